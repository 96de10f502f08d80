"""The budget of a step (``estimate``), and what each tensor's choice of remat, device or offload costs
(``tensor_tradeoffs``)."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ...models import configs
from ...models.configs import ModelConfig
from ...models.graph import layer_graph
from ...ground.sharding import AxisRules, mesh_of
from ...hardware.targets import DEFAULT_MEM_FRACTION, Target
from ...ground.state import StateConfig

from .result import Budget, UNSCANNED
from .phases import (
    FIRST_ORDER_GONE, LAYER_RULES, PHASE_RULES, _Phases, _budget, _layer_backward, _persistent_terms, _resolve,
    _static_terms
)
from .terms import _backward_end_terms, _check_divisible, _loss_terms, _update_terms, layer_sizes, tail_layers


def estimate(model: ModelConfig | str, batch: int, seq: int, policy="full",
             mesh: Mapping[str, int] | str | None = None, num_devices: int | None = None, *,
             mu_dtype_bytes: int | None = None, rules: AxisRules = AxisRules(), hbm_bytes: int | None = None,
             mem_fraction: float = DEFAULT_MEM_FRACTION, target: Target | None = None,
             state: StateConfig | None = None, flags=None) -> Budget:
    """The per-device memory budget of one training step (see the module docstring).

    ``target`` (or ``hbm_bytes`` and ``mem_fraction``) gives the verdicts: fits, margin, the
    scheduler's limit, all against the usable HBM (JAX's allocator limit), not the whole card.
    ``state`` are MaxText's training-state levers (gradient accumulation, optimizer and parameter
    host offload); ``flags`` the XLA flags of the step (``flags.resolve``: MaxText's GPU flags by
    default), whose pipelined all-gathers and host offloading change what is live.

    Read top to bottom, as notebook 01 builds it: the step's inputs, the static terms (its
    arguments), the persistent ones (alive through the backward pass), the transient phases — and
    between them, in order, the scheduler's effects the compiles showed, each a named rule
    (``LAYER_RULES`` on the loss and a layer's backward, ``PHASE_RULES`` on the phases after it).
    """
    s = _resolve(model, batch, seq, policy, mesh, num_devices, mu_dtype_bytes, rules,
                 target.hbm_bytes if target is not None else hbm_bytes,
                 target.mem_fraction if target is not None else mem_fraction, target, state, flags)
    s.terms = _static_terms(s)
    s.terms += _persistent_terms(s)
    p = _Phases(layer=_layer_backward(s), loss=_loss_terms(s.cfg, s.b, s.S, s.D, s.V, s.A, s.shards, s.n_acc),
                tail=tail_layers(s.flag_set, bool(s.residual_host)), gone=dict(FIRST_ORDER_GONE))
    for rule in LAYER_RULES:
        rule(s, p)
    p.named = {"loss": p.loss, "layer backward": p.layer, "backward end": _backward_end_terms(p.layer, s.D, s.V),
               "optimizer update": _update_terms(s.state, s.param_bytes, s.moments, s.specs, s.shards, s.cfg,
                                                 s.mesh, s.A, p.tail)}
    if p.moe_peeled:
        p.named["peeled MoE backward"] = p.layer + list(p.moe_peeled)
    for rule in PHASE_RULES:
        rule(s, p)
    return _budget(s, p)


@dataclasses.dataclass(frozen=True)
class TensorTradeoff:
    """One named tensor of a layer: what keeping it costs against what recomputing it costs."""

    name: str
    bytes_per_layer: int  # per device
    recompute_flops_per_layer: float  # the op that produces it, per device
    layers: int


def tensor_tradeoffs(model: ModelConfig | str, batch: int, seq: int, mesh: Mapping[str, int] | str | None = None,
                     num_devices: int | None = None) -> list[TensorTradeoff]:
    """Per named tensor of the (largest) layer: bytes to save or offload it, FLOPs to recompute it.

    With flash attention ``context`` shows 0 FLOPs: saving it never spares the kernel's rerun (the
    backward pass also needs the kernel's log-sum-exp, which has no name), so nothing is gained by
    keeping it — a break-even bandwidth for it is infinite."""
    cfg = configs.config(model)
    if not cfg.scan_layers:
        raise ValueError(f"{cfg.name} with scan_layers false: {UNSCANNED}")
    mesh = mesh_of(mesh, num_devices)
    _check_divisible(cfg, batch, seq, mesh)
    routed = cfg.moe is not None and cfg.num_moe_layers > 0
    graph = layer_graph(cfg, layer_sizes(cfg, batch, seq, mesh, routed=routed), routed=routed)
    count = cfg.num_moe_layers if routed else cfg.num_layers
    return [TensorTradeoff(n.name, n.bytes, n.flops, count) for n in graph.nodes if n.name and n.key != "x"]
