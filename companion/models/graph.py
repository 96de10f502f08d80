"""What one decoder layer computes, as a small graph of named tensors: the shapes and FLOPs
behind the budget, and what a remat policy makes the backward pass keep or recompute.

Each ``Node`` is a tensor the layer produces: its checkpoint name (if MaxText gives it one),
its per-device shape, the FLOPs of the op that makes it, what it is computed from, and whether
the backward pass reads it. Given the names a policy saves (on device or on the host):

* a *residual* is a saved tensor the backward pass needs, directly or to recompute another;
* the *recomputed* tensors are the needed ones nobody saved, plus whatever they need.

Layer input is the scan carry: always saved (on device, unless offloaded by name).
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

from .configs import ModelConfig


@dataclasses.dataclass(frozen=True)
class Node:
    key: str
    name: str | None  # checkpoint name, if the layer gives it one
    shape: tuple[int, ...]  # per device
    dtype_bytes: int
    inputs: tuple[str, ...] = ()
    flops: float = 0.0  # of the op producing it (per device, forward)
    needed: bool = False  # read by the backward pass
    matmul: bool = False
    aliases: tuple[str, ...] = ()  # more names on the same tensor (nested checkpoint_name)

    @property
    def names(self) -> tuple[str, ...]:
        return ((self.name,) if self.name else ()) + self.aliases

    @property
    def bytes(self) -> int:
        n = self.dtype_bytes
        for d in self.shape:
            n *= d
        return n


@dataclasses.dataclass(frozen=True)
class LayerSizes:
    """Per-device sizes of one layer's tensors: b sequences of S tokens, heads and MLP split by tensor."""

    b: int  # sequences per device (batch / (data x fsdp x expert))
    S: int
    D: int
    H: int  # query heads per device
    Hkv: int
    dh: int
    F: int  # MLP width per device
    act: int  # activation bytes (bf16: 2)
    groups_per_device: int = 0  # MoE groups (sequences) per device: batch / (data x fsdp)
    experts: int = 0  # routed experts per device
    capacity: int = 0  # dense path: slots per expert and sequence (0: every expert on every token)
    expert_F: int = 0  # expert MLP width per device
    shared_F: int = 0  # shared-expert MLP width per device
    topk: int = 0
    expert_rows: int = 0  # sparse paths: rows of the routed experts' tensors on a device (the receive buffer)
    routed_rows: int = 0  # sparse paths: rows whose matmul FLOPs the experts' kernels execute (see moe_sizes)
    receive_rows: int = 0  # sparse paths: the all-to-all receive buffer (rows x min(EP, E/k), or the factor)
    attention_pairs: int = 0  # query-key pairs the attention computes per sequence and head


@dataclasses.dataclass(frozen=True)
class LayerGraph:
    nodes: tuple[Node, ...]

    @cached_property
    def by_key(self) -> dict[str, Node]:
        return {n.key: n for n in self.nodes}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for n in self.nodes for name in n.names)

    def plan(self, saved_names: set[str]) -> tuple[list[Node], list[Node]]:
        """(residuals, recomputed) for a policy saving ``saved_names`` (device or host)."""
        saved = {n.key for n in self.nodes if saved_by(saved_names, n) or n.key == "x"}
        residual, recompute = set(), set()

        def need(key: str) -> None:
            if key in saved:
                residual.add(key)
                return
            if key in recompute:
                return
            recompute.add(key)
            for k in self.by_key[key].inputs:
                need(k)

        for node in self.nodes:
            if node.needed:
                need(node.key)
        order = [n.key for n in self.nodes]
        return ([self.by_key[k] for k in order if k in residual], [self.by_key[k] for k in order if k in recompute])

    @property
    def forward_flops(self) -> float:
        return sum(n.flops for n in self.nodes)


