"""A simulated step: its events and what the replay found (``StepSimulation``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .prices import CostModel


# ----------------------------------------------------------------------------- the result

@dataclasses.dataclass(frozen=True)
class Event:
    """One interval on one lane, for a Gantt chart. ``kind``: compute, d2h, h2d, collective, async,
    wait-transfer / wait-collective / wait-async (the compute stream stalled on a ``*-done``),
    loop (iterations simulated as a block)."""

    name: str
    lane: str
    start: float
    end: float
    kind: str
    computation: str
    iteration: int = 0

    @property
    def seconds(self) -> float:
        return self.end - self.start


SCHEMA = 2  # of ``StepSimulation.to_dict`` (simulate --json): 2 gave FLOPs one meaning each and the op-class tables


@dataclasses.dataclass(frozen=True)
class StepSimulation:
    """One training step replayed on one GPU of ``target`` (per device; seconds).

    FLOPs, one meaning each: ``model_flops`` is MaxText's count of the model's work (``companion.flops``,
    from the compile's ``Workload``; None for a function compiled without one), the numerator of
    TFLOP/s and MFU, the same for every policy at a batch; ``hardware_flops`` is what the compiled
    program executes (recompute, padding, dispatch einsums, a grouped GEMM's tiles, ``ragged_dot``'s
    dense expansion), ``recompute_flops`` the part of it remat added. ``flops_by_kind`` and
    ``time_by_kind`` split the executed FLOPs and the busy seconds by op class (``hlo.OP_CLASSES``;
    collectives by lane, ``collective:nvlink``/``collective:network``; host transfers by direction,
    ``transfer:d2h``/``transfer:h2d``): streams overlap, so the seconds do not add up to the step.
    """

    target: str
    link: str
    step_seconds: float
    compute_seconds: float  # the compute stream busy
    exposed_transfer_seconds: float  # compute stream waiting for host transfers
    exposed_collective_seconds: float  # ... for collectives (and synchronous collectives)
    exposed_other_seconds: float  # ... for other async work
    exposed_transfer_by_direction: dict[str, float]  # the exposed transfer seconds of writes (d2h) and reads (h2d)
    busy_seconds: dict[str, float]  # per lane
    model_flops: float | None  # MaxText's count, per device (None without a workload)
    hardware_flops: float  # what the compiled program executes, per device
    recompute_flops: float
    peak_flops: float  # the GPU's dense bf16 peak, FLOP/s
    peak_device_bytes: int
    host_bytes: int
    loop_iteration_seconds: dict[str, float]  # per loop body: one steady-state iteration
    tokens: float | None = None  # per device per step (None without a workload)
    flops_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    time_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    # the part of the exposed transfer seconds the link's bandwidth forces (``_Replay.scoped``: per loop
    # iteration and the entry, per direction, the transfer time beyond that scope's compute); the rest is
    # the schedule's excess
    exposed_transfer_floor: dict[str, float] = dataclasses.field(default_factory=dict)
    events: tuple[Event, ...] = dataclasses.field(repr=False, default=())
    cost_model: CostModel = CostModel()
    async_compute_limit: int = 2
    # compute seconds added by the SMs transfer kernels held (engine "kernel": the #46231 workaround's transfers)
    transfer_kernel_sm_seconds: float = 0.0

    @property
    def exposed_seconds(self) -> float:
        return self.exposed_transfer_seconds + self.exposed_collective_seconds + self.exposed_other_seconds

    @property
    def exposed_transfer_excess(self) -> dict[str, float]:
        """Exposed transfer seconds per direction beyond the link's floor: what a better schedule could hide."""
        return {d: max(0.0, v - self.exposed_transfer_floor.get(d, 0.0))
                for d, v in self.exposed_transfer_by_direction.items()}

    @property
    def exposed_transfer_split(self) -> dict[str, dict[str, float]]:
        """Per direction: the exposed seconds, the link's floor and the schedule's excess (floor + excess = exposed)."""
        return {d: {"exposed_seconds": v, "floor_seconds": self.exposed_transfer_floor.get(d, 0.0),
                    "excess_seconds": self.exposed_transfer_excess[d]}
                for d, v in self.exposed_transfer_by_direction.items()}

    @property
    def tflops_per_gpu(self) -> float | None:
        """Model FLOP/s per GPU (MaxText's count over the simulated step), in TFLOP/s."""
        if self.model_flops is None or not self.step_seconds:
            return None
        return self.model_flops / self.step_seconds / 1e12

    @property
    def mfu(self) -> float | None:
        if self.model_flops is None or not self.step_seconds:
            return None
        return self.model_flops / self.step_seconds / self.peak_flops

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens per second per GPU: how practitioners compare runs at a fixed global batch."""
        if self.tokens is None or not self.step_seconds:
            return None
        return self.tokens / self.step_seconds

    def to_dict(self, events: bool = False) -> dict[str, Any]:
        out = {"schema": SCHEMA, "target": self.target, "link": self.link, "step_seconds": self.step_seconds,
               "compute_seconds": self.compute_seconds, "exposed_transfer_seconds": self.exposed_transfer_seconds,
               "exposed_collective_seconds": self.exposed_collective_seconds,
               "exposed_other_seconds": self.exposed_other_seconds,
               "exposed_transfer_by_direction": dict(self.exposed_transfer_by_direction),
               "exposed_transfer_split": self.exposed_transfer_split,
               "busy_seconds": dict(self.busy_seconds), "tokens_per_device": self.tokens,
               "tokens_per_second_per_gpu": self.tokens_per_second,
               "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "model_flops": self.model_flops,
               "hardware_flops": self.hardware_flops, "recompute_flops": self.recompute_flops,
               "flops_by_kind": dict(self.flops_by_kind), "time_by_kind": dict(self.time_by_kind),
               "peak_device_bytes": self.peak_device_bytes,
               "host_bytes": self.host_bytes, "loop_iteration_seconds": dict(self.loop_iteration_seconds),
               "async_compute_limit": self.async_compute_limit, "cost_model": self.cost_model.to_dict(),
               "transfer_kernel_sm_seconds": self.transfer_kernel_sm_seconds}
        if events:
            out["events"] = [dataclasses.asdict(e) for e in self.events]
        return out

    def summary(self) -> str:
        ms = 1e3
        rate = (f"{self.tokens_per_second:,.0f} tokens/s and {self.tflops_per_gpu:.0f} TFLOP/s per GPU (model FLOPs), "
                f"MFU {self.mfu:.1%}" if self.model_flops is not None and self.tokens is not None
                else f"{self.hardware_flops / self.step_seconds / 1e12:.0f} TFLOP/s executed per GPU (no model "
                     "FLOP count: compile with a Workload)" if self.step_seconds else "")
        return (f"{self.target} over {self.link}: step {self.step_seconds * ms:.1f} ms = compute "
                f"{self.compute_seconds * ms:.1f} + exposed transfers {self.exposed_transfer_seconds * ms:.1f} + "
                f"exposed collectives {self.exposed_collective_seconds * ms:.1f}"
                + (f" + other waits {self.exposed_other_seconds * ms:.1f}" if self.exposed_other_seconds else "")
                + f" ms; {rate}")

    def lane_events(self, computation: str | None = None, iteration: int = 0) -> list[Event]:
        """Events of one computation's recorded iteration (all of them when ``computation`` is None)."""
        return [e for e in self.events if computation is None or (e.computation == computation
                                                                  and e.iteration == iteration)]
