"""Measure a compiled step on this machine's accelerator: time, run-to-run spread, real peak HBM,
per-op device time from a profiler trace, and a loss/gradient A/B.

Everything else in the lab predicts; this module runs. It needs a local TPU or GPU
(``require_accelerator`` says so in one line elsewhere), and is what ``python -m companion measure``
and ``benchmarks/bench_measured.py`` call on the lent TPU v5e.

* ``time_step``: warm-up calls (the first includes nothing of the compile: the step is compiled
  before), then N timed calls, each waited for (``jax.block_until_ready``): median, min, max. A
  training step's donated state is threaded from one call to the next (``carry``).
* ``spread``: the run-to-run spread across separate processes, (max - min) / median of their medians
  (a process's own repeat is not independent: same allocation, same chip state).
* ``peak_by_filler``: the step's real device footprint. On the TPU, ``memory_stats()``'s
  ``peak_bytes_in_use`` counts the runtime's buffers but not a program's temporaries (seen on the
  chip: 6.46 GiB for steps whose compiled temp was 8.7-12.4 GiB), so the peak is found by occupying
  HBM with a filler array and bisecting the largest filler beside which the step still runs: the
  footprint is then the limit less that filler, to ``resolution``. ``memory_stats`` is read beside it.
  It needs an allocator that raises when full (a GPU's does); the TPU runtime, on the lent v5e, waited
  instead at the first allocation past its limit, so there the bisection must run in a child process
  with a timeout (not yet done: no TPU footprint is measured).
* ``read_trace``: a ``jax.profiler`` trace (``.xplane.pb``) reduced without xprof
  (``jax.profiler.ProfileData``): the device plane's ``XLA Ops`` line (one event per executed HLO op)
  and its ``Async XLA Ops`` line (host transfers among them), per op name and class, and how much of
  the transfers' time compute ran beside (``OpTrace.overlap``).
* ``ab``: the same step under two policies (an offloading one and its device-saving twin) from the
  same state: the loss and the gradients' largest relative difference. On a TPU it says nothing of
  openxla/xla #46231, a bug of XLA:GPU's memcpy descriptors.
* A real ``RESOURCE_EXHAUSTED`` (XLA:TPU's at compile time: ``compiler.DoesNotFit``; the runtime's at
  execution) is a recorded verdict (``Verdict``), not a crash. XLA:TPU does not refuse every step over the
  limit: one it compiles with a peak over usable HBM is recorded "does not fit" at compile and not run
  (``train_step``'s ``run_over_limit``), since the runtime, past its limit, waits rather than raises (seen on
  the chip, with the filler bisection too).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import statistics
import time
from collections import defaultdict
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..compiling import compiler, train

GiB = 2**30


def local_accelerator() -> str | None:
    """``tpu`` or ``gpu`` where this process runs on one, else None."""
    platform = jax.default_backend()
    return platform if platform in ("tpu", "gpu") else None


def require_accelerator() -> str:
    platform = local_accelerator()
    if platform is None:
        raise ValueError(f"measure runs a step on a local TPU or GPU; this machine's JAX backend is "
                         f"{jax.default_backend()!r} (compile and simulate work without one)")
    return platform


# ----------------------------------------------------------------------------- time


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of N calls of one compiled step in one process (after ``warmup`` calls)."""

    seconds: tuple[float, ...]
    warmup: int

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def min(self) -> float:
        return min(self.seconds)

    @property
    def max(self) -> float:
        return max(self.seconds)

    @property
    def within_process_spread(self) -> float:
        """(max - min) / median of this process's calls."""
        return (self.max - self.min) / self.median

    def to_dict(self) -> dict:
        return {"seconds": list(self.seconds), "warmup": self.warmup, "median": self.median, "min": self.min,
                "max": self.max, "within_process_spread": self.within_process_spread}


