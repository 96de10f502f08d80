"""Planning a run: the largest batch each policy fits, and the planner that chooses a whole run.

``largest_batch(model, target, seq, policy, mesh)`` searches the global batch in steps of the mesh's
batch ways (data x fsdp x expert: one more sequence per GPU of a batch shard) for the largest that
the analytic budget fits under usable HBM, then compiles the step there and one step further: the
answer is the compiler's boundary — the largest batch whose compiled peak fits, with the next one
compiled and shown not to — with the step simulated at it (TFLOP/s per GPU).

``plan(model, target, seq)`` chooses everything MaxText lets a user choose for memory and speed: each
named tensor's ``remat | device | offload`` (the scan carry kept or offloaded), the batch, pipelined
host offload on or off, optimizer and parameter host offload, gradient accumulation (with a fixed
global batch), and the mesh (all-FSDP, or FSDP with tensor or expert parallelism) unless one is given.
It works in two stages:

1. ``search``, no compile: the model's tensors are ordered greedily by the recompute each spares per
   byte it keeps (the budget's graph, given those before it); the candidates save the first k, of
   which the last j go to the host — a grid of (k, j) that holds every MaxText preset's shape — each
   at the largest batch the budget fits under usable HBM (``BUDGET_MARGIN`` below it) and under the
   host limit. ``estimate_seconds`` ranks them (compute with recompute at peak, the link time the
   compute cannot hide, FSDP/tensor/expert collectives).
2. The best of each (mesh, offloads or not, state levers) are compiled for the target and their
   schedules simulated (``schedule``); a finalist whose compiled peak does not fit with the margin
   (``PLAN_MARGIN``: max(2 % of usable HBM, 1.5 GiB), an option) steps its batch down. The plan is the
   finalist with the most simulated tokens per second (the same numerator for every policy; TFLOP/s is
   reported beside it); finalists tied with it under the paired band (``bands.rank``: the ranking flips
   inside the simulator's constants' measured spread) are broken by device margin, then by the simpler
   plan (no pipelining, fewer tensors offloaded). It reports the budget's prediction against the compiled
   peak, the simulated step, and why each tensor sits where it does.

The host limit per GPU is the pinned pool you give XLA (``host_pool_gib``) or, when the plan sizes the
pool itself, ``HOST_RAM_SHARE`` of the host RAM behind the GPU (``Gpu.host_memory_per_gpu_bytes``:
2 TB / 8 on DGX H100, a Grace's 480 GB / 2 on GB200, shared as the board shares it) — an assumption:
the rest is left to the OS, the input pipeline and checkpointing.

The exported pool (``Plan.pinned_pool``) follows how jaxlib 0.10.2's XLA sizes it
(``targets.pinned_host_pool_bytes``): ``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB`` caps each GPU's own pool —
one per device, serving offloaded activations and ``pinned_host`` arrays alike — and each process's one
staging pool, so it is set to one GPU's pinned bytes with 10 % to spare, whatever the launcher layout
(``processes_per_node``: MaxText's ``gpu_multi_process_run.sh`` runs one process per node), and the host's
RAM must hold its GPUs' pinned bytes together.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from . import bands, fit
from . import budget as budget_lib
from . import compiler, schedule, sharding, targets, train, workaround
from .fit import HOST_RAM_SHARE, host_limit_bytes
from . import flags as xla_flags
from .models import configs as model_configs
from .targets import GiB, Target

MAX_PER_SHARD = 1 << 12  # the search's ceiling: sequences per batch shard
PLAN_MARGIN = fit.Margin(0.02, int(1.5 * GiB))  # device headroom a plan keeps under usable HBM
CONTENDERS = 0.85  # finalists within this share of the best tokens/s are swept for a paired-band tie


@dataclasses.dataclass(frozen=True)
class LargestBatch:
    """The largest global batch a policy fits on a target (usable HBM), and how it was found."""

    model: str
    policy: str
    seq: int
    target: str
    mesh: dict[str, int]
    state: train.StateConfig
    batch_step: int  # global batches come in multiples of the mesh's batch ways
    budget_batch: int  # the largest the budget fits (0: not even one step)
    batch: int  # the largest whose compiled step fits (0: none)
    device_bytes: int  # compiled peak at ``batch``
    next_device_bytes: int  # compiled peak at ``batch + batch_step``: over usable HBM
    usable_hbm_bytes: int
    compiles: int
    tflops_per_gpu: float = 0.0  # simulated at ``batch`` (model FLOPs, recompute not counted)
    step_seconds: float = 0.0
    exposed_transfer_seconds: float = 0.0  # of the simulated step: waiting for host transfers
    exposed_collective_seconds: float = 0.0
    report: object = dataclasses.field(repr=False, default=None, compare=False)  # the CompileReport at ``batch``
    compile_seconds: float = 0.0  # all of its compiles, wall clock

    @property
    def budget_off_by_steps(self) -> int:
        """How many batch steps the budget's answer was from the compiler's (positive: too high)."""
        return (self.budget_batch - self.batch) // self.batch_step

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "report"}
        return {**out, "state": dataclasses.asdict(self.state), "budget_off_by_steps": self.budget_off_by_steps}

    def summary(self) -> str:
        gib = GiB
        if not self.batch:
            return (f"--batch max: not even B={self.batch_step} fits ({self.next_device_bytes / gib:.2f} GiB compiled "
                    f"against {self.usable_hbm_bytes / gib:.2f} usable)")
        return (f"--batch max: B={self.batch} (the budget said {self.budget_batch}): compiled peak "
                f"{self.device_bytes / gib:.2f} GiB of {self.usable_hbm_bytes / gib:.2f} usable; B={self.batch + self.batch_step} "
                f"compiles to {self.next_device_bytes / gib:.2f} GiB and does not fit; {self.compiles} compiles, "
                f"{self.compile_seconds:.0f} s (wall clock)")


def _largest(fits, step: int, top: int = MAX_PER_SHARD) -> int:
    """The largest multiple k x step (k <= top) with fits(k x step), fits being monotone; 0 if none."""
    if not fits(step):
        return 0
    low, high = 1, 2
    while high <= top and fits(high * step):
        low, high = high, high * 2
    if high > top:
        return low * step
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid * step) else (low, mid)
    return low * step


def budget_largest_batch(cfg, target: Target, seq: int, policy, mesh: Mapping[str, int],
                         state: train.StateConfig = train.StateConfig(), flags=None) -> int:
    """The largest global batch (a multiple of the batch ways and of the accumulation steps) the
    budget fits under usable HBM; 0 when even the smallest does not."""
    step = sharding.batch_ways(mesh) * state.gradient_accumulation_steps

    def fits(batch: int) -> bool:
        return budget_lib.estimate(cfg, batch, seq, policy, mesh, target=target, state=state, flags=flags).fits

    return _largest(fits, step)


def largest_batch(model, target: Target, seq: int, policy="full", mesh: Mapping[str, int] | str | None = None,
                  state: train.StateConfig = train.StateConfig(), flags=None) -> LargestBatch:
    """The largest global batch ``policy`` fits on ``target`` (device and host, ``fit``): the budget's
    answer, confirmed (and, where it is off, corrected) by compiling the full train step at it and one
    step further — two compiles or more: seconds for an 8B, minutes for the 671B."""
    cfg = model_configs.config(model)
    mesh = sharding.parse_mesh(mesh, target.num_devices) if not isinstance(mesh, Mapping) else dict(mesh)
    step = sharding.batch_ways(mesh) * state.gradient_accumulation_steps
    placement = compiler.place(target, sharding.active_axes(mesh))
    trainer = train.trainer(cfg, policy, state=state)
    reports: dict[int, compiler.CompileReport] = {}

    def fits(batch: int) -> bool:  # the fits rule: device and host
        if batch not in reports:
            reports[batch] = train.compile_step(trainer, placement, batch, seq, flags=flags)
        return reports[batch].fits

    def peak(batch: int) -> int:
        fits(batch)
        return reports[batch].device.peak_bytes

    usable = target.usable_hbm_bytes
    from_budget = budget_largest_batch(cfg, target, seq, policy, mesh, state, flags)
    batch = max(from_budget, step)
    if not fits(batch):  # the budget was too generous: step down to the compiler's boundary
        while batch > step and not fits(batch):
            batch -= step
        if not fits(batch):
            batch = 0
    else:  # step up while the next one still fits
        while batch + step <= MAX_PER_SHARD * step and fits(batch + step):
            batch += step
    nxt = batch + step
    sim = schedule.simulate(reports[batch], target) if batch else None
    return LargestBatch(cfg.name, trainer.policy.name, seq, target.name, mesh, state, step, from_budget, batch,
                        peak(batch) if batch else 0, peak(nxt), usable, len(reports),
                        *((sim.tflops_per_gpu, sim.step_seconds, sim.exposed_transfer_seconds,
                           sim.exposed_collective_seconds) if sim else (0.0, 0.0, 0.0, 0.0)),
                        reports.get(batch), sum(r.compile_seconds for r in reports.values()))


# ----------------------------------------------------------------------------- the planner

# the budget's own error (benchmarks/results/budget.json: median 1 % among the 35 real-size steps that
# fit, 19 of them low, 10 by more than 1 %): candidates within 2 % of usable HBM are left to the next
# batch step down, and the finalists are compiled
BUDGET_MARGIN = 0.02
# The budget's measured error on the grouped MoE path (the DeepSeek-V3 steps benchmarks/bench_central.py stores: EP 8
# and 64, ragged_buffer_factor -1 and 2, 256 and 512 GB200, fractions 0.85 and 0.90, remat and offload policies;
# budget / compiled peak - 1): median |error| about 4 %, from about -16 % to +29 %; among the steps that fit compiled it
# is at most MOE_BUDGET_OVERESTIMATE over. Where it says "over" the compile can still fit, so for a MoE model the
# planner keeps the candidates the budget puts up to that far above its cut and lets the compile decide
# (tests/test_plan.py: the stored steps bear these figures out, and none that fits compiled is pruned).
MOE_BUDGET_OVERESTIMATE = 0.093  # the worst overestimate, 9.24 %, rounded up


def budget_keeps(cfg, device_bytes: int, usable_bytes: int) -> bool:
    """The search's device rule: a budget under usable HBM less ``BUDGET_MARGIN``, widened for a MoE model by
    the budget's worst measured overestimate of a step that fits (``MOE_BUDGET_OVERESTIMATE``)."""
    over = MOE_BUDGET_OVERESTIMATE if cfg.moe is not None else 0.0
    return device_bytes <= (1 - BUDGET_MARGIN) * (1 + over) * usable_bytes


