"""What CI's re-derivation checks: a compiled program's hash without where Python traced it, every table read
recorded, reads the stamp does not hold."""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from .rules import ROOT, TABLES
from .tables import table_values


# ----------------------------------------------------------------------------- what the re-derivation checks

_STACK_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_SOURCE_POSITION = re.compile(r'\s*(?:stack_frame_id|source_(?:file|line|end_line|column|end_column))=(?:"[^"]*"|\d+)')


def program_hash(hlo_text: str) -> str:
    """SHA-256 (16 hex) of a compiled program's text without where in Python its ops were traced: the module's
    stack-frame tables (``FileNames``, ``FunctionNames``, ``FileLocations``, ``StackFrames``: the checkout's paths,
    lines and callers) and each op's ``stack_frame_id`` / ``source_*`` fields, which a docstring edit, a moved module
    or another calling script shifts. What each op does, and its ``op_name`` (which the lab reads), stay."""
    kept, table = [], False
    for line in hlo_text.split("\n"):
        if line in _STACK_TABLES:
            table = True
        elif table and (not line or line[0].isdigit()):
            continue
        else:
            table = False
            kept.append(_SOURCE_POSITION.sub("", line))
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]


class _Recording(Mapping):
    """A table that notes each entry read (``reads``) and hands out its entries (recording at depth 1)."""

    def __init__(self, name: str, value: Mapping, depth: int, reads: set[str], prefix: str = ""):
        self._name, self._value, self._depth, self._reads, self._prefix = name, value, depth, reads, prefix

    def _note(self, key) -> None:
        if self._depth == 0:
            self._reads.add(f"{self._name}[{self._prefix}{key}]")

    def __getitem__(self, key):
        self._note(key)  # a key it lacks too: adding it later would change what the code does
        item = self._value[key]
        if self._depth == 1 and isinstance(item, Mapping):
            return _Recording(self._name, item, 0, self._reads, f"{key}/")
        return item

    def __contains__(self, key) -> bool:
        return key in self._value

    def __iter__(self) -> Iterator:
        return iter(self._value)

    def __len__(self) -> int:
        return len(self._value)

    def values(self):
        return [self[k] for k in self._value]

    def items(self):
        return [(k, self[k]) for k in self._value]


@contextlib.contextmanager
def recording(root: Path = ROOT) -> Iterator[set[str]]:
    """Within the block, every module attribute that holds a table reads through a recorder: the set it yields
    collects ``NAME[key]`` (``NAME[top/key]`` at depth 1) for each entry read. Iterating keys is not a read."""
    reads: set[str] = set()
    swapped = []
    tables = table_values(root)
    for table in TABLES:
        value = tables[table.name][1]
        proxy = _Recording(table.name, value, table.depth, reads)
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if not file or module.__name__.startswith(__package__) or not Path(file).resolve().is_relative_to(root.resolve()):
                continue  # only the checkout's modules (the package, the benchmark scripts) are redirected
            for attr, held in list(vars(module).items()):
                if held is value:
                    setattr(module, attr, proxy)
                    swapped.append((module, attr, value))
    try:
        yield reads
    finally:
        for module, attr, value in swapped:
            setattr(module, attr, value)


def uncovered(reads: set[str], stored: Mapping) -> list[str]:
    """Reads a stamp's table entries do not hold (a table held whole covers every read of it)."""
    held = stored.get("tables", {})
    out = []
    for read in sorted(reads):
        name, key = read[:-1].split("[", 1)
        entries = held.get(name)
        if entries is None:
            out.append(f"{read} (its table is not in the stamp)")
        elif "*" not in entries and key not in entries:
            out.append(read)
    return out
