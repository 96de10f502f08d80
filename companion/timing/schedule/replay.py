"""The replay: XLA's scheduled instructions walked in order, one clock per lane, loops simulated once and multiplied."""

from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Any

from .. import collectives as coll
from ...xla import hlo
from ...hardware import targets
from ...hardware.targets import HostLink, Target

from .prices import CostModel, LANES, Op, _ASYNC_CAPPED, build_program
from .simulation import Event, StepSimulation


# ----------------------------------------------------------------------------- the replay

_WAIT_KIND = {"transfer": "wait-transfer", "collective": "wait-collective", "async": "wait-async"}


class _Tally:
    """What a replay counts: each lane's busy seconds, the compute stream's waits by kind, and the scopes of
    the exposed-transfer split (the entry and each loop iteration: their own busy and exposed seconds)."""

    def __init__(self):
        self.busy = dict.fromkeys(LANES, 0.0)
        # waits by kind; "sm_lost": the compute seconds added beside transfer kernels (tallied with the waits, so a
        # loop's steady iterations multiply it too)
        self.exposed = {"transfer": 0.0, "collective": 0.0, "async": 0.0, "d2h": 0.0, "h2d": 0.0,
                        "floor:d2h": 0.0, "floor:h2d": 0.0, "sm_lost": 0.0}
        self.scopes: list[dict[str, float]] = []

    def expose(self, category: str, lane: str, seconds: float):
        """The compute stream waited ``seconds`` for work of ``category`` (transfers also by direction)."""
        self.exposed[category] += seconds
        if category == "transfer":
            self.exposed[lane] += seconds
            if self.scopes:
                self.scopes[-1]["exposed:" + lane] += seconds

    def add_busy(self, lane: str, seconds: float):
        self.busy[lane] += seconds
        if self.scopes and lane in self.scopes[-1]:
            self.scopes[-1][lane] += seconds

    def open_scope(self):
        self.scopes.append(dict.fromkeys(("compute", "d2h", "h2d", "exposed:d2h", "exposed:h2d"), 0.0))

    def close_scope(self):
        """Per direction, the closed scope's floor: what the link needs beyond the scope's own compute,
        ``max(0, transfer busy - compute busy)`` (no schedule hides that), capped at what was exposed."""
        scope = self.scopes.pop()
        for d in targets.DIRECTIONS:
            self.exposed["floor:" + d] += min(scope["exposed:" + d], max(0.0, scope[d] - scope["compute"]))

    def totals(self) -> tuple[dict, dict]:
        return dict(self.busy), dict(self.exposed)

    def since(self, totals: tuple[dict, dict]) -> tuple[dict, dict]:
        """What was added since ``totals`` (a loop iteration's busy and exposed seconds)."""
        busy0, exposed0 = totals
        return {k: self.busy[k] - busy0[k] for k in busy0}, {k: self.exposed[k] - exposed0[k] for k in exposed0}

    def repeat(self, busy: dict, exposed: dict, n: int):
        """Add ``n`` more of an iteration's seconds (a loop's steady state)."""
        for k, v in busy.items():
            self.busy[k] += n * v
        for k, v in exposed.items():
            self.exposed[k] += n * v

    def copy(self) -> "_Tally":
        other = _Tally()
        other.busy, other.exposed, other.scopes = dict(self.busy), dict(self.exposed), [dict(s) for s in self.scopes]
        return other


