"""Read a scheduled XLA HLO module as text: shapes, memory spaces, loops, offload and collectives.

Pure Python (no jax import), so it runs on any HLO text: ``compiled.as_text()``, a file
from ``--xla_dump_to``, or a string in a test. The vocabulary:

* memory space ``S(5)`` in a layout (``f32[4,512]{1,0:S(5)}``) marks a buffer in pinned host
  memory; everything else lives in device HBM.
* an *execution count* is how often a computation runs per call of the entry computation:
  a ``while`` body with ``known_trip_count`` n runs n times per execution of its caller.
* a *host transfer* is an instruction that reads from or writes to ``S(5)``: async ones come
  as a ``*-start`` / ``*-done`` pair (``copy-start``, ``fusion-start`` wrapping a
  ``dynamic-update-slice`` or ``dynamic-slice``, ``async-start``), sync ones as a single op.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections import Counter, defaultdict
from functools import cached_property
from typing import Any

HOST_MEMORY_SPACE = 5

DTYPE_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f4e2m1fn": 4, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e4m3fnuz": 8,
    "f8e5m2": 8, "f8e5m2fnuz": 8, "f8e8m0fnu": 8, "bf16": 16, "f16": 16, "f32": 32, "f64": 64,
    "c64": 64, "c128": 128, "token": 0, "opaque": 0,
}

COLLECTIVE_OPCODES = (
    "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "ragged-all-to-all",
    "collective-permute", "collective-broadcast",
)

# Attributes whose value names the computations an instruction calls.
_CALLING_ATTRS = ("calls", "body", "condition", "to_apply", "branch_computations",
                  "true_computation", "false_computation")


# ----------------------------------------------------------------------------- shapes


@dataclasses.dataclass(frozen=True)
class ArrayShape:
    """One array: element type, dimensions and memory space (0 device, 5 pinned host)."""

    dtype: str
    dims: tuple[int, ...]
    memory_space: int = 0
    # the layout (None when the text gives none); not part of a shape's identity
    minor_to_major: tuple[int, ...] | None = dataclasses.field(default=None, compare=False)

    @property
    def byte_strides(self) -> tuple[int, ...]:
        """Bytes between consecutive indices of each dimension, from the layout (row-major without one)."""
        order = self.minor_to_major if self.minor_to_major is not None else tuple(reversed(range(len(self.dims))))
        strides, step = [0] * len(self.dims), DTYPE_BITS.get(self.dtype, 0) // 8
        for d in order:
            strides[d] = step
            step *= self.dims[d]
        return tuple(strides)

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def bytes(self) -> int:
        return (self.elements * DTYPE_BITS.get(self.dtype, 0) + 7) // 8

    @property
    def on_host(self) -> bool:
        return self.memory_space == HOST_MEMORY_SPACE

    def __str__(self) -> str:
        space = f":S({self.memory_space})" if self.memory_space else ""
        return f"{self.dtype}[{','.join(map(str, self.dims))}]{space}"


@dataclasses.dataclass(frozen=True)
class TupleShape:
    elements: tuple["Shape", ...]

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.elements)

    def arrays(self) -> list[ArrayShape]:
        return [a for e in self.elements for a in flatten_shape(e)]

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.elements)) + ")"


Shape = ArrayShape | TupleShape


def flatten_shape(shape: Shape) -> list[ArrayShape]:
    return shape.arrays() if isinstance(shape, TupleShape) else [shape]


_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\](\{[^{}]*\})?")


def parse_shape(text: str) -> Shape:
    """Parse ``f32[4,8]{1,0:S(5)}`` or a (nested) tuple of such into a shape."""
    shape, rest = _parse_shape_prefix(text.strip())
    if rest.strip():
        raise ValueError(f"trailing text after shape: {rest!r}")
    return shape


def _parse_shape_prefix(text: str) -> tuple[Shape, str]:
    shape, pos = _parse_shape_at(text, 0)
    return shape, text[pos:]


_SPACES = re.compile(r"\s*")


def _parse_shape_at(text: str, pos: int) -> tuple[Shape, int]:
    """The shape starting at ``pos`` (after blanks) and where it ends: positions, not slices, so a
    long line with many tuple elements is read once."""
    pos = _SPACES.match(text, pos).end()
    if text.startswith("(", pos):
        elements = []
        pos = _SPACES.match(text, pos + 1).end()
        if text.startswith(")", pos):
            return TupleShape(()), pos + 1
        while True:
            element, pos = _parse_shape_at(text, pos)
            elements.append(element)
            pos = _SPACES.match(text, pos).end()
            if text.startswith(",", pos):
                pos += 1
                continue
            if text.startswith(")", pos):
                return TupleShape(tuple(elements)), pos + 1
            raise ValueError(f"malformed tuple shape near {text[pos:pos + 40]!r}")
    m = _ARRAY_RE.match(text, pos)
    if not m:
        raise ValueError(f"not a shape: {text[pos:pos + 40]!r}")
    return _array_shape(m.group(1), m.group(2), m.group(3) or ""), m.end()


@functools.lru_cache(maxsize=4096)
def _array_shape(dtype: str, dims: str, layout: str) -> ArrayShape:
    space = re.search(r"S\((\d+)\)", layout)
    order = re.match(r"\{([0-9,]*)", layout)
    minor_to_major = tuple(int(d) for d in order.group(1).split(",") if d) if order else None
    dims_tuple = tuple(int(d) for d in dims.split(",") if d)
    if minor_to_major is not None and sorted(minor_to_major) != list(range(len(dims_tuple))):
        minor_to_major = None
    return ArrayShape(dtype, dims_tuple, int(space.group(1)) if space else 0, minor_to_major)


# ----------------------------------------------------------------------------- module


@dataclasses.dataclass
class Instruction:
    name: str
    opcode: str
    shape: Shape
    operands: list[str]
    attrs: dict[str, str]
    computation: str
    is_root: bool = False
    operand_text: str = ""  # as written between the parentheses (e.g. "1" for parameter(1))
    inferred_trip_count: int | None = None  # a while's trips read from its condition (``_infer_trip_counts``)

    @property
    def called(self) -> list[str]:
        names = []
        for key in _CALLING_ATTRS:
            value = self.attrs.get(key)
            if value:
                names += [n.strip().lstrip("%") for n in value.strip("{}").split(",") if n.strip()]
        return names

    @property
    def op_name(self) -> str:
        m = re.search(r'op_name="([^"]*)"', self.attrs.get("metadata", ""))
        return m.group(1) if m else ""

    @cached_property
    def backend_config(self) -> dict:
        raw = self.attrs.get("backend_config", "")
        if not raw.startswith("{"):
            return {}
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return {}

    @property
    def trip_count(self) -> int | None:
        """A while's trips: XLA:GPU's ``known_trip_count``, else (XLA:TPU prints none) read from its condition."""
        n = self.backend_config.get("known_trip_count", {}).get("n")
        return int(n) if n is not None else self.inferred_trip_count

    @property
    def custom_call_target(self) -> str:
        return self.attrs.get("custom_call_target", "").strip('"')


@dataclasses.dataclass
class Computation:
    name: str
    instructions: list[Instruction]
    is_entry: bool = False

    @cached_property
    def by_name(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    @property
    def root(self) -> Instruction:
        return next((i for i in self.instructions if i.is_root), self.instructions[-1])


@dataclasses.dataclass
class HloModule:
    name: str
    computations: dict[str, Computation]
    entry: str

    def instructions(self):
        for comp in self.computations.values():
            yield from comp.instructions

    def operand_shapes(self, instr: Instruction) -> list[Shape]:
        comp = self.computations[instr.computation].by_name
        return [comp[o].shape for o in instr.operands if o in comp]

    @cached_property
    def scheduled_computations(self) -> set[str]:
        """Computations the runtime steps through: the entry, loop bodies and conditions, calls,
        branches. Fusion bodies, reducers and async-wrapped computations run inside one op."""
        seen, todo = set(), [self.entry]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.computations:
                continue
            seen.add(name)
            for instr in self.computations[name].instructions:
                if instr.opcode in ("while", "call", "conditional"):
                    todo += instr.called
        return seen

    @cached_property
    def execution_counts(self) -> dict[str, int]:
        """How often each computation runs per execution of the entry, loops by trip count."""
        callers: dict[str, list[tuple[Instruction, int]]] = defaultdict(list)
        for instr in self.instructions():
            for callee in instr.called:
                callers[callee].append((instr, _call_multiplicity(instr, callee)))
        counts: dict[str, int] = {}

        def count(name: str, stack: tuple = ()) -> int:
            if name in counts:
                return counts[name]
            if name == self.entry:
                counts[name] = 1
                return 1
            if name in stack:  # malformed recursion: never expected in HLO
                return 0
            total = sum(count(i.computation, stack + (name,)) * m for i, m in callers.get(name, []))
            counts[name] = total
            return total

        for name in self.computations:
            count(name)
        return counts

    @property
    def conditionals(self) -> list[str]:
        """Conditionals of the schedule: their branches are all counted as if each ran (an upper bound)."""
        return [i.name for i in self.instructions() if i.opcode == "conditional"]

    @property
    def unknown_trip_count_loops(self) -> list[str]:
        return [i.name for i in self.instructions() if i.opcode == "while" and i.trip_count is None]

    def executions(self, instr: Instruction) -> int:
        return self.execution_counts.get(instr.computation, 0)

    def scheduled(self):
        """Instructions that the runtime issues (not those inside fusion bodies or reducers)."""
        scheduled = self.scheduled_computations
        for comp in self.computations.values():  # module order: deterministic
            if comp.name in scheduled:
                yield from comp.instructions


def async_window(module: HloModule, start: str) -> list[Instruction]:
    """The instructions XLA scheduled between the async op ``start`` (a ``*-start``) and its
    ``*-done``, in schedule order: what runs while it is in flight."""
    for comp in module.computations.values():
        names = [i.name for i in comp.instructions]
        if start in names:
            first = names.index(start)
            for k in range(first + 1, len(comp.instructions)):
                instr = comp.instructions[k]
                if instr.opcode.endswith("-done") and start in instr.operands:
                    return comp.instructions[first + 1:k]
            raise ValueError(f"{start!r} has no matching -done in {comp.name}")
    raise ValueError(f"no instruction {start!r} in the module")


def _call_multiplicity(instr: Instruction, callee: str) -> int:
    if instr.opcode == "while":
        trips = instr.trip_count if instr.trip_count is not None else 1
        body = instr.attrs.get("body", "").lstrip("%")
        return trips if callee == body else trips + 1
    return 1


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", "", text)


_COMP_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")


def parse_module(text: str) -> HloModule:
    """Parse HLO text (as printed by ``as_text()`` or dumped) into computations and instructions."""
    text = _strip_comments(text)
    name_match = re.search(r"^HloModule\s+([\w.\-]+)", text, re.M)
    computations: dict[str, Computation] = {}
    entry = ""
    current: Computation | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None:
            m = _COMP_HEADER.match(stripped)
            if m and not stripped.startswith("HloModule"):
                current = Computation(m.group(2), [], is_entry=bool(m.group(1)))
                if current.is_entry:
                    entry = current.name
            continue
        if stripped == "}":
            computations[current.name] = current
            current = None
            continue
        m = _INSTR.match(line)
        if m:
            current.instructions.append(_parse_instruction(m.group(2), m.group(3), current.name, bool(m.group(1))))
    if not entry and computations:
        entry = list(computations)[-1]
    module = HloModule(name_match.group(1) if name_match else "", computations, entry)
    _infer_trip_counts(module)
    return module


_COUNTING = {"LT": lambda start, end, step: -(-(end - start) // step), "NE": lambda start, end, step: (end - start) // step,
             "LE": lambda start, end, step: (end - start) // step + 1}


def _infer_trip_counts(module: HloModule) -> None:
    """Trips of the whiles XLA printed no ``known_trip_count`` for (XLA:TPU prints none): a counted loop
    ``i = start; while i < end: i += step`` whose condition compares one tuple element with a constant,
    whose body adds a constant step to it and whose start is a constant (through copies). Others stay None."""
    for instr in module.instructions():
        if instr.opcode != "while" or instr.backend_config.get("known_trip_count") or not instr.operands:
            continue
        cond = module.computations.get(instr.attrs.get("condition", "").lstrip("%"))
        body = module.computations.get(instr.attrs.get("body", "").lstrip("%"))
        if cond is None or body is None:
            continue
        compare = cond.root
        direction = compare.attrs.get("direction", "")
        if compare.opcode != "compare" or direction not in _COUNTING or len(compare.operands) != 2:
            continue
        index, end = _tuple_index(cond, compare.operands[0]), _constant(cond, compare.operands[1])
        start = step = None
        if index is not None and end is not None:
            start = _constant(module.computations[instr.computation], _tuple_element(module, instr, index))
            step = _step(body, index)
        if None not in (index, end, start, step) and step > 0:
            instr.inferred_trip_count = max(0, _COUNTING[direction](start, end, step))


def _through_copies(comp: Computation, name: str | None) -> Instruction | None:
    instr = comp.by_name.get(name) if name else None
    while instr is not None and instr.opcode in ("copy", "bitcast", "convert") and instr.operands:
        instr = comp.by_name.get(instr.operands[0])
    return instr


def _constant(comp: Computation, name: str | None) -> int | None:
    instr = _through_copies(comp, name)
    if instr is None or instr.opcode != "constant" or not re.fullmatch(r"-?\d+", instr.operand_text.strip()):
        return None
    return int(instr.operand_text)


def _tuple_index(comp: Computation, name: str) -> int | None:
    """k where ``name`` is get-tuple-element(parameter, index=k) of ``comp``."""
    instr = _through_copies(comp, name)
    if instr is None or instr.opcode != "get-tuple-element":
        return None
    source = comp.by_name.get(instr.operands[0]) if instr.operands else None
    if source is None or source.opcode != "parameter":
        return None
    return int(instr.attrs.get("index", "-1"))


def _tuple_element(module: HloModule, loop: Instruction, index: int) -> str | None:
    """The name of element ``index`` of the tuple a while starts from."""
    init = module.computations[loop.computation].by_name.get(loop.operands[0])
    if init is None or init.opcode != "tuple" or index >= len(init.operands):
        return None
    return init.operands[index]


def _step(body: Computation, index: int) -> int | None:
    """The constant a loop body adds to its tuple element ``index``."""
    root = body.root
    if root.opcode != "tuple" or index >= len(root.operands):
        return None
    add = _through_copies(body, root.operands[index])
    if add is None or add.opcode != "add" or len(add.operands) != 2:
        return None
    a, b = add.operands
    for counter, constant in ((a, b), (b, a)):
        if _tuple_index(body, counter) == index:
            return _constant(body, constant)
    return None


def _parse_instruction(name: str, body: str, computation: str, is_root: bool) -> Instruction:
    shape, rest = _parse_shape_prefix(body)
    rest = rest.lstrip()
    m = re.match(r"([\w\-]+)\(", rest)
    if not m:
        raise ValueError(f"cannot parse instruction {name}: {body[:80]!r}")
    opcode = m.group(1)
    close = _matching(rest, m.end() - 1)
    operand_text = rest[m.end():close]
    operands = [t.strip().lstrip("%") for t in _split_top(operand_text) if t.strip().startswith("%")]
    attrs = {}
    for item in _split_top(rest[close + 1:].lstrip(", ")):
        key, sep, value = item.partition("=")
        if sep:
            attrs[key.strip()] = value.strip()
    return Instruction(name, opcode, shape, operands, attrs, computation, is_root, operand_text.strip())


def _matching(text: str, open_index: int) -> int:
    depth, in_string = 0, False
    for i in range(open_index, len(text)):
        c = text[i]
        if in_string:
            if c == "\\":
                continue
            if c == '"' and text[i - 1] != "\\":
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


_SPECIAL = re.compile(r'[(){}\[\]",]')


def _split_top(text: str) -> list[str]:
    """Split on commas that are not nested in brackets or strings."""
    if "," not in text:
        return [text] if text.strip() else []
    parts, depth, in_string, start = [], 0, False, 0
    for m in _SPECIAL.finditer(text):  # only the characters that matter: long attribute values are skipped
        c, i = m.group(), m.start()
        if in_string:
            if c == '"' and text[i - 1] != "\\":
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:])
    return parts


# ----------------------------------------------------------------------------- loops


@dataclasses.dataclass(frozen=True)
class Loop:
    """One ``while`` of the schedule: its body, trip count and loop-carried state."""

    name: str
    computation: str  # where the while sits
    body: str
    trips: int | None
    carried: int  # elements of the loop-carried tuple
    carried_device_bytes: int  # of them in HBM: what the loop keeps alive on the device across iterations
    carried_host_bytes: int  # in pinned host memory (S(5)): the offloaded stacks


def loops(module: HloModule) -> list[Loop]:
    """Every scheduled ``while``, in module order."""
    out = []
    for instr in module.scheduled():
        if instr.opcode != "while":
            continue
        arrays = flatten_shape(instr.shape)
        elements = len(instr.shape.elements) if isinstance(instr.shape, TupleShape) else 1
        out.append(Loop(instr.name, instr.computation, instr.attrs.get("body", "").lstrip("%"), instr.trip_count,
                        elements, sum(a.bytes for a in arrays if not a.on_host),
                        sum(a.bytes for a in arrays if a.on_host)))
    return out


# ----------------------------------------------------------------------------- host offload


ENGINES = ("copy_engine", "kernel", "dma")
ENGINE_NAMES = {"copy_engine": "copy engine (DMA)", "kernel": "SM kernel (zero-copy)", "dma": "TPU DMA"}
# Why each engine: the XLA source the classification rests on (file:line in the research notes named)
ENGINE_SOURCES = {
    "copy_engine": "XLA:GPU runs a slice fusion carrying a memcpy descriptor (dynamic_slice_config) as a memcpy: "
                   "at jaxlib 0.10.2 a kCustom dynamic-slice fusion (docs/research/46231-workaround-transfers.md); "
                   "at 0.12 a kLoop one that thunk_emitter.cc's EmitFusion matches (AnalyzeDynamicSliceCopyFusion) "
                   "and runs as a DeviceToDeviceCopyThunk, cuMemcpyDtoDAsync on the memcpy_d2h/h2d streams "
                   "(docs/research/xla-0.12-host-transfers.md)",
    "kernel": "a kLoop slice fusion with no memcpy descriptor is a generated kernel whose threads move the bytes "
              "over the link from the SMs (docs/research/46231-workaround-transfers.md)",
    "dma": "XLA:TPU's async dynamic-(update-)slice-start: the TPU's DMA engines",
}


@dataclasses.dataclass(frozen=True)
class HostTransfer:
    """One instruction that moves bytes between device HBM and pinned host memory.

    ``engine`` says what moves them (``transfer_engine``, ``ENGINE_SOURCES``): ``copy_engine`` — a DMA copy (a
    ``copy-start``, or XLA:GPU's dynamic-slice fusion with a memcpy descriptor: ``kCustom`` at jaxlib 0.10.2,
    ``kLoop`` with a ``dynamic_slice_config`` at 0.12); ``kernel`` — a generated kernel (a ``kLoop`` fusion
    without a descriptor) whose threads read or write the pinned host memory over the
    link themselves, on SMs (what ``--xla_disable_hlo_passes=dynamic-slice-annotator``, the lab's #46231
    workaround, turns XLA:GPU's offloaded scan residuals into); ``dma`` — XLA:TPU's native async
    ``dynamic-(update-)slice-start`` (the TPU's DMA engines).
    """

    name: str
    kind: str  # copy | dynamic-update-slice | dynamic-slice | other
    direction: str  # d2h | h2d
    is_async: bool
    bytes_per_execution: int
    executions: int
    computation: str
    engine: str = "copy_engine"

    @property
    def bytes_per_step(self) -> int:
        return self.bytes_per_execution * self.executions

    def describe(self) -> str:
        mode = "async" if self.is_async else "sync"
        arrow = "device -> host" if self.direction == "d2h" else "host -> device"
        return (f"{arrow}  {self.kind:20} {mode:5}  {self.bytes_per_execution / 2**20:9.2f} MiB x "
                f"{self.executions:4} runs = {self.bytes_per_step / 2**20:10.2f} MiB/step  ({self.name} in {self.computation})")


@dataclasses.dataclass(frozen=True)
class OffloadSummary:
    """What the scheduled module does with pinned host memory."""

    host_buffers: int  # S(5) buffers: allocated ones, host copies, host-resident entry parameters
    transfers: tuple[HostTransfer, ...]
    checks: Any = None  # companion.descriptors.DescriptorChecks, filled in by the compiler

    def count(self, direction: str, kind: str | None = None, is_async: bool | None = None) -> int:
        return sum(1 for t in self.transfers if t.direction == direction
                   and (kind is None or t.kind == kind) and (is_async is None or t.is_async == is_async))

    @property
    def d2h_ops(self) -> int:
        return self.count("d2h")

    @property
    def h2d_ops(self) -> int:
        return self.count("h2d")

    @property
    def async_pairs(self) -> int:
        return sum(1 for t in self.transfers if t.is_async)

    @property
    def d2h_bytes_per_step(self) -> int:
        return sum(t.bytes_per_step for t in self.transfers if t.direction == "d2h")

    @property
    def h2d_bytes_per_step(self) -> int:
        return sum(t.bytes_per_step for t in self.transfers if t.direction == "h2d")

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(f"{t.direction} {t.kind}{' async' if t.is_async else ''}" for t in self.transfers))

    def bytes_by_engine(self) -> dict[str, dict[str, int]]:
        """Bytes per step each way, by what moves them (``HostTransfer.engine``): {engine: {d2h, h2d}}."""
        out: dict[str, dict[str, int]] = {}
        for t in self.transfers:
            out.setdefault(t.engine, {"d2h": 0, "h2d": 0})[t.direction] += t.bytes_per_step
        return out

    @property
    def kernel_transfers(self) -> int:
        """Transfers a generated kernel makes on the SMs (``engine == "kernel"``)."""
        return sum(1 for t in self.transfers if t.engine == "kernel")

    def engines(self) -> str:
        """One line: transfers and GiB each way per engine."""
        if not self.transfers:
            return "no host transfers"
        counts = Counter(t.engine for t in self.transfers)
        return "; ".join(f"{counts[e]} by {ENGINE_NAMES[e]} ({b['d2h'] / 2**30:.3f} GiB out, {b['h2d'] / 2**30:.3f} "
                         "GiB back)" for e, b in sorted(self.bytes_by_engine().items()))

    def to_dict(self) -> dict:
        return {
            "host_buffers": self.host_buffers,
            "d2h_ops": self.d2h_ops,
            "h2d_ops": self.h2d_ops,
            "async_pairs": self.async_pairs,
            "d2h_bytes_per_step": self.d2h_bytes_per_step,
            "h2d_bytes_per_step": self.h2d_bytes_per_step,
            "by_kind": self.by_kind(),
            "bytes_by_engine": self.bytes_by_engine(),
        }


def wrapped_root(module: HloModule, instr: Instruction) -> Instruction | None:
    """The root of the first computation ``instr`` calls (what an ``async-start`` or a fusion wraps)."""
    for callee in instr.called:
        comp = module.computations.get(callee)
        if comp is not None:
            return comp.root
    return None


def _wrapped_root_opcode(module: HloModule, instr: Instruction) -> str:
    root = wrapped_root(module, instr)
    return root.opcode if root is not None else ""


def collective_opcode(module: HloModule, instr: Instruction) -> str:
    """``all-gather`` etc. for a collective (sync, ``*-start``, or an ``async-start`` wrapping one);
    "" for anything else (``*-done`` included)."""
    base = _wrapped_root_opcode(module, instr) if instr.opcode == "async-start" else instr.opcode.removesuffix("-start")
    return base if base in COLLECTIVE_OPCODES else ""


def _start_parts(instr: Instruction) -> tuple[list[ArrayShape], ArrayShape | None]:
    """(sources, destination) of an async start: ``((operands...), output, context)``."""
    shape = instr.shape
    if isinstance(shape, TupleShape) and len(shape.elements) >= 2:
        operands, output = shape.elements[0], shape.elements[1]
        if instr.opcode == "copy-start":  # (destination, source, context)
            return flatten_shape(output), flatten_shape(operands)[0]
        out = flatten_shape(output)
        return flatten_shape(operands), out[0] if out else None
    arrays = flatten_shape(shape)
    return [], arrays[0] if arrays else None


def offload_summary(module: HloModule) -> OffloadSummary:
    """Find every device<->host transfer of the schedule, with bytes and execution counts."""
    transfers = []
    host_buffers = sum(1 for i in module.computations[module.entry].instructions
                       if i.opcode == "parameter" and any(a.on_host for a in flatten_shape(i.shape)))
    for instr in module.scheduled():
        if instr.opcode.endswith("-done") or instr.opcode in ("parameter", "get-tuple-element", "tuple",
                                                               "bitcast", "while", "call", "conditional"):
            continue
        operand_shapes = [a for s in module.operand_shapes(instr) for a in flatten_shape(s)]
        if instr.opcode.endswith("-start"):
            sources, dest = _start_parts(instr)
            is_async = True
        else:
            sources, dest = operand_shapes, (flatten_shape(instr.shape) or [None])[0]
            is_async = False
        if dest is None:
            continue
        kind = _transfer_kind(module, instr)
        if dest.on_host:
            if kind in ("allocate", "copy"):  # a new S(5) buffer; a dynamic-update-slice writes into one
                host_buffers += 1
            if kind == "allocate":
                continue
            device_sources = [s for s in sources if not s.on_host and s.dims]
            if not device_sources:
                continue
            moved = (device_sources[0].bytes if kind == "dynamic-update-slice"
                     else dest.bytes if kind == "copy" else sum(s.bytes for s in device_sources))
            transfers.append(HostTransfer(instr.name, kind, "d2h", is_async, moved,
                                          module.executions(instr), instr.computation, transfer_engine(instr, module)))
        elif any(s.on_host for s in sources) and kind != "allocate":
            transfers.append(HostTransfer(instr.name, kind, "h2d", is_async, dest.bytes,
                                          module.executions(instr), instr.computation, transfer_engine(instr, module)))
    return OffloadSummary(host_buffers, tuple(transfers))


def transfer_engine(instr: Instruction, module: "HloModule | None" = None) -> str:
    """What moves a host transfer's bytes (see ``HostTransfer.engine``): a DMA copy, a generated kernel on the
    SMs, or XLA:TPU's DMA engines."""
    if instr.opcode in ("copy-start", "copy"):
        return "copy_engine"
    if instr.opcode in ("dynamic-slice-start", "dynamic-update-slice-start"):
        return "dma"
    if instr.opcode in ("fusion", "fusion-start"):
        if instr.attrs.get("kind") == "kCustom":  # jaxlib 0.10.2: the dynamic-slice memcpy fusion
            return "copy_engine"
        # jaxlib 0.12: the fusion stays kLoop; a wrapped slice with a memcpy descriptor (dynamic_slice_config)
        # becomes a DynamicSliceFusion thunk around a memcpy at thunk emission (the thunk_sequence dump shows it)
        root = wrapped_root(module, instr) if module is not None else None
        if root is not None and root.opcode in ("dynamic-slice", "dynamic-update-slice") \
                and root.backend_config.get("dynamic_slice_config"):
            return "copy_engine"
        return "kernel"
    return "kernel"  # an unfused dynamic-(update-)slice is a generated kernel too


def _opcodes_within(module: HloModule, callees: list[str], seen: set | None = None) -> set[str]:
    seen = set() if seen is None else seen
    found = set()
    for name in callees:
        if name in seen or name not in module.computations:
            continue
        seen.add(name)
        for i in module.computations[name].instructions:
            found.add(i.opcode)
            found |= _opcodes_within(module, i.called, seen)
    return found


def _transfer_kind(module: HloModule, instr: Instruction) -> str:
    if instr.opcode in ("copy-start", "copy"):
        return "copy"
    if instr.opcode == "custom-call" and instr.custom_call_target == "AllocateBuffer":
        return "allocate"
    if instr.opcode in ("dynamic-update-slice", "dynamic-slice"):
        return instr.opcode
    inner = _opcodes_within(module, instr.called)  # nested: dumps wrap the fusion in an async computation
    for kind in ("dynamic-update-slice", "dynamic-slice", "copy"):
        if kind in inner:
            return kind
    return _wrapped_root_opcode(module, instr) or instr.opcode


# ----------------------------------------------------------------------------- collectives


@dataclasses.dataclass(frozen=True)
class CollectiveSummary:
    counts: dict[str, int]  # opcode -> instructions in the schedule
    bytes_per_step: dict[str, int]  # opcode -> result bytes times executions

    def to_dict(self) -> dict:
        return {"counts": dict(self.counts), "bytes_per_step": dict(self.bytes_per_step)}


def collective_summary(module: HloModule) -> CollectiveSummary:
    """Count each collective once (its sync op or its ``-start``), with bytes moved per step."""
    counts: Counter = Counter()
    moved: Counter = Counter()
    for instr in module.scheduled():
        opcode, shape = instr.opcode, instr.shape
        base = collective_opcode(module, instr)
        if not base:
            continue
        if opcode == "async-start":
            shape = instr.shape.elements[1] if isinstance(instr.shape, TupleShape) else instr.shape
        elif opcode.endswith("-start") and isinstance(shape, TupleShape) and base != "all-reduce":
            shape = shape.elements[-1] if base == "collective-permute" else shape.elements[1]
        counts[base] += 1
        moved[base] += shape.bytes * module.executions(instr)
    return CollectiveSummary(dict(counts), dict(moved))


# ----------------------------------------------------------------------------- grouped GEMMs

GROUPED_GEMM_TARGET = "offload_lab_grouped_gemm"  # the stand-in custom call of ``models.grouped_gemm``
ROUTED_EXPERTS_SCOPE = "routed_experts"  # the named scope of every MoE path's expert matmuls
GROUPED_GEMM_TILE_ROWS = 128  # rows per tile of a Hopper grouped GEMM (``targets.Gpu.grouped_gemm_tile_rows``)
_FFI_ATTR = re.compile(r'(\w+)\s*=\s*(?:"([^"]*)"|(-?\d+))')


@dataclasses.dataclass(frozen=True)
class GroupedGemm:
    """One pass of the grouped-GEMM stand-in: ``[rows, k] x [experts, k, n]`` per expert (fprop;
    dgrad and wgrad are the same product's other two sides), priced as the kernel it stands for."""

    kind: str  # fprop | dgrad | wgrad
    experts: int
    k: int  # the forward's contraction
    n: int  # the forward's output width
    routed_rows: int  # rows routed to this device under balanced routing
    expected_rows: int  # rows the kernel computes on the most-loaded device (the routing assumption)
    dtype_bytes: int

    def computed_rows(self, tile: int) -> int:
        """Rows the kernel multiplies: each expert's share of ``expected_rows`` rounded up to whole
        tiles, Σ_e ceil(m_e / tile) x tile with m_e = expected_rows / experts."""
        return self.experts * math.ceil(math.ceil(self.expected_rows / self.experts) / tile) * tile

    def flops(self, tile: int) -> float:
        return 2.0 * self.computed_rows(tile) * self.k * self.n

    @property
    def hbm_bytes(self) -> int:
        """Each routed row's activations once (both sides of the pass) and each expert's weights once."""
        return (self.expected_rows * (self.k + self.n) + self.experts * self.k * self.n) * self.dtype_bytes


def grouped_gemm(module: HloModule, instr: Instruction) -> GroupedGemm | None:
    """The grouped-GEMM pass a stand-in custom call stands for (None for any other instruction)."""
    if instr.opcode != "custom-call" or instr.custom_call_target != GROUPED_GEMM_TARGET:
        return None
    attrs = {m.group(1): m.group(2) if m.group(2) is not None else int(m.group(3))
             for m in _FFI_ATTR.finditer(instr.attrs.get("backend_config", ""))}
    operands = [flatten_shape(s)[0] for s in module.operand_shapes(instr)]
    weights = flatten_shape(instr.shape)[0] if attrs.get("kind") == "wgrad" else operands[1]
    experts, k, n = weights.dims
    return GroupedGemm(str(attrs.get("kind", "")), experts, k, n, int(attrs.get("routed_rows", 0)),
                       int(attrs.get("expected_rows", 0)), DTYPE_BITS[weights.dtype] // 8)


# ----------------------------------------------------------------------------- FLOPs and bytes

_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")
_NOT_KERNELS = ("parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while", "call",
                "conditional", "after-all", "add-dependency", "opt-barrier", "partition-id", "replica-id")


def _dims(attr: str) -> list[int]:
    return [int(d) for d in attr.strip("{}").split(",") if d.strip()]


def dot_flops(module: HloModule, instr: Instruction, grouped_tile: int = GROUPED_GEMM_TILE_ROWS) -> float:
    """FLOPs of one execution of a dot, convolution, cuBLAS gemm or cuDNN attention custom call (2 per
    multiply-add); a grouped-GEMM stand-in counts the rows its kernel computes in ``grouped_tile``-row tiles."""
    grouped = grouped_gemm(module, instr)
    if grouped is not None:
        return grouped.flops(grouped_tile)
    operands = module.operand_shapes(instr)
    out = flatten_shape(instr.shape)[0] if flatten_shape(instr.shape) else None
    if out is None or not operands:
        return 0.0
    lhs = flatten_shape(operands[0])[0]
    if instr.opcode == "dot":
        contracting = math.prod(lhs.dims[d] for d in _dims(instr.attrs.get("lhs_contracting_dims", "{}")))
        return 2.0 * out.elements * contracting
    if instr.opcode == "custom-call" and instr.custom_call_target in _GEMM_TARGETS:
        numbers = instr.backend_config.get("gemm_backend_config", {}).get("dot_dimension_numbers", {})
        contracting = math.prod(lhs.dims[int(d)] for d in numbers.get("lhs_contracting_dimensions", []))
        return 2.0 * out.elements * contracting
    if instr.opcode == "custom-call" and instr.custom_call_target.startswith(CUDNN_ATTENTION):
        return cudnn_attention_flops(module, instr)
    if instr.opcode == "custom-call" and instr.custom_call_target == "tpu_custom_call":
        return pallas_attention_flops(module, instr)
    if instr.opcode == "convolution" and len(operands) > 1:
        return 2.0 * out.elements * _convolution_macs_per_output(instr, lhs, flatten_shape(operands[1])[0], out)
    return 0.0


_WINDOW_FIELD = re.compile(r"(size|stride|pad|lhs_dilate|rhs_dilate)=([\dx_\-]+)")


def _convolution_macs_per_output(instr: Instruction, lhs: ArrayShape, kernel: ArrayShape, out: ArrayShape) -> float:
    """Multiply-adds per output element of a convolution, averaged over the outputs: the kernel's input
    features (per group) times the window taps that land on real input elements.

    XLA:TPU writes the batch dimensions of a dot as spatial dimensions of a convolution whose window
    is mostly padding or dilation holes (``size=4x16 stride=3x15 lhs_dilate=4x16``, or ``size=1x16
    pad=0_0x15_15``): each output then reads one real element per such dimension, not the window's
    size. Counted tap by tap per spatial dimension (``_real_taps``)."""
    labels = instr.attrs.get("dim_labels", "")
    parts = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels)
    if not parts:
        return kernel.elements / max(1, out.dims[-1] if out.dims else 1)
    lhs_labels, kernel_labels, out_labels = parts.groups()
    macs = float(kernel.dims[kernel_labels.index("i")]) if "i" in kernel_labels else 1.0
    spatial = sorted(c for c in kernel_labels if c.isdigit())  # the window lists spatial dims 0, 1, ... in order
    fields = dict(_WINDOW_FIELD.findall(instr.attrs.get("window", "")))

    def per_dim(name: str, default: int) -> list[int]:
        return [int(v) for v in fields[name].split("x")] if name in fields else [default] * len(spatial)

    size = per_dim("size", 1)
    stride, lhs_dilate, rhs_dilate = per_dim("stride", 1), per_dim("lhs_dilate", 1), per_dim("rhs_dilate", 1)
    pads = [tuple(int(x) for x in p.split("_")) for p in fields["pad"].split("x")] if "pad" in fields else [(0, 0)] * len(spatial)
    for d, label in enumerate(spatial):
        n_in, n_out = lhs.dims[lhs_labels.index(label)], out.dims[out_labels.index(label)]
        macs *= _real_taps(size[d], stride[d], pads[d][0], lhs_dilate[d], rhs_dilate[d], n_in, n_out) / n_out
    return macs


@functools.lru_cache(maxsize=4096)
def _real_taps(size: int, stride: int, pad_low: int, lhs_dilate: int, rhs_dilate: int, n_in: int, n_out: int) -> int:
    """Window taps over all ``n_out`` outputs of one spatial dimension that read a real input element
    (not padding, not a hole of the input's dilation)."""
    last = (n_in - 1) * lhs_dilate
    taps = 0
    for o in range(n_out):
        for k in range(size):
            position = o * stride + k * rhs_dilate - pad_low
            taps += 0 <= position <= last and position % lhs_dilate == 0
    return taps


CUDNN_ATTENTION = "__cudnn$fmha"


def cudnn_attention_flops(module: HloModule, instr: Instruction) -> float:
    """Matmul FLOPs of cuDNN's fused attention (``__cudnn$fmha*`` custom calls; forward, or
    ``...Backward``): q ``[b, s, h, d]``, k ``[b, t, h_kv, d]``, v ``[b, t, h_kv, d_v]`` in JAX's
    BTNH layout. Forward: QK^T and PV; backward: QK^T recomputed, dV, dP, dQ and dK. A causal mask
    counts the s(s+1)/2 pairs at or below the diagonal (the tiles cuDNN skips are not work)."""
    operands = [flatten_shape(s)[0] for s in module.operand_shapes(instr)[:3]]
    if len(operands) < 3 or any(len(o.dims) != 4 for o in operands):
        return 0.0
    (b, s, h, d), (_, t, _, _), (_, _, _, dv) = (o.dims for o in operands)
    config = instr.backend_config.get("cudnn_fmha_backend_config", {})
    causal = config.get("mask_type", "") in ("CAUSAL", "PADDING_CAUSAL") and s == t
    pairs = s * (s + 1) / 2 if causal else s * t
    per_pair = (3 * d + 2 * dv) if instr.custom_call_target.endswith("Backward") else (d + dv)
    return 2.0 * b * h * pairs * per_pair


PALLAS_ATTENTION = re.compile(r"flash_mha_(fwd|bwd_dq|bwd_dkv)[\w=]*?block_k_major[=_](\d+)")
# matmuls per query-key pair of each Pallas TPU flash kernel (jax.experimental.pallas.ops.tpu.flash_attention):
# forward QK^T and PV; dK/dV kernel QK^T again, dV = P^T dO, dP = dO V^T, dK = dS^T Q; dQ kernel QK^T, dP, dQ = dS K
_PALLAS_MATMULS = {"fwd": 2, "bwd_dkv": 4, "bwd_dq": 3}


def pallas_kernel(instr: Instruction) -> tuple[str, int] | None:
    """(``fwd`` | ``bwd_dq`` | ``bwd_dkv``, block) of a Pallas TPU flash kernel's custom call; None for anything else."""
    if instr.opcode != "custom-call" or instr.custom_call_target != "tpu_custom_call":
        return None
    found = PALLAS_ATTENTION.search(instr.op_name)
    return (found.group(1), int(found.group(2))) if found else None


def pallas_attention_flops(module: HloModule, instr: Instruction) -> float:
    """Matmul FLOPs of one of the Pallas TPU flash kernels (``tpu_custom_call`` named ``flash_mha_*`` by
    its scope, ``models.flash.pallas_attention``): q ``[b, h, s, d]``, causal, whole ``block`` x ``block``
    tiles at or below the diagonal (the kernels skip the rest; the forward's own cost estimate counts
    the full square)."""
    kernel, operands = pallas_kernel(instr), module.operand_shapes(instr)
    if kernel is None or not operands:
        return 0.0
    q = flatten_shape(operands[0])[0]
    if len(q.dims) != 4:
        return 0.0
    b, h, s, d = q.dims
    block = min(kernel[1], s)
    blocks = s // block
    pairs = block * block * blocks * (blocks + 1) // 2
    return 2.0 * b * h * pairs * d * _PALLAS_MATMULS[kernel[0]]


def phase_of(op_name: str) -> str:
    """forward | backward | recompute | other, from JAX's op_name metadata."""
    if "rematted_computation" in op_name:
        return "recompute"
    if "transpose(jvp" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "other"


OP_CLASSES = ("matmul", "grouped_matmul", "attention", "other_compute", "copy")


def _matmul_class(instr: Instruction) -> str:
    """The class of a matmul-doing instruction: cuDNN attention, the routed experts' matmuls (the
    grouped-GEMM stand-in, and any path's matmuls under ``ROUTED_EXPERTS_SCOPE``), or a matmul."""
    if instr.opcode == "custom-call" and instr.custom_call_target.startswith(CUDNN_ATTENTION) or pallas_kernel(instr):
        return "attention"
    if instr.custom_call_target == GROUPED_GEMM_TARGET or ROUTED_EXPERTS_SCOPE in instr.op_name:
        return "grouped_matmul"
    return "matmul"


@dataclasses.dataclass(frozen=True)
class FlopSummary:
    """Matmul FLOPs per step (dots, convolutions, gemm, attention and grouped-GEMM custom calls),
    loops by trip count: what the compiled program executes."""

    total: float
    by_phase: dict[str, float]  # forward | backward | recompute | other
    exact: bool = True  # False when conditionals or loops without a known trip count were counted
    by_class: dict[str, float] = dataclasses.field(default_factory=dict)  # matmul | grouped_matmul | attention

    @property
    def recompute(self) -> float:
        return self.by_phase.get("recompute", 0.0)

    def to_dict(self) -> dict:
        return {"total": self.total, "by_phase": dict(self.by_phase), "by_class": dict(self.by_class),
                "exact": self.exact}


def flop_summary(module: HloModule, grouped_tile: int = GROUPED_GEMM_TILE_ROWS) -> FlopSummary:
    by_phase: Counter = Counter()
    by_class: Counter = Counter()
    for instr in module.instructions():
        if instr.opcode in ("dot", "convolution", "custom-call"):
            flops = dot_flops(module, instr, grouped_tile) * module.executions(instr)
            if flops:
                by_phase[phase_of(instr.op_name)] += flops
                by_class[_matmul_class(instr)] += flops
    exact = not module.conditionals and not module.unknown_trip_count_loops
    return FlopSummary(float(sum(by_phase.values())), {k: float(v) for k, v in by_phase.items()}, exact,
                       {k: float(v) for k, v in by_class.items()})


def einsum_runs(module: HloModule, einsum: str, phase: str) -> int:
    """How many times per step the program runs the matmul JAX traced as ``einsum`` (its op name, e.g. a
    router's ``bsd,de->bse``) in ``phase``: every copy XLA made of it (loop peeling, double buffering, a
    collective pipeliner's prefetch) counted with its loop's trips."""
    return sum(module.executions(i) for i in module.instructions()
               if i.opcode in ("dot", "custom-call") and f"/{einsum}/" in i.op_name and phase_of(i.op_name) == phase
               and dot_flops(module, i))


def grouped_padding_flops(module: HloModule, grouped_tile: int = GROUPED_GEMM_TILE_ROWS) -> dict[str, float]:
    """FLOPs the grouped GEMMs compute beyond their routed rows, by phase: whole tiles per expert and the
    routing assumption's most-loaded device (``GroupedGemm.computed_rows`` against ``routed_rows``) — hardware
    work that is not model work, so that hardware = model + recompute + this + a fused attention's extra."""
    out: Counter = Counter()
    for instr in module.instructions():
        g = grouped_gemm(module, instr)
        if g is not None:
            out[phase_of(instr.op_name)] += (2.0 * (g.computed_rows(grouped_tile) - g.routed_rows) * g.k * g.n
                                             * module.executions(instr))
    return {k: float(v) for k, v in out.items()}


@dataclasses.dataclass(frozen=True)
class OpCost:
    """One kernel (or transfer, or collective) of the schedule and what it does per execution."""

    name: str
    kind: str  # compute | collective | host-transfer
    flops: float
    bytes: int  # HBM bytes read and written (operands + result)
    dtype: str  # input dtype of the op's (first) matmul, for the FLOP rate; "" without matmuls
    executions: int
    computation: str
    phase: str
    op_class: str = "other_compute"  # a compute op's class (OP_CLASSES)
    grouped_kind: str = ""  # a grouped-GEMM pass: fprop | dgrad | wgrad

    @property
    def flops_per_step(self) -> float:
        return self.flops * self.executions

    @property
    def bytes_per_step(self) -> int:
        return self.bytes * self.executions


def inner_matmuls(module: HloModule, instr: Instruction,
                   grouped_tile: int) -> tuple[float, str, Instruction | None]:
    """FLOPs of the matmuls an op runs (itself, or inside the computations it fuses), their input
    dtype, and the largest of them (None without matmuls)."""
    flops, dtype, largest = dot_flops(module, instr, grouped_tile), "", None
    if flops:
        operands = module.operand_shapes(instr)
        dtype = flatten_shape(operands[0])[0].dtype if operands else ""
        largest = instr
    if instr.opcode in ("while", "call", "conditional"):
        return flops, dtype, largest
    most = flops
    for callee in instr.called:
        comp = module.computations.get(callee)
        if comp is None:
            continue
        for inner in comp.instructions:
            f, d, big = inner_matmuls(module, inner, grouped_tile)
            flops += f
            dtype = dtype or d
            if f > most:
                most, largest = f, big
    return flops, dtype, largest


def _is_copy(module: HloModule, instr: Instruction) -> bool:
    """A device copy: ``copy``/``copy-start``, or a fusion whose root is one (layout changes, moves)."""
    return instr.opcode in ("copy", "copy-start") or (instr.opcode == "fusion"
                                                      and _wrapped_root_opcode(module, instr) == "copy")


def op_costs(module: HloModule, host_transfers: set[str] | None = None,
             grouped_tile: int = GROUPED_GEMM_TILE_ROWS, platform: str = "gpu") -> list[OpCost]:
    """Every scheduled op with its matmul FLOPs and HBM bytes per execution (roofline inputs) and
    its class; ``host_transfers``: the names of ``offload_summary(module)``'s transfers, when
    known; ``grouped_tile``: the rows per tile of the GPU's grouped GEMM; ``platform``: whose bytes rules
    (``_hbm_bytes``) apply."""
    costs = []
    if host_transfers is None:
        host_transfers = {t.name for t in offload_summary(module).transfers}
    for instr in module.scheduled():
        if instr.opcode in _NOT_KERNELS or instr.opcode.endswith("-done"):
            continue
        if instr.name in host_transfers:
            kind = "host-transfer"
        elif collective_opcode(module, instr):
            kind = "collective"
        else:
            kind = "compute"
        flops, dtype, largest = inner_matmuls(module, instr, grouped_tile)
        grouped = grouped_gemm(module, instr)
        moved = grouped.hbm_bytes if grouped is not None else _hbm_bytes(module, instr, platform)
        op_class = (_matmul_class(largest) if largest is not None
                    else "copy" if _is_copy(module, instr) else "other_compute")
        # a fusion's metadata is its root's; an op with matmuls belongs to its largest matmul's phase
        # (a recomputed projection fused into a backward op is recompute), any other op to its own
        phase = phase_of(largest.op_name if largest is not None else instr.op_name)
        costs.append(OpCost(instr.name, kind, flops, moved, dtype, module.executions(instr), instr.computation,
                            phase, op_class, grouped.kind if grouped is not None else ""))
    return costs


_IN_PLACE = ("slice", "dynamic-slice", "dynamic-update-slice", "scatter")  # ops that touch part of operand 0
TPU_VMEM_SPACE = 1  # S(1) in XLA:TPU's layouts: the TensorCore's vector memory, on the chip (S(5): pinned host)


def _nested_read(module: HloModule, comp: Computation, index: int, full: int) -> int:
    """Bytes a fusion nested in a fusion reads of its parameter ``index`` (``full`` bytes): the slices
    where its computation only slices that parameter, else all of it."""
    param = next((i for i in comp.instructions if i.opcode == "parameter" and i.operand_text == str(index)), None)
    if param is None:
        return full
    uses = [i for i in comp.instructions if param.name in i.operands]
    if uses and all(u.opcode in ("slice", "dynamic-slice") and u.operands[0] == param.name for u in uses):
        return min(full, sum(u.shape.bytes for u in uses))
    return full


def _fused_read(module: HloModule, comp: Computation, value: str, use: Instruction, full: int,
                users: dict[str, list[Instruction]]) -> int | None:
    """Bytes a fused computation ``comp`` reads of ``value`` (``full`` bytes) through ``use``, a fusion
    nested in it: what the nested computation slices of it; or, where the nested fusion is elementwise over
    ``value`` and its result is only sliced, that share of ``value`` (the fused code computes only the
    elements the slices take). None where neither holds (priced whole)."""
    nested = module.computations.get(use.called[0]) if use.called else None
    if nested is None:
        return None
    read = sum(_nested_read(module, nested, k, full) for k, o in enumerate(use.operands) if o == value)
    if read < full:
        return read
    if not _elementwise(comp, value, use):
        return None
    after = users.get(use.name, [])
    if not after or not all(u.opcode in ("slice", "dynamic-slice") and u.operands[0] == use.name for u in after):
        return None
    return min(full, int(full * sum(math.prod(u.shape.dims) for u in after) / math.prod(use.shape.dims)))


def _elementwise(comp: Computation, value: str, use: Instruction) -> bool:
    """``use`` (a nested fusion) has one array result with as many elements as ``value``."""
    if isinstance(use.shape, TupleShape) or isinstance(comp.by_name[value].shape, TupleShape):
        return False
    return math.prod(use.shape.dims) == math.prod(comp.by_name[value].shape.dims)


def _updated_in_place(comp: Computation, value: str, use: Instruction, users: dict[str, list[Instruction]]) -> list:
    """The dynamic-update-slices that update ``use`` (an elementwise nested fusion of ``value``, a layout
    change) in place, where those are its only users; else []."""
    after = users.get(use.name, [])
    if _elementwise(comp, value, use) and after and all(
            u.opcode == "dynamic-update-slice" and u.operands[0] == use.name for u in after):
        return after
    return []


def _hbm_bytes(module: HloModule, instr: Instruction, platform: str = "gpu") -> int:
    """HBM bytes an op reads and writes: its device operands and result, except that a buffer it
    only slices (slice, dynamic-slice) or updates in place (dynamic-update-slice; a scatter, whose
    operand XLA's GPU emitter updates in its output buffer) costs just the slice, or the scattered rows
    read and written. On a TPU also: buffers in the cores' VMEM (``TPU_VMEM_SPACE``) cost nothing, and a
    buffer read only inside fusions nested in the op costs what they read of it (``_fused_read``), an async
    ``slice-start`` the slice it reads, or
    nothing where a nested layout change of it is updated in place (``_updated_in_place``): XLA:TPU nests
    fusions, and its traces show the blockwise attention's fusions running at the bytes they slice, not at
    their operands' (benchmarks/bench_tpu_simulation.py). On a GPU these rules are not applied:
    no GPU measurement has tested them yet, and the stored GPU results stand as they were priced."""
    tpu = platform == "tpu"

    def in_hbm(a) -> bool:
        return not a.on_host and not (tpu and a.memory_space == TPU_VMEM_SPACE)

    if tpu and instr.opcode == "slice-start" and isinstance(instr.shape, TupleShape) and len(instr.shape.elements) > 1:
        return instr.shape.elements[1].bytes  # an async slice reads the slice it makes (into VMEM, or HBM)
    operands = module.operand_shapes(instr)
    sizes = [sum(a.bytes for a in flatten_shape(s) if in_hbm(a)) for s in operands]
    result = 0 if instr.opcode.endswith("-start") else sum(a.bytes for a in flatten_shape(instr.shape) if in_hbm(a))
    comp = module.computations.get(instr.called[0]) if instr.opcode == "fusion" and instr.called else None
    if comp is None:
        return sum(sizes) + result
    params = {i.name: int(i.operand_text) for i in comp.instructions
              if i.opcode == "parameter" and i.operand_text.isdigit()}
    users: dict[str, list[Instruction]] = defaultdict(list)
    for i in comp.instructions:
        for o in i.operands:
            users[o].append(i)
    def final_uses(value: str) -> list[tuple[str, Instruction]]:  # looking through bitcasts
        out = []
        for u in users.get(value, []):
            out += final_uses(u.name) if u.opcode == "bitcast" else [(value, u)]
        return out

    for name, index in params.items():
        pairs = final_uses(name)
        uses = [u for _, u in pairs]
        if tpu and uses and 0 <= index < len(sizes) and all(u.opcode == "fusion" for u in uses):  # nested fusions
            reads = []
            for v, u in pairs:
                updates = _updated_in_place(comp, v, u, users)
                reads.append(0 if updates else _fused_read(module, comp, v, u, sizes[index], users))
                for update in (x for x in updates if x.is_root):  # as the output only the update is written
                    written = comp.by_name.get(update.operands[1])
                    result -= update.shape.bytes - (written.shape.bytes if written is not None else 0)
            if all(r is not None for r in reads):
                sizes[index] = min(sizes[index], sum(reads))
            continue
        if uses and 0 <= index < len(sizes) and all(u.opcode in _IN_PLACE and u.operands and u.operands[0] == v
                                                   for v, u in pairs):
            sliced = 0
            for u in uses:
                if u.opcode in ("slice", "dynamic-slice"):
                    sliced += u.shape.bytes
                elif u.opcode == "dynamic-update-slice":  # not read; as the output only the update is written
                    update = comp.by_name.get(u.operands[1])
                    if u.is_root:
                        result -= u.shape.bytes - (update.shape.bytes if update is not None else 0)
                elif len(u.operands) == 3 and not isinstance(u.shape, TupleShape):  # scatter: rows read and written
                    update = comp.by_name.get(u.operands[2])
                    touched = update.shape.bytes if update is not None and not isinstance(update.shape, TupleShape) else 0
                    sliced += touched
                    if u.is_root:
                        result -= u.shape.bytes - touched
                else:  # a variadic scatter: priced whole
                    sliced += sizes[index]
            sizes[index] = sliced
    return sum(sizes) + max(result, 0)