def _attention_core(cfg: ModelConfig, z: LayerSizes, qk: int, vd: int) -> list[Node]:
    """The attention between q, k, v and the out projection, per implementation.

    dot_product / chunked: the probabilities ``[b, H, S, S]`` are what the backward reads, and the
    output is named ``attention_out``. flash: a fused kernel whose own residuals (its output and
    the log-sum-exp) are not named, so any remat policy recomputes the kernel's forward for its
    backward; its output is named ``context`` and ``attention_out`` (MaxText's cuDNN path).
    """
    b, S, H, a = z.b, z.S, z.H, z.act
    if cfg.attention != "flash":
        return [
            Node("probs", None, (b, H, S, S), a, ("q", "k"), 2 * b * H * S * S * qk, True, True),
            Node("ctx", "attention_out", (b, S, H, vd), a, ("probs", "v"), 2 * b * H * S * S * vd, True, True),
        ]
    flops = 2 * b * H * z.attention_pairs * (qk + vd)
    return [
        Node("attn", None, (b, S, H, vd), a, ("q", "k", "v"), flops, True, True),  # + lse [b, H, S] fp32
        Node("ctx", "context", (b, S, H, vd), a, ("attn",), needed=True, aliases=("attention_out",)),
    ]


def _attention_nodes(cfg: ModelConfig, z: LayerSizes) -> list[Node]:
    b, S, D, H, Hkv, dh, a = z.b, z.S, z.D, z.H, z.Hkv, z.dh, z.act
    T = b * S
    if cfg.mla is None:
        return [
            Node("n1", None, (b, S, D), a, ("x",), needed=True),
            Node("q", "query_proj", (b, S, H, dh), a, ("n1",), 2 * T * D * H * dh, True, True),
            Node("k", "key_proj", (b, S, Hkv, dh), a, ("n1",), 2 * T * D * Hkv * dh, True, True),
            Node("v", "value_proj", (b, S, Hkv, dh), a, ("n1",), 2 * T * D * Hkv * dh, True, True),
            *_attention_core(cfg, z, dh, dh),
            Node("out", "out_proj", (b, S, D), a, ("ctx",), 2 * T * H * dh * D, False, True),
        ]
    m = cfg.mla
    qk, vd = m.qk_head_dim, m.v_head_dim
    return [
        Node("n1", None, (b, S, D), a, ("x",), needed=True),
        Node("qa", "query_wa_proj", (b, S, m.q_lora_rank), a, ("n1",), 2 * T * D * m.q_lora_rank, True, True),
        Node("qn", "mla_q", (b, S, m.q_lora_rank), a, ("qa",), needed=True),
        Node("q", "query_proj", (b, S, H, qk), a, ("qn",), 2 * T * m.q_lora_rank * H * qk, True, True),
        Node("kva", "kv_wa_proj", (b, S, m.kv_lora_rank + m.qk_rope_head_dim), a, ("n1",),
             2 * T * D * (m.kv_lora_rank + m.qk_rope_head_dim), True, True),
        Node("kvn", "mla_kv", (b, S, m.kv_lora_rank), a, ("kva",), needed=True),
        Node("k", "key_proj", (b, S, H, qk), a, ("kvn", "kva"), 2 * T * m.kv_lora_rank * H * m.qk_nope_head_dim, True, True),
        Node("v", "value_proj", (b, S, H, vd), a, ("kvn",), 2 * T * m.kv_lora_rank * H * vd, True, True),
        *_attention_core(cfg, z, qk, vd),
        Node("out", "out_proj", (b, S, D), a, ("ctx",), 2 * T * H * vd * D, False, True),
    ]


def _mlp_nodes(prefix: str, z: LayerSizes, rows: tuple[int, ...], width: int, names: tuple[tuple[str, ...], ...],
               source: str, flop_rows: int | None = None) -> list[Node]:
    T = 1
    for r in rows:
        T *= r
    F = flop_rows if flop_rows is not None else T
    (g, *g_more), (u, *u_more), (o, *o_more) = names
    return [
        Node(f"{prefix}gate", g, (*rows, width), z.act, (source,), 2 * F * z.D * width, True, True, tuple(g_more)),
        Node(f"{prefix}up", u, (*rows, width), z.act, (source,), 2 * F * z.D * width, True, True, tuple(u_more)),
        Node(f"{prefix}act", None, (*rows, width), z.act, (f"{prefix}gate", f"{prefix}up"), needed=True),
        Node(f"{prefix}down", o, (*rows, z.D), z.act, (f"{prefix}act",), 2 * F * width * z.D, False, True,
             tuple(o_more)),
    ]


