"""When pipelined host offload pays: four conditions, each read off a naive offload compile.

``--xla_gpu_enable_pipelined_host_offloading`` moves each offloaded tensor's transfer one loop
iteration away from its use: a write finishes during the next layer, a read starts during the layer
before. Notebooks 04, 06 and 07 find it winning on some steps and losing on others; these are the conditions
that decide it (notebook 09, the decision card), measured on the naive compile so they
can be checked before compiling the pipelined one:

0. **transfers to win** — the naive step exposes host transfers, at least ``MIN_EXPOSED_SHARE`` of
   its time: where the scheduler already hides them, pipelining has nothing to move (notebook 06's
   405B with the carry offloaded). It can still move collectives, either way.
1. **enough loop trips** — the scanned loop that moves the most offloaded bytes runs ``MIN_TRIPS``
   times or more: pipelining peels an iteration at each end, and a loop that runs once or twice is all
   prologue and epilogue (notebook 05's four-layer stack).
2. **reads a schedule could hide** — the naive step's exposed host reads beyond the link's floor (the
   schedule's excess, ``StepSimulation.exposed_transfer_excess``) are at least ``MIN_EXPOSED_SHARE`` of
   it. A read issued one iteration early runs beside a whole iteration's compute: where a backward
   iteration's reads take no longer on the link than its compute, they can hide entirely; where they take
   longer, what outlasts the compute stays exposed whatever the schedule (the floor), and pipelining can
   win only the rest. The naive schedule issues each read at the top of the iteration that needs it and
   exposes nearly all of it, so the excess is what pipelining has to win (notebook 04's H100 step under the
   #46231 workaround: reads 45.5 ms on the link against 30.9 ms of compute, 43.0 -> 12.6 ms waited per
   iteration). Reads shorter than the compute were the condition while the lab priced the reads as
   copy engines; at the kernels' rate they no longer are on PCIe, and the steps still gain.
3. **forward writes within the link's floor** — per forward iteration, the writes' time on the link is
   at most that iteration's compute. Where it is not, the forward pass runs at the link's speed
   whatever the schedule (notebook 04's floor) and pipelining can only win the backward pass.
4. **headroom for one more carried layer** — usable HBM less the naive peak holds one layer's
   offloaded bytes: the pipelined loop carries the next layer's tensors in HBM. Without it the step
   does not fit, or the scheduler (which fills the limit it is given) trades overlap for memory.

Transfer times are bytes / the link's per-GPU bandwidth with every GPU of a sharing group busy, at each
transfer's engine's rate (``HostLink.bandwidth_per_gpu``; the workaround's kernels' for offloaded scan
residuals, ``HostTransfer.engine``); compute is the simulation's compute-stream time in the loop body's
recorded iteration. Conditions 0, 1, 2 and 4 are needed for a gain; 3 says whether the forward pass can
share in it. They are necessary, not sufficient: the collectives the scheduler moves around the
transfers can tip the step either way, and where it costs kernels by constants (Blackwell at jaxlib
0.10.2, notebook 05) it may leave reads exposed that could hide — which is why the verdict is checked
against the simulated pair wherever both were compiled (notebook 09).
"""

from __future__ import annotations

import dataclasses

from ..xla import hlo
from .schedule import Simulator, StepSimulation

MIN_TRIPS = 3
MIN_EXPOSED_SHARE = 0.01  # of the naive step: below it, the transfers are already hidden
GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Condition:
    name: str
    holds: bool
    measured: str  # what was read off the compile, in words and numbers

    def cell(self) -> str:
        return f"{'yes' if self.holds else 'no'}: {self.measured}"


@dataclasses.dataclass(frozen=True)
class Conditions:
    """The four conditions for one naive offload compile."""

    exposed: Condition
    trips: Condition
    reads: Condition
    writes: Condition
    headroom: Condition

    @property
    def expect_gain(self) -> bool:
        """Pipelining can gain: exposed transfers, enough trips, reads to hide, room for the carried layer."""
        return self.exposed.holds and self.trips.holds and self.reads.holds and self.headroom.holds

    def row(self) -> dict[str, str]:
        return {"transfers to win": self.exposed.cell(), "enough loop trips": self.trips.cell(),
                "reads a schedule could hide": self.reads.cell(), "writes < forward compute": self.writes.cell(),
                "headroom for a carried layer": self.headroom.cell(), "expect a gain": "yes" if self.expect_gain else "no"}


