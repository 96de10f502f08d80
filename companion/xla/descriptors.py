"""Check the memcpy descriptors XLA writes for sliced host transfers in loops (openxla/xla #46231).

A scanned layer stack that offloads its residuals writes each layer's slice into a stacked
``[L, ...]`` host buffer with a ``dynamic-update-slice`` (forward loop) and reads it back with a
``dynamic-slice`` at index ``L-1-i`` (backward loop). XLA:GPU turns these into memcpys whose
addresses it precomputes per loop iteration: the fused slice carries
``"dynamic_slice_config":{"loop_index", "byte_offset", "byte_stride"}``, and iteration ``k``
copies at ``byte_offset + k x byte_stride``.

In the XLA that jaxlib 0.10.2 pins, a slice wrapped in an async computation (how host transfers
are made asynchronous) gets the descriptor of index ``i`` whatever index it is fed: ``byte_offset
0`` and a positive stride for the reversed ``L-1-i``. On a GPU the backward pass then reads layer
``i``'s activations for layer ``L-1-i``: silently wrong gradients, with correct-looking memory
figures. Fixed upstream by openxla/xla #46308 (2026-07-28), after jaxlib 0.10.2's XLA.

Measured on jaxlib 0.10.2 compiles: with MaxText's double-buffered loops the forward *writes* go
wrong too (a body holding layers 2k and 2k+1 needs a two-slot stride and gets one); reversing the
scan moves the bug to the other direction; scanning with ``unroll=2`` and offload stops XLA with an
INTERNAL error. ``--xla_disable_hlo_passes=dynamic-slice-annotator`` leaves every slice without a
descriptor (its kernel reads the index at run time; transfers stay async, memory is unchanged):
the lab's default workaround (``flags.resolve``).

``check(module)`` recomputes what each descriptor should be: it follows every index operand of
every slice carrying a descriptor out to the loop body that feeds it, evaluates that scalar
expression for each iteration from the loop's induction variable (and any other loop-carried
counter XLA annotated), clamps it the way ``dynamic-slice`` does, and turns it into bytes with the
buffer's layout. A descriptor that disagrees with the index at any iteration is wrong. Pure
Python over the scheduled HLO text: it needs no GPU, and device-memory slices (which XLA gets
right) serve as the check's own control group.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from . import hlo

FIX = "openxla/xla #46308"
BUG = "openxla/xla #46231"


class _NotEvaluable(Exception):
    """The index is not a scalar expression of loop counters and constants that this checker reads."""


@dataclasses.dataclass(frozen=True)
class DescriptorCheck:
    """One slice with a memcpy descriptor: what XLA wrote against what its index computes."""

    name: str  # the dynamic-slice or dynamic-update-slice carrying the descriptor
    opcode: str
    loop: str  # the while loop it runs in ("" outside loops)
    direction: str  # h2d (slice read from host) | d2h (update written to host) | device
    trips: int
    descriptor: tuple[int, int] | None  # (byte_offset, byte_stride) as XLA wrote them; None: no descriptor
    expected: tuple[int, ...] | None  # byte offset per iteration, from the index; None: not evaluated
    reason: str = ""  # why the index was not evaluated

    @property
    def host(self) -> bool:
        return self.direction != "device"

    @property
    def described(self) -> tuple[int, ...] | None:
        if self.descriptor is None:
            return None
        offset, stride = self.descriptor
        return tuple(offset + k * stride for k in range(self.trips))

    @property
    def ok(self) -> bool | None:
        """True: right (or no descriptor, so the kernel reads the index at run time); False: wrong;
        None: the index could not be evaluated."""
        if self.descriptor is None:
            return True
        return None if self.expected is None else self.expected == self.described

    @property
    def expected_descriptor(self) -> tuple[int, int] | None:
        """(byte_offset, byte_stride) that would be right, when the offsets are affine in the iteration."""
        e = self.expected
        if not e:
            return None
        stride = e[1] - e[0] if len(e) > 1 else 0
        return (e[0], stride) if all(e[k] == e[0] + k * stride for k in range(len(e))) else None

    def describe(self) -> str:
        verdict = {True: "ok", False: "WRONG", None: "not checked"}[self.ok]
        if self.descriptor is None:
            return f"{verdict:11} {self.direction:6} {self.name} in {self.loop}: no descriptor (index read at run time)"
        offset, stride = self.descriptor
        text = f"{verdict:11} {self.direction:6} {self.name} in {self.loop}: descriptor offset {offset:,} stride {stride:,}"
        if self.ok is False:
            right = self.expected_descriptor
            text += (f"; the index needs offset {right[0]:,} stride {right[1]:,}" if right
                     else f"; the index gives offsets {list(self.expected)}")
        elif self.ok is None:
            text += f" ({self.reason})"
        return text

    def to_dict(self) -> dict:
        offset, stride = self.descriptor or (None, None)
        return {"name": self.name, "opcode": self.opcode, "loop": self.loop, "direction": self.direction,
                "trips": self.trips, "byte_offset": offset, "byte_stride": stride,
                "expected": self.expected_descriptor, "ok": self.ok}


@dataclasses.dataclass(frozen=True)
class DescriptorChecks:
    """Every descriptor of a module, and the verdict on its host transfers."""

    checks: tuple[DescriptorCheck, ...]

    @property
    def host(self) -> tuple[DescriptorCheck, ...]:
        return tuple(c for c in self.checks if c.host)

    @property
    def wrong(self) -> tuple[DescriptorCheck, ...]:
        return tuple(c for c in self.host if c.ok is False)

    @property
    def runtime_indexed(self) -> tuple[DescriptorCheck, ...]:
        """Sliced host transfers without a descriptor: their kernel reads the index at run time."""
        return tuple(c for c in self.host if c.descriptor is None)

    @property
    def verdict(self) -> str:
        """``wrong`` (a host transfer's descriptor disagrees with its index), ``ok`` (every sliced
        host transfer in a loop has a right descriptor or none), ``unchecked`` (some could not be
        evaluated, none wrong) or ``none`` (no sliced host transfer in a loop)."""
        host = self.host
        if not host:
            return "none"
        if self.wrong:
            return "wrong"
        return "ok" if all(c.ok for c in host) else "unchecked"

    def warning(self) -> str | None:
        """One line for reports and notebooks when a host transfer's descriptor is wrong."""
        if self.verdict != "wrong":
            return None
        kinds = sorted({c.direction for c in self.wrong})
        return (f"{len(self.wrong)} sliced host transfer(s) ({'/'.join(kinds)}) carry a memcpy descriptor that "
                f"disagrees with their loop index ({BUG}, fixed by {FIX}, after jaxlib 0.10.2's XLA): on a GPU "
                "they copy the wrong layer's activations, so gradients are silently wrong")

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "host_checked": len(self.host), "host_wrong": len(self.wrong),
                "host_without_descriptor": len(self.runtime_indexed),
                "device_checked": len(self.checks) - len(self.host),
                "device_wrong": sum(1 for c in self.checks if not c.host and c.ok is False),
                "warning": self.warning(), "wrong": [c.to_dict() for c in self.wrong]}