DENSE_NAMES = (("mlpwi_0",), ("mlpwi_1",), ("mlpwo",))


def layer_graph(cfg: ModelConfig, z: LayerSizes, *, routed: bool) -> LayerGraph:
    """The graph of one layer: attention, then a dense MLP or routed experts (+ shared expert)."""
    nodes = [Node("x", "decoder_layer_input", (z.b, z.S, z.D), z.act, needed=False)]
    nodes += _attention_nodes(cfg, z)
    nodes += [Node("h", None, (z.b, z.S, z.D), z.act, ("x", "out"), needed=True),
              Node("n2", None, (z.b, z.S, z.D), z.act, ("h",), needed=True)]
    if not routed:
        nodes += _mlp_nodes("", z, (z.b, z.S), z.F, DENSE_NAMES, "n2")
        return LayerGraph(tuple(nodes))
    sparse = cfg.moe.dispatch != "dense"
    if sparse:
        rows = (z.expert_rows,)
    elif z.capacity:
        rows = (z.experts, z.groups_per_device, z.capacity)
    else:  # every expert on every token
        rows = (z.b, z.S, cfg.moe.num_experts)
    # MaxText's names: the sparse path tags the up output moe_mlpwi_1 only; its dense path also mlpwi_1
    up = ("moe_mlpwi_1",) if sparse else ("moe_mlpwi_1", "mlpwi_1")
    names = (("moe_mlpwi_0", "mlpwi_0"), up, ("moe_mlpwo", "mlpwo"))
    nodes += [Node("dispatch", None, (*rows, z.D), z.act, ("n2",), needed=True)]
    routed_nodes = _mlp_nodes("moe_", z, rows, z.expert_F, names, "dispatch",
                              flop_rows=z.routed_rows if sparse else None)
    # The routed down projection is read by the weighted combine's backward (for the router's gradient).
    routed_nodes[-1] = dataclasses.replace(routed_nodes[-1], needed=True)
    nodes += routed_nodes
    if z.shared_F:
        nodes += _mlp_nodes("shared_", z, (z.b, z.S), z.shared_F, DENSE_NAMES, "n2")
    return LayerGraph(tuple(nodes))


def saved_by(names: set[str] | tuple[str, ...], node: Node) -> bool:
    return any(n in names for n in node.names)


def moe_sizes(cfg: ModelConfig, groups_per_device: int, expert_ways: int, tensor: int, S: int,
              local_tokens: int) -> dict:
    """The routed experts' per-device sizes. ``routed_rows``, the rows whose matmul FLOPs the
    experts' kernels execute: a grouped GEMM the expected rows (balanced x the imbalance on the
    most-loaded device); ``ragged_dot`` as jaxlib 0.10.2 expands it, every buffer row times every
    local expert."""
    from .moe import expert_capacity, ragged_sizes

    m = cfg.moe
    out = {"groups_per_device": groups_per_device, "experts": m.num_experts // expert_ways,
           "expert_F": m.expert_mlp_dim // tensor, "shared_F": m.shared_experts * m.expert_mlp_dim // tensor,
           "topk": m.experts_per_token}
    if m.dispatch == "dense":
        out["capacity"] = (expert_capacity(S, m.experts_per_token, m.num_experts, m.capacity_factor)
                           if m.capacity_factor > 0 else 0)
    else:
        z = ragged_sizes(local_tokens, m.experts_per_token, m.num_experts, expert_ways, m.ragged_buffer_factor,
                         m.imbalance)
        routed = z.expected_rows if m.dispatch == "grouped" else z.buffer_rows * z.local_experts
        out.update(expert_rows=z.buffer_rows, routed_rows=routed, receive_rows=z.buffer_rows)
    return out


