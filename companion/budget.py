"""HBM budget of one training step, per device, as formulas: the analytic model of notebook 01.

``estimate(model, batch, seq, policy, mesh)`` lists every term that occupies device or host
memory at the step's peak, each with the tensor it stands for and its formula, plus the FLOPs
the policy's recompute adds. Pure Python over the config (no tracing, no compile): a widget can
call it on every slider move.

The terms, for the lab's models compiled as MaxText GPU users compile them (flash attention,
the MoE paths of ``models.moe``, MaxText's XLA flags) by the XLA jaxlib 0.10.2 pins, validated
against the compiler by ``benchmarks/bench_budget.py``:

* **static** — what the step's arguments hold: parameters (``weight_dtype``), AdamW's two
  moments, the token batch; on the host with ``optimizer_memory_host_offload`` /
  ``parameter_memory_host_offload``. Donated, so the updated copies reuse the same buffers.
* **persistent** — alive through the backward pass: the fp32 gradient accumulators of the
  scanned layers' weights (and a transposed copy of some of them under FSDP), and the
  *residuals* — every tensor the policy saves that the backward pass reads, stacked over the L
  layers (on the device, or on the host when offloaded; with pipelined host offloading one more
  layer of them on the device). With gradient accumulation, the fp32 accumulator (and, with
  double-buffered loops, a second microbatch's residuals and the accumulator's next value).
* **transient** — the largest of four phases: the **loss** (fp32 logits and their gradient,
  the head's gradient and shard in the compute dtype; inside gradient accumulation's microbatch
  loop also the target logits' gradient, scattered apart); a **layer backward** (the attention
  kernel's working set — cuDNN's or the lab's flash, or the ``[b, H, S, S]`` scores of the
  teaching options —, the MLP's or the routed experts' tensors, the layer weights gathered under
  FSDP: two layers and a bit with MaxText's pipelined all-gathers, some ``[b, S, D]`` scratch and
  the fp32 loss gradient, which the head's weight-gradient matmul after the layer loop reads); the
  **backward end** (the head's fp32 weight gradient, kept until its reduce-scatter); the
  **loop tail** (pipelined host offloading only: the last two layers, peeled out of the loop, whose
  backward and recompute the top-level scheduler overlaps up to its memory limit); the **peeled
  MoE backward** (sparse MoE stacks with a loop left after XLA peels 4 of their layers: the first
  peeled layer's working set next to the top-level layers' zero-filled receive-buffer gradients and
  combine buffers, allocated at the step's start by horizontally fused broadcasts; the loop's fp32
  gradient accumulators are not allocated yet); the
  **optimizer update** (offloaded state brought back to the device; offloaded moments arrive while
  the peeled last layers' weights, their weight gradients before the reduce-scatter and the saved
  activations are still there).

XLA peels the backward loop's last iteration (double-buffered loops; two with pipelined host
offloading) into the step's top level, where the scheduler interleaves it with the head's weight
gradient and the update's host copies: the phases above that sit after the loop model that tail.

**Its goal** (``benchmarks/bench_budget.py`` measures it): the fits verdict agrees with the compiler's,
the device bytes within a median |error| of 1.5 % over the real-size configurations, the host bytes
exact. The residual is where XLA's scheduler places buffers; the compile (``compiler.compile``, its
seconds printed) is the exact answer, and the budget is for what a widget or a search needs at once.

The latency-hiding scheduler keeps some buffers alive longer while it is under its memory limit
(extra fp32 score copies, offloaded moments brought in early): where it is, the budget says so.
Known gaps (``benchmarks/results/budget.json`` lists every configuration):

* the heap's fragmentation at the scheduler's limit: where a phase fills the limit (the loop tail
  under pipelined offload, Llama 3.1 405B at fsdp=128,tensor=2) the heap's packing decides. The
  budget flags such peaks (``Budget.at_scheduler_limit``), where its "fits" is the heap's call;
* the scheduler's cost model of each GPU: the same step, every tensor the same size, compiles to peaks
  2.9 % apart on 8 H100 and 8 B200 (Llama 3.1 8B, fsdp=8; the 70B on 64: 0.8 %), as the buffers XLA
  starts early differ; a budget without a model of the scheduler misses one of each pair by at least half
  that (``same_step_other_gpu`` in ``benchmarks/results/budget.json``'s summary);
* DeepSeek-V3's peeled MoE layers with memory to spare (512 GB200, fsdp=64, one sequence per GPU):
  the scheduler starts more or fewer of the receive-buffer-sized buffers and gathered expert weights
  early than the budget's count — the worst-case buffer within 5 % ("full", "minimal",
  qkv_proj_offloaded), ``ragged_buffer_factor`` 2 -12 %, pipelined minimal_offloaded +21 %, the dense
  path -5 %; where the step peaks in the layer loop (64 GB200, fsdp=8) every path is within 3 %
  (``tests/test_budget.py``, recorded compiles);
* gradient accumulation with a sparse MoE, over usable HBM: the double-buffered microbatch loop
  hoists each copy's peeled MoE buffers; the budget counts two sets (DeepSeek-V3, two microbatches on
  512 GB200: -7 %);
* where the scheduler places the ops it is free to move — the layer gradients' zero-fill broadcasts,
  which it uses as filler beside async collectives, and the fp32 copy of the gathered head that the
  loss gradient's matmul reads: Llama 3.1 8B on 8 H100 (fsdp=8, "full") zero-fills the ``mlp/wo``,
  ``attention/wq``, ``attention/wo``, ``wk`` and ``wv`` accumulators (1.5 GiB) after the loss's peak
  at S=8192 (+3.5 %), only the last three (0.4 GiB) at S=4096; with pipelined host offloading it
  converts the head to fp32 before the loss gradient, next to both fp32 logits (minimal_offloaded:
  -6 %), without it after; on 4 GH200 (qkv_proj_offloaded, pipelined) it zero-fills every
  accumulator but the transposed ones after the loss, and the step peaks after the layer loop
  instead (+4.6 %). The placement follows the scheduler's cost model, not the tensors' sizes;
* with the moments on the device and far over the scheduler's limit, XLA may compute the head's
  weight gradient before the layer loop instead of after it (Llama 3.1 405B on 256 H100, S=8192,
  "full", fsdp=256 or fsdp=128,tensor=2: +12 % and +4 %; Llama 3.1 70B, fsdp=8,tensor=8: +4 %;
  the condition is not modelled);
* tiny models, whose fixed-size buffers (cuBLAS workspaces, MBs) dominate and are not modelled.

Per-device sizes: ``b = B / (data x fsdp x expert)`` sequences; heads, MLP width and vocabulary
divided by ``tensor``; parameters by the sharding rules.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from typing import Mapping

from . import fit as fit_rule
from . import flags as xla_flags
from . import policies as policy_lib
from .models import configs, flash
from .models.configs import ModelConfig
from .models.graph import LayerSizes, layer_graph, moe_sizes, parameter_specs, saved_by
from . import sharding, targets
from .sharding import MESH_AXES, AxisRules, mesh_of
from .targets import DEFAULT_MEM_FRACTION, Target, allocator_limit_bytes, check_mem_fraction
from .state import StateConfig

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
    other_phase: tuple[Term, ...] = ()  # the transient terms of the phases that are not the peak
    mem_fraction: float = DEFAULT_MEM_FRACTION  # JAX's allocator share of HBM
    phases: dict[str, tuple[Term, ...]] = dataclasses.field(default_factory=dict)  # every phase's transient terms
    # The peak is where XLA's latency-hiding scheduler starts buffers early until its memory limit stops it
    # (the second peeled MoE layer's zero-filled buffers, the loop tail's second layer): the budget counts
    # the bytes live there, the limit's, which leaves a margin of about 5 % (the slop factor's), and how
    # tightly XLA's heap packs them decides the allocation. Compiled (jaxlib 0.10.2): seven DeepSeek-V3 671B
    # steps at the limit (256 and 512 GB200, memory fractions 0.75 and 0.85; benchmarks/results/budget.json,
    # tests/test_budget.py) allocated from 2.3 % under to 1.1 % over usable HBM (the heap took most or all
    # of the slop), Llama 3.1 405B's loop tail (256 H100) 4.1 % under. There "fits" is the heap's call.
    at_scheduler_limit: bool = False
    uncalibrated: str = ""  # why the lab cannot stand behind this estimate ("": it can; UNCALIBRATED)
    host_limit_bytes: int | None = None  # pinned host bytes a GPU may hold (``fit.host_limit_bytes``; None: unchecked)

    def phase_terms(self, phase: str) -> tuple[Term, ...]:
        """The transient terms of a phase: "loss", "layer backward", "backward end", "optimizer update"
        (and "loop tail" where pipelined host offloading peels the loop's last two layers, "peeled MoE
        backward" where a dropless MoE stack's backward loop has layers peeled to the top level)."""
        if phase not in self.phases:
            raise ValueError(f"unknown phase {phase!r}; choose one of: {', '.join(self.phases)}")
        return self.phases[phase]

    @property
    def device_bytes(self) -> int:
        return sum(t.bytes for t in self.terms if t.space == "device")

    @property
    def host_bytes(self) -> int:
        return sum(t.bytes for t in self.terms if t.space == "host")

    @property
    def usable_hbm_bytes(self) -> int | None:
        """What the step may allocate: JAX's allocator limit, ``mem_fraction`` x HBM."""
        return None if self.hbm_bytes is None else allocator_limit_bytes(self.hbm_bytes, self.mem_fraction)

    @property
    def xla_memory_limit_bytes(self) -> int | None:
        """The limit XLA's latency-hiding scheduler plans for: (the allocator limit - the step's
        device arguments and outputs, donated ones once) x the slop factor (95 %). Above it the
        scheduler trades overlap for memory (and XLA's own remat pass, where it is not disabled as
        MaxText's GPU flags do, recomputes buffers by itself)."""
        usable = self.usable_hbm_bytes
        if usable is None:
            return None
        io = sum(t.bytes for t in self.terms if t.kind == "static" and t.space == "device")  # host args: not HBM
        return max((usable - io) * 95 // 100, 0)

    @property
    def over_scheduler_limit(self) -> bool | None:
        limit = self.xla_memory_limit_bytes
        if limit is None:
            return None
        temp = sum(t.bytes for t in self.terms if t.space == "device" and t.kind != "static")
        return temp > limit

    @property
    def fit(self):
        """The fits rule (``companion.fit``): device peak against usable HBM, pinned host bytes against the
        host RAM behind the GPU (None without a target)."""
        if self.hbm_bytes is None:
            return None
        host_limit = self.host_limit_bytes if self.host_limit_bytes is not None else max(self.host_bytes, 0)
        return fit_rule.Fit(self.device_bytes, self.usable_hbm_bytes, self.host_bytes, host_limit)

    @property
    def fits(self) -> bool | None:
        return None if self.fit is None else self.fit.fits

    @property
    def margin_bytes(self) -> int | None:
        """Usable HBM left after the peak (negative: by how much it does not fit)."""
        return None if self.hbm_bytes is None else self.usable_hbm_bytes - self.device_bytes

    def by_category(self, space: str = "device") -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.terms:
            if t.space == space:
                out[t.category] = out.get(t.category, 0) + t.bytes
        return out

    def to_dict(self) -> dict:
        return {"model": self.model, "batch": self.batch, "seq": self.seq, "policy": self.policy,
                "mesh": dict(self.mesh), "device_bytes": self.device_bytes, "host_bytes": self.host_bytes,
                "hbm_bytes": self.hbm_bytes, "mem_fraction": self.mem_fraction,
                "usable_hbm_bytes": self.usable_hbm_bytes, "fits": self.fits, "margin_bytes": self.margin_bytes,
                "host_limit_bytes": self.host_limit_bytes, "fit": self.fit.to_dict() if self.fit else None,
                "xla_memory_limit_bytes": self.xla_memory_limit_bytes, "over_scheduler_limit": self.over_scheduler_limit,
                "at_scheduler_limit": self.at_scheduler_limit, "uncalibrated": self.uncalibrated,
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
            f"   (usable HBM {self.usable_hbm_bytes / GiB:.1f} GiB = {self.mem_fraction:.2f} x "
            f"{self.hbm_bytes / GiB:.1f}: " + ("fits" if self.fit.fits_device else f"over by {-self.margin_bytes / GiB:.2f} GiB")
            + ("; at the scheduler's limit, where XLA's heap packing decides: compile to check)"
               if self.at_scheduler_limit else ")") if self.hbm_bytes else ""))
        lines.append(f"  {self.host_bytes / GiB:9.3f} GiB  host total" + (
            "" if self.host_limit_bytes is None else
            f"   (host limit {self.host_limit_bytes / GiB:.1f} GiB per GPU: "
            + ("fits" if self.fit.fits_host else "does not fit host RAM, over by "
               f"{(self.host_bytes - self.host_limit_bytes) / GiB:.1f} GiB") + ")"))
        if self.uncalibrated:
            lines.append(f"  not calibrated: {self.uncalibrated}")
        lines.append(f"  recompute adds {self.recompute_flops / 1e12:.2f} TFLOP per device per step "
                     f"({self.recompute_flops / self.step_flops:.1%} of the step's {self.step_flops / 1e12:.2f})")
        return "\n".join(lines)


# MaxText's scan_layers: false is another program (each layer its own remat, with CSE barriers; no loop whose
# buffers one layer reuses): the budget models the scanned stack only, the compile answers for the unscanned one
UNSCANNED = ("the budget models the scanned layer stack, an unscanned one is another program: compile it "
             "(python -m companion compile; the compile is the answer for unscanned steps), or budget it with "
             "scan_layers=true")


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
        return (allocator_limit_bytes(self.hbm_bytes, self.mem_fraction) - self.static_dev) * 95 // 100


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
    """With only the parameters offloaded, their copies to the device for the update start after the layer
    loop, while the head's weight gradient is computed (the saved activations are gone by then) — when they
    fit under the scheduler's limit. Compiled (jaxlib 0.10.2, Llama 3.1 8B on 8 H100, fsdp=8, B=8, S=4096):
    the step peaks there, with the layers' MLP weights, the embedding and the head arriving next to the
    head's fp32 weight gradient and the loss gradient it reads."""
    st = s.state
    if not st.parameter_memory_host_offload or st.optimizer_memory_host_offload or s.n_acc != 1:
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
                  fit_rule.host_limit_bytes(s.target) if s.target is not None else None)


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
