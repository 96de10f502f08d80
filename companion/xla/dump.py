"""Read the files XLA writes with ``--xla_dump_to``: buffer assignment, live ranges, and the
latency-hiding scheduler's own estimated schedule.

Pure Python. ``read(dir)`` picks the after-optimizations files of the (last) module in a dump
folder. The buffer assignment lists allocations (what the runtime really reserves, by memory
space, with each value's offset); the live-range file lists the schedule and, per buffer, the
steps it is alive. Together: ``XlaDump.temp_timeline()``, the bytes of the temp arena in use at
each step, and ``live_at(step)``, what is alive then (e.g. at the peak).

With ``--xla_dump_latency_hiding_schedule=true`` (and ``--xla_dump_hlo_as_text``) the scheduler
also writes ``<module>.schedule.txt``: an ``xla.ScheduleProto`` (``xla/xla.proto`` at the XLA
jaxlib 0.10.2 pins) holding the module as the scheduler saw it and, per scheduled computation
(the while bodies among them), each instruction's estimated start and end and the scheduler's
statistics. ``read_schedule(path)`` turns it into a ``LhsSchedule``: what XLA *thinks* each op
costs, to set beside the lab's own time model. Its units are the estimator's cycles;
``cycles_per_microsecond`` is 1 for every GPU estimator, so they read as microseconds.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from . import hlo


@dataclasses.dataclass(frozen=True)
class Value:
    """One HLO value placed in an allocation: ``buffer`` is "instruction{shape index}"."""

    buffer: str
    size: int
    offset: int


@dataclasses.dataclass(frozen=True)
class Allocation:
    index: int
    size: int
    memory_space: int  # 0 device, 5 pinned host
    kind: str  # parameter | output | temp | thread-local | constant
    values: tuple[Value, ...]  # HLO values placed in it (several share bytes when lifetimes do not overlap)


@dataclasses.dataclass(frozen=True)
class LiveRange:
    buffer: str  # "instruction{shape index}"
    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class XlaDump:
    folder: str
    module_text: str = dataclasses.field(repr=False)
    allocations: tuple[Allocation, ...] = dataclasses.field(repr=False)
    sequence: tuple[str, ...] = dataclasses.field(repr=False)
    live_ranges: tuple[LiveRange, ...] = dataclasses.field(repr=False)
    peak_step: int | None = None
    schedule: "LhsSchedule | None" = dataclasses.field(default=None, repr=False)  # with LHS on

    def allocated_bytes(self, memory_space: int = 0, kinds: tuple[str, ...] | None = None) -> int:
        return sum(a.size for a in self.allocations
                   if a.memory_space == memory_space and (kinds is None or a.kind in kinds))

    def temp_timeline(self, memory_space: int = 0) -> list[int]:
        """Bytes of the temp arena in use at each step of the schedule (alias-aware: values that
        share bytes count once), in one memory space. Its maximum is at most that space's temp allocation:
        XLA's heap leaves holes where lifetimes interleave (0-5.8 % of the compiled peak on the state-offload
        set, ``benchmarks/bench_state_offload.py``), and XLA:GPU places some loop buffers in a device memory
        space of their own (7 there): add the spaces' timelines step by step."""
        ranges = {r.buffer: (r.start, r.end) for r in self.live_ranges}
        steps = len(self.sequence)
        used = [0] * steps
        for allocation in self.allocations:  # offsets are only comparable within one allocation
            if allocation.memory_space != memory_space or allocation.kind != "temp":
                continue
            starts: dict[int, list[Value]] = {}
            for v in allocation.values:
                r = ranges.get(v.buffer)
                if r:
                    starts.setdefault(max(r[0], 0), []).append(v)
            live: list[Value] = []
            for step in range(steps):
                live = [v for v in live if ranges[v.buffer][1] >= step] + starts.get(step, [])
                used[step] += _union_bytes(live)
        return used

    def live_at(self, step: int, memory_space: int = 0) -> list[tuple[str, int, str]]:
        """``(buffer, bytes, op_name)`` of the temp values alive at ``step``, largest first.

        Bytes are attributed once: a value sharing bytes with a larger live one (an in-place
        update, a loop-carried alias) is listed with only the bytes it adds, often 0.
        """
        module = hlo.parse_module(self.module_text)
        op_names = {i.name: i.op_name for i in module.instructions()}
        ranges = {r.buffer: (r.start, r.end) for r in self.live_ranges}
        out = []
        for a in self.allocations:  # offsets are only comparable within one allocation
            if a.memory_space != memory_space or a.kind != "temp":
                continue
            live = [v for v in a.values if (r := ranges.get(v.buffer)) and r[0] <= step <= r[1]]
            covered: list[Value] = []
            for v in sorted(live, key=lambda v: -v.size):
                added = _union_bytes(covered + [v]) - _union_bytes(covered)
                covered.append(v)
                out.append((v.buffer, added, op_names.get(v.buffer.split("{")[0], "")))
        return sorted(out, key=lambda t: -t[1])