def time_step(fn: Callable, args: tuple, *, steps: int = 5, warmup: int = 2,
              carry: Callable[[tuple, Any], tuple] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> tuple[Timing, Any]:
    """Time ``fn(*args)``: ``warmup`` calls, then ``steps`` timed calls, each waited for; returns the
    timing and the last output. ``carry(args, out)`` gives the next call's arguments (a training step's
    new parameters and optimizer state in place of the donated ones); by default the same ``args``."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    out, seconds = None, []
    for i in range(warmup + steps):
        start = clock()
        out = jax.block_until_ready(fn(*args))
        if i >= warmup:
            seconds.append(clock() - start)
        if carry is not None:
            args = carry(args, out)
    return Timing(tuple(seconds), warmup), out


def spread(medians: list[float] | tuple[float, ...]) -> float:
    """Run-to-run spread across separate processes: (max - min) / median of their medians."""
    if not medians:
        raise ValueError("spread needs at least one process's median")
    return (max(medians) - min(medians)) / statistics.median(medians)


# ----------------------------------------------------------------------------- out of memory


def is_out_of_memory(err: BaseException) -> bool:
    """XLA's or the runtime's ``RESOURCE_EXHAUSTED`` (compile-time ``compiler.DoesNotFit`` included)."""
    text = str(err)
    return isinstance(err, compiler.DoesNotFit) or "RESOURCE_EXHAUSTED" in text or "Ran out of memory" in text


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a step ran: ``runs``, ``does_not_fit`` (XLA:TPU refused the compile, or the runtime could
    not allocate), with the message and, for a compile-time refusal, the bytes needed."""

    status: str  # runs | does_not_fit
    stage: str = ""  # compile | execute (where it failed)
    message: str = ""
    needed_bytes: int | None = None

    @property
    def runs(self) -> bool:
        return self.status == "runs"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def verdict_of(err: BaseException, stage: str) -> Verdict:
    """The recorded verdict of an out-of-memory error; anything else is re-raised by the caller."""
    needed = getattr(err, "needed_bytes", None)
    first = next((line for line in str(err).splitlines() if "RESOURCE_EXHAUSTED" in line or "memory" in line),
                 str(err).splitlines()[0] if str(err) else type(err).__name__)
    return Verdict("does_not_fit", stage, first[:400], needed)


# ----------------------------------------------------------------------------- peak HBM


def memory_stats(device=None) -> dict[str, int]:
    """The runtime's own counters for ``device`` (default: the first local one); {} where it keeps none."""
    device = device or jax.local_devices()[0]
    return dict(device.memory_stats() or {})


def runtime_footprint(stats: dict[str, int]) -> int | None:
    """A step's device footprint as the TPU runtime holds it, from ``memory_stats()`` after the step ran:
    the buffers in use (parameters, optimizer state, batch, outputs) plus ``bytes_reserved``, the
    reservation the runtime makes for the loaded program's temporaries. ``peak_bytes_in_use`` does not see
    temporaries (it stayed at the arguments' bytes for every step of the first chip session); on the chip
    ``bytes_reserved`` equalled a known temporary to the byte (2, 4 and 8 GiB kept alive by an
    optimization barrier: ``benchmarks/bench_measured.py``'s memory probe, stored in measured.json). None
    where the runtime keeps no reservation counter (CPU; GPU allocators report none)."""
    if "bytes_reserved" not in stats or "bytes_in_use" not in stats:
        return None
    return stats["bytes_in_use"] + stats["bytes_reserved"]


@dataclasses.dataclass(frozen=True)
class FillerPeak:
    """A step's real device footprint, bisected with a filler array (``peak_by_filler``)."""

    limit_bytes: int  # what the runtime lets a program use (``bytes_limit``)
    largest_filler_bytes: int  # the largest filler beside which the step ran
    smallest_failing_filler_bytes: int | None  # the smallest beside which it did not (None: all ran)
    resolution_bytes: int
    runs: int  # step calls the search made

    @property
    def footprint_bytes(self) -> int:
        """The step's footprint (its arguments, outputs and temporaries) to ``resolution``: the limit less
        the largest filler it ran beside."""
        return self.limit_bytes - self.largest_filler_bytes

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "footprint_bytes": self.footprint_bytes}