def _moved(report, simulator: Simulator) -> dict[tuple[str, str], float]:
    """Link seconds per execution of each computation's transfers, by (computation, direction): each transfer's
    bytes at its engine's rate on the step's link (``HostLink.bandwidth_per_gpu``)."""
    link, out = simulator.target.link, {}
    for t in report.offload.transfers:
        seconds = t.bytes_per_execution / link.bandwidth_per_gpu(t.direction, simulator.concurrent_gpus(link), t.engine)
        out[t.computation, t.direction] = out.get((t.computation, t.direction), 0.0) + seconds
    return out


def _loop_times(moved: dict[tuple[str, str], float], simulator: Simulator, result: StepSimulation,
                direction: str) -> list[tuple[float, float]]:
    """(transfer seconds on the link, compute seconds) per iteration of each loop body moving ``direction``: each
    transfer at its engine's rate (a kernel's for the #46231 workaround's transfers, ``HostTransfer.engine``)."""
    out = []
    for loop in hlo.loops(simulator.module):
        if not moved.get((loop.body, direction)):
            continue
        compute = sum(e.seconds for e in result.lane_events(loop.body) if e.kind == "compute")
        out.append((moved[loop.body, direction], compute))
    return out


def conditions(report, simulator: Simulator, result: StepSimulation, layers: int) -> Conditions:
    """The conditions for the naive offload compile ``report`` (its ``simulator`` and a ``result`` replayed
    with events: the default ``Simulator.run``); ``layers``: the model's decoder layers."""
    if not report.offload.transfers:
        raise ValueError("no host transfers in this compile: the conditions are for a step that offloads")
    moved = _moved(report, simulator)

    def loop_seconds(loop) -> float:
        return moved.get((loop.body, "d2h"), 0.0) + moved.get((loop.body, "h2d"), 0.0)

    busiest = max(hlo.loops(simulator.module), key=loop_seconds, default=None)
    trips = (busiest.trips or 0) if busiest is not None and loop_seconds(busiest) else 0
    reads, writes = (_loop_times(moved, simulator, result, d) for d in ("h2d", "d2h"))
    if not result.lane_events() or (reads and not any(c for _, c in reads)):
        raise ValueError("the simulation recorded no events: replay with events (Simulator.run's default max_events)")

    def pace(pairs) -> tuple[float, float] | None:
        """The loop iteration whose transfers outlast its compute the most: (link, compute) seconds."""
        return max(pairs, key=lambda p: p[0] - p[1]) if pairs else None

    def in_words(paced) -> str:
        return f"{paced[0] * 1e3:.1f} ms on the link, {paced[1] * 1e3:.1f} ms of compute"

    paced_reads, paced_writes = pace(reads), pace(writes)
    excess = result.exposed_transfer_excess.get("h2d", 0.0)
    reads_to_hide = Condition("reads", bool(paced_reads) and excess >= MIN_EXPOSED_SHARE * result.step_seconds,
                              f"{excess * 1e3:,.0f} ms exposed beyond the link's floor; " + in_words(paced_reads)
                              if paced_reads else "no reads in the loops")
    writes_paced = Condition("writes", bool(paced_writes) and paced_writes[0] <= paced_writes[1],
                             in_words(paced_writes) if paced_writes else "no transfers in the loops")

    per_layer = report.offload.d2h_bytes_per_step // max(1, layers)
    margin = report.margin_bytes
    share = result.exposed_transfer_seconds / result.step_seconds
    return Conditions(
        exposed=Condition("exposed", share >= MIN_EXPOSED_SHARE,
                          f"{result.exposed_transfer_seconds * 1e3:,.0f} ms exposed, {share:.1%} of the step"),
        trips=Condition("trips", trips >= MIN_TRIPS, f"{trips} trips"),
        reads=reads_to_hide,
        writes=writes_paced,
        headroom=Condition("headroom", margin >= per_layer,
                           f"{margin / GiB:.1f} GiB free, a layer offloads {per_layer / GiB:.2f} GiB"))
