"""Where a step's peak falls: the step's phases and the scheduler's rules, each a named function in the order it
applies."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from typing import Mapping

from ...hardware import fit as fit_rule
from ...hardware import flags as xla_flags
from ...ground import policies as policy_lib
from ...models import configs
from ...models.configs import ModelConfig
from ...models.graph import layer_graph, parameter_specs, saved_by
from ...ground import sharding
from ...ground.sharding import mesh_of
from ...hardware.targets import Target, allocator_limit_bytes, check_mem_fraction
from ...ground.state import StateConfig

from .result import Budget, Term, UNSCANNED
from .terms import (
    SCHEDULER_SLACK, SCORE_COPY_BYTES, _check_divisible, _gradient_transposes, _layer_backward_terms,
    _loop_tail_terms, _peeled_moe_terms, _uncalibrated, layer_sizes
)


@dataclasses.dataclass
class _Step:
    """One step's checked inputs and the first-order model's pieces: what the rules read."""

    cfg: ModelConfig
    batch: int
    seq: int
    mesh: dict
    pol: object  # policies.Policy
    state: StateConfig
    flag_set: object  # flags.FlagSet
    hbm_bytes: int | None
    mem_fraction: float
    target: Target | None
    mu_bytes: int
    specs: tuple  # models.graph.ParamSpec, read-only (shared by every estimate of the model and mesh)
    shards: Mapping[str, int]  # elements per device, by parameter path (read-only)
    terms: list = dataclasses.field(default_factory=list)
    graphs: list = dataclasses.field(default_factory=list)  # per layer stack: label, count, routed, sizes, graph, ...
    param_bytes: int = 0
    moments: int = 0
    residual_dev: int = 0
    residual_host: int = 0
    recompute_flops: float = 0.0
    step_flops: float = 0.0
    transposes: Term | None = None

    @property
    def n_acc(self) -> int:
        return self.state.gradient_accumulation_steps

    @property
    def micro(self) -> int:
        return self.batch // self.n_acc

    @property
    def b(self) -> int:
        return self.micro // sharding.batch_ways(self.mesh)

    @property
    def S(self) -> int:
        return self.seq

    @property
    def D(self) -> int:
        return self.cfg.d_model

    @property
    def V(self) -> int:
        return self.cfg.vocab_size // self.mesh["tensor"]

    @property
    def A(self) -> int:
        return self.cfg.act_bytes

    @property
    def double_buffered(self) -> bool:
        return bool(self.flag_set.flags.get("xla_gpu_enable_while_loop_double_buffering"))

    @property
    def base(self) -> int:
        """The static and persistent terms on the device: under every phase."""
        return sum(t.bytes for t in self.terms if t.space == "device")

    @property
    def static_dev(self) -> int:
        return sum(t.bytes for t in self.terms if t.kind == "static" and t.space == "device")

    @property
    def limit(self) -> int | None:
        """The latency-hiding scheduler's memory limit (usable HBM less the arguments, x 95 %)."""
        if not self.hbm_bytes:
            return None
        return (self.usable_bytes - self.static_dev) * 95 // 100

    @property
    def usable_bytes(self) -> int:
        """Usable HBM: the allocator's share on a GPU, the runtime's fixed limit on a TPU."""
        if self.target is not None and self.target.is_tpu:
            return self.target.usable_hbm_bytes
        return allocator_limit_bytes(self.hbm_bytes, self.mem_fraction)


@dataclasses.dataclass
class _Phases:
    """The transient phases as the rules shape them: the loss and a layer's backward first, then every
    phase by name (``named``), what each no longer holds (``gone``) and where the limit cut (``filled``)."""

    layer: list
    loss: list
    tail: int  # the backward loop's iterations XLA peels into the top level (``tail_layers``)
    gone: dict
    moe_peeled: list = dataclasses.field(default_factory=list)
    named: dict = dataclasses.field(default_factory=dict)
    filled: set = dataclasses.field(default_factory=set)


