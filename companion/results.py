"""Stored benchmark results a notebook reads instead of recompiling for minutes, and whether they are fresh.

A result written by ``benchmarks/*.py`` carries ``stamp()``: the jaxlib that compiled it and a hash of
the ``companion/`` source that produced it. ``load(path)`` reads it back with a ``Freshness``: fresh
only where both match this checkout — a changed model, policy, compiler or simulator makes every stored
number suspect, so any source change counts. A notebook prints the freshness line beside the numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def source_hash(root: Path = PACKAGE) -> str:
    """SHA-256 (first 16 hex) over every ``.py`` file under ``companion/``, by relative path and bytes."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stamp() -> dict:
    """What a benchmark stores beside its results so a reader can tell whether they still hold."""
    import jaxlib

    return {"companion_source": source_hash(), "jaxlib": jaxlib.__version__}


@dataclasses.dataclass(frozen=True)
class Freshness:
    path: str
    stored: dict
    current: dict

    @property
    def fresh(self) -> bool:
        return self.stored == self.current

    def line(self) -> str:
        written = f"{self.path}: written with jaxlib {self.stored.get('jaxlib')} from companion source " \
                  f"{self.stored.get('companion_source')}"
        if self.fresh:
            return f"{written}, this checkout's: fresh"
        return (f"{written}; this checkout: jaxlib {self.current['jaxlib']}, source {self.current['companion_source']} "
                f"— STALE: rerun the benchmark that wrote it before trusting these numbers")


def load(path: str | Path) -> tuple[dict, Freshness]:
    """The stored results and their freshness against this checkout."""
    path = Path(path)
    data = json.loads(path.read_text())
    return data, Freshness(path.name, dict(data.get("stamp", {})), stamp())