class _Lanes:
    """The async lanes' clocks: when each lane is next free, the ends of the transfers and async computes
    XLA's in-flight cap counts, and the work started but not yet waited for (start name -> (begin, end,
    category, lane, engine)). Host transfers are priced here, at their engine's rate on the link."""

    def __init__(self, bandwidth: dict[str, float], kernel_bandwidth: dict[str, float] | None, limit: int,
                 shared_pcie: tuple[float, float] | None):
        self.bandwidth = bandwidth  # host link bytes/s per GPU, per direction (copy engines)
        self.kernel_bandwidth = kernel_bandwidth or bandwidth  # ... for transfers a kernel makes (engine "kernel")
        self.limit = limit
        self.shared_pcie = shared_pcie  # (PCIe bytes/s each way, NIC bytes/s) where transfers and the NIC share it
        self.free = dict.fromkeys(LANES, 0.0)
        self.capped_ends: list[float] = []  # sorted
        self.pending: dict[str, tuple[float, float, str, str, str]] = {}

    def rate(self, lane: str, engine: str) -> float:
        """A host transfer's bytes/s on ``lane`` by what moves it."""
        return (self.kernel_bandwidth if engine == "kernel" else self.bandwidth)[lane]

    def seconds(self, op: Op) -> float:
        return op.bytes / self.rate(op.lane, op.engine) if op.category == "transfer" else op.seconds

    def quiet(self, now: float) -> bool:
        """Nothing runs or is pending past ``now``."""
        return all(v <= now for v in self.free.values()) and not any(p[1] > now for p in self.pending.values())

    def start(self, op: Op, now: float) -> tuple[float, float, float]:
        """Start ``op`` on its lane once the compute clock is at ``now``: (begin, end, busy seconds). It waits
        for its lane and, on a capped lane, for a slot under XLA's in-flight cap."""
        seconds = self.seconds(op)
        begin = max(now, self.free[op.lane])
        if op.lane in _ASYNC_CAPPED:
            running = self.capped_ends[bisect.bisect_right(self.capped_ends, begin):]
            if len(running) >= self.limit:
                begin = max(begin, running[len(running) - self.limit])
        end = begin + seconds
        if self.shared_pcie is not None:
            end = self._share_pcie(op, begin, end)
            seconds = end - begin
        self.free[op.lane] = end
        if op.lane in _ASYNC_CAPPED:  # ends at or before the compute clock can no longer hold anything up
            self.capped_ends = [e for e in self.capped_ends if e > now]
            bisect.insort(self.capped_ends, end)
        self.pending[op.name] = (begin, end, op.category, op.lane, op.engine)
        return begin, end, seconds

    def beside(self, begin: float, seconds: float, which) -> float:
        """How much of [begin, begin + seconds) pending work ``which(category, engine)`` runs in (an async
        collective holding NCCL's SMs, a transfer kernel holding its share of them)."""
        spans = sorted((max(b, begin), min(e, begin + seconds)) for b, e, category, _, engine in self.pending.values()
                       if which(category, engine) and b < begin + seconds and e > begin)
        covered, reach = 0.0, begin
        for b, e in spans:
            if e > reach:
                covered += e - max(b, reach)
                reach = e
        return covered

    def _share_pcie(self, op: Op, begin: float, end: float) -> float:
        """Where a GPU's host transfers and its NIC's traffic cross one PCIe link (DGX/HGX: the GPU and its
        NIC under one switch), each gets half of it while both run: the new op's end, later by its slowdown
        over the overlap, and the overlapped ops' ends pushed out by theirs."""
        pcie, nic = self.shared_pcie
        if op.category == "transfer":
            others = [k for k, v in self.pending.items() if v[2] == "collective" and v[3] == "network"]
            mine, theirs = self.rate(op.lane, op.engine), nic
        elif op.lane == "network":
            others = [k for k, v in self.pending.items() if v[2] == "transfer"]
            mine, theirs = nic, None
        else:
            return end
        extra = 0.0
        for name in others:
            b, e, category, lane, engine = self.pending[name]
            overlap = min(end, e) - max(begin, b)
            if overlap <= 0:
                continue
            rate_theirs = theirs if theirs is not None else self.rate(lane, engine)
            extra = max(extra, overlap * max(0.0, mine / (pcie / 2) - 1))
            pushed = e + overlap * max(0.0, rate_theirs / (pcie / 2) - 1)
            self.pending[name] = (b, pushed, category, lane, engine)
            self.free[lane] = max(self.free[lane], pushed)
        return end + extra

    def copy(self) -> "_Lanes":
        other = _Lanes(self.bandwidth, self.kernel_bandwidth, self.limit, self.shared_pcie)
        other.free, other.capped_ends, other.pending = dict(self.free), list(self.capped_ends), dict(self.pending)
        return other


def _collective(category: str, engine: str) -> bool:
    return category == "collective"


def _transfer_kernel(category: str, engine: str) -> bool:
    return category == "transfer" and engine == "kernel"


