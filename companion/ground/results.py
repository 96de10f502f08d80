"""Stored benchmark results a notebook reads instead of recompiling for minutes, and whether they are fresh.

A result written by ``benchmarks/*.py`` carries a stamp (``stamp``): what decides its numbers — the jax,
jaxlib (and libtpu) versions, a fingerprint of the code its benchmark ran, the data files and the price-table
and config entries it read (``companion.freshness`` says how each is keyed, and why a change that moves a
number cannot be missed). ``load(path)`` reads a result back with its ``Freshness``: fresh where every part
of its stamp is this checkout's. A notebook prints the freshness line beside the numbers.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from . import freshness
from .freshness import Freshness

__all__ = ["Freshness", "load", "source_hash", "stamp"]

PACKAGE = Path(__file__).resolve().parents[1]  # companion/: this module sits in companion/ground/


def source_hash(root: Path = PACKAGE) -> str:
    """SHA-256 (first 16 hex) over every ``.py`` file under ``companion/``, by relative path and bytes: the
    report cache's key (``companion.report_cache``: a cache may key more than decides its entries), and the
    stamp of results written before ``freshness.RULE`` 2."""
    return files_hash((path.relative_to(root).as_posix(), path.read_bytes()) for path in sorted(root.rglob("*.py")))


def files_hash(files) -> str:
    """SHA-256 (first 16 hex) over ``(relative path, bytes)`` pairs, in the order given: ``source_hash``'s digest."""
    digest = hashlib.sha256()
    for relative, data in files:
        digest.update(relative.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:16]


def producer() -> str:
    """The benchmark script this process runs (``__main__``), relative to the checkout."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if not main or not Path(main).resolve().is_relative_to(freshness.ROOT):
        raise ValueError(f"results are stamped by a benchmark script of this checkout, not {main!r}")
    return Path(main).resolve().relative_to(freshness.ROOT).as_posix()


def stamp(result: dict | None = None) -> dict:
    """The stamp of ``result`` (the payload a benchmark writes; its models and accelerators are its coordinates),
    written by the running benchmark script. ``benchmarks/_common.write`` stamps every payload it writes."""
    return freshness.stamp(producer(), result)


def load(path: str | Path) -> tuple[dict, Freshness]:
    """The stored results and their freshness against this checkout."""
    path = Path(path)
    data = json.loads(path.read_text())
    return data, freshness.check(path.name, data.get("stamp"))