# ----------------------------------------------------------------------------- parameters


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter array as the models create it: path, global shape, logical axes, dtype bytes."""

    path: str
    shape: tuple[int, ...]
    axes: tuple[str, ...]
    dtype_bytes: int
    trainable: bool = True  # the router's balancing bias is not

    @property
    def count(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _layer_params(cfg: ModelConfig, *, routed: bool) -> list[tuple[str, tuple[int, ...], tuple[str, ...], bool]]:
    D, H, Hkv, dh = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    out = [("attention_norm/scale", (D,), ("norm",), True), ("mlp_norm/scale", (D,), ("norm",), True)]
    if cfg.mla is None:
        out += [("attention/wq", (D, H, dh), ("embed", "heads", "head_dim"), True),
                ("attention/wk", (D, Hkv, dh), ("embed", "kv_heads", "head_dim"), True),
                ("attention/wv", (D, Hkv, dh), ("embed", "kv_heads", "head_dim"), True),
                ("attention/wo", (H, dh, D), ("heads", "head_dim", "embed"), True)]
    else:
        m = cfg.mla
        out += [("attention/wq_a", (D, m.q_lora_rank), ("embed", "q_lora"), True),
                ("attention/q_norm/scale", (m.q_lora_rank,), ("norm",), True),
                ("attention/wq_b", (m.q_lora_rank, H, m.qk_head_dim), ("q_lora_up", "heads", "head_dim"), True),
                ("attention/wkv_a", (D, m.kv_lora_rank + m.qk_rope_head_dim), ("embed", "kv_lora"), True),
                ("attention/kv_norm/scale", (m.kv_lora_rank,), ("norm",), True),
                ("attention/wkv_b", (m.kv_lora_rank, H, m.qk_nope_head_dim + m.v_head_dim),
                 ("kv_lora_up", "heads", "head_dim"), True),
                ("attention/wo", (H, m.v_head_dim, D), ("heads", "head_dim", "embed"), True)]
    if not routed:
        F = cfg.mlp_dim
        return out + [("mlp/wi_0", (D, F), ("embed", "mlp"), True), ("mlp/wi_1", (D, F), ("embed", "mlp"), True),
                      ("mlp/wo", (F, D), ("mlp", "embed"), True)]
    m = cfg.moe
    E, Fe = m.num_experts, m.expert_mlp_dim
    out += [("mlp/router", (D, E), ("embed", "router"), True)]
    if m.score_function == "sigmoid":
        out += [("mlp/router_bias", (E,), ("router",), False)]
    out += [("mlp/wi_0", (E, D, Fe), ("exp", "embed_moe", "mlp_moe"), True),
            ("mlp/wi_1", (E, D, Fe), ("exp", "embed_moe", "mlp_moe"), True),
            ("mlp/wo", (E, Fe, D), ("exp", "mlp_moe", "embed_moe"), True)]
    if m.shared_experts:
        Fs = m.shared_experts * Fe
        out += [("mlp/shared/wi_0", (D, Fs), ("embed", "mlp"), True),
                ("mlp/shared/wi_1", (D, Fs), ("embed", "mlp"), True),
                ("mlp/shared/wo", (Fs, D), ("mlp", "embed"), True)]
    return out


def parameter_specs(cfg: ModelConfig) -> list[ParamSpec]:
    """Every parameter of ``models.build(cfg)``, stacked layers with their leading "layers" axis."""
    w = cfg.weight_bytes
    specs = [ParamSpec("embed/table", (cfg.vocab_size, cfg.d_model), ("vocab", "embed"), w)]
    for stack, count, routed in cfg.stacks():
        for path, shape, axes, trainable in _layer_params(cfg, routed=routed):
            dtype = 4 if path.endswith(("router", "router_bias")) else w
            specs.append(ParamSpec(f"{stack}/{path}", (count, *shape), ("layers", *axes), dtype, trainable))
    specs += [ParamSpec("head/norm/scale", (cfg.d_model,), ("norm",), w),
              ParamSpec("head/kernel", (cfg.d_model, cfg.vocab_size), ("embed", "vocab"), w)]
    return specs
