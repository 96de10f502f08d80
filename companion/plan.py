"""Planning a run: the largest batch each policy fits, found with the budget and confirmed by compiling.

``largest_batch(model, target, seq, policy, mesh)`` searches the global batch in steps of the mesh's
batch ways (data x fsdp x expert: one more sequence per GPU of a batch shard) for the largest that
the analytic budget fits under usable HBM, then compiles the step there and one step further: the
answer is the compiler's boundary — the largest batch whose compiled peak fits, with the next one
compiled and shown not to — and it says how many steps the budget was off. The budget prunes (pure
Python, no compile); a few compiles settle it (each seconds for a Llama step, more for DeepSeek-V3).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from . import budget as budget_lib
from . import compiler, sharding, train
from .models import configs as model_configs
from .targets import Target

MAX_PER_SHARD = 1 << 12  # the search's ceiling: sequences per batch shard


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

    @property
    def budget_off_by_steps(self) -> int:
        """How many batch steps the budget's answer was from the compiler's (positive: too high)."""
        return (self.budget_batch - self.batch) // self.batch_step

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "budget_off_by_steps": self.budget_off_by_steps}


def budget_largest_batch(cfg, target: Target, seq: int, policy, mesh: Mapping[str, int],
                         state: train.StateConfig = train.StateConfig(), flags=None) -> int:
    """The largest global batch (a multiple of the batch ways and of the accumulation steps) the
    budget fits under usable HBM; 0 when even the smallest does not."""
    step = sharding.batch_ways(mesh) * state.gradient_accumulation_steps

    def fits(k: int) -> bool:
        return budget_lib.estimate(cfg, k * step, seq, policy, mesh, target=target, state=state, flags=flags).fits

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= MAX_PER_SHARD and fits(high):  # grow until it does not fit, then bisect
        low, high = high, high * 2
    if high > MAX_PER_SHARD:
        return low * step
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low * step


def largest_batch(model, target: Target, seq: int, policy="full", mesh: Mapping[str, int] | str | None = None,
                  state: train.StateConfig = train.StateConfig(), flags=None) -> LargestBatch:
    """The largest global batch ``policy`` fits on ``target``: the budget's answer, confirmed (and,
    where it is off, corrected) by compiling the full train step at it and one step further."""
    cfg = model_configs.config(model)
    mesh = sharding.parse_mesh(mesh, target.num_devices) if not isinstance(mesh, Mapping) else dict(mesh)
    step = sharding.batch_ways(mesh) * state.gradient_accumulation_steps
    placement = compiler.place(target, sharding.active_axes(mesh))
    trainer = train.trainer(cfg, policy, state=state)
    peaks: dict[int, int] = {}

    def peak(batch: int) -> int:
        if batch not in peaks:
            peaks[batch] = train.compile_step(trainer, placement, batch, seq, flags=flags).device.peak_bytes
        return peaks[batch]

    usable = target.usable_hbm_bytes
    from_budget = budget_largest_batch(cfg, target, seq, policy, mesh, state, flags)
    batch = max(from_budget, step)
    if peak(batch) > usable:  # the budget was too generous: step down to the compiler's boundary
        while batch > step and peak(batch) > usable:
            batch -= step
        if peak(batch) > usable:
            batch = 0
    else:  # step up while the next one still fits
        while batch + step <= MAX_PER_SHARD * step and peak(batch + step) <= usable:
            batch += step
    nxt = batch + step
    return LargestBatch(cfg.name, trainer.policy.name, seq, target.name, mesh, state, step, from_budget, batch,
                        peak(batch) if batch else 0, peak(nxt), usable, len(peaks))