STATE_CHOICES = (train.StateConfig(), train.StateConfig(optimizer_memory_host_offload=True),
                 train.StateConfig(optimizer_memory_host_offload=True, parameter_memory_host_offload=True))
PIPELINED_FLAG = xla_flags.PIPELINED_HOST_OFFLOADING
CARRY = "decoder_layer_input"  # the scan carry: on the device or offloaded, never recomputed


@dataclasses.dataclass(frozen=True)
class TensorChoice:
    """One named tensor: what saving it spares, what keeping or moving it costs, and where the plan puts it."""

    name: str
    bytes_per_layer: int  # per device, one microbatch
    layers: int
    spared_flops_per_layer: float  # recompute the plan avoids by saving it (greedy order: given those before it)
    link_seconds_per_layer: float  # one layer's write to the host at its engine's per-GPU rate, all GPUs offloading
    forward_seconds_per_layer: float  # one layer's forward matmuls at the GPU's peak: what a write can hide under
    location: str  # remat | device | offload
    reason: str

    @property
    def flops_per_byte(self) -> float:
        return self.spared_flops_per_layer / self.bytes_per_layer if self.bytes_per_layer else 0.0


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One point of the search: a per-tensor spec, the batch, pipelined offload, the state levers."""

    spec: tuple[tuple[str, str], ...]  # (name, device|offload) of the saved names, the rest remat
    batch: int  # global batch
    pipelined: bool
    state: train.StateConfig
    device_bytes: int  # the budget's
    host_bytes: int
    step_flops: float  # per device, without recompute
    recompute_flops: float
    estimated_seconds: float  # the analytic step time (see ``estimate_seconds``)
    tokens: float = 0.0  # per GPU per step (batch x seq / GPUs), set with the batch by ``_priced``

    @property
    def policy(self) -> dict[str, str]:
        return dict(self.spec)

    @property
    def offloads(self) -> bool:
        return any(where == "offload" for _, where in self.spec)

    @property
    def estimated_tflops(self) -> float:
        return self.step_flops / self.estimated_seconds / 1e12

    @property
    def estimated_tokens_per_second(self) -> float:
        """Per GPU: what the search ranks by (the same numerator for every policy)."""
        return self.tokens / self.estimated_seconds

    def label(self) -> str:
        saved = ", ".join(f"{n}:{w[:3]}" for n, w in self.spec) or "nothing saved (full remat)"
        levers = [k for k, on in (("opt-offload", self.state.optimizer_memory_host_offload),
                                  ("param-offload", self.state.parameter_memory_host_offload)) if on]
        if self.state.gradient_accumulation_steps > 1:
            levers.append(f"accum {self.state.gradient_accumulation_steps}")
        if self.offloads:
            levers.append("pipelined" if self.pipelined else "not pipelined")
        return f"B={self.batch} [{saved}]" + (f" ({', '.join(levers)})" if levers else "")

    def to_dict(self) -> dict:
        return {"policy": self.policy, "batch": self.batch, "pipelined": self.pipelined,
                "state": dataclasses.asdict(self.state), "device_bytes": self.device_bytes,
                "host_bytes": self.host_bytes, "recompute_flops": self.recompute_flops,
                "estimated_seconds": self.estimated_seconds, "estimated_tflops_per_gpu": self.estimated_tflops,
                "estimated_tokens_per_s_per_gpu": self.estimated_tokens_per_second, "label": self.label()}


@dataclasses.dataclass(frozen=True)
class Checked:
    """A finalist compiled and simulated from its schedule."""

    candidate: Candidate
    device_bytes: int  # compiled peak
    host_bytes: int  # compiled pinned host bytes
    fits: bool  # device under usable HBM and host under the pool the plan can set
    step_seconds: float  # simulated
    tflops_per_gpu: float  # simulated model TFLOP/s per GPU (recompute not counted)
    exposed_transfer_seconds: float
    exposed_collective_seconds: float
    compile_seconds: float
    descriptor_issues: int  # offloaded scan residuals read with a wrong memcpy descriptor (openxla/xla #46231)
    margin_bytes: int = 0  # usable HBM left after the compiled peak
    report: object = dataclasses.field(repr=False, default=None, compare=False)  # the CompileReport

    @property
    def tokens_per_second(self) -> float:
        """Simulated tokens per second per GPU: the plan's ranking key."""
        return self.candidate.tokens / self.step_seconds

    @property
    def prediction_error(self) -> float:
        """(budget - compiled) / compiled device peak."""
        return (self.candidate.device_bytes - self.device_bytes) / self.device_bytes

    def to_dict(self) -> dict:
        return {"candidate": self.candidate.to_dict(), "compiled_device_bytes": self.device_bytes,
                "compiled_host_bytes": self.host_bytes, "fits": self.fits, "step_seconds": self.step_seconds,
                "tokens_per_s_per_gpu": self.tokens_per_second, "margin_bytes": self.margin_bytes,
                "tflops_per_gpu": self.tflops_per_gpu, "exposed_transfer_seconds": self.exposed_transfer_seconds,
                "exposed_collective_seconds": self.exposed_collective_seconds,
                "compile_seconds": self.compile_seconds, "prediction_error": self.prediction_error,
                "descriptor_issues": self.descriptor_issues}


