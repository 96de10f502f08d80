"""The bytes of each term, by formula: the state, the layer's saved and working tensors, the loss, the update,
attention and MoE buffers."""

from __future__ import annotations

from typing import Mapping

from ...hardware import flags as xla_flags
from ...models import flash
from ...models.configs import ModelConfig
from ...models.graph import LayerSizes, moe_sizes
from ...ground import sharding
from ...hardware import targets
from ...ground.sharding import MESH_AXES

from .result import Term


# Steps the budget's rules were not measured on, with what the compiles showed (benchmarks/results/budget.json):
# their estimate is labelled, and the compile is the answer there
UNCALIBRATED = {
    "ragged_dot_wide_experts": "ragged_dot with experts wider than the model (F_e > D, Mixtral): XLA's dense "
                               "expansion keeps more [R, E_local, F_e] buffers than the DeepSeek-measured rule "
                               "counts (Mixtral 8x7B: 21-29 % low); compile to check",
    "every_expert_under_ep": "the dense path at capacity -1 under expert parallelism: XLA gathers the whole batch "
                             "for the every-expert einsums (DeepSeek-V3, expert=8: 14 % low); compile to check",
}


def _uncalibrated(cfg, mesh) -> str:
    moe = cfg.moe
    if moe is None:
        return ""
    if moe.dispatch == "ragged_dot" and moe.expert_mlp_dim > cfg.d_model:
        return UNCALIBRATED["ragged_dot_wide_experts"]
    if moe.dispatch == "dense" and moe.capacity_factor <= 0 and mesh.get("expert", 1) > 1:
        return UNCALIBRATED["every_expert_under_ep"]
    return ""


def _loop_tail_terms(layer: list[Term], z: LayerSizes, A: int, limit: int | None,
                     persistent: int) -> tuple[list[Term], bool]:
    """The two last layers' backward, peeled out of the loop by pipelined host offloading
    (``tail_layers``) into the step's top level, where the latency-hiding scheduler overlaps the
    second one's recompute with the first one's backward as far as its memory limit allows.

    At the MLP's backward six ``[b, S, F]`` tensors are live (the recomputed gate and up, the
    gradient of their product, and the fused multiply's three outputs); the second layer brings
    its attention, its MLP tensors and its ``[b, S, D]`` scratch. Compiled (jaxlib 0.10.2, Llama
    3.1 405B on 256 H100, fsdp=128,tensor=2, B=384, S=8192, ``decoder_layer_input`` offloaded):
    the tail peaks 1 % under the scheduler's limit, with both layers' MLP tensors live.
    Also returns whether the limit cut the second layer short (``_started_early``)."""
    keep = [t for t in layer if t.key in ("attention", "layer_weights", "scratch", "loss_grad")]
    mlp = Term("tail_mlp", "last layer: MLP backward tensors (6)", 6 * z.b * z.S * z.F * A, "device", "transient",
               f"6 x b x S x F/tensor x {A} B (gate, up, product gradient, the fused multiply's 3 outputs)",
               "working")
    second = sum(t.bytes for t in keep if t.key in ("attention", "scratch")) + mlp.bytes
    first = sum(t.bytes for t in keep) + mlp.bytes
    room, cut = _started_early(second, limit, persistent + first)
    return keep + [mlp, Term("tail_second_layer", "the layer before it, recomputed alongside (as far as the "
                             "scheduler's memory limit allows)", room, "device", "transient",
                             "min(attention + 6 x b x S x F/tensor x 2 B + scratch, scheduler limit - the rest)",
                             "working")], cut


def _started_early(full: int, limit: int | None, used: int) -> tuple[int, bool]:
    """The bytes of ``full`` the latency-hiding scheduler starts early next to ``used``, as far as its
    memory limit allows, and whether the limit cut them short (some started, not all: the step then
    peaks at the limit, ``Budget.at_scheduler_limit``)."""
    room = full if limit is None else max(min(full, limit - used), 0)
    return room, 0 < room < full