class _Replay:
    """The program run on the compute stream's clock ``t``: compute ops advance it, an async start hands its op
    to the lanes (``_Lanes``), a done waits for it; loops run until one iteration is steady, then repeat it;
    of a conditional's branches the slowest counts. ``tally`` counts the seconds (``_Tally``)."""

    def __init__(self, program: dict[str, list[Op]], bandwidth: dict[str, float], limit: int, max_events: int,
                 sm_slowdown: float = 1.0, shared_pcie: tuple[float, float] | None = None,
                 kernel_bandwidth: dict[str, float] | None = None, kernel_sm_share: float = 0.0):
        self.program = program
        self.lanes = _Lanes(bandwidth, kernel_bandwidth, limit, shared_pcie)
        self.tally = _Tally()
        self.kernel_sm_share = kernel_sm_share  # of a compute kernel's throughput, while a transfer kernel runs
        self.sm_slowdown = sm_slowdown  # a compute kernel's time x this while a collective holds NCCL's SMs
        self.max_events = max_events
        self.t = 0.0
        self.events: list[Event] = []
        self.iteration_seconds: dict[str, float] = {}
        self._steady: dict[str, tuple[float, dict, dict]] = {}

    def record(self, event: Event, on: bool):
        if on and len(self.events) < self.max_events:
            self.events.append(event)

    def run(self, computation: str, record: bool, iteration: int = 0):
        for op in self.program.get(computation, ()):
            action = op.action
            if action == "compute":
                self._compute(op, computation, record, iteration)
            elif action == "start":
                self._start(op, computation, record, iteration)
            elif action == "done":
                self._done(op, computation, record, iteration)
            elif action == "while":
                self._loop(op, computation, record)
            elif action == "call":
                for callee in op.called:
                    self.run(callee, record, iteration)
            elif action == "conditional":
                self._conditional(op, record, iteration)

    def _compute(self, op: Op, computation: str, record: bool, iteration: int):
        """A kernel on the compute stream, slowed by what holds its SMs; a synchronous collective or transfer
        is waited out there."""
        begin = self.t
        seconds = self.lanes.seconds(op)
        if op.category == "compute" and self.sm_slowdown > 1:
            seconds += self.lanes.beside(begin, seconds, _collective) * (self.sm_slowdown - 1)
        if op.category == "compute" and self.kernel_sm_share:
            lost = self.lanes.beside(begin, seconds, _transfer_kernel) * self.kernel_sm_share
            seconds += lost
            self.tally.exposed["sm_lost"] += lost
        self.t += seconds
        if op.category in ("collective", "transfer"):  # synchronous: the compute stream waits it out
            self.tally.expose(op.category, op.lane, seconds)
            self.tally.add_busy(op.lane, seconds)
            kind = _WAIT_KIND[op.category]
        else:
            self.tally.add_busy("compute", seconds)
            kind = op.category
        if seconds:
            self.record(Event(op.name, "compute", begin, self.t, kind, computation, iteration), record)

    def _start(self, op: Op, computation: str, record: bool, iteration: int):
        begin, end, seconds = self.lanes.start(op, self.t)
        self.tally.add_busy(op.lane, seconds)
        kind = op.lane if op.category == "transfer" else op.category
        self.record(Event(op.name, op.lane, begin, end, kind, computation, iteration), record)

    def _done(self, op: Op, computation: str, record: bool, iteration: int):
        started = self.lanes.pending.pop(op.start, None)
        if started is None:
            return
        _, end, category, lane, _ = started
        if end > self.t:
            self.tally.expose(category, lane, end - self.t)
            self.record(Event(op.name, "compute", self.t, end, _WAIT_KIND[category], computation, iteration), record)
            self.t = end

    def scoped(self, computation: str, record: bool, iteration: int = 0):
        """Run ``computation`` as one scope of the exposed-transfer split (``_Tally.close_scope``): the link's
        floor per direction; the rest of the exposed time is the schedule's excess."""
        self.tally.open_scope()
        self.run(computation, record, iteration)
        self.tally.close_scope()

    def _loop(self, op: Op, computation: str, record: bool):
        """Run the body until an iteration starts and ends with the lanes quiet; the remaining trips repeat it."""
        body = op.called[0]
        trips, i = op.trips, 0
        while i < trips:
            steady = self._steady.get(body)
            if steady is not None and self.lanes.quiet(self.t):
                seconds, busy, exposed = steady
                n = trips - i
                begin = self.t
                self.t += n * seconds
                self.tally.repeat(busy, exposed, n)
                self.record(Event(f"{body} x {n}", "compute", begin, self.t, "loop", body, i), record and i > 0)
                return
            was_quiet = self.lanes.quiet(self.t)
            t0, totals = self.t, self.tally.totals()
            self.scoped(body, record and i == 0, i)
            if was_quiet and self.lanes.quiet(self.t):
                seconds = self.t - t0
                self._steady[body] = (seconds, *self.tally.since(totals))
                self.iteration_seconds.setdefault(body, seconds)
            i += 1

    def _conditional(self, op: Op, record: bool, iteration: int):
        """Every branch from the same clocks; the slowest one's clocks go on."""
        start, best = (self.t, self.lanes.copy(), self.tally.copy()), None
        for branch in op.called:
            self.t, self.lanes, self.tally = start[0], start[1].copy(), start[2].copy()
            self.run(branch, False, iteration)
            if best is None or self.t > best[0]:
                best = (self.t, self.lanes.copy(), self.tally.copy())
        if best is not None:
            self.t, self.lanes, self.tally = best[0], best[1].copy(), best[2].copy()