def check(module: hlo.HloModule) -> DescriptorChecks:
    """Check every ``dynamic_slice_config`` of a scheduled module (see the module docstring)."""
    callers: dict[str, list[hlo.Instruction]] = defaultdict(list)
    loops: dict[str, hlo.Instruction] = {}
    for instr in module.instructions():
        for callee in instr.called:
            callers[callee].append(instr)
        if instr.opcode == "while":
            loops[instr.attrs.get("body", "").lstrip("%")] = instr
    checks = []
    for instr in module.instructions():
        if instr.opcode not in ("dynamic-slice", "dynamic-update-slice"):
            continue
        check_ = _check_one(module, instr, instr.backend_config.get("dynamic_slice_config"), callers, loops)
        if check_ is not None:
            checks.append(check_)
    return DescriptorChecks(tuple(checks))


def _check_one(module, instr, config, callers, loops) -> DescriptorCheck | None:
    """The check of one slice with a descriptor, or of a sliced host transfer in a loop without one."""
    comp = module.computations[instr.computation]
    operands = [comp.by_name[o] for o in instr.operands]
    buffer = hlo.flatten_shape(operands[0].shape)[0]
    if instr.opcode == "dynamic-slice":
        window, first_index = hlo.flatten_shape(instr.shape)[0].dims, 1
        direction = "h2d" if buffer.on_host else "device"
    else:
        window, first_index = hlo.flatten_shape(operands[1].shape)[0].dims, 2
        direction = "d2h" if buffer.on_host or hlo.flatten_shape(instr.shape)[0].on_host else "device"
    loop, body, chain = _enclosing_loop(module, instr.computation, callers, loops)
    if not config:
        if direction == "device" or loop is None:
            return None
        return DescriptorCheck(instr.name, instr.opcode, loop.name, direction, loop.trip_count or 0, None, None,
                               "no descriptor")
    # jaxlib 0.12 nests the affine descriptor: {"loop_index", "byte_offset": "0", "byte_stride": "0",
    # "linear": {"byte_offset", "byte_stride"}} (the top-level pair stays, zeroed); 0.10.2 had the pair only.
    linear = config.get("linear") if isinstance(config.get("linear"), dict) else config
    descriptor = (int(linear.get("byte_offset", 0)), int(linear.get("byte_stride", 0)))
    trips = loop.trip_count or 0 if loop is not None else 1  # outside a loop: one copy at a constant index
    counters = _loop_counters(loop) if loop is not None else {}
    try:
        scope = _Scope(module, body, dict(chain), counters)
        per_dim = [[scope.value(comp, operand, k, {}) for operand in operands[first_index:]] for k in range(trips)]
    except _NotEvaluable as err:
        return DescriptorCheck(instr.name, instr.opcode, loop.name if loop else "", direction, trips, descriptor,
                               None, str(err))
    strides = buffer.byte_strides
    expected = []
    for indices in per_dim:
        offset = 0
        for d, index in enumerate(indices):
            offset += min(max(index, 0), buffer.dims[d] - window[d]) * strides[d]  # dynamic-slice clamps
        expected.append(offset)
    return DescriptorCheck(instr.name, instr.opcode, loop.name if loop else "", direction, trips, descriptor,
                           tuple(expected))