def peak_by_filler(run: Callable[[], Any], limit_bytes: int, *, resolution: int = 64 * 2**20,
                   low: int = 0, high: int | None = None, device=None) -> FillerPeak:
    """Bisect the largest filler (a ``uint8`` array on ``device``) beside which ``run()`` still runs.

    ``run`` must re-create what it needs each call (a donated argument is gone after one). Between
    ``low`` (must run) and ``high`` (default: the limit) in steps of ``resolution``."""
    device = device or jax.local_devices()[0]
    high = limit_bytes if high is None else high
    calls = 0

    def fits(filler_bytes: int) -> bool:
        nonlocal calls
        calls += 1
        filler = None
        try:
            if filler_bytes:
                filler = jax.device_put(np.zeros(filler_bytes, np.uint8), device)
                jax.block_until_ready(filler)
            jax.block_until_ready(run())
            return True
        except Exception as err:  # noqa: BLE001 - only an out-of-memory error is an answer
            if not is_out_of_memory(err):
                raise
            return False
        finally:
            del filler

    if not fits(low):
        return FillerPeak(limit_bytes, 0, low, resolution, calls)
    failing = None
    while high - low > resolution:
        middle = low + (high - low) // 2 // resolution * resolution or low + resolution
        if fits(middle):
            low = middle
        else:
            high = failing = middle
    return FillerPeak(limit_bytes, low, failing, resolution, calls)


# ----------------------------------------------------------------------------- traces


def trace_call(fn: Callable, args: tuple, folder: str, calls: int = 1) -> str:
    """Run ``fn(*args)`` ``calls`` times under ``jax.profiler.trace``; the path of the ``.xplane.pb`` it wrote."""
    with jax.profiler.trace(folder):
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
    found = sorted(glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True), key=os.path.getmtime)
    if not found:
        raise ValueError(f"jax.profiler.trace wrote no .xplane.pb under {folder}")
    return found[-1]


CONTAINERS = ("while", "conditional", "call")  # their events span the ops they run: not work of their own


def is_wait(opcode: str) -> bool:
    """An async op's ``*-done`` (``async-done``, ``copy-done``, ...): its event is the core waiting for the
    async work to finish: the part of a transfer the step did not hide, not work of its own."""
    return opcode.endswith("-done")


@dataclasses.dataclass(frozen=True)
class TraceEvent:
    """One device event of a trace: the HLO instruction it ran (parsed from the event's name, which is the
    instruction's text) and when."""

    name: str  # "%fusion.329"
    opcode: str
    kind: str  # a fusion's kind (kLoop, kOutput, ...) or a custom call's target; else ""
    start_ns: int
    end_ns: int
    host_bytes: int = 0  # an async host transfer's bytes (its device-side operand or result)
    direction: str = ""  # d2h | h2d for a host transfer

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def op_class(self) -> str:
        """The event's class: host transfer, container, or opcode[:kind]."""
        if self.direction:
            return f"host_{self.direction}"
        return f"{self.opcode}:{self.kind}" if self.kind else self.opcode


def _event(text: str, start_ns: int, end_ns: int) -> TraceEvent:
    from ..xla import hlo

    name, _, body = text.partition(" = ")
    body = hlo._strip_comments(body)  # "/*index=5*/" in long tuples
    try:
        instr = hlo._parse_instruction(name.strip().lstrip("%"), body, "", False)
    except Exception:  # noqa: BLE001 - a name the parser cannot read is still time on the device
        return TraceEvent(name.strip(), "unknown", "", start_ns, end_ns)
    kind = instr.attrs.get("kind", "") if instr.opcode == "fusion" else instr.custom_call_target
    moved, direction = 0, ""
    if "S(5)" in body and instr.opcode.endswith("-start"):
        sources, destination = hlo._start_parts(instr)
        if destination is not None and destination.on_host:
            direction = "d2h"
            moved = next((a.bytes for a in sources if not a.on_host and a.dims), 0)
        elif any(a.on_host for a in sources):
            direction, moved = "h2d", destination.bytes if destination is not None else 0
    return TraceEvent(name.strip(), instr.opcode, kind, start_ns, end_ns, moved, direction)