def estimate_seconds(b: budget_lib.Budget, cfg, target: Target, mesh: Mapping[str, int], seq: int) -> float:
    """An analytic step time per GPU, to rank candidates before compiling any (the simulator has the
    last word on the few that are compiled).

    * compute: the step's matmul FLOPs plus the recompute at the GPU's dense bf16 peak;
    * offloaded activations: written during the forward pass and read back during the backward pass at
      the link's per-GPU bandwidth with every GPU sharing it busy; only what outlasts the pass's compute
      is exposed. Under the #46231 workaround (jaxlib <= 0.10.2: what the lab compiles) a generated kernel
      moves them (``companion.workaround``): the link's SM-driven rate, and the compute beside it loses the
      kernel's share of the SMs for as long as both run (``schedule.CostModel.kernel_sm_share``);
    * optimizer / parameter host offload: their bytes cross the link both ways per step, exposed (an
      assumption: the update waits for them);
    * the optimizer update: 7 passes over the fp32 parameter shard (read p, g, mu, nu; write p, mu,
      nu) at HBM bandwidth;
    * FSDP: weights gathered in bf16 twice (forward, backward) and fp32 gradients reduce-scattered at
      the bandwidth of the axis's slowest group (``collectives.axis_bandwidth``: NVLink inside a domain,
      the thinner side's NICs across); exposed only beyond the compute they overlap;
    * tensor and expert parallelism: the activation all-gathers / reduce-scatters (four per layer
      forward, eight backward with remat's rerun) and the token all-to-alls (dispatch and combine, both
      passes), exposed (XLA's GPU backend runs them between the matmuls that need them).
    """
    from . import collectives

    gpu, link = target.gpu, target.link
    peak = gpu.bf16_dense_flops
    forward = b.step_flops / 3 / peak
    backward = (2 * b.step_flops / 3 + b.recompute_flops) / peak
    seconds = forward + backward
    by_key = {t.key: t.bytes for t in b.terms}
    act = by_key.get("residuals_host", 0)
    if act:
        engine = "kernel" if workaround.in_effect() else "copy_engine"
        share = schedule.CostModel().kernel_sm_share(link) if engine == "kernel" else 0.0
        for direction, compute in (("d2h", forward), ("h2d", backward)):
            moving = link.transfer_seconds(act, direction, engine=engine)
            seconds += max(0.0, moving - compute) + share * min(moving, compute)
    state_host = b.host_bytes - act
    if state_host:
        seconds += link.transfer_seconds(state_host, "h2d") + link.transfer_seconds(state_host, "d2h")
    param_shard = by_key.get("parameters", 0)
    seconds += 7 * param_shard / gpu.hbm_bandwidth
    fabric = collectives.fabric(gpu.key)
    fsdp, tensor, expert = mesh.get("fsdp", 1), mesh.get("tensor", 1), mesh.get("expert", 1)
    active = sharding.active_axes(mesh)
    if fsdp > 1:
        full = param_shard * fsdp / 4  # the layer's parameters (not fsdp-sharded), in parameter count
        wire = full * (2 * 2 + 4) * (fsdp - 1) / fsdp
        seconds += max(0.0, wire / collectives.axis_bandwidth(active, ["fsdp"], target) - (forward + backward))
    tokens = b.batch * seq / sharding.batch_ways(mesh)  # per batch shard, every microbatch
    if tensor > 1:
        wire = 12 * cfg.num_layers * tokens * cfg.d_model * cfg.act_bytes * (tensor - 1) / tensor
        seconds += wire / fabric.nvlink_bytes_per_s(0.8)
    if expert > 1 and cfg.moe is not None:
        wire = 6 * cfg.num_moe_layers * tokens * cfg.moe.experts_per_token * cfg.d_model * cfg.act_bytes * (expert - 1) / expert
        seconds += wire / collectives.axis_bandwidth(active, ["expert"], target)
    return seconds