# MoE layers of the backward pass XLA runs at the step's top level, out of the double-buffered loop
# (compiled, jaxlib 0.10.2: DeepSeek-V3's 58 MoE layers run as 27 double iterations and 4 layers)
PEELED_MOE_LAYERS = 4


def _peeled_moe_terms(cfg, graphs, layer: list[Term], A: int, flag_set) -> list[Term]:
    """The sparse MoE layers of the backward pass that XLA peels out of the (double-buffered) layer
    loop into the step's top level: their zero-filled buffers, hoisted to the step's start.

    Each routed layer's backward fills two receive-buffer-sized buffers with zeros (the scatter-adds
    that transpose the row gathers into and out of the sorted buffer), and each layer's combine
    zeroes the token rows it gets back. For the layers at the top level XLA fuses these broadcasts
    into a few multi-output fusions run before the forward pass: they are live from the step's start
    until their layer runs, next to the first peeled layer's working set.

    Compiled (jaxlib 0.10.2, DeepSeek-V3 671B, S = 4096, expert = 8, one sequence per GPU, on 512
    GB200 at fsdp=64: the worst-case buffer and ``ragged_buffer_factor`` 2, ``full`` and
    ``qkv_proj_offloaded``): at the peak 8 ``[R, D]`` such buffers (4 layers) and 6 ``[rows, D]``
    ones next to the layer's working set."""
    if not flag_set.flags.get("xla_gpu_enable_while_loop_double_buffering"):
        return []
    routed = [(label, count, z) for label, count, r, z, *_ in graphs if r]
    if not routed or cfg.moe.dispatch == "dense" or not any(t.key == "moe_dispatch" for t in layer):
        return []
    label, count, z = routed[0]
    if (count - PEELED_MOE_LAYERS) // 2 < 2:  # no loop left (DeepSeek-V3 with 6 layers: every layer at the top level)
        return []
    R, rows = z.receive_rows, z.b * z.S * z.topk
    return [Term("moe_tail_zeros", f"{label}s at the top level: their zero-filled buffers, allocated at the step's "
                 "start", (2 * PEELED_MOE_LAYERS * R + 6 * rows) * z.D * A, "device", "transient",
                 f"(2 x {PEELED_MOE_LAYERS} layers x R + 6 x {rows} token rows) x D x {A} B (R = {R})", "working")]


def _backward_end_terms(layer: list[Term], D: int, V: int) -> list[Term]:
    """The last layers' backward with the head's weight gradient, computed late in fp32 and kept
    until its reduce-scatter after the loop, and the loss gradient it is computed from."""
    keep = [t for t in layer if t.key in ("layer_weights", "scratch", "loss_grad", "moments_early")]
    return keep + [Term("head_grad", "output head's weight gradient (fp32, before its reduce-scatter)", D * V * 4,
                        "device", "transient", "D x V/tensor x 4 B", "gradients")]


def _loss_terms(cfg, b, S, D, V, A, shards, n_acc=1) -> list[Term]:
    """At the start of the backward pass: the logits and their gradient in fp32, the whole head
    gathered in the compute dtype for the backward matmuls, and the head's shard in it.

    Inside the microbatch loop of gradient accumulation the cross-entropy's gather of the target
    logits is differentiated into a scatter-add of its own, a third fp32 ``[b, S, V]`` buffer
    (at the top level XLA fuses it into the logits' gradient). Compiled (jaxlib 0.10.2, Llama 3.1
    8B on 8 H100, fsdp=8): two microbatches of one sequence at S=8192 peak at the loss with the
    logits, their gradient and the scatter-add live (the budget without it: -10.9 %)."""
    terms = [
        Term("logits", "logits and their gradient (fp32)", 2 * b * S * V * 4, "device", "transient",
             f"2 x b x S x V/tensor x 4 B = 2 x {b} x {S} x {V} x 4", "logits"),
        Term("head_gathered", "output head gathered in compute dtype (for the backward matmuls)", D * V * A,
             "device", "transient", f"D x V/tensor x {A} B", "logits"),
        Term("head_shard", "output head shard in compute dtype", shards["head/kernel"] * A, "device", "transient",
             f"D x V x {A} B / sharding", "logits"),
    ]
    if n_acc > 1:
        terms.insert(1, Term("logits_scatter", "target logits' gradient, scattered (fp32, inside the microbatch loop)",
                             b * S * V * 4, "device", "transient", f"b x S x V/tensor x 4 B = {b} x {S} x {V} x 4",
                             "logits"))
    return terms