@dataclasses.dataclass(frozen=True)
class OpTrace:
    """One device plane of a trace, reduced: what ran (leaf ops: loops' own events span their bodies and
    are left out), the host transfers among the async ops, and how much of their time compute ran beside."""

    plane: str
    steps: int  # executions of the traced module
    span_seconds: float  # the module's executions, end to end
    busy_seconds: float  # the union of the leaf ops' events, waits left out (the cores computing or copying)
    wait_seconds: float  # the union of the ``*-done`` events beyond busy: the cores waiting on async work
    op_seconds: dict[str, float]  # leaf op name -> seconds over the trace
    class_seconds: dict[str, float]  # op class (``TraceEvent.op_class``) -> seconds, leaf ops and host transfers
    transfer_seconds: dict[str, float]  # d2h | h2d -> the union of that direction's transfers in flight
    transfer_bytes: dict[str, int]
    transfer_rates: dict[str, float]  # d2h | h2d -> bytes/s: the median over transfers of bytes / time in flight
    overlap_seconds: float  # of all host transfers in flight, the time leaf compute (waits left out) ran beside

    @property
    def transfers_in_flight(self) -> float:
        return sum(self.transfer_seconds.values())

    @property
    def overlap(self) -> float:
        """Share of the host transfers' time in flight with compute beside it (1: hidden; no transfers: 1)."""
        total = self.transfers_in_flight
        return min(1.0, self.overlap_seconds / total) if total else 1.0

    def top(self, n: int = 10) -> list[tuple[str, float]]:
        return sorted(self.op_seconds.items(), key=lambda kv: -kv[1])[:n]

    def to_dict(self, top: int = 40) -> dict:
        return {"plane": self.plane, "steps": self.steps, "span_seconds": self.span_seconds,
                "busy_seconds": self.busy_seconds, "wait_seconds": self.wait_seconds,
                "class_seconds": dict(self.class_seconds),
                "transfer_seconds": dict(self.transfer_seconds), "transfer_bytes": dict(self.transfer_bytes),
                "transfer_rates": dict(self.transfer_rates), "overlap_seconds": self.overlap_seconds,
                "overlap": self.overlap, "ops": len(self.op_seconds),
                "top": [[name, seconds] for name, seconds in self.top(top)]}


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in intervals)


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Overlap of two sorted, disjoint interval lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def trace_events(path_or_bytes: str | bytes, plane_prefix: str = "/device:") -> tuple[str, int, float, list, list]:
    """(plane name, module executions, their span in seconds, XLA Ops events, Async XLA Ops events) of the
    first accelerator plane of a ``.xplane.pb`` (a path, or its bytes)."""
    from jax.profiler import ProfileData

    data = (ProfileData.from_serialized_xspace(path_or_bytes) if isinstance(path_or_bytes, bytes)
            else ProfileData.from_file(path_or_bytes))
    plane = next((p for p in data.planes if p.name.startswith(plane_prefix)
                  and any(line.name == "XLA Ops" for line in p.lines)), None)
    if plane is None:
        raise ValueError(f"no device plane with an 'XLA Ops' line (planes: {', '.join(p.name for p in data.planes)})")
    ops, asyncs, modules = [], [], []
    for line in plane.lines:
        target = {"XLA Ops": ops, "Async XLA Ops": asyncs, "XLA Modules": modules}.get(line.name)
        if target is None:
            continue
        for event in line.events:
            start = int(event.start_ns)
            target.append((event.name, start, start + int(event.duration_ns)))
    span = (max(e for _, _, e in modules) - min(s for _, s, _ in modules)) / 1e9 if modules else 0.0
    return (plane.name, len(modules), span, [_event(*e) for e in ops], [_event(*e) for e in asyncs])


