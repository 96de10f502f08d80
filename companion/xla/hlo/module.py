"""An HLO module parsed: instructions, computations, execution counts, while loops and their trip counts."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter, defaultdict
from functools import cached_property

from .shapes import Shape, TupleShape, _CALLING_ATTRS, _parse_shape_prefix, flatten_shape


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