def _union_bytes(values: list[Value]) -> int:
    total, end = 0, -1
    for start, stop in sorted((v.offset, v.offset + v.size) for v in values):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _after_optimizations(folder: Path, suffix: str) -> Path | None:
    files = sorted(folder.glob(f"*after_optimizations{suffix}"))
    return files[-1] if files else None


def read(folder: Path | str) -> XlaDump:
    folder = Path(folder)
    module_file = _after_optimizations(folder, ".txt")
    if module_file is None:
        raise FileNotFoundError(f"no '*after_optimizations.txt' in {folder}: was it written with --xla_dump_to?")
    assignment = _after_optimizations(folder, "-buffer-assignment.txt")
    live = _after_optimizations(folder, "-live-range.txt")
    sequence, ranges, peak = parse_live_ranges(live.read_text()) if live else ((), (), None)
    schedules = sorted(folder.glob("*.schedule.txt"))
    return XlaDump(
        folder=str(folder),
        module_text=module_file.read_text(),
        allocations=parse_buffer_assignment(assignment.read_text()) if assignment else (),
        sequence=sequence,
        live_ranges=ranges,
        peak_step=peak,
        schedule=read_schedule(schedules[-1]) if schedules else None,
    )


_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(r"^ value: <\d+ (\S+?)(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)")


def parse_buffer_assignment(text: str) -> tuple[Allocation, ...]:
    allocations, current = [], None
    for line in text.splitlines():
        m = _ALLOCATION.match(line)
        if m:
            if current:
                allocations.append(_allocation(*current))
            current = (int(m.group(1)), int(m.group(2)), m.group(3), [])
        elif current and line.startswith(" value: "):
            m = _VALUE.match(line)
            if m:
                name = m.group(1) if "{" in m.group(1) else m.group(1) + "{}"
                current[3].append(Value(name, int(m.group(2)), int(m.group(3))))
        elif current and not line.startswith(" "):
            allocations.append(_allocation(*current))
            current = None
    if current:
        allocations.append(_allocation(*current))
    return tuple(allocations)


def _allocation(index: int, size: int, tags: str, values: list[str]) -> Allocation:
    color = re.search(r"color (\d+)", tags)
    if "parameter" in tags:
        kind = "parameter"
    elif "output shape" in tags or "maybe-live-out" in tags:
        kind = "output"
    elif "thread-local" in tags:
        kind = "thread-local"
    elif "constant" in tags:
        kind = "constant"
    else:  # "preallocated-temp", or an untagged allocation: a temporary XLA did not combine
        kind = "temp"
    return Allocation(index, size, int(color.group(1)) if color else 0, kind, tuple(values))


def parse_live_ranges(text: str) -> tuple[tuple[str, ...], tuple[LiveRange, ...], int | None]:
    sequence, ranges, section, peak = [], [], None, None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "InstructionSequence:":
            section = "sequence"
        elif stripped == "BufferLiveRange:":
            section = "ranges"
        elif stripped.startswith("Live ranges at"):
            m = re.search(r"at (\d+)", stripped)
            peak = int(m.group(1)) if m else None
            section = None
        elif section == "sequence":
            m = re.match(r"(\d+):(\S+)", stripped)
            if m:
                sequence.append(m.group(2))
        elif section == "ranges":
            m = re.match(r"(.+\{[0-9,]*\}):(-?\d+)-(-?\d+)$", stripped)
            if m:
                ranges.append(LiveRange(m.group(1), int(m.group(2)), int(m.group(3))))
    return tuple(sequence), tuple(ranges), peak


# ----------------------------------------------------------------------------- the scheduler's estimate

_PROTO_TOKEN = re.compile(r'\s*(?:(\w+)\s*:?\s*(\{)|(\w+)\s*:\s*("(?:[^"\\]|\\.)*"|[^\s{}]+)|(\}))')


