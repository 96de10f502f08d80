"""HBM budget of one training step, per device, as formulas: the analytic model of notebook 01.

``estimate(model, batch, seq, policy, mesh)`` lists every term that occupies device or host
memory at the step's peak, each with the tensor it stands for and its formula, plus the FLOPs
the policy's recompute adds. Pure Python over the config (no tracing, no compile): a widget can
call it on every slider move.

The terms, for the lab's models and XLA 0.10.2 (validated against the compiler by
``benchmarks/bench_budget.py``):

* **static** — what the step's arguments hold: parameters (``weight_dtype``), AdamW's two
  moments, the token batch. Donated, so the updated copies reuse the same buffers.
* **persistent** — alive through the backward pass: the fp32 gradient accumulators of the
  scanned layers' weights, and the *residuals* — every tensor the policy saves that the backward
  pass reads, stacked over the L layers (on the device, or on the host when offloaded). The
  layer input (the scan carry) is always one of them.
* **transient** — the working set at the peak. For a training step that is the backward of one
  layer: the recomputed attention scores (``[b, H, S, S]``, or one query chunk with chunked
  attention), the MLP's hidden tensors, the layer's weights in the compute dtype (all-gathered
  under FSDP), a few ``[b, S, D]`` scratch tensors, and the loss gradient ``[b, S, V]`` that XLA
  keeps until the embedding's backward. With few layers and a large vocabulary the loss phase
  (logits, their gradient, the output head) can be larger: the peak is the larger of the two.

Per-device sizes: ``b = B / (data x fsdp x expert)`` sequences; heads, MLP width and vocabulary
divided by ``tensor``; parameters by the sharding rules.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from . import policies as policy_lib
from .models import configs
from .models.configs import ModelConfig
from .models.graph import LayerSizes, layer_graph, moe_sizes, parameter_specs, saved_by
from .sharding import MESH_AXES, AxisRules, mesh_of

GiB = 2**30
SPACES = ("device", "host")
KINDS = ("static", "persistent", "transient")


@dataclasses.dataclass(frozen=True)
class Term:
    key: str
    label: str
    bytes: int
    space: str  # device | host
    kind: str  # static | persistent | transient
    formula: str
    category: str  # parameters | optimizer | batch | gradients | activations | working | logits

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Budget:
    model: str
    batch: int
    seq: int
    policy: str
    mesh: dict[str, int]
    terms: tuple[Term, ...]
    peak_phase: str  # "layer backward" | "loss"
    recompute_flops: float  # added by remat, per device per step
    step_flops: float  # forward + backward matmul FLOPs without recompute, per device per step
    hbm_bytes: int | None = None
    other_phase: tuple[Term, ...] = ()  # the transient terms of the phase that is not the peak

    def phase_terms(self, phase: str) -> tuple[Term, ...]:
        """The transient terms of "layer backward" or "loss", whichever is the peak."""
        if phase not in ("layer backward", "loss"):
            raise ValueError(f"unknown phase {phase!r}; choose 'layer backward' or 'loss'")
        transient = tuple(t for t in self.terms if t.kind == "transient")
        return transient if phase == self.peak_phase else self.other_phase

    @property
    def device_bytes(self) -> int:
        return sum(t.bytes for t in self.terms if t.space == "device")

    @property
    def host_bytes(self) -> int:
        return sum(t.bytes for t in self.terms if t.space == "host")

    @property
    def xla_memory_limit_bytes(self) -> int | None:
        """The limit XLA's scheduler and rematerialization pass plan for: (80% of HBM - the step's
        device arguments and outputs) x the slop factor (95%). Over it, XLA recomputes buffers on
        its own and the compiled peak can come out lower than this budget."""
        if self.hbm_bytes is None:
            return None
        io = sum(t.bytes for t in self.terms if t.kind == "static")
        return max(int((0.8 * self.hbm_bytes - io) * 0.95), 0)

    @property
    def xla_remat_expected(self) -> bool | None:
        limit = self.xla_memory_limit_bytes
        if limit is None:
            return None
        temp = sum(t.bytes for t in self.terms if t.space == "device" and t.kind != "static")
        return temp > limit

    @property
    def fits(self) -> bool | None:
        return None if self.hbm_bytes is None else self.device_bytes <= self.hbm_bytes

    @property
    def margin_bytes(self) -> int | None:
        return None if self.hbm_bytes is None else self.hbm_bytes - self.device_bytes

    def by_category(self, space: str = "device") -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.terms:
            if t.space == space:
                out[t.category] = out.get(t.category, 0) + t.bytes
        return out

    def to_dict(self) -> dict:
        return {"model": self.model, "batch": self.batch, "seq": self.seq, "policy": self.policy,
                "mesh": dict(self.mesh), "device_bytes": self.device_bytes, "host_bytes": self.host_bytes,
                "hbm_bytes": self.hbm_bytes, "fits": self.fits, "margin_bytes": self.margin_bytes,
                "xla_memory_limit_bytes": self.xla_memory_limit_bytes, "xla_remat_expected": self.xla_remat_expected,
                "peak_phase": self.peak_phase, "recompute_flops": self.recompute_flops,
                "step_flops": self.step_flops, "terms": [t.to_dict() for t in self.terms]}

    def table(self) -> str:
        """One line per term: bytes per device, where, and the formula."""
        lines = [f"{self.model}  B={self.batch} S={self.seq}  policy {self.policy}  mesh "
                 + ",".join(f"{k}={v}" for k, v in self.mesh.items() if v > 1) + f"  (peak: {self.peak_phase})"]
        for t in self.terms:
            if t.bytes:
                lines.append(f"  {t.bytes / GiB:9.3f} GiB  {t.space:6} {t.kind:10} {t.label:38} {t.formula}")
        lines.append(f"  {self.device_bytes / GiB:9.3f} GiB  device total" + (
            f"   (HBM {self.hbm_bytes / GiB:.1f} GiB: " + ("fits)" if self.fits else
                                                            f"over by {-self.margin_bytes / GiB:.2f} GiB)")
            if self.hbm_bytes else ""))
        lines.append(f"  {self.host_bytes / GiB:9.3f} GiB  host total")
        lines.append(f"  recompute adds {self.recompute_flops / 1e12:.2f} TFLOP per device per step "
                     f"({self.recompute_flops / self.step_flops:.1%} of the step's {self.step_flops / 1e12:.2f})")
        return "\n".join(lines)


def estimate(model: ModelConfig | str, batch: int, seq: int, policy="full",
             mesh: Mapping[str, int] | str | None = None, num_devices: int | None = None, *,
             mu_dtype_bytes: int | None = None, rules: AxisRules = AxisRules(), hbm_bytes: int | None = None) -> Budget:
    """The per-device memory budget of one training step (see the module docstring)."""
    cfg = configs.config(model)
    mesh = mesh_of(mesh, num_devices)
    pol = policy_lib.resolve(policy)
    if pol.save_all:
        raise ValueError("the budget models remat policies; 'no_remat' keeps every intermediate of every layer "
                         "(compile it to see what that costs)")
    W, A = cfg.weight_bytes, cfg.act_bytes
    mu_bytes = mu_dtype_bytes or W
    _check_divisible(cfg, batch, seq, mesh)
    data, fsdp, tensor, expert = (mesh[a] for a in MESH_AXES)
    batch_ways = data * fsdp * expert
    b, S, D, V = batch // batch_ways, seq, cfg.d_model, cfg.vocab_size // tensor
    terms: list[Term] = []

    # --- static: the step's arguments
    specs = parameter_specs(cfg)
    shards = {s.path: math.prod(rules.shard_shape(s.shape, s.axes, mesh)) for s in specs}
    param_bytes = sum(shards[s.path] * s.dtype_bytes for s in specs)
    trainable = [s for s in specs if s.trainable]
    moments = sum(shards[s.path] * (mu_bytes + s.dtype_bytes) for s in trainable)
    terms += [
        Term("parameters", "parameters", param_bytes, "device", "static",
             f"{cfg.param_count() / 1e9:.2f}B params x {W} B / sharding", "parameters"),
        Term("optimizer", "AdamW moments (mu, nu)", moments, "device", "static",
             f"params x ({mu_bytes} + {W}) B / sharding", "optimizer"),
        Term("batch", "token batch (inputs, targets)", 2 * b * S * 4, "device", "static",
             f"2 x b x S x 4 B = 2 x {b} x {S} x 4", "batch"),
    ]

    # --- per-layer graphs: residuals, recompute
    stacks = [("layer", cfg.num_dense_layers, False)]
    if cfg.moe is not None:
        stacks.append(("MoE layer", cfg.num_moe_layers, True))
    residual_dev = residual_host = 0
    recompute_flops = step_flops = 0.0
    dev_names, host_names = [], []
    graphs = []
    for label, count, routed in stacks:
        if not count:
            continue
        z = layer_sizes(cfg, batch, seq, mesh, routed=routed)
        g = layer_graph(cfg, z, routed=routed)
        residuals, recomputed = g.plan(set(pol.device) | set(pol.offload))
        graphs.append((label, count, routed, z, g, residuals, recomputed))
        for n in residuals:
            if saved_by(pol.offload, n) and not saved_by(pol.device, n):
                residual_host += count * n.bytes
                host_names.append(n.name)
            else:
                residual_dev += count * n.bytes
                dev_names.append(n.name or n.key)
        recompute_flops += count * sum(n.flops for n in recomputed)
        step_flops += count * 3 * g.forward_flops
    layer_param_grads = sum(shards[s.path] * 4 for s in trainable if s.path.split("/")[0].endswith("layers"))
    if fsdp > 1:
        terms.append(_gradient_transposes(cfg, specs, shards))
    terms += [
        Term("gradients", "gradients of the layer weights (fp32)", layer_param_grads, "device", "persistent",
             "layer params x 4 B / sharding", "gradients"),
        Term("residuals", "saved activations (residuals)", residual_dev, "device", "persistent",
             "L x [" + " + ".join(dict.fromkeys(dev_names)) + "]", "activations"),
        Term("residuals_host", "offloaded activations (residuals)", residual_host, "host", "persistent",
             "L x [" + " + ".join(dict.fromkeys(host_names)) + "]" if host_names else "none offloaded",
             "activations"),
    ]

    # --- transient: the larger of one layer's backward and the loss phase
    loss_grad = b * S * V * 4
    layer_terms = _layer_backward_terms(cfg, pol, graphs, b, S, D, A, mesh, specs, shards, loss_grad)
    head_gathered = D * V * A
    loss_terms = [
        Term("logits", "logits and their gradient (fp32)", 2 * b * S * V * 4, "device", "transient",
             f"2 x b x S x V/tensor x 4 B = 2 x {b} x {S} x {V} x 4", "logits"),
        Term("head", "output head in compute dtype (gathered)", head_gathered, "device", "transient",
             f"D x V/tensor x {A} B", "logits"),
        Term("head_shard", "output head shard in compute dtype", shards["head/kernel"] * A, "device", "transient",
             f"D x V x {A} B / sharding", "logits"),
    ]
    layer_total, loss_total = sum(t.bytes for t in layer_terms), sum(t.bytes for t in loss_terms)
    peak_phase = "layer backward" if layer_total >= loss_total else "loss"
    peak, other = (layer_terms, loss_terms) if layer_total >= loss_total else (loss_terms, layer_terms)
    flops_head = 2 * b * S * D * V
    return Budget(cfg.name, batch, seq, pol.name, mesh, tuple(terms + peak), peak_phase, recompute_flops,
                  step_flops + 3 * flops_head, hbm_bytes, tuple(other))


# Under FSDP, XLA 0.10.2 keeps some of the scanned layers' gradient accumulators in a second,
# transposed layout through the backward loop (layout assignment around the loop's
# dynamic-update-slice): one MLP and one attention weight in a dense layer; all three expert
# weights, the shared expert's gate and the attention output projection in an MoE layer.
_TRANSPOSED_GRADIENTS = {
    False: ("mlp/wi_0", "attention/wq"),
    True: ("mlp/wi_0", "mlp/wi_1", "mlp/wo", "mlp/shared/wi_0", "attention/wo"),
}


def _gradient_transposes(cfg, specs, shards) -> Term:
    stack, routed = ("moe_layers", True) if cfg.num_moe_layers else (
        ("layers" if cfg.mla is None else "dense_layers"), False)
    names = _TRANSPOSED_GRADIENTS[routed]
    size = sum(4 * shards.get(f"{stack}/{n}", 0) for n in names)
    return Term("gradient_transposes", "transposed gradient accumulators (FSDP)", size, "device", "persistent",
                "L x 4 B x (" + " + ".join(n.split("/")[-1] for n in names) + ") / sharding", "gradients")


def _check_divisible(cfg: ModelConfig, batch: int, seq: int, mesh: Mapping[str, int]) -> None:
    if batch < 1 or seq < 1:
        raise ValueError(f"batch and seq must be positive, got batch={batch}, seq={seq}")
    data, fsdp, tensor, expert = (mesh[a] for a in MESH_AXES)
    for what, size, ways in (("batch", batch, data * fsdp * expert), ("heads", cfg.num_heads, tensor),
                             ("vocab", cfg.vocab_size, tensor)):
        if size % ways:
            raise ValueError(f"{what} {size} does not divide over {ways} devices (mesh "
                             + ",".join(f"{k}={v}" for k, v in mesh.items() if v > 1) + ")")


def layer_sizes(cfg: ModelConfig, batch: int, seq: int, mesh: Mapping[str, int], *, routed: bool) -> LayerSizes:
    """Per-device sizes of one layer's tensors under ``mesh`` (a full mesh, as ``parse_mesh`` gives)."""
    data, fsdp, tensor, expert = (mesh[a] for a in MESH_AXES)
    extra = moe_sizes(cfg, batch // (data * fsdp), expert, tensor, seq) if routed else {}
    return LayerSizes(b=batch // (data * fsdp * expert), S=seq, D=cfg.d_model, H=cfg.num_heads // tensor,
                      Hkv=max(cfg.num_kv_heads // tensor, 1), dh=cfg.head_dim, F=cfg.mlp_dim // tensor,
                      act=cfg.act_bytes, **extra)


def _layer_backward_terms(cfg, pol, graphs, b, S, D, A, mesh, specs, shards, loss_grad) -> list[Term]:
    """The working set of the largest layer's backward pass (see the module docstring)."""
    best: list[Term] = []
    for label, count, routed, z, g, residuals, recomputed in graphs:
        H = z.H
        if cfg.attention == "chunked" and S > cfg.attention_chunk and S % cfg.attention_chunk == 0:
            rows, what = cfg.attention_chunk, f"C={cfg.attention_chunk} query rows"
        else:
            rows, what = S, "S"
        scores = b * H * rows * S
        recomputed_keys = {n.key for n in recomputed}
        mlp_rows = b * S
        mlp = []
        if routed:
            rows_moe = z.groups_per_device * z.experts * z.capacity
            mlp.append(Term("moe_hidden", f"{label}: routed experts' hidden tensors", 3 * rows_moe * z.expert_F * A,
                            "device", "transient", f"3 x G x E x C x F_e x {A} B", "working"))
            mlp.append(Term("moe_dispatch", f"{label}: dispatched tokens", 2 * rows_moe * D * A, "device",
                            "transient", f"2 x G x E x C x D x {A} B", "working"))
            if z.shared_F:
                mlp.append(Term("shared_hidden", f"{label}: shared expert's hidden tensors",
                                4 * mlp_rows * z.shared_F * A, "device", "transient",
                                f"4 x b x S x F_shared x {A} B", "working"))
        else:
            # gate, up, their product and its gradient (3 when gate/up are saved); with tensor
            # parallelism XLA keeps only the product alive at the peak
            n_mlp = 1 if mesh["tensor"] > 1 else 4 if {"gate", "up"} & recomputed_keys else 3
            mlp.append(Term("mlp_hidden", f"{label}: MLP hidden tensors ({n_mlp})", n_mlp * mlp_rows * z.F * A,
                            "device", "transient", f"{n_mlp} x b x S x F/tensor x {A} B", "working"))
        stack = "moe_layers" if routed else ("layers" if cfg.mla is None else "dense_layers")
        # the q/k/v projection weights (all-gathered under FSDP) are live at the peak when the
        # backward recomputes q/k/v from them; with q/k/v saved they are needed only later
        attention_weights = sum(s.count // s.shape[0] for s in specs if s.path.startswith(f"{stack}/attention/w")
                                and not s.path.endswith("/wo")) * A // mesh["tensor"] if "q" in recomputed_keys else 0
        # Scores in the backward: fp32 scores and fp32 score gradient (8 B per score), bf16
        # probabilities (2 B), and sometimes a transposed bf16 copy for the value-gradient matmul
        # (2 B). XLA 0.10.2 keeps that copy for MLA and for 8+ query heads per KV head; with fewer,
        # when the out projection is saved while q/k/v and the MLP inputs are not on the device.
        device_names = set(pol.device)
        transposed = (cfg.mla is not None or cfg.num_heads // cfg.num_kv_heads >= 8 or (
            "out_proj" in set(pol.device) | set(pol.offload)
            and not device_names & {"query_proj", "key_proj", "value_proj", "mlpwi_0", "mlpwi_1"}))
        per_score = 12 if transposed else 10
        detail = "2 fp32 + 2 bf16" if transposed else "2 fp32 + 1 bf16"
        # [b, S, D] tensors of the layer's backward (residual-stream gradients, norm inputs):
        # 2 fp32 + 6 bf16 without tensor parallelism, 4 bf16 with it
        scratch, scratch_text = (4 * A, "4 bf16") if mesh["tensor"] > 1 else (2 * 4 + 6 * A, "2 fp32 + 6 bf16")
        terms = [
            Term("attention_scores", f"{label}: attention scores ({detail})",
                 per_score * scores, "device", "transient",
                 f"{per_score} B x b x H/tensor x {what} x S", "working"),
            *mlp,
            Term("layer_weights", f"{label}: attention weights in {A}-byte compute dtype", attention_weights,
                 "device", "transient", "q/k/v projection weights x 2 B / tensor (gathered under FSDP)", "working"),
            Term("scratch", f"{label}: [b, S, D] scratch ({scratch_text})", b * S * D * scratch, "device",
                 "transient", f"b x S x D x {scratch} B", "working"),
            Term("loss_grad", "loss gradient kept for the embedding's backward", loss_grad, "device", "transient",
                 "b x S x V/tensor x 4 B", "logits"),
        ]
        if sum(t.bytes for t in terms) > sum(t.bytes for t in best):
            best = terms
    return best


@dataclasses.dataclass(frozen=True)
class TensorTradeoff:
    """One named tensor of a layer: what keeping it costs against what recomputing it costs."""

    name: str
    bytes_per_layer: int  # per device
    recompute_flops_per_layer: float  # the op that produces it, per device
    layers: int


def tensor_tradeoffs(model: ModelConfig | str, batch: int, seq: int, mesh: Mapping[str, int] | str | None = None,
                     num_devices: int | None = None) -> list[TensorTradeoff]:
    """Per named tensor of the (largest) layer: bytes to save or offload it, FLOPs to recompute it."""
    cfg = configs.config(model)
    mesh = mesh_of(mesh, num_devices)
    _check_divisible(cfg, batch, seq, mesh)
    routed = cfg.moe is not None and cfg.num_moe_layers > 0
    graph = layer_graph(cfg, layer_sizes(cfg, batch, seq, mesh, routed=routed), routed=routed)
    count = cfg.num_moe_layers if routed else cfg.num_layers
    return [TensorTradeoff(n.name, n.bytes, n.flops, count) for n in graph.nodes if n.name and n.key != "x"]