def tail_layers(flag_set, offloaded_residuals: bool) -> int:
    """How many of the backward loop's last iterations XLA peels out of the loop into the step's
    top level: one with MaxText's double-buffered loops (an odd trip count), two where pipelined
    host offloading also peels the loop for the offloaded residuals' transfers (compiled,
    jaxlib 0.10.2: Llama 3.1 405B with 126 layers, 61 double iterations and 4 peeled layers)."""
    return 2 if offloaded_residuals and flag_set.flags.get(xla_flags.PIPELINED_HOST_OFFLOADING) else 1


def _update_terms(state, param_bytes, moments, specs, shards, cfg=None, mesh=None, A=2, tail=1) -> list[Term]:
    """The optimizer update: the gradients of the embedding and the head (the layers' are counted
    already; and, offloaded, the moments and parameters brought to the device for it).

    With the moments on the host, XLA starts their copies to the device as soon as the last layer's
    weight gradients go to their reduce-scatter: the peeled last layers (``tail_layers``) still hold
    their weights gathered in the compute dtype and the weight gradients in it that wait for the
    reduce-scatter (under FSDP), one more layer's gathered weights, and the saved activations (see
    ``estimate``). Compiled (jaxlib 0.10.2, Llama 3.1 405B on 256 H100): fsdp=64,tensor=4 and
    fsdp=256 with offloaded activations peak here."""
    grads = sum(shards[s.path] * 4 for s in specs if s.trainable and not s.path.split("/")[0].endswith("layers"))
    terms = [Term("update_grads", "embedding and head gradients at the update (fp32)", grads, "device", "transient",
                  "(embedding + head) x 4 B / sharding", "gradients")]
    if state.optimizer_memory_host_offload:
        terms.append(Term("update_moments", "AdamW moments brought to the device", moments, "device", "transient",
                          "params x 8 B / sharding", "optimizer"))
        if cfg is not None and mesh["fsdp"] > 1 and not state.parameter_memory_host_offload:
            stack, _, routed = cfg.stacks()[0]
            per_layer = (_layer_weights(specs, stack, "mlp/shared/" if routed else "mlp/", mesh["tensor"], A)
                         + _layer_weights(specs, stack, "attention/", mesh["tensor"], A))
            terms.append(Term("update_tail_weights", f"last {tail} layer(s)' weights and weight gradients "
                              f"(compute dtype, before their reduce-scatter) and one more layer's weights",
                              (tail + 1) * per_layer, "device", "transient",
                              f"({tail} + 1) x (MLP + attention weights) x {A} B / tensor", "working"))
    if state.parameter_memory_host_offload:
        terms.append(Term("update_params", "parameters brought to the device", param_bytes, "device", "transient",
                          "params x 4 B / sharding", "parameters"))
    return terms


# Under FSDP, XLA keeps some of the scanned layers' gradient accumulators in a second, transposed
# layout through the backward loop (layout assignment around the loop's dynamic-update-slice): one
# MLP and one attention weight in a dense layer; all three expert weights, the shared expert's gate
# and the attention output projection in an MoE layer. Without FSDP, the capacity dispatch's
# per-expert einsums, and gradient accumulation's microbatch loop, still leave the three expert
# weights' accumulators transposed (one dropless step does not). Compiles of jaxlib 0.10.2's XLA
# (``benchmarks/bench_budget.py``).
_TRANSPOSED_GRADIENTS = {
    False: ("mlp/wi_0", "attention/wq"),
    True: ("mlp/wi_0", "mlp/wi_1", "mlp/wo", "mlp/shared/wi_0", "attention/wo"),
}
_TRANSPOSED_EXPERT_GRADIENTS = ("mlp/wi_0", "mlp/wi_1", "mlp/wo")