# What each phase no longer holds in the first-order model: after the layers, the transposed
# accumulators; after the backward pass, the residuals too
FIRST_ORDER_GONE = {"backward end": ("gradient_transposes",), "loop tail": ("gradient_transposes",),
                    "peeled MoE backward": ("gradients",),
                    "optimizer update": ("gradient_transposes", "residuals", "pipelined_offload",
                                         "residuals_second_microbatch")}


def _resolve(model, batch, seq, policy, mesh, num_devices, mu_dtype_bytes, rules, hbm_bytes, mem_fraction,
             target, state, flags) -> _Step:
    """The inputs, checked: a scanned model, a remat policy, a batch the mesh and the microbatches divide."""
    mem_fraction = check_mem_fraction(mem_fraction)
    state = state or StateConfig()
    flag_set = xla_flags.resolve(flags)
    cfg = configs.config(model)
    if not cfg.scan_layers:
        raise ValueError(f"{cfg.name} with scan_layers false: {UNSCANNED}")
    mesh = mesh_of(mesh, num_devices)
    pol = policy_lib.resolve(policy)
    if pol.save_all:
        raise ValueError("the budget models remat policies; 'no_remat' keeps every intermediate of every layer "
                         "(compile it to see what that costs)")
    _check_divisible(cfg, batch, seq, mesh)
    n_acc = state.gradient_accumulation_steps
    if batch % n_acc:
        raise ValueError(f"batch {batch} does not split into {n_acc} gradient accumulation steps")
    _check_divisible(cfg, batch // n_acc, seq, mesh)
    specs, shards = _parameter_shards(cfg, rules, tuple(mesh.items()))
    return _Step(cfg, batch, seq, mesh, pol, state, flag_set, hbm_bytes, mem_fraction, target,
                 mu_dtype_bytes or cfg.weight_bytes, specs, shards)


@functools.lru_cache(maxsize=64)  # a plan search prices thousands of batches of one model on one mesh
def _parameter_shards(cfg, rules, mesh: tuple[tuple[str, int], ...]):
    """The model's parameters and each one's elements per device under ``rules`` (read-only)."""
    specs = tuple(parameter_specs(cfg))
    mesh = dict(mesh)
    shards = {sp.path: math.prod(rules.shard_shape(sp.shape, sp.axes, mesh)) for sp in specs}
    return specs, types.MappingProxyType(shards)


def _static_terms(s: _Step) -> list[Term]:
    """The step's arguments (on the host where MaxText's offload flags put them)."""
    cfg, W, S = s.cfg, s.cfg.weight_bytes, s.S
    s.param_bytes = sum(s.shards[sp.path] * sp.dtype_bytes for sp in s.specs)
    s.moments = sum(s.shards[sp.path] * (s.mu_bytes + sp.dtype_bytes) for sp in s.specs if sp.trainable)
    per_device = s.batch // sharding.batch_ways(s.mesh)
    return [
        Term("parameters", "parameters", s.param_bytes, "host" if s.state.parameter_memory_host_offload else "device",
             "static", f"{cfg.param_count() / 1e9:.2f}B params x {W} B / sharding", "parameters"),
        Term("optimizer", "AdamW moments (mu, nu)", s.moments,
             "host" if s.state.optimizer_memory_host_offload else "device", "static",
             f"params x ({s.mu_bytes} + {W}) B / sharding", "optimizer"),
        Term("batch", "token batch (inputs, targets)", 2 * per_device * S * 4, "device", "static",
             f"2 x B/devices x S x 4 B = 2 x {per_device} x {S} x 4", "batch"),
    ]


def _persistent_terms(s: _Step) -> list[Term]:
    """Alive through the backward pass: the layers' fp32 weight gradients (and their transposes), the
    residuals the policy saves (device or host; one more layer of the offloaded ones when pipelined), and
    gradient accumulation's accumulator (with a second microbatch in flight when the loop is double-buffered)."""
    pol, cfg = s.pol, s.cfg
    pipelined_copy = 0
    dev_names, host_names = [], []
    for _, count, routed in cfg.stacks():
        if not count:
            continue
        z = layer_sizes(cfg, s.micro, s.seq, s.mesh, routed=routed)
        g = layer_graph(cfg, z, routed=routed)
        residuals, recomputed = g.plan(set(pol.device) | set(pol.offload))
        s.graphs.append(("MoE layer" if routed else "layer", count, routed, z, g, residuals, recomputed))
        for n in residuals:
            if saved_by(pol.offload, n) and not saved_by(pol.device, n):
                s.residual_host += count * n.bytes
                pipelined_copy += n.bytes
                host_names.append(n.name)
            else:
                s.residual_dev += count * n.bytes
                dev_names.append(n.name or n.key)
        s.recompute_flops += count * sum(n.flops for n in recomputed)
        s.step_flops += count * 3 * g.forward_flops
    trainable = [sp for sp in s.specs if sp.trainable]
    layer_param_grads = sum(s.shards[sp.path] * 4 for sp in trainable if sp.path.split("/")[0].endswith("layers"))
    s.transposes = _gradient_transposes(cfg, s.specs, s.shards, s.mesh["fsdp"], s.n_acc)
    terms = [s.transposes] if s.transposes is not None else []
    terms += [
        Term("gradients", "gradients of the layer weights (fp32)", layer_param_grads, "device", "persistent",
             "layer params x 4 B / sharding", "gradients"),
        Term("residuals", "saved activations (residuals)", s.residual_dev, "device", "persistent",
             "L x [" + " + ".join(dict.fromkeys(dev_names)) + "]", "activations"),
        Term("residuals_host", "offloaded activations (residuals)", s.residual_host, "host", "persistent",
             "L x [" + " + ".join(dict.fromkeys(host_names)) + "]" if host_names else "none offloaded",
             "activations"),
    ]
    if s.flag_set.flags.get(xla_flags.PIPELINED_HOST_OFFLOADING) and pipelined_copy:
        terms.append(Term("pipelined_offload", "offloaded tensors of the next layer, carried (pipelined offload)",
                          pipelined_copy, "device", "persistent",
                          "1 layer x [" + " + ".join(dict.fromkeys(host_names)) + "]", "activations"))
    accumulator = sum(s.shards[sp.path] * 4 for sp in s.specs)
    if s.n_acc > 1:
        terms.append(Term("gradient_accumulator", "gradient accumulator (fp32)", accumulator, "device", "persistent",
                          f"params x 4 B / sharding ({s.n_acc} microbatches of B/{s.n_acc})", "gradients"))
    if s.n_acc > 1 and s.double_buffered:  # the microbatch loop is unrolled by two: two microbatches in flight
        terms.append(Term("residuals_second_microbatch", "the second microbatch's saved activations (double-buffered "
                          "accumulation loop)", s.residual_dev, "device", "persistent", "= saved activations",
                          "activations"))
        terms.append(Term("gradient_accumulator_next", "the accumulator's next value (fp32)", accumulator, "device",
                          "persistent", "params x 4 B / sharding", "gradients"))
    return terms


def _layer_backward(s: _Step, score_bytes: int = 0) -> list[Term]:
    return _layer_backward_terms(s.cfg, s.pol, s.graphs, s.b, s.S, s.D, s.V, s.A, s.mesh, s.specs, s.shards,
                                 s.flag_set, s.state, score_bytes=score_bytes or SCORE_COPY_BYTES[0])


def _transient_room(s: _Step, phase: list[Term]) -> bool:
    """Whether ``phase`` fits next to the persistent terms under the scheduler's limit (no limit: it does)."""
    return s.limit is None or s.base - s.static_dev + sum(t.bytes for t in phase) <= s.limit


# ----------------------------------------------------------------------------- the scheduler's rules

def score_copies(s: _Step, p: _Phases) -> None:
    """The scheduler keeps as many fp32 attention-score copies as fit under its limit (18, 16, then 12 B a
    score); only the teaching attentions with cuBLAS matmuls have copies to drop (``SCORE_COPY_BYTES``)."""
    if s.cfg.attention == "flash" or s.flag_set.flags.get("xla_gpu_enable_triton_gemm", True):
        return
    for fewer in SCORE_COPY_BYTES[1:]:
        if _transient_room(s, p.layer):
            return
        p.layer = _layer_backward(s, fewer)


def peeled_moe_buffers(s: _Step, p: _Phases) -> None:
    """With a dropless MoE loop, the zero-filled buffers of the MoE layers XLA peels out of it are there
    from the step's start (``_peeled_moe_terms``): at the loss too, and in the top level's memory that
    decides whether the moments come early (compiled: DeepSeek-V3 on 128 GB200, fsdp=16, B = 128, moments
    offloaded: they do not). With gradient accumulation the double-buffered microbatch loop hoists a second
    set. Compiled (jaxlib 0.10.2, DeepSeek-V3 671B, two microbatches of one sequence per GPU): on 64 GB200
    (fsdp=8) two sets are live at the peak, in the layer loop; on 512 GB200 (fsdp=64) the peak is in the
    peeled layers instead, with all four peeled layers' sets (without their fp32 weight gradients) live —
    not modelled (module docstring)."""
    p.moe_peeled = _peeled_moe_terms(s.cfg, s.graphs, p.layer, s.A, s.flag_set)
    if p.moe_peeled and s.n_acc > 1 and s.double_buffered:
        zeros = p.moe_peeled[0]
        p.moe_peeled = p.moe_peeled + [Term("moe_tail_zeros_second_microbatch", "the second microbatch's copy of "
                                            "them (double-buffered accumulation loop)", zeros.bytes, "device",
                                            "transient", "= " + zeros.formula, "working")]
    p.loss += p.moe_peeled


def moments_early_in_backward(s: _Step, p: _Phases) -> None:
    """Under its memory limit the scheduler starts transfers early for overlap: offloaded moments come to
    the device from the start of the backward pass. The limit it checks is the top level's: the layer loop is
    one instruction there, whose inside (the layer backward's working set) is not counted, so the moments
    come early whenever they fit next to the loss phase — even where the layer's working set then takes the
    step over usable HBM (compiled: DeepSeek-V3 on 8 B200, and on 128 GB200 at B = 128). Unless the layer loop
    moves offloaded residuals itself: then the moments' copies start after the loop (compiled: Llama 3.1
    405B, 256 H100, fsdp=256, activations and moments offloaded, pipelined)."""
    if not s.state.optimizer_memory_host_offload or s.limit is None or s.residual_host:
        return
    early = Term("moments_early", "offloaded moments brought to the device early (for the update)", s.moments,
                 "device", "transient", "params x 8 B / sharding", "optimizer")
    if _transient_room(s, p.loss + [early]):
        p.layer.append(early)
        p.loss.append(early)


def loop_tail(s: _Step, p: _Phases) -> None:
    """Pipelined host offloading peels the backward loop's last two layers into the top level, where the
    scheduler overlaps the second one's recompute with the first's backward up to its limit
    (``_loop_tail_terms``)."""
    if p.tail > 1 and not s.graphs[0][2]:
        persistent = s.base - s.static_dev - (s.transposes.bytes if s.transposes is not None else 0)
        p.named["loop tail"], cut = _loop_tail_terms(p.layer, s.graphs[0][3], s.A, s.limit, persistent)
        if cut:
            p.filled.add("loop tail")


def tensor_parallel_zero_fill(s: _Step, p: _Phases) -> None:
    """Under tensor parallelism XLA zero-fills the layer loop's fp32 gradient accumulators after the loss's
    fp32 logits and gradient are gone. Compiled (jaxlib 0.10.2, Llama 3.1 8B, B=8, S=8192, fsdp=4,tensor=2
    on 8 H200): the step peaks in the layer loop, 1.7 GiB under loss + accumulators; so do the four
    tensor-parallel Llama steps ``benchmarks/bench_budget.py`` checks it with (8B at tensor=2 and 4 on H100
    and H200, 70B at fsdp=8,tensor=4: the budget within 0.7 % of each)."""
    if s.mesh["tensor"] > 1:
        p.gone["loss"] = ("gradients",)


def params_early(s: _Step, p: _Phases) -> None:
    """With the parameters offloaded (the optimizer's moments too, or not), their copies to the device for the
    update start after the layer loop, while the head's weight gradient is computed (the saved activations are gone
    by then) — when they fit under the scheduler's limit. (Compiled at jaxlib 0.12.0.1, Llama 3.1 8B on 8 H100 with
    both on the host: all of the host state sits on the device at the backward's end; the rule skipped that case and
    the budget was 13.2 % under, now 5.7 %: issue 52.) Compiled (jaxlib 0.10.2, Llama 3.1 8B on 8 H100, fsdp=8, B=8, S=4096):
    the step peaks there, with the layers' MLP weights, the embedding and the head arriving next to the
    head's fp32 weight gradient and the loss gradient it reads."""
    st = s.state
    if not st.parameter_memory_host_offload or s.n_acc != 1:
        return
    arriving = Term("params_early", "parameters brought to the device early (for the update)", s.param_bytes,
                    "device", "transient", f"params x {s.cfg.weight_bytes} B / sharding", "parameters")
    after_loop = s.base - s.static_dev - sum(t.bytes for t in s.terms if t.key in ("gradient_transposes", "residuals")
                                             and t.space == "device")
    if s.limit is None or after_loop + sum(t.bytes for t in p.named["backward end"]) + arriving.bytes <= s.limit:
        p.named["backward end"] = p.named["backward end"] + [arriving]
        p.gone["backward end"] = ("gradient_transposes", "residuals")


def moments_early_in_update(s: _Step, p: _Phases) -> None:
    """With only the moments offloaded, their copies to the device start while the last (peeled) layer's
    backward still runs: the saved activations it reads are still there — when that about fits under the
    scheduler's limit (compiled, Llama 3.1 405B, 256 H100, fsdp=64,tensor=4, S=8192: 3 % over the budget's
    limit, early); with the parameters offloaded too, or far over the limit, the update waits for the
    backward pass (fsdp=64, B=64, S=4096 on 64 H100: 3x over, compiled 89.8 GiB)."""
    if not s.state.optimizer_memory_host_offload or s.state.parameter_memory_host_offload:
        return
    early_gone = ("gradient_transposes", "residuals_second_microbatch")
    early = s.base - s.static_dev + sum(t.bytes for t in p.named["optimizer update"]) - sum(
        t.bytes for t in s.terms if t.key in early_gone and t.space == "device")
    if s.limit is None or early <= SCHEDULER_SLACK * s.limit:
        p.gone["optimizer update"] = early_gone
    else:
        p.named["optimizer update"] = [t for t in p.named["optimizer update"] if t.key != "update_tail_weights"]


# The rules, in the order they apply: on the loss and a layer's backward, then on the phases after the layers
LAYER_RULES = (score_copies, peeled_moe_buffers, moments_early_in_backward)
PHASE_RULES = (loop_tail, tensor_parallel_zero_fill, params_early, moments_early_in_update)


def _budget(s: _Step, p: _Phases) -> Budget:
    """The peak phase (the largest total, less what it no longer holds) and the budget around it."""
    def held(name: str) -> list[Term]:
        return [t for t in s.terms if not (t.key in p.gone.get(name, ()) and t.space == "device")]

    totals = {name: sum(t.bytes for t in held(name) if t.space == "device") + sum(t.bytes for t in ts)
              for name, ts in p.named.items()}
    peak = max(totals, key=totals.get)
    flops_head = 2 * s.b * s.S * s.D * s.V
    return Budget(s.cfg.name, s.batch, s.seq, s.pol.name, s.mesh, tuple(held(peak) + p.named[peak]), peak,
                  s.n_acc * s.recompute_flops, s.n_acc * (s.step_flops + 3 * flops_head), s.hbm_bytes,
                  tuple(t for name, ts in p.named.items() if name != peak for t in ts), s.mem_fraction,
                  {name: tuple(ts) for name, ts in p.named.items()}, peak in p.filled, _uncalibrated(s.cfg, s.mesh),
                  fit_rule.host_limit_bytes(s.target) if s.target is not None else None,
                  s.target.usable_hbm_bytes if s.target is not None and s.target.is_tpu else None)
