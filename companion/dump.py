"""Read the files XLA writes with ``--xla_dump_to``: buffer assignment and live ranges.

Pure Python. ``read(dir)`` picks the after-optimizations files of the (last) module in a dump
folder. The buffer assignment lists allocations (what the runtime really reserves, by memory
space, with each value's offset); the live-range file lists the schedule and, per buffer, the
steps it is alive. Together: ``XlaDump.temp_timeline()``, the bytes of the temp arena in use at
each step, and ``live_at(step)``, what is alive then (e.g. at the peak).
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

    def allocated_bytes(self, memory_space: int = 0, kinds: tuple[str, ...] | None = None) -> int:
        return sum(a.size for a in self.allocations
                   if a.memory_space == memory_space and (kinds is None or a.kind in kinds))

    def temp_timeline(self, memory_space: int = 0) -> list[int]:
        """Bytes of the temp arena in use at each step of the schedule (alias-aware: values that
        share bytes count once). Its maximum is the temp allocation: XLA's heap packs tightly."""
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
    return XlaDump(
        folder=str(folder),
        module_text=module_file.read_text(),
        allocations=parse_buffer_assignment(assignment.read_text()) if assignment else (),
        sequence=sequence,
        live_ranges=ranges,
        peak_step=peak,
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