def _gradient_transposes(cfg, specs, shards, fsdp: int, n_acc: int) -> Term | None:
    stack, _, routed = cfg.stacks()[-1]  # the routed stack where there is one
    if fsdp > 1:
        names, why = _TRANSPOSED_GRADIENTS[routed], "FSDP"
    elif routed and (cfg.moe.dispatch == "dense" or n_acc > 1):
        names, why = _TRANSPOSED_EXPERT_GRADIENTS, "dense MoE" if n_acc == 1 else "gradient accumulation"
    else:
        return None
    size = sum(4 * shards.get(f"{stack}/{n}", 0) for n in names)
    return Term("gradient_transposes", f"transposed gradient accumulators ({why})", size, "device", "persistent",
                "L x 4 B x (" + " + ".join(n.split("/")[-1] for n in names) + ") / sharding", "gradients")


def _check_divisible(cfg: ModelConfig, batch: int, seq: int, mesh: Mapping[str, int]) -> None:
    if batch < 1 or seq < 1:
        raise ValueError(f"batch and seq must be positive, got batch={batch}, seq={seq}")
    tensor = mesh["tensor"]
    for what, size, ways in (("batch", batch, sharding.batch_ways(mesh)), ("heads", cfg.num_heads, tensor),
                             ("vocab", cfg.vocab_size, tensor)):
        if size % ways:
            raise ValueError(f"{what} {size} does not divide over {ways} devices (mesh "
                             + ",".join(f"{k}={v}" for k, v in mesh.items() if v > 1) + ")")


def attention_kernel(cfg: ModelConfig) -> str:
    """The flash kernel a config compiles with for the lab's GPU targets (``models.flash``; every one
    of them is Hopper or Blackwell)."""
    qk, v = (cfg.mla.qk_head_dim, cfg.mla.v_head_dim) if cfg.mla is not None else (cfg.head_dim, cfg.head_dim)
    oldest = min(g.compute_capability for g in targets.GPUS.values())
    return flash.kernel_for(qk, v, cfg.dtype, capability=oldest)