def read_trace(path_or_bytes: str | bytes) -> OpTrace:
    """A ``jax.profiler`` trace reduced (see ``OpTrace``)."""
    plane, steps, span, ops, asyncs = trace_events(path_or_bytes)
    leaves = [e for e in ops if e.opcode not in CONTAINERS]
    busy = _union([(e.start_ns, e.end_ns) for e in leaves if not is_wait(e.opcode)])
    waits = _union([(e.start_ns, e.end_ns) for e in leaves if is_wait(e.opcode)])
    op_seconds: dict[str, float] = defaultdict(float)
    class_seconds: dict[str, float] = defaultdict(float)
    for e in leaves:
        op_seconds[e.name] += e.seconds
        class_seconds[e.op_class] += e.seconds
    transfers = [e for e in asyncs if e.direction]
    in_flight, moved, rates = {}, {}, {}
    for direction in ("d2h", "h2d"):
        mine = [e for e in transfers if e.direction == direction]
        if not mine:
            continue
        in_flight[direction] = _length(_union([(e.start_ns, e.end_ns) for e in mine])) / 1e9
        moved[direction] = sum(e.host_bytes for e in mine)
        rates[direction] = statistics.median(e.host_bytes / e.seconds for e in mine if e.seconds > 0)
        class_seconds[f"host_{direction}"] += sum(e.seconds for e in mine)
    overlap = _intersection(_union([(e.start_ns, e.end_ns) for e in transfers]), busy) / 1e9
    return OpTrace(plane, steps, span, _length(busy) / 1e9, (_length(waits) - _intersection(waits, busy)) / 1e9,
                   dict(op_seconds), dict(class_seconds), in_flight, moved, rates, overlap)


# ----------------------------------------------------------------------------- A/B


@dataclasses.dataclass(frozen=True)
class AB:
    """The same step's loss and gradients under two programs (e.g. offloading and not) from one state."""

    loss_a: float
    loss_b: float
    max_abs_grad_diff: float
    max_grad: float  # the largest |gradient| of b, for scale
    finite: bool

    @property
    def relative(self) -> float:
        return self.max_abs_grad_diff / self.max_grad if self.max_grad else 0.0

    @property
    def loss_diff(self) -> float:
        return abs(self.loss_a - self.loss_b)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "relative": self.relative, "loss_diff": self.loss_diff}


def ab(grad_a: Callable, grad_b: Callable, args: tuple) -> AB:
    """Compare ``(loss, grads) = grad_x(*args)`` of two programs on the same arguments."""
    loss_a, grads_a = jax.block_until_ready(grad_a(*args))
    loss_b, grads_b = jax.block_until_ready(grad_b(*args))
    leaves_a, leaves_b = jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)
    if len(leaves_a) != len(leaves_b):
        raise ValueError(f"the two programs return {len(leaves_a)} and {len(leaves_b)} gradient leaves")
    diff = max(float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32)))) for a, b in zip(leaves_a, leaves_b))
    scale = max(float(jnp.max(jnp.abs(b.astype(jnp.float32)))) for b in leaves_b)
    finite = all(bool(jnp.all(jnp.isfinite(x))) for x in leaves_a + leaves_b)
    return AB(float(loss_a), float(loss_b), diff, scale, finite)


# ----------------------------------------------------------------------------- a training step


def compile_record(report: compiler.CompileReport) -> dict:
    """What a measured step stores of its compile: XLA's memory analysis, host bytes, FLOPs, seconds."""
    d, h = report.device, report.host
    return {"peak_bytes": d.peak_bytes, "argument_bytes": d.argument_bytes, "output_bytes": d.output_bytes,
            "temp_bytes": d.temp_bytes, "alias_bytes": d.alias_bytes, "host_bytes": h.total_bytes,
            "host_temp_bytes": h.temp_bytes, "d2h_bytes_per_step": report.offload.d2h_bytes_per_step,
            "h2d_bytes_per_step": report.offload.h2d_bytes_per_step, "hardware_flops": report.flops.total,
            "recompute_flops": report.flops.recompute, "flops_by_class": dict(report.flops.by_class),
            "model_flops": report.workload.model_flops if report.workload else None,
            "xla_rematerialized": report.xla_rematerialized, "compile_seconds": report.compile_seconds,
            "usable_hbm_bytes": report.usable_hbm_bytes, "flags": report.flag_set.xla_flags(),
            "xla_cost": report.xla_cost}