@dataclasses.dataclass
class Simulator:
    """A compiled step prepared for replays: its program priced on ``target`` (compute and
    collectives), host transfers priced per replay on the link ``run`` is given."""

    module: hlo.HloModule
    target: Target
    cost_model: CostModel
    program: dict[str, list[Op]]
    limit: int
    peak_device_bytes: int = 0
    host_bytes: int = 0
    workload: Any = None  # the compile's ``compiler.Workload`` (model FLOPs, tokens), when it has one

    def run(self, link: HostLink | str | None = None, *, max_events: int = 20000) -> StepSimulation:
        """One step on ``link`` (default: the target's own host link)."""
        target = self.target.with_link(link) if link is not None else self.target
        bandwidth = self.bandwidth(target.link)
        model = self.cost_model
        sms = getattr(target.gpu, "sm_count", 0)  # a TPU runs no NCCL kernels on its cores
        sm_slowdown = sms / (sms - model.collectives.nccl_sms) if 0 < model.collectives.nccl_sms < sms else 1.0
        shared = None
        if target.link.carries_nic_traffic:
            nic = (model.collectives.nic_per_gpu or target.fabric.nic_per_gpu)
            shared = (min(target.link.achievable_d2h, target.link.achievable_h2d),
                      nic * model.collectives.network_efficiency)
        replay = _Replay(self.program, bandwidth, self.limit, max_events, sm_slowdown, shared,
                         self.bandwidth(target.link, "kernel"), model.kernel_sm_share(target.link))
        replay.scoped(self.module.entry, True)
        flops, busy, exposed = self.flops, replay.tally.busy, replay.tally.exposed
        by_kind = {**self.compute_by_class[1], **{f"collective:{lane}": busy[lane] for lane in ("nvlink", "network")},
                   **{f"transfer:{d}": busy[d] for d in targets.DIRECTIONS}}
        work = self.workload
        return StepSimulation(
            target=target.name, link=target.link.key, step_seconds=replay.t, compute_seconds=busy["compute"],
            exposed_transfer_seconds=exposed["transfer"],
            exposed_collective_seconds=exposed["collective"], exposed_other_seconds=exposed["async"],
            exposed_transfer_by_direction={d: exposed[d] for d in targets.DIRECTIONS},
            exposed_transfer_floor={d: exposed["floor:" + d] for d in targets.DIRECTIONS},
            busy_seconds=dict(busy), model_flops=work.model_flops if work else None,
            hardware_flops=flops.total, recompute_flops=flops.recompute, peak_flops=target.gpu.bf16_dense_flops,
            peak_device_bytes=self.peak_device_bytes, host_bytes=self.host_bytes,
            loop_iteration_seconds=dict(replay.iteration_seconds), tokens=work.tokens if work else None,
            flops_by_kind=self.compute_by_class[0], time_by_kind=by_kind, events=tuple(replay.events),
            cost_model=self.cost_model, async_compute_limit=self.limit,
            transfer_kernel_sm_seconds=exposed["sm_lost"])

    def bandwidth(self, link: HostLink, engine: str = "copy_engine") -> dict[str, float]:
        """Bytes/s per GPU each way over ``link`` for transfers ``engine`` moves (``HostTransfer.engine``), with
        ``concurrent_gpus(link)`` sharing it."""
        return {d: link.bandwidth_per_gpu(d, self.concurrent_gpus(link), engine) for d in targets.DIRECTIONS}

    def transfer_seconds(self, op: Op, link: HostLink) -> float:
        """One host transfer ``op``'s time on ``link`` at its engine's rate (the lab's pricing, not XLA's)."""
        return op.bytes / link.bandwidth_per_gpu(op.lane, self.concurrent_gpus(link), op.engine)

    def concurrent_gpus(self, link: HostLink | None = None) -> int:
        """GPUs sharing ``link`` (default the target's) that transfer at once: the cost model's, else the target's
        (a bad count is left for ``HostLink.bandwidth_per_gpu`` to refuse)."""
        n = self.cost_model.concurrent_gpus
        return self.target.transferring_together(link) if n is None else n

    @functools.cached_property
    def flops(self) -> hlo.FlopSummary:
        return hlo.flop_summary(self.module, self.target.gpu.grouped_gemm_tile_rows)

    @functools.cached_property
    def compute_by_class(self) -> tuple[dict[str, float], dict[str, float]]:
        """(FLOPs, seconds) of every kernel by op class, times its executions: what each class puts
        on the compute stream (and the async stream's device copies) per step."""
        counts = self.module.execution_counts
        flops, seconds = dict.fromkeys(hlo.OP_CLASSES, 0.0), dict.fromkeys(hlo.OP_CLASSES, 0.0)
        for comp, ops in self.program.items():
            for op in ops:
                if op.category in ("compute", "async") and op.op_class:
                    flops[op.op_class] += op.flops * counts.get(comp, 0)
                    seconds[op.op_class] += op.seconds * counts.get(comp, 0)
        return flops, seconds

    def op_seconds(self) -> float:
        """Every compute op's time times its executions: the step with nothing overlapped or waited for."""
        counts = self.module.execution_counts
        return sum(op.seconds * counts.get(comp, 0) for comp, ops in self.program.items()
                   for op in ops if op.action == "compute" and op.category == "compute")


