"""The largest batch that fits: by the budget, then by compiles, with the margins that guard the budget's known
errors."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ...hardware import fit
from ...memory import budget as budget_lib
from ...compiling import compiler
from ...timing import schedule
from ...ground import sharding
from ...compiling import train
from ...models import configs as model_configs
from ...hardware.targets import GiB, Target


MAX_PER_SHARD = 1 << 12  # the search's ceiling: sequences per batch shard
PLAN_MARGIN = fit.Margin(0.02, int(1.5 * GiB))  # device headroom a plan keeps under a GPU's usable HBM
# XLA:TPU places every buffer at compile time and refuses a program over the runtime's limit: the compile is the
# verdict, so a TPU plan keeps no headroom. Measured (benchmarks/results/measured.json): all 79 chip steps that
# compiled ran, the largest at 15.70 of 15.75 GiB; the 12 over it were refused by the compiler, none at run time.
TPU_PLAN_MARGIN = fit.NO_MARGIN
CONTENDERS = 0.85  # finalists within this share of the best tokens/s are swept for a paired-band tie


def plan_margin(target: Target) -> fit.Margin:
    """The device headroom a plan keeps by default: none on a TPU (its compile is the verdict), ``PLAN_MARGIN`` on a
    GPU, whose allocator, cuDNN workspaces and fragmentation live outside the compiled peak."""
    return TPU_PLAN_MARGIN if target.is_tpu else PLAN_MARGIN


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
    reports: dict[int, compiler.CompileReport | compiler.DoesNotFit] = {}

    def fits(batch: int) -> bool:  # the fits rule: device and host
        if batch not in reports:
            try:
                reports[batch] = train.compile_step(trainer, placement, batch, seq, flags=flags)
            except compiler.DoesNotFit as refused:  # XLA:TPU refuses a program over HBM at compile time
                reports[batch] = refused
        return not isinstance(reports[batch], compiler.DoesNotFit) and reports[batch].fits

    def peak(batch: int) -> int:
        fits(batch)
        found = reports[batch]
        return found.needed_bytes if isinstance(found, compiler.DoesNotFit) else found.device.peak_bytes

    usable = target.usable_hbm_bytes
    from_budget = budget_largest_batch(cfg, target, seq, policy, mesh, state, flags)
    batch = max(from_budget, step)
    if not fits(batch):  # the budget was too generous: step down to the compiler's boundary
        while batch > step and not fits(batch):
            batch -= step
        if not fits(batch):
            batch = 0
    else:  # up: gallop while the next one still fits (1, 2, 4 ... steps), then bisect the last gap
        stride, top = step, MAX_PER_SHARD * step
        while batch + stride <= top and fits(batch + stride):
            batch, stride = batch + stride, 2 * stride
        high = min(batch + stride, top + step)  # the smallest known not to fit (or past the ceiling)
        while high - batch > step:
            mid = batch + (high - batch) // (2 * step) * step
            batch, high = (mid, high) if fits(mid) else (batch, mid)
    nxt = batch + step
    sim = schedule.simulate(reports[batch], target) if batch else None
    return LargestBatch(cfg.name, trainer.policy.name, seq, target.name, mesh, state, step, from_budget, batch,
                        peak(batch) if batch else 0, peak(nxt), usable, len(reports),
                        *((sim.tflops_per_gpu, sim.step_seconds, sim.exposed_transfer_seconds,
                           sim.exposed_collective_seconds) if sim else (0.0, 0.0, 0.0, 0.0)),
                        reports.get(batch), sum(r.compile_seconds for r in reports.values()))  # refusals timed too


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