def layer_sizes(cfg: ModelConfig, batch: int, seq: int, mesh: Mapping[str, int], *, routed: bool) -> LayerSizes:
    """Per-device sizes of one layer's tensors under ``mesh`` (a full mesh, as ``parse_mesh`` gives)."""
    data, fsdp, tensor, expert = (mesh[a] for a in MESH_AXES)
    b = batch // sharding.batch_ways(mesh)
    extra = moe_sizes(cfg, batch // (data * fsdp), expert, tensor, seq, local_tokens=b * seq) if routed else {}
    if cfg.attention != "flash":
        pairs = seq * seq
    elif attention_kernel(cfg) == "cudnn":
        pairs = flash.causal_pairs(seq)
    else:
        pairs = flash.pairs_in_blocks(seq, cfg.flash_block)
    return LayerSizes(b=b, S=seq, D=cfg.d_model, H=cfg.num_heads // tensor,
                      Hkv=max(cfg.num_kv_heads // tensor, 1), dh=cfg.head_dim, F=cfg.mlp_dim // tensor,
                      act=cfg.act_bytes, attention_pairs=pairs, **extra)


def _layer_weights(specs, stack: str, part: str, tensor: int, A: int) -> int:
    """One layer's weights of ``stack`` whose path contains ``part``, in the compute dtype, split by tensor."""
    return sum(s.count // s.shape[0] for s in specs if s.path.startswith(f"{stack}/") and part in s.path) * A // tensor


# Bytes per attention score of the teaching attentions' backward, most first: fp32 scores and
# their gradient and bf16 probabilities are 12; with cuBLAS matmuls (MaxText's flags turn Triton's
# off) and memory to spare under its limit, XLA keeps one or two more fp32 copies for the
# transposed matmuls (16 B at Llama 3.1 8B, S = 8192 on H100, 18 B at S = 4096: jaxlib 0.10.2).
SCORE_COPY_BYTES = (18, 16, 12)
# XLA's scheduler tracks memory by its own accounting, not the final buffer assignment: a phase the
# budget puts this much over its limit may still be scheduled (an assumption from one compile, above)
SCHEDULER_SLACK = 1.05


def _attention_working(cfg, z: LayerSizes, A: int, triton_gemm: bool, score_bytes: int) -> tuple[int, str]:
    """Bytes of the attention's backward working set, and its formula."""
    b, S, H, Hkv = z.b, z.S, z.H, z.Hkv
    qk, vd = (cfg.mla.qk_head_dim, cfg.mla.v_head_dim) if cfg.mla is not None else (z.dh, z.dh)
    if cfg.attention != "flash":
        chunked = cfg.attention == "chunked" and S > cfg.attention_chunk and S % cfg.attention_chunk == 0
        rows, what = (cfg.attention_chunk, f"S_c={cfg.attention_chunk} query rows") if chunked else (S, "S")
        per = 12 if triton_gemm else score_bytes  # SCORE_COPY_BYTES
        return per * b * H * rows * S, f"{per} B x b x H/tensor x {what} x S (fp32 scores and gradients, bf16 probabilities)"
    if attention_kernel(cfg) == "cudnn":
        # cuDNN's backward: dQ, dK, dV and the recomputed output with dO (its workspace is 0 in a
        # compile-only compile: cuDNN sizes it on the GPU), the log-sum-exp in fp32
        size = (b * S * (2 * H * vd + H * qk + 2 * Hkv * qk)) * A + b * H * S * 4
        return size, "b x S x (2 H d_v + H d_qk + 2 H_kv d_qk) x 2 B + b x H x S x 4 B (cuDNN flash backward)"
    blk = flash.block_size(S, cfg.flash_block)
    size = b * S * (H * qk + Hkv * (qk + vd)) * 4 + 4 * b * H * blk * blk * 4 + b * S * H * (qk + 2 * vd) * A
    return size, (f"fp32 dQ, dK, dV + 4 fp32 [b, H, {blk}, {blk}] blocks + q, O, dO (the lab's flash backward)")


def _sparse_moe_terms(label: str, z, S: int, D: int, A: int) -> list[Term]:
    """The sparse paths' backward over the receive buffer of R rows (the grouped GEMM's or ``ragged_dot``'s):
    the recomputed rows sorted by expert, the down projection's and the grouped GEMMs' input gradients and the
    scatter-adds that transpose the row gathers (7 x R x D), the gate/up/product gradients (3 x R x F_e), the
    token rows sent and received back (2 x rows x D), and the expert weights in fp32 gradients and in the
    compute dtype. Compiled (jaxlib 0.10.2, DeepSeek-V3 671B, S=4096, one sequence per GPU, expert=8, the
    worst-case buffer: R = 8 x rows) on 64 GB200 at fsdp=8, where the step peaks there."""
    R, Fe, El = z.receive_rows, z.expert_F, z.experts
    rows = z.b * S * z.topk
    terms = [
        Term("moe_hidden", f"{label}: routed experts' hidden tensors", 3 * R * Fe * A, "device", "transient",
             f"3 x R x F_e x {A} B (R = {R} rows of the receive buffer)", "working"),
        Term("moe_dispatch", f"{label}: dispatched rows", (7 * R + 2 * rows) * D * A, "device", "transient",
             f"(7 x R + 2 x {rows} token rows) x D x {A} B", "working"),
        Term("moe_weight_grads", f"{label}: expert weights (fp32 gradients, compute-dtype copies)",
             3 * El * D * Fe * (4 + 2 * A), "device", "transient", "3 x E_local x D x F_e x (4 + 2 x 2) B", "working"),
    ]
    if z.routed_rows > R:
        # ragged_dot's dense expansion (XLA's RaggedDotRewriter at jaxlib 0.10.2): the backward's operands
        # broadcast to every local expert, three [R, E_local, D] buffers (compiled: 64 GB200, fsdp=8,expert=8,
        # the worst-case buffer)
        terms.append(Term("ragged_dot_expansion", f"{label}: ragged_dot's dense expansion: rows broadcast "
                          "to every local expert (3)", 3 * R * El * max(D, Fe) * A, "device", "transient",
                          f"3 x R x E_local x max(D, F_e) x {A} B", "working"))
    return terms


def _dense_moe_terms(label: str, z, E: int, S: int, D: int, A: int) -> list[Term]:
    """MaxText's dense path at the layer's backward: the slots' hidden tensors, four [E_local, G, C, D] slot
    buffers (the dispatch einsum's output, the down projection's, and their gradients), the one-hot masks
    [b, S, E, C] (bool dispatch, compute-dtype combine) and two layers' expert weights in the compute dtype
    (gathered under FSDP). Compiled (jaxlib 0.10.2, DeepSeek-V3 671B, capacity factor 1.25, one sequence per
    GPU, expert=8, fsdp=64 on 512 GB200). Capacity -1 (no dispatch: every expert on every token,
    [b, S, E_local, F_e] einsums) keeps eight hidden tensors and one slot buffer instead: the recomputed gate,
    up and product, their three gradients and two transposed copies for the weight-gradient dots (compiled:
    Mixtral 8x7B, B=512, S=4096, fsdp=64 on 64 H100, as MaxText's mixtral_8x1b.yml runs it)."""
    El, Fe = z.experts, z.expert_F
    C = z.capacity or z.S  # capacity -1: every expert's "slots" are every token
    slots = z.groups_per_device * El * C
    n_hidden, n_slots = (3, 4) if z.capacity else (8, 1)
    terms = [
        Term("moe_hidden", f"{label}: routed experts' hidden tensors ({n_hidden})", n_hidden * slots * Fe * A,
             "device", "transient", f"{n_hidden} x E_local x G x C x F_e x {A} B", "working"),
        Term("moe_dispatch", f"{label}: expert slots ({n_slots} buffer{'s' if n_slots > 1 else ''})",
             n_slots * slots * D * A, "device", "transient",
             f"{n_slots} x E_local x G x C x D x {A} B (G = {z.groups_per_device} sequences, C = {C} slots)",
             "working"),
    ]
    if z.capacity:
        terms.append(Term("moe_masks", f"{label}: dispatch and combine masks", z.b * S * E * C * (1 + A),
                          "device", "transient", f"b x S x E x C x (1 + {A}) B", "working"))
    terms.append(Term("moe_weights", f"{label}: expert weights in the compute dtype (2 layers)",
                      2 * 3 * El * D * Fe * A, "device", "transient", f"2 x 3 x E_local x D x F_e x {A} B", "working"))
    return terms


def _mlp_terms(cfg, label: str, z, routed: bool, recomputed_keys: set[str], S: int, D: int, A: int,
               tensor: int) -> list[Term]:
    """The MLP's working tensors at the layer's backward: a routed layer's experts by its dispatch path and its
    shared expert; a dense layer's recomputed gate and up, the down projection's input gradient and the fused
    multiply's three outputs (without tensor parallelism one of the recomputed pair is already gone)."""
    if not routed:
        recomputed_mlp = bool({"gate", "up"} & recomputed_keys)
        n_mlp = (6 if recomputed_mlp else 3) if tensor > 1 else (4 if recomputed_mlp else 3)
        return [Term("mlp_hidden", f"{label}: MLP hidden tensors ({n_mlp})", n_mlp * z.b * S * z.F * A,
                     "device", "transient", f"{n_mlp} x b x S x F/tensor x {A} B", "working")]
    if cfg.moe.dispatch == "dense":
        terms = _dense_moe_terms(label, z, cfg.moe.num_experts, S, D, A)
    else:
        terms = _sparse_moe_terms(label, z, S, D, A)
    if z.shared_F:
        terms.append(Term("shared_hidden", f"{label}: shared expert's hidden tensors", 4 * z.b * S * z.shared_F * A,
                          "device", "transient", f"4 x b x S x F_shared x {A} B", "working"))
    return terms


def _gathered_weights_term(label: str, specs, stack: str, routed: bool, tensor: int, A: int, gathered: bool,
                           prefetch: bool) -> Term:
    """FSDP: the layer's weights gathered in the compute dtype; with pipelined all-gathers and double-buffered
    loops (MaxText's flags) two layers' and a transposed bf16 copy of one MLP matrix for the backward matmuls
    (a ``wrapped_transpose`` of a [D, F/tensor] matrix in the buffer assignment: Llama 3.1 8B fsdp=4,tensor=2
    and 405B fsdp=64, jaxlib 0.10.2). Routed experts are sharded over `expert` and gathered inside the MoE
    block (``moe_weight_grads``)."""
    if not gathered:
        return Term("layer_weights", f"{label}: layer weights in compute dtype", 0, "device", "transient",
                    "no FSDP: the parameters' own buffers", "working")
    mlp_w = _layer_weights(specs, stack, "mlp/shared/" if routed else "mlp/", tensor, A)
    att_w = _layer_weights(specs, stack, "attention/", tensor, A)
    layers_mlp, layers_att = (7 / 3, 2) if prefetch else (1, 1)
    return Term("layer_weights", f"{label}: layer weights in compute dtype ({layers_att} layers)",
                int(layers_mlp * mlp_w + layers_att * att_w), "device", "transient",
                f"{layers_mlp:.3g} x MLP + {layers_att} x attention weights x {A} B", "working")


def _layer_backward_terms(cfg, pol, graphs, b, S, D, V, A, mesh, specs, shards, flag_set, state,
                          score_bytes: int = SCORE_COPY_BYTES[0]) -> list[Term]:
    """The working set of the largest layer's backward pass (see the module docstring): its attention, its MLP
    (``_mlp_terms``), its gathered weights, its [b, S, D] scratch and the loss gradient the head keeps;
    ``score_bytes``: bytes per attention score the teaching attentions keep (``SCORE_COPY_BYTES``)."""
    best: list[Term] = []
    tensor, fsdp = mesh["tensor"], mesh["fsdp"]
    flags = flag_set.flags
    prefetch = fsdp > 1 and xla_flags.pipelines(flags, "all_gather")
    # under tensor parallelism the residual stream's gradient in fp32 (before its reduction over `tensor`) and
    # four [b, S, D] partial sums and converts in the compute dtype
    scratch, scratch_text = (4 + 4 * A, "1 fp32 + 4 bf16") if tensor > 1 else (4 + 2 * A, "1 fp32 + 2 bf16")
    for label, count, routed, z, g, residuals, recomputed in graphs:
        stack = next(name for name, _, r in cfg.stacks() if r == routed)
        attention_bytes, attention_formula = _attention_working(cfg, z, A, flags.get("xla_gpu_enable_triton_gemm", True),
                                                                score_bytes)
        terms = [
            Term("attention", f"{label}: attention backward ({cfg.attention})", attention_bytes, "device", "transient",
                 attention_formula, "working"),
            *_mlp_terms(cfg, label, z, routed, {n.key for n in recomputed}, S, D, A, tensor),
            _gathered_weights_term(label, specs, stack, routed, tensor, A,
                                   fsdp > 1 or state.parameter_memory_host_offload, prefetch),
            Term("scratch", f"{label}: [b, S, D] scratch ({scratch_text})", z.b * S * D * scratch, "device",
                 "transient", f"b x S x D x {scratch} B", "working"),
            Term("loss_grad", "loss gradient (fp32), kept for the head's weight gradient after the layer loop",
                 z.b * S * V * 4, "device", "transient", "b x S x V/tensor x 4 B", "logits"),
        ]
        if sum(t.bytes for t in terms) > sum(t.bytes for t in best):
            best = terms
    return best