def async_limit(target: Target, flags: dict) -> int:
    """How many async ops may be in flight beside compute: on a GPU XLA's
    ``xla_gpu_experimental_parallel_async_compute_limit`` (default 2; the compile's flags). On a TPU none: XLA:TPU's
    own limits (e.g. ``xla_tpu_host_transfer_overlap_limit``) act when it schedules, so the replay runs every
    async copy the schedule starts (an assumption: the DMA engines' runtime concurrency was not measured)."""
    if target.is_tpu:
        return 1 << 30
    return int(flags.get("xla_gpu_experimental_parallel_async_compute_limit", 2))


def prepare(compiled, target: Target | str | None = None, *, cost_model: CostModel = CostModel()) -> Simulator:
    """Price a compiled step's schedule on ``target``. ``compiled`` is a ``CompileReport`` (the
    target defaults to its own, the in-flight cap to its flags) or scheduled HLO (an
    ``hlo.HloModule`` or its text; then ``target`` is required and the cap is XLA's default 2
    unless ``cost_model`` sets it)."""
    if isinstance(compiled, (str, hlo.HloModule)):
        if target is None:
            raise ValueError("simulating HLO text needs a target, e.g. target='h100:1x8'")
        module = hlo.parse_module(compiled) if isinstance(compiled, str) else compiled
        flags, peak, host, workload = {}, 0, 0, None
    else:
        module, flags, workload = compiled.module, compiled.flags, compiled.workload
        peak = compiled.device.peak_bytes
        host = compiled.host.total_bytes
        if target is None:
            target = targets.target(compiled.target, mem_fraction=compiled.mem_fraction)
    if isinstance(target, str):
        target = targets.target(target)
    limit = cost_model.async_compute_limit or async_limit(target, flags)
    return Simulator(module, target, cost_model, build_program(module, target, cost_model), limit, peak, host, workload)


def simulate(compiled, target: Target | str | None = None, *, link: HostLink | str | None = None,
             cost_model: CostModel = CostModel(), max_events: int = 20000) -> StepSimulation:
    """Replay a compiled step's schedule (a ``CompileReport``, or scheduled HLO with a ``target``)
    on ``target`` (default: the compile's own; ``link`` swaps the host link for a what-if) and
    time one training step per GPU."""
    return prepare(compiled, target, cost_model=cost_model).run(link, max_events=max_events)