@dataclasses.dataclass(frozen=True)
class Plan:
    """The planner's answer: the configuration it chose (compiled and simulated), the finalists it
    compared, why each tensor sits where it does, and the run as MaxText overrides and XLA flags."""

    model: str
    target: str
    num_devices: int
    gpus_per_host: int
    seq: int
    mesh: dict[str, int]
    mem_fraction: float
    usable_hbm_bytes: int
    host_limit_bytes: int  # pinned host memory the plan may use per GPU (pool cap, or RAM share)
    chosen: Checked
    finalists: tuple[Checked, ...]
    tensors: tuple[TensorChoice, ...]
    searched: int  # candidates the budget evaluated
    feasible: int  # ... that fit by the budget
    search_seconds: float
    total_seconds: float
    flag_set: xla_flags.FlagSet | None = dataclasses.field(repr=False, default=None)
    config: model_configs.ModelConfig | None = dataclasses.field(repr=False, default=None)  # with its attention, MoE
    margin_bytes: int = 0  # the device headroom the plan required (``PLAN_MARGIN`` of usable HBM)
    tie_break: str = ""  # why the chosen finalist, in words
    processes_per_node: int = 1  # the launcher layout the export states
    for_jaxlib: str | None = None  # the jaxlib the exported flags are spelled for (None: the installed one)

    @property
    def candidate(self) -> Candidate:
        return self.chosen.candidate

    @property
    def host_pool_gib(self) -> int:
        """``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB`` for the plan: its compiled host bytes with 10 % to spare,
        never below XLA's default pool, never above the host limit."""
        return targets.host_pool_gib(self.chosen.host_bytes, spare=0.1, limit_bytes=self.host_limit_bytes)

    @property
    def policy_name(self) -> str | None:
        """The MaxText preset the chosen spec is, on this model's names (None: only ``custom`` says it)."""
        from . import models, policies

        emitted = models.checkpoint_names(self.config or self.model)
        chosen = policies.resolve(self.candidate.policy).touched(emitted)
        return next((name for name, p in policies.PRESETS.items()
                     if name != "no_remat" and p.touched(emitted) == chosen), None)

    def overrides(self) -> dict:
        from . import maxtext

        c = self.candidate
        return maxtext.overrides(self.config or self.model, self.policy_name or c.policy, c.batch, self.seq,
                                 self.mesh, self.num_devices, self.gpus_per_host, c.state)

    def pinned_pool(self) -> dict:
        """The exported pinned pool and what it assumes (module docstring; ``targets.pinned_host_pool_bytes``):
        the cap per GPU pool, the pools per node for the stated launcher layout, and the host's RAM against
        its GPUs' pinned bytes together."""
        per_host = self.gpus_per_host
        ram = self.host_limit_bytes * per_host if self.host_limit_bytes else 0
        return {"env": targets.HOST_POOL_ENV, "gib_per_gpu_pool": self.host_pool_gib,
                "processes_per_node": self.processes_per_node, "gpus_per_node": per_host,
                "pools_per_node": per_host + self.processes_per_node,
                "pinned_bytes_per_node": self.chosen.host_bytes * per_host, "host_limit_bytes_per_node": ram,
                "memlock_gib_per_node": (per_host + self.processes_per_node) * self.host_pool_gib,
                "reading": f"{targets.HOST_POOL_ENV}={self.host_pool_gib} caps each of the node's {per_host} GPU "
                           f"pools (offloaded activations and pinned_host arrays of that GPU) and each of its "
                           f"{self.processes_per_node} process staging pool(s) separately, not their sum "
                           "(jaxlib 0.10.2: se_gpu_pjrt_client.cc:1419-1426, 1875-1879); pools grow as used, so "
                           f"the node pins about {self.chosen.host_bytes * per_host / GiB:.0f} GiB; `ulimit -l` must "
                           f"allow every pool at its cap, {(per_host + self.processes_per_node) * self.host_pool_gib} GiB"}

    def exported(self) -> dict:
        """``XLA_FLAGS``, the environment (mem fraction, the pinned pool), the jaxlib the flags are spelled
        for and the correctness caveats that travel with them."""
        return xla_flags.export(self.flag_set, mem_fraction=self.mem_fraction, host_pool_gib=self.host_pool_gib,
                                offloads=self.candidate.offloads, for_jaxlib=self.for_jaxlib)

    def environment(self) -> dict[str, str]:
        out = self.exported()
        return {**out["env"], "XLA_FLAGS": out["XLA_FLAGS"]}

    def yaml(self) -> str:
        from . import maxtext

        return maxtext.to_yaml(self.overrides())

    def command_line(self) -> str:
        from . import maxtext

        return maxtext.command_line(self.overrides(), self.environment())

    def to_dict(self) -> dict:
        return {"model": self.model, "target": self.target, "num_devices": self.num_devices, "seq": self.seq,
                "mesh": self.mesh, "mem_fraction": self.mem_fraction, "usable_hbm_bytes": self.usable_hbm_bytes,
                "host_limit_bytes": self.host_limit_bytes, "host_pool_gib": self.host_pool_gib,
                "chosen": self.chosen.to_dict(), "finalists": [f.to_dict() for f in self.finalists],
                "tensors": [dataclasses.asdict(t) | {"flops_per_byte": t.flops_per_byte} for t in self.tensors],
                "searched": self.searched, "feasible": self.feasible, "search_seconds": self.search_seconds,
                "total_seconds": self.total_seconds, "maxtext": self.overrides(), "environment": self.environment(),
                "command_line": self.command_line(), "margin_bytes": self.margin_bytes, "tie_break": self.tie_break,
                "pinned_pool": self.pinned_pool(), "jaxlib": self.exported()["jaxlib"],
                "flag_notes": self.exported()["notes"], "caveats": self.exported()["caveats"]}

    def summary(self) -> str:
        c, k = self.candidate, self.chosen
        lines = [f"plan for {self.model} on {self.target}, S={self.seq}: {c.label()}",
                 f"  mesh {_mesh_text(self.mesh)}; searched {self.searched} candidates with the budget "
                 f"({self.feasible} fit) in {self.search_seconds:.1f} s (wall clock); compiled {len(self.finalists)} "
                 f"finalist{'s' if len(self.finalists) != 1 else ''}; in all {self.total_seconds:.1f} s (wall clock)",
                 f"  device: predicted {c.device_bytes / GiB:.2f} GiB, compiled {k.device_bytes / GiB:.2f} GiB "
                 f"({k.prediction_error:+.1%}) of {self.usable_hbm_bytes / GiB:.2f} GiB usable; host "
                 f"{k.host_bytes / GiB:.2f} GiB (pool {self.host_pool_gib} GiB)",
                 f"  simulated step {k.step_seconds:.2f} s: {k.tokens_per_second:,.0f} tokens/s and "
                 f"{k.tflops_per_gpu:.0f} TFLOP/s per GPU (exposed transfers {k.exposed_transfer_seconds:.2f} s, "
                 f"collectives {k.exposed_collective_seconds:.2f} s); chosen: {self.tie_break}",
                 f"  pinned pool: {self.pinned_pool()['reading']}"]
        if k.descriptor_issues:
            lines.append(f"  WARNING: {k.descriptor_issues} offloaded scan residual read(s) carry a wrong memcpy "
                         "descriptor (openxla/xla #46231): on a GPU the gradients are silently wrong")
        lines.append("  finalists (simulated):")
        for f in self.finalists:
            lines.append(f"    {'*' if f is k else ' '} {f.tokens_per_second:8,.0f} tokens/s  {f.tflops_per_gpu:6.0f} "
                         f"TFLOP/s  {f.device_bytes / GiB:6.2f} GiB  {'fits' if f.fits else 'does not fit'}  "
                         f"{f.candidate.label()}")
        lines.append("  tensors (greedy order: recompute spared per byte):")
        for t in self.tensors:
            lines.append(f"    {t.name:16} {t.location:8} {t.reason}")
        for c in self.exported()["caveats"]:
            lines.append(f"  CAVEAT {c['key']}: {c['risk']} Workaround: {c['workaround']} Check: {c['check']}")
        return "\n".join(lines)