def _carry(previous: tuple, out) -> tuple:
    """A training step's next arguments: its new parameters and optimizer state (the old were donated)."""
    params, opt_state, _ = out
    return params, previous[1], opt_state, previous[3]


def train_step(trainer: train.Trainer, placement: compiler.Placement, batch: int, seq: int, *, flags=None,
               steps: int = 5, warmup: int = 2, seed: int = 0, footprint: bool = False,
               trace_dir: str | None = None, run_over_limit: bool = False) -> dict:
    """Compile ``trainer``'s full training step for ``placement`` (this machine's chip), run it on real
    parameters and a synthetic batch, and measure it: the verdict, the compile's memory analysis, the
    timing, the runtime's counters, optionally the footprint by filler and a reduced profiler trace. A step
    XLA compiles with a peak over usable HBM is not run unless ``run_over_limit`` (the TPU runtime can hang)."""
    record: dict = {}
    abstract = train.abstract_state(trainer, placement, batch, seq)
    try:
        report, executable = compiler.compile(
            trainer.jit_step(), *abstract.arguments(), placement=placement, flags=flags,
            host_arguments=abstract.host_arguments(trainer.state),
            workload=train.workload(trainer.cfg, placement.num_devices, batch, seq), executable=True)
    except compiler.DoesNotFit as err:
        return {"verdict": verdict_of(err, "compile").to_dict(), "compile": err.to_dict()}
    record["compile"] = compile_record(report)
    if not report.fits and not run_over_limit:
        # XLA:TPU does not always refuse: minimal at B = 12 (L 4, S 2048) compiles with a 16.15 GiB peak over 15.75
        # GiB usable, and the first chip session's try of it ran 90 s without a word (the runtime waits for memory)
        return {**record, "verdict": Verdict("does_not_fit", "compile", f"compiled, but its peak {report.fit.reason()}; "
                                             "not run (past the limit the TPU runtime waits instead of raising)",
                                             report.device.peak_bytes).to_dict()}
    before = memory_stats()

    def concrete():
        _, params, rest, opt_state = train.init(trainer.cfg, trainer.policy, seed=seed, state=trainer.state)
        return params, rest, opt_state, train.synthetic_batch(trainer.cfg, batch, seq, seed)

    try:
        timing, out = time_step(executable, concrete(), steps=steps, warmup=warmup, carry=_carry)
    except Exception as err:  # noqa: BLE001 - an out-of-memory run is a verdict
        if not is_out_of_memory(err):
            raise
        return {**record, "verdict": verdict_of(err, "execute").to_dict()}
    after = memory_stats()
    record.update(verdict=Verdict("runs").to_dict(), timing=timing.to_dict(), loss=float(out[2]["loss"]),
                  memory_stats_before=before, memory_stats_after=after, runtime_footprint=runtime_footprint(after))
    del out
    if trace_dir:
        try:
            path = trace_call(executable, concrete(), trace_dir)
            record["trace_file"] = path
            record["trace"] = read_trace(path).to_dict()
        except Exception as err:  # noqa: BLE001 - a trace the profiler could not give is noted, not fatal
            record["trace_error"] = f"{type(err).__name__}: {str(err)[:300]}"
    if footprint:  # the arguments kept on the host between calls, put back where the step wants them each call
        arguments = concrete()
        where = jax.tree.map(lambda x: x.sharding, arguments)
        host = jax.tree.map(np.asarray, arguments)
        del arguments
        limit = memory_stats().get("bytes_limit", placement.target.usable_hbm_bytes)
        record["filler_peak"] = peak_by_filler(lambda: executable(*jax.device_put(host, where)), limit).to_dict()
    return record


def ab_policies(cfg, policy_a, policy_b, batch: int, seq: int, seed: int = 0) -> AB:
    """Loss and gradients of one model under two remat policies, from the same parameters and batch."""
    runs = [jax.jit(jax.value_and_grad(train.trainer(cfg, p).loss)) for p in (policy_a, policy_b)]
    _, params, rest, _ = train.init(cfg, policy_a, seed=seed)
    return ab(runs[0], runs[1], (params, rest, train.synthetic_batch(cfg, batch, seq, seed)))