def _enclosing_loop(module, computation, callers, loops):
    """(while instruction, body name, [(computation, the instruction calling it), ...] from the body
    down to ``computation``) for the innermost loop whose body runs ``computation``; outside any
    loop, (None, the outermost computation, the chain from it)."""
    chain, current, seen = [], computation, set()
    while current not in loops:
        if current in seen or not callers.get(current):  # reached the entry: not in a loop
            return None, current, [(callee, caller) for caller, callee in reversed(chain)]
        seen.add(current)
        caller = callers[current][0]
        chain.append((caller, current))
        current = caller.computation
    return loops[current], current, [(callee, caller) for caller, callee in reversed(chain)]


def _loop_counters(loop: hlo.Instruction) -> dict[int, tuple[int, int]]:
    """Loop-tuple index -> (init, step) of every counter XLA annotated on the while loop."""
    config = loop.backend_config
    counters = {}
    induction = config.get("known_induction_variable", {}).get("tuple_index")
    init_step = config.get("known_init_step", {})
    if induction is not None and init_step:
        counters[int(induction)] = (int(init_step.get("init", 0)), int(init_step.get("step", 1)))
    for variable in config.get("dynamic_variables", []):
        counters[int(variable["tuple_index"])] = (int(variable.get("init", 0)), int(variable.get("step", 1)))
    return counters


_BINARY = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "maximum": max, "minimum": min,
    "divide": lambda a, b: int(a / b) if b else 0, "remainder": lambda a, b: a - b * int(a / b) if b else 0,
}
_COMPARE = {"LT": lambda a, b: a < b, "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b,
            "GE": lambda a, b: a >= b, "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b}


@dataclasses.dataclass(frozen=True)
class _Scope:
    """Evaluates scalar integer expressions at a loop iteration: constants, loop counters,
    arithmetic, fusions, and parameters of the computations between the loop body and the slice."""

    module: hlo.HloModule
    body: str
    callers: dict  # computation -> the instruction (fusion, async-start, call) that calls it
    counters: dict  # loop-tuple index -> (init, step)

    def value(self, comp, instr, k: int, args: dict) -> int:
        def operand(i: int) -> int:
            return self.value(comp, comp.by_name[instr.operands[i]], k, args)

        op = instr.opcode
        if op == "constant":
            try:
                return int(instr.operand_text.replace("true", "1").replace("false", "0"))
            except ValueError:
                raise _NotEvaluable(f"constant {instr.name} is not a scalar integer") from None
        if op == "parameter":
            index = int(instr.operand_text)
            if comp.name in args:
                return args[comp.name][index]
            caller = self.callers.get(comp.name)
            if caller is None or index >= len(caller.operands):
                raise _NotEvaluable(f"parameter {instr.name} of {comp.name}")
            outer = self.module.computations[caller.computation]
            return self.value(outer, outer.by_name[caller.operands[index]], k, args)
        if op == "get-tuple-element":
            source = comp.by_name.get(instr.operands[0])
            index = int(instr.attrs.get("index", -1))
            if comp.name == self.body and source is not None and source.opcode == "parameter" and index in self.counters:
                init, step = self.counters[index]
                return init + k * step
            raise _NotEvaluable(f"{instr.name} reads loop-tuple element {index}, not a counter XLA annotated")
        if op in _BINARY:
            return _BINARY[op](operand(0), operand(1))
        if op == "negate":
            return -operand(0)
        if op == "clamp":
            low, value, high = operand(0), operand(1), operand(2)
            return min(max(value, low), high)
        if op == "select":
            return operand(1) if operand(0) else operand(2)
        if op == "compare":
            direction = instr.attrs.get("direction", "")
            if direction not in _COMPARE:
                raise _NotEvaluable(f"compare {instr.name} with direction {direction!r}")
            return int(_COMPARE[direction](operand(0), operand(1)))
        if op in ("convert", "bitcast", "copy", "reshape", "broadcast", "bitcast-convert") and instr.operands:
            return operand(0)
        if op in ("fusion", "call") and instr.called:
            callee = self.module.computations[instr.called[0]]
            values = [operand(i) for i in range(len(instr.operands))]
            return self.value(callee, callee.root, k, {**args, callee.name: values})
        raise _NotEvaluable(f"{op} {instr.name} in the index expression")