def _mesh_text(mesh: Mapping[str, int]) -> str:
    return ",".join(f"{axis}={size}" for axis, size in sharding.active_axes(mesh).items())


def default_mesh(cfg, target: Target) -> tuple[dict[str, int], str]:
    """The mesh a command uses when none is given, and why: all-FSDP for a dense model; for a MoE model,
    expert parallelism inside one NVLink domain (the largest power of two up to 64 that fits the domain,
    divides the experts and the GPUs: EP 64 for DeepSeek-V3 on 256 GB200, 8 on H100 boards) and FSDP over
    the rest — all-FSDP would gather every expert's weights in every MoE layer."""
    from . import collectives

    n = target.num_devices
    if cfg.moe is None:
        return sharding.parse_mesh(None, n), "all-FSDP (the default for a dense model)"
    domain = min(collectives.fabric(target.gpu.key).nvlink_domain, n)
    ep = next((e for e in (64, 32, 16, 8, 4, 2) if e <= domain and n % e == 0 and cfg.moe.num_experts % e == 0), 1)
    if ep == 1:
        return sharding.parse_mesh(None, n), "all-FSDP (no expert split fits an NVLink domain here)"
    mesh = sharding.parse_mesh({"fsdp": n // ep, "expert": ep}, n)
    return mesh, (f"mesh {_mesh_text(mesh)}: expert parallelism inside one NVLink domain ({domain} GPUs), FSDP over "
                  f"the rest (all-FSDP would gather all {cfg.moe.num_experts} experts' weights in every MoE layer); "
                  "--mesh chooses another")


def mesh_candidates(cfg, target: Target) -> list[dict[str, int]]:
    """The meshes the planner tries when none is given: all-FSDP, and FSDP with tensor parallelism
    inside a host (dense models: 2, 4, 8 ways where the KV heads split) or expert parallelism (MoE:
    8 to 64 ways where the experts split)."""
    n, per_host = target.num_devices, target.topology.gpus_per_host
    meshes = [sharding.parse_mesh(None, n)]
    if cfg.moe is None:
        for t in (2, 4, 8):
            if t <= per_host and n % t == 0 and n > t and cfg.num_kv_heads % t == 0:
                meshes.append(sharding.parse_mesh({"fsdp": n // t, "tensor": t}, n))
    else:
        for e in (8, 16, 32, 64):
            if n % e == 0 and n > e and cfg.moe.num_experts % e == 0:
                meshes.append(sharding.parse_mesh({"fsdp": n // e, "expert": e}, n))
    return meshes


def _order(cfg, seq: int, mesh, target: Target) -> tuple[list[str], dict, list[TensorChoice]]:
    """The model's named tensors, greedily ordered by the recompute saving each spares per byte (given
    those before it), at one sequence per batch shard; and the names saving never helps."""
    batch = sharding.batch_ways(mesh)
    sizes = {t.name: t for t in budget_lib.tensor_tradeoffs(cfg, batch, seq, mesh)}

    def recompute(saved) -> float:
        return budget_lib.estimate(cfg, batch, seq, {n: "device" for n in saved}, mesh, target=target).recompute_flops

    order, info, left = [], {}, [n for n, t in sizes.items() if t.recompute_flops_per_layer > 0]
    current = recompute(order)
    while left:
        gains = {n: current - recompute(order + [n]) for n in left}
        best = max(left, key=lambda n: (gains[n] / sizes[n].bytes_per_layer, gains[n]))
        if gains[best] <= 0:
            break
        order.append(best)
        info[best] = gains[best] / sizes[best].layers
        left.remove(best)
        current -= gains[best]
    never = [TensorChoice(n, t.bytes_per_layer, t.layers, 0.0, 0.0, 0.0, "remat", _NO_GAIN.get(n, _NO_GAIN[None]))
             for n, t in sizes.items() if n not in order]
    return order, {n: (sizes[n], info[n]) for n in order}, never


_NO_GAIN = {"context": "saving it spares nothing: flash attention reruns its kernel in the backward pass anyway",
            None: "saving it spares nothing: the backward pass reads no value computed from it"}


def _flag_sets(flags):
    base = xla_flags.resolve(flags)
    on = xla_flags.resolve(f"{base.xla_flags()} --{PIPELINED_FLAG}=true".strip())
    off = xla_flags.resolve(f"{base.xla_flags()} --{PIPELINED_FLAG}=false".strip())
    return {True: on, False: off}


@dataclasses.dataclass(frozen=True)
class Search:
    """The budget stage of the planner: candidates that fit, best estimated throughput first."""

    config: model_configs.ModelConfig
    target: Target
    seq: int
    ranked: tuple[tuple[dict, Candidate], ...]  # (mesh, candidate)
    orders: dict = dataclasses.field(repr=False)  # per mesh: the tensors' greedy order and what each spares
    searched: int  # candidates the budget evaluated
    seconds: float
    usable_hbm_bytes: int
    host_limit_bytes: int
    flag_sets: dict = dataclasses.field(repr=False)  # pipelined offload on / off

    def overrides(self, rank: int = 0) -> dict:
        """A ranked candidate as MaxText overrides (budget only: ``plan`` compiles before it answers)."""
        from . import maxtext

        m, c = self.ranked[rank]
        t = self.target
        return maxtext.overrides(self.config, c.policy, c.batch, self.seq, m, t.num_devices,
                                 t.topology.gpus_per_host, c.state)


def search(model, target: Target, seq: int, mesh: Mapping[str, int] | str | None = None, *,
           global_batch: int | None = None, host_pool_gib: int | None = None, flags=None,
           states=STATE_CHOICES) -> Search:
    """The planner's first stage, no compile: every candidate (per-tensor remat/device/offload, the scan
    carry kept or offloaded, pipelined offload, the state levers) at the largest batch the budget fits
    under usable HBM (less ``BUDGET_MARGIN``) and the host limit, ranked by ``estimate_seconds``.

    ``mesh``: one mesh, or None to try ``mesh_candidates``. ``global_batch``: fixed (the planner then
    chooses gradient accumulation 1, 2, 4 or 8), or None (the largest each candidate fits, no
    accumulation). ``host_pool_gib``: the pinned pool you will give XLA, or None to let the plan size it
    up to ``HOST_RAM_SHARE`` of the host RAM behind each GPU (shared where it is shared).
    """
    import time

    t0 = time.perf_counter()
    cfg = model_configs.config(model)
    n = target.num_devices
    if mesh is None:
        meshes = mesh_candidates(cfg, target)
    else:
        meshes = [sharding.parse_mesh(dict(mesh) if isinstance(mesh, Mapping) else mesh, n)]
    host_limit = host_limit_bytes(target, host_pool_gib * GiB if host_pool_gib is not None else None)
    usable = target.usable_hbm_bytes
    flag_sets = _flag_sets(flags)
    accums = (1,) if global_batch is None else (1, 2, 4, 8)
    searched = 0
    feasible: list[tuple[dict, Candidate]] = []
    orders = {}
    for m in meshes:
        ways = sharding.batch_ways(m)
        order, _, _ = orders[tuple(m.items())] = _order(cfg, seq, m, target)
        # save the first k of the order; of those, offload the last j (HBM holds the rest)
        specs = [tuple((name, "offload" if i >= k - j else "device") for i, name in enumerate(order[:k]))
                 for k in range(len(order) + 1) for j in range(k + 1)]
        specs += [spec + ((CARRY, "offload"),) for spec in specs]  # the scan carry: kept, or offloaded
        for spec in specs:
            offloads = any(w == "offload" for _, w in spec)
            for base_state in states:
                for accum in accums:
                    state = dataclasses.replace(base_state, gradient_accumulation_steps=accum)
                    step = ways * accum
                    memo: dict[int, budget_lib.Budget | None] = {}

                    def budget_at(batch: int):
                        nonlocal searched
                        if batch not in memo:
                            searched += 1
                            try:
                                memo[batch] = budget_lib.estimate(cfg, batch, seq, dict(spec), m, target=target,
                                                                  state=state, flags=flag_sets[offloads])
                            except ValueError:
                                memo[batch] = None
                        return memo[batch]

                    def fits(batch: int) -> bool:
                        b = budget_at(batch)
                        return (b is not None and budget_keeps(cfg, b.device_bytes, usable)
                                and b.host_bytes <= host_limit)

                    if global_batch is not None:
                        batch = global_batch if global_batch % step == 0 and fits(global_batch) else 0
                    else:
                        batch = _largest(fits, step)
                    if not batch:
                        continue
                    feasible.append((m, _priced(Candidate(spec, batch, offloads, state, 0, 0, 0.0, 0.0, 0.0),
                                                budget_at(batch), cfg, target, m, seq)))
    if not feasible:
        raise ValueError(f"no configuration of {cfg.name} fits {target.name} at S={seq} by the budget (usable HBM "
                         f"{usable / GiB:.1f} GiB at XLA_PYTHON_CLIENT_MEM_FRACTION={target.mem_fraction:g}, host "
                         f"{host_limit / GiB:.0f} GiB per GPU): try more GPUs, a shorter sequence, a tensor or "
                         "expert axis (--mesh) or a larger --mem-fraction")
    feasible.sort(key=lambda mc: -mc[1].estimated_tokens_per_second)
    return Search(cfg, target, seq, tuple(feasible), orders, searched, time.perf_counter() - t0, usable, host_limit,
                  flag_sets)


def plan(model, target: Target, seq: int, mesh: Mapping[str, int] | str | None = None, *,
         global_batch: int | None = None, host_pool_gib: int | None = None, max_compiles: int = 4,
         flags=None, states=STATE_CHOICES, progress=None, margin: fit.Margin = PLAN_MARGIN,
         processes_per_node: int = 1, for_jaxlib: str | None = None) -> Plan:
    """Search per-tensor remat/device/offload, batch, pipelined offload and the state levers for the
    most simulated throughput that fits (``search``); compile and simulate the best few, and keep the
    fastest whose compiled peak fits.

    ``mesh``: one mesh, or None to try ``mesh_candidates``. ``global_batch``: fixed (the planner then
    chooses gradient accumulation 1, 2, 4 or 8), or None (the largest each candidate fits, no
    accumulation). ``host_pool_gib``: the pinned pool you will give XLA, or None to let the plan size it
    up to ``HOST_RAM_SHARE`` of the host RAM behind each GPU (shared where it is shared). ``margin``: the
    device headroom a finalist's compiled peak must leave. ``processes_per_node`` (the launcher layout)
    and ``for_jaxlib`` shape the export (``Plan.pinned_pool``, ``flags.export``).
    """
    import time

    if not isinstance(processes_per_node, int) or not 1 <= processes_per_node <= target.topology.gpus_per_host:
        raise ValueError(f"processes_per_node {processes_per_node!r}: choose 1 (one per node, MaxText's "
                         f"gpu_multi_process_run.sh) to {target.topology.gpus_per_host} (one per GPU)")
    if for_jaxlib is not None:
        xla_flags.export(xla_flags.resolve(flags), for_jaxlib=for_jaxlib)  # a bad version fails before the search
    t0 = time.perf_counter()
    found = search(model, target, seq, mesh, global_batch=global_batch, host_pool_gib=host_pool_gib, flags=flags,
                   states=states)
    cfg, feasible, orders, flag_sets = found.config, list(found.ranked), found.orders, found.flag_sets
    usable, host_limit, n = found.usable_hbm_bytes, found.host_limit_bytes, target.num_devices
    checked: list[tuple[dict, Checked]] = []

    def check(m, c):
        if progress:
            progress(f"compiling {c.label()} on mesh {_mesh_text(m)}")
        checked.append((m, _check(cfg, target, seq, m, c, flag_sets[c.pipelined], margin, host_limit)))
        return checked[-1][1]

    # the best of each (mesh, offload or not, state levers), in the budget's order, until enough compile
    # and fit; a finalist whose compiled peak does not fit (one step lower included) gives way to the next
    # and fit; a finalist whose compiled peak does not fit (one step lower included) gives way to the next;
    # once one fits, the budget's miss on a mesh (compiled / predicted) skips the others it would not fit
    keys, fits, miss = set(), 0, {}
    for m, c in feasible:
        key = (tuple(m.items()), c.offloads, c.state)
        if key in keys or (fits and c.device_bytes * miss.get(key[0], 1.0) > usable):
            continue
        keys.add(key)
        done = check(m, c)
        fits += done.fits
        miss[key[0]] = max(miss.get(key[0], 1.0), done.device_bytes / done.candidate.device_bytes)
        if fits >= max(1, max_compiles - 1) or len(checked) >= 2 * max_compiles:
            break
    twin = next(((m, k.candidate) for m, k in checked if k.fits and k.candidate.offloads), None)
    if twin is not None and max_compiles > 1:  # the same plan without pipelined offload, for comparison
        m, c = twin
        b = budget_lib.estimate(cfg, c.batch, seq, c.policy, m, target=target, state=c.state, flags=flag_sets[False])
        check(m, _priced(dataclasses.replace(c, pipelined=False), b, cfg, target, m, seq))
    fitting = [(m, k) for m, k in checked if k.fits]
    if not fitting:
        raise ValueError(f"none of the {len(checked)} finalists of {cfg.name} on {target.name} fits once compiled "
                         f"with a {margin.of(usable) / GiB:.2f} GiB margin (the closest: "
                         f"{min(k.device_bytes for _, k in checked) / GiB:.1f} GiB of {usable / GiB:.1f} usable): try a "
                         "larger --max-compiles, more GPUs or a smaller --margin-gib")
    (mesh_, best), tie_break = _choose(fitting)
    light = {id(k): dataclasses.replace(k, report=None) for _, k in checked}  # the compiles are not kept: GiBs at 671B
    best = light[id(best)]
    tensors = _explain(cfg, best.candidate, mesh_, seq, *orders[tuple(mesh_.items())], target)
    return Plan(cfg.name, target.name, n, target.topology.gpus_per_host, seq, mesh_, target.mem_fraction, usable,
                host_limit, best, tuple(light[id(k)] for _, k in checked), tuple(tensors), found.searched, len(feasible),
                found.seconds, time.perf_counter() - t0, flag_sets[best.candidate.pipelined], cfg,
                margin.of(usable), tie_break, processes_per_node, for_jaxlib)


def _simplicity(c: Candidate) -> tuple[int, int]:
    """Fewer moving parts first: no pipelining, then fewer tensors offloaded."""
    return (int(c.pipelined), sum(where == "offload" for _, where in c.spec))


def _choose(fitting: list[tuple[dict, "Checked"]]) -> tuple[tuple[dict, "Checked"], str]:
    """The finalist with the most simulated tokens/s; those tied with it under the paired band (swept only
    within ``CONTENDERS`` of it) go to the larger device margin, then the simpler plan. Returns the choice
    and why, in words."""
    top = max(fitting, key=lambda mk: mk[1].tokens_per_second)
    contenders = [mk for mk in fitting if mk is not top and mk[1].tokens_per_second >= CONTENDERS * top[1].tokens_per_second]
    if not contenders:
        return top, "the most simulated tokens/s"
    swept = {id(mk): bands.sweep(mk[1].report) for mk in [top, *contenders]}
    tied = [mk for mk in contenders if bands.rank(swept[id(mk)], swept[id(top)]).tie]
    if not tied:
        return top, "the most simulated tokens/s, ahead of every other finalist over the constants' spread"
    best = min([top, *tied], key=lambda mk: (-mk[1].margin_bytes, _simplicity(mk[1].candidate)))
    return best, (f"tied on tokens/s with {len(tied)} other finalist(s) within the paired band; chosen for the larger "
                  "device margin, then the simpler plan")


def _priced(c: Candidate, b: budget_lib.Budget, cfg, target: Target, mesh, seq: int) -> Candidate:
    """``c`` with the budget's memory, FLOPs, tokens per GPU and analytic step time at its batch, state and
    flags: everything that follows from the batch, so a finalist stepped down to a smaller batch is re-priced
    whole (it had kept the larger batch's tokens and ranked 1.5x high)."""
    return dataclasses.replace(c, device_bytes=b.device_bytes, host_bytes=b.host_bytes, step_flops=b.step_flops,
                               recompute_flops=b.recompute_flops, tokens=c.batch * seq / target.num_devices,
                               estimated_seconds=estimate_seconds(b, cfg, target, mesh, seq))


def _check(cfg, target, seq, mesh, c: Candidate, flag_set, margin: fit.Margin, host_limit: int) -> Checked:
    """Compile a finalist (one batch step lower, twice at most, when its compiled peak does not fit with
    the margin) and simulate its schedule."""
    placement = compiler.place(target, sharding.active_axes(mesh))
    trainer = train.trainer(cfg, c.policy, state=c.state)
    step = sharding.batch_ways(mesh) * c.state.gradient_accumulation_steps
    for attempt in range(3):
        report = train.compile_step(trainer, placement, c.batch, seq, flags=flag_set)
        verdict = fit.check(report.device.peak_bytes, report.host.total_bytes, target, margin, host_limit)
        fits = verdict.fits
        if fits or attempt == 2 or c.batch - step < step:
            break
        smaller = c.batch - step
        b = budget_lib.estimate(cfg, smaller, seq, c.policy, mesh, target=target, state=c.state, flags=flag_set)
        c = _priced(dataclasses.replace(c, batch=smaller), b, cfg, target, mesh, seq)
    sim = schedule.simulate(report, target)
    checks = report.offload.checks
    return Checked(c, report.device.peak_bytes, report.host.total_bytes, fits, sim.step_seconds, sim.tflops_per_gpu,
                   sim.exposed_transfer_seconds, sim.exposed_collective_seconds, report.compile_seconds,
                   len(checks.wrong) if checks is not None else 0, verdict.usable_hbm_bytes - verdict.device_bytes,
                   report)


def _explain(cfg, c: Candidate, mesh, seq: int, order, info, never, target: Target) -> list[TensorChoice]:
    """Why each tensor sits where the plan puts it: recompute spared per byte against HBM and link time
    (per layer, one microbatch of the plan)."""
    where, link = c.policy, target.link
    n_acc = c.state.gradient_accumulation_steps
    per_shard = c.batch // (sharding.batch_ways(mesh) * n_acc)  # info is at one sequence per batch shard
    forward_s = c.step_flops / 3 / target.gpu.bf16_dense_flops / (n_acc * cfg.num_layers)
    engine = "kernel" if workaround.in_effect() else "copy_engine"  # the #46231 workaround's transfers are kernels

    def moved(nbytes: float) -> tuple[float, str]:
        """One layer's write (seconds) and its time out and back, in words, at the transfers' engine's rate."""
        out_s, back_s = (link.transfer_seconds(nbytes, d, engine=engine) for d in ("d2h", "h2d"))
        by = " as the #46231 workaround's kernels" if engine == "kernel" else ""
        return out_s, f"{out_s * 1e3:.2f} ms out and {back_s * 1e3:.2f} ms back{by}"

    out = []
    for rank, name in enumerate(order):
        sizes, spared = info[name]
        nbytes, spared = sizes.bytes_per_layer * per_shard, spared * per_shard
        link_s, link_words = moved(nbytes)
        location, ratio = where.get(name, "remat"), spared / nbytes
        if location == "device":
            reason = f"#{rank + 1} in recompute spared per byte ({ratio:,.0f} FLOP/B): kept in HBM"
        elif location == "offload":
            reason = (f"#{rank + 1} ({ratio:,.0f} FLOP/B), past what HBM holds: to the host, one layer's copy "
                      f"{link_words}, against {forward_s * 1e3:.2f} ms of a layer's forward compute")
        else:
            reason = (f"#{rank + 1} ({ratio:,.0f} FLOP/B): recomputed, {spared / 1e9:,.0f} GFLOP per layer; "
                      "keeping or moving it cost more than it spared")
        out.append(TensorChoice(name, nbytes, sizes.layers, spared, link_s, forward_s, location, reason))
    carry = per_shard * seq * cfg.d_model * cfg.act_bytes  # [b, S, D] in the compute dtype, each layer's input
    link_s, link_words = moved(carry)
    if where.get(CARRY) == "offload":
        reason = (f"the scan carry (never recomputed: every layer's backward starts from it): offloaded, "
                  f"{carry / GiB:.2f} GiB per layer off HBM for {link_words}")
    else:
        reason = "the scan carry (never recomputed: every layer's backward starts from it): kept in HBM"
    out.append(TensorChoice(CARRY, carry, cfg.num_layers, 0.0, link_s, forward_s, where.get(CARRY, "device"), reason))
    return out + [dataclasses.replace(t, bytes_per_layer=t.bytes_per_layer * per_shard) for t in never]