def parse_text_proto(text: str) -> dict:
    """A protobuf text-format message as nested dicts: every field maps to a list of values
    (strings, or dicts for sub-messages), in file order. No schema needed."""
    stack, position = [{}], 0
    while True:
        m = _PROTO_TOKEN.match(text, position)
        if not m:
            if text[position:].strip():
                raise ValueError(f"cannot parse text proto near {text[position:position + 60]!r}")
            return stack[0]
        position = m.end()
        if m.group(2):
            child: dict = {}
            stack[-1].setdefault(m.group(1), []).append(child)
            stack.append(child)
        elif m.group(5):
            if len(stack) == 1:
                raise ValueError("unbalanced '}' in text proto")
            stack.pop()
        else:
            value = m.group(4)
            stack[-1].setdefault(m.group(3), []).append(value[1:-1] if value.startswith('"') else value)


def _one(message: dict, field: str, default=None):
    values = message.get(field)
    return values[0] if values else default


@dataclasses.dataclass(frozen=True)
class ScheduledOp:
    """One instruction as the latency-hiding scheduler placed it (its estimate, in µs)."""

    name: str
    opcode: str
    start: float
    end: float
    operands: tuple[str, ...] = ()  # names, for pairing an async *-done with its *-start

    @property
    def cost(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class ComputationSchedule:
    """One scheduled computation: its ops in the scheduler's order and its statistics."""

    name: str
    ops: tuple[ScheduledOp, ...]
    statistics: dict[str, float]  # total_cycles, total_wasted_cycles, *_wasted_cycles, memory_pressure_peak
    cycles_per_microsecond: float = 1.0

    @property
    def total_us(self) -> float:
        """The scheduler's estimate of one run of this computation."""
        return self.statistics.get("total_cycles", 0.0) / self.cycles_per_microsecond

    @property
    def wasted_us(self) -> float:
        return self.statistics.get("total_wasted_cycles", 0.0) / self.cycles_per_microsecond

    def op(self, name: str) -> ScheduledOp:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(f"no op {name!r} in the schedule of {self.name}")

    def async_spans(self) -> list[tuple[ScheduledOp, ScheduledOp]]:
        """``(start, done)`` pairs of async ops (copies, host transfers, collectives)."""
        starts = {o.name: o for o in self.ops if o.opcode.endswith("-start")}
        return [(starts[o.operands[0]], o) for o in self.ops
                if o.opcode.endswith("-done") and o.operands and o.operands[0] in starts]

    def async_windows(self) -> dict[str, float]:
        """Per async start: the time the scheduler left between its start and its done (µs), the
        latency it planned for (longer where it placed the done later than needed)."""
        return {start.name: done.start - start.end for start, done in self.async_spans()}


@dataclasses.dataclass(frozen=True)
class LhsSchedule:
    """What ``--xla_dump_latency_hiding_schedule`` wrote: a ``ComputationSchedule`` per computation."""

    module: str
    computations: dict[str, ComputationSchedule]

    def ops(self):
        for comp in self.computations.values():
            yield from comp.ops


def read_schedule(path: Path | str) -> LhsSchedule:
    """Parse a ``<module>.schedule.txt`` (text ``xla.ScheduleProto``)."""
    proto = parse_text_proto(Path(path).read_text())
    module = _one(proto, "hlo_module", {})
    names, computation_names = {}, {}
    for comp in module.get("computations", []):
        computation_names[_one(comp, "id")] = _one(comp, "name", "")
        for instr in comp.get("instructions", []):
            names[_one(instr, "id")] = (_one(instr, "name", ""), _one(instr, "opcode", ""),
                                        tuple(instr.get("operand_ids", ())))
    computations = {}
    for entry in proto.get("computation_schedules", []):
        name = computation_names.get(_one(entry, "computation_id"), "")
        ops = []
        for instr in entry.get("instructions", []):
            op_name, opcode, operand_ids = names.get(_one(instr, "id"), ("", "", ()))
            ops.append(ScheduledOp(op_name, opcode, float(_one(instr, "start_timestamp_cycles", 0)),
                                   float(_one(instr, "end_timestamp_cycles", 0)),
                                   tuple(names[i][0] for i in operand_ids if i in names)))
        stats = {k: float(v[0]) for k, v in _one(entry, "scheduler_statistics", {}).items()}
        computations[name] = ComputationSchedule(name, tuple(ops), stats,
                                                 float(_one(entry, "cycles_per_microsecond", 1) or 1))
    return LhsSchedule(_one(module, "name", ""), computations)
