"""HLO shapes as the text writes them: dtypes, array and tuple shapes, memory spaces."""

from __future__ import annotations

import dataclasses
import functools
import math
import re


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
