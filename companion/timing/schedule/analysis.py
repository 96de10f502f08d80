"""What a replay answers beyond the step: what-ifs on the link, XLA's own estimate of the same schedule, how well
transfers are covered, the schematic."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...hardware import targets
from ...hardware.targets import HostLink

from .simulation import Event, StepSimulation
from .replay import Simulator


# ----------------------------------------------------------------------------- what-ifs

def link_at(bytes_per_s: float) -> HostLink:
    """A what-if host link giving each GPU ``bytes_per_s`` each way, shared with nobody."""
    if not isinstance(bytes_per_s, (int, float)) or not bytes_per_s > 0:
        raise ValueError(f"link bandwidth must be a positive number of bytes/s, got {bytes_per_s!r}")
    return HostLink(f"what_if_{bytes_per_s / targets.GB:g}GBps", f"what-if link, {bytes_per_s / targets.GB:g} GB/s "
                    "per GPU each way", nominal_per_direction=bytes_per_s, achievable_d2h=bytes_per_s,
                    achievable_h2d=bytes_per_s, gpus_per_link=1, host_memory_bytes_per_s=bytes_per_s,
                    gpus_per_host_memory=1, host_memory="not a limit (what-if)",
                    assumption="a what-if: this bandwidth per GPU each way, nothing shared")


def break_even_bandwidth(offload: Simulator, reference_seconds: float, *, low: float = 1e9,
                         high: float = 1e13, tolerance: float = 0.01) -> float | None:
    """The per-GPU link bandwidth (bytes/s each way) at which ``offload``'s simulated step equals
    ``reference_seconds`` (e.g. the remat step's): offload is faster above it. None if it is
    still slower at ``high``; ``low`` if it is already faster there."""
    def step(bw: float) -> float:
        return offload.run(link_at(bw), max_events=0).step_seconds

    if step(high) > reference_seconds:
        return None
    if step(low) <= reference_seconds:
        return low
    while high / low > 1 + tolerance:
        mid = (low * high) ** 0.5
        low, high = (low, mid) if step(mid) <= reference_seconds else (mid, high)
    return high


# ----------------------------------------------------------------------------- XLA's own estimate

@dataclasses.dataclass(frozen=True)
class XlaComparison:
    """One scheduled computation: XLA's estimate of one run beside the simulation's."""

    computation: str
    role: str  # the step (entry + bodies x trips) | the entry computation alone | a loop body (one iteration)
    xla_us: float  # the latency-hiding scheduler's total for one run
    simulated_us: float | None
    host_transfers: int  # async host transfers the computation runs
    xla_transfer_us: float | None  # what XLA's estimator charged one of them (median)
    simulated_transfer_us: float | None  # bytes / link bandwidth (median)

    def row(self) -> dict[str, Any]:
        """A table row, milliseconds ("-" where a side has no figure)."""
        def ms(us, digits=1):
            return "-" if us is None else f"{us / 1e3:.{digits}f}"

        return {"computation": self.computation, "role": self.role, "XLA ms": ms(self.xla_us),
                "simulated ms": ms(self.simulated_us), "host transfers": self.host_transfers,
                "XLA ms per transfer": ms(self.xla_transfer_us, 2),
                "simulated ms per transfer": ms(self.simulated_transfer_us, 2)}


def xla_step_us(simulator: Simulator, lhs, computation: str | None = None) -> float:
    """XLA's own estimate of a whole step: a computation's scheduled total plus, for each ``while`` in it,
    its body's estimate times the loop's trips (recursively). The latency-hiding scheduler's total of the
    entry alone prices each ``while`` at ~0 µs, leaving the loops out."""
    name = computation or simulator.module.entry
    comp = lhs.computations.get(name)
    total = comp.total_us if comp is not None else 0.0
    for op in simulator.program.get(name, ()):
        if op.action == "while" and op.called:
            total += op.trips * xla_step_us(simulator, lhs, op.called[0])
        elif op.action == "call":
            total += sum(xla_step_us(simulator, lhs, callee) for callee in op.called)
    return total


def compare_with_xla(simulator: Simulator, result: StepSimulation, lhs) -> list[XlaComparison]:
    """Rows of XLA's own schedule estimate (``dump.LhsSchedule``, from a compile with ``dump=True``)
    beside the simulation ``result`` of the same compile: the whole step (the entry plus every loop body
    times its trips, ``xla_step_us``), the entry computation alone (what XLA's dump totals: its loops count
    ~0 there) and each loop body for one iteration."""
    link = targets.host_link(result.link) if result.link in targets.HOST_LINKS else None
    entry = simulator.module.entry
    transfers = {}
    for name, comp in lhs.computations.items():
        ops = {op.name: op for op in simulator.program.get(name, ())}
        windows = {n: w for n, w in comp.async_windows().items() if n in ops and ops[n].category == "transfer"}
        ours_t = sorted(simulator.transfer_seconds(ops[n], link) for n in windows) if link else []
        transfers[name] = (len(windows), sorted(windows.values()), ours_t)

    def row(name, role, xla_us, ours, counted):
        n, xla_t, ours_t = counted
        return XlaComparison(name, role, xla_us, ours * 1e6 if ours is not None else None, n,
                             xla_t[len(xla_t) // 2] if xla_t else None,
                             ours_t[len(ours_t) // 2] * 1e6 if ours_t else None)

    every = (sum(t[0] for t in transfers.values()), sorted(w for t in transfers.values() for w in t[1]),
             sorted(w for t in transfers.values() for w in t[2]))
    rows = [row(entry, "step (entry + loop bodies x trips)", xla_step_us(simulator, lhs), result.step_seconds, every)]
    for name, comp in lhs.computations.items():
        if name == entry:
            rows.append(row(name, "entry computation (its loops count ~0)", comp.total_us, None, transfers[name]))
        else:
            rows.append(row(name, "loop body (one iteration)", comp.total_us, result.loop_iteration_seconds.get(name),
                            transfers[name]))
    return rows


@dataclasses.dataclass(frozen=True)
class TransferCover:
    """One async host transfer and the compute XLA scheduled between its start and its done."""

    name: str
    computation: str
    direction: str  # d2h | h2d
    bytes: float
    transfer_seconds: float  # bytes / the link's per-GPU bandwidth
    kernels_between: int
    compute_between_seconds: float  # the simulation's time of those kernels (nested loops not counted)

    @property
    def hidden(self) -> bool:
        return self.compute_between_seconds >= self.transfer_seconds


def transfer_cover(simulator: Simulator, link: HostLink | str | None = None) -> list[TransferCover]:
    """Every async host transfer of the schedule with the compute placed under it: the question the
    scheduler answered with its own costs."""
    on = targets.host_link(link) if link is not None else simulator.target.link
    out = []
    for computation, ops in simulator.program.items():
        index = {op.name: k for k, op in enumerate(ops)}
        for k, op in enumerate(ops):
            if op.action != "done" or op.start not in index:
                continue
            start = ops[index[op.start]]
            if start.category != "transfer":
                continue
            between = [o for o in ops[index[op.start] + 1:k] if o.action == "compute" and o.category == "compute"
                       and o.seconds > 0]
            out.append(TransferCover(start.name, computation, start.lane, start.bytes, simulator.transfer_seconds(start, on),
                                     len(between), sum(o.seconds for o in between)))
    return out


def summarize_cover(covers: list[TransferCover]) -> dict[str, dict[str, float]]:
    """Per direction: transfers, median MiB, median transfer ms, median compute placed under one (ms),
    and how many have at least their own time of compute under them."""
    import statistics

    out = {}
    for direction in targets.DIRECTIONS:
        these = [c for c in covers if c.direction == direction]
        if not these:
            continue
        out[direction] = {
            "transfers": len(these),
            "median MiB": statistics.median(c.bytes for c in these) / 2**20,
            "median transfer ms": statistics.median(c.transfer_seconds for c in these) * 1e3,
            "median kernels under it": statistics.median(c.kernels_between for c in these),
            "median compute under it ms": statistics.median(c.compute_between_seconds for c in these) * 1e3,
            "covered": sum(c.hidden for c in these),
        }
    return out


# ----------------------------------------------------------------------------- the picture before the replay

def offload_schematic(layers: int, forward_s: float, backward_s: float, d2h_s: float, h2d_s: float, *,
                      overlapped: bool) -> list[Event]:
    """A layer-by-layer sketch of a step that offloads each layer's activations, for a Gantt chart:
    not a replay of a compiled schedule (``simulate`` is), but the two ends of what one can be.

    ``overlapped=False`` (naive): each layer's write follows its forward compute and each read
    precedes its backward compute, the compute stream waiting for both. ``overlapped=True``: a
    write starts as soon as its layer's forward is done and a read one layer ahead of the layer
    that needs it, each on its own copy engine (one per direction, one transfer at a time), and
    the compute stream waits only for data that is not there yet. Times in seconds per layer.
    """
    events: list[Event] = []
    t = 0.0
    d2h_free = 0.0
    written = [0.0] * layers
    for i in range(layers):  # forward
        events.append(Event(f"forward {i}", "compute", t, t + forward_s, "compute", "forward"))
        t += forward_s
        start = max(t, d2h_free)
        events.append(Event(f"write {i}", "d2h", start, start + d2h_s, "d2h", "forward"))
        d2h_free = written[i] = start + d2h_s
        if not overlapped:
            events.append(Event(f"wait write {i}", "compute", t, d2h_free, "wait-transfer", "forward"))
            t = d2h_free
    h2d_free = 0.0
    order = list(reversed(range(layers)))
    arrived: dict[int, float] = {}

    def read(k: int, not_before: float) -> None:
        nonlocal h2d_free
        start = max(not_before, h2d_free, written[k])
        events.append(Event(f"read {k}", "h2d", start, start + h2d_s, "h2d", "backward"))
        h2d_free = arrived[k] = start + h2d_s

    for n, i in enumerate(order):  # backward, last layer first
        if i not in arrived:
            read(i, t)
        if overlapped and n + 1 < layers:
            read(order[n + 1], t)  # prefetch the next layer's activations while this one computes
        if arrived[i] > t:
            events.append(Event(f"wait read {i}", "compute", t, arrived[i], "wait-transfer", "backward"))
            t = arrived[i]
        events.append(Event(f"backward {i}", "compute", t, t + backward_s, "compute", "backward"))
        t += backward_s
    return events
