"""A folder of compile reports, keyed by everything that decides them: a test run compiles each step once.

Off unless ``$OFFLOAD_LAB_REPORT_CACHE`` names a folder. ``make test`` and ``make test-browser`` set one
inside ``.venv``, so the package tests (on every pytest-xdist worker), nbval's kernels and the browser
test's kernels share each compile; ``make lab`` and ``make notebooks`` leave it off, so a notebook's
printed compile seconds are always its own.

The key is a SHA-256 over what decides a ``CompileReport``: the lowered program (StableHLO, after the lab
marked its host arguments), the compile options (the XLA flags; the kernel cache file left out: it
decides how long code generation takes, not the program), the target (GPU, HBM, memory fraction, host
RAM), the backend, the mesh, the ``XLA_FLAGS`` the backend started with, the jax and jaxlib versions and
the hash of the ``companion/`` source (``results.source_hash``: the code that reads the compile into a
report). An entry is therefore never stale: anything that could change the report changes the key.
Entries live in one subfolder per jaxlib and source hash; the first write under a new one removes the
others. A report served from here is the first compile's, its compile seconds included; a compile with
an XLA dump is never cached (its files are the point).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import jax
import jaxlib

from ..ground.results import source_hash

ENV = "OFFLOAD_LAB_REPORT_CACHE"


def folder() -> Path | None:
    """This checkout's entries (``$OFFLOAD_LAB_REPORT_CACHE/jaxlib-<version>-<source hash>``), or None: off."""
    root = os.environ.get(ENV, "")
    if not root or root.lower() == "off":
        return None
    return Path(root) / f"jaxlib-{jaxlib.__version__}-{_source()}"


def key(*parts: str) -> str:
    """The entry's name: SHA-256 over ``parts`` (each the text of one thing that decides the report)."""
    digest = hashlib.sha256(f"jax {jax.__version__} jaxlib {jaxlib.__version__}".encode())
    for part in parts:
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()


def load(name: str):
    """The stored report for ``name``, or None (off, absent, or unreadable: then it is compiled again)."""
    where = folder()
    if where is None:
        return None
    try:
        with open(where / f"{name}.pkl", "rb") as f:
            return pickle.load(f)
    except Exception:  # noqa: BLE001 (absent, truncated, or from classes that changed: compile instead)
        return None


def store(name: str, report) -> None:
    """Keep ``report`` under ``name`` (atomically: a reader sees the whole entry or none; without its parsed
    module, which is re-parsed from ``hlo_text`` when asked for). A folder that cannot be written (full,
    read-only, removed by another run meanwhile) only costs the next compile."""
    where = folder()
    if where is None:
        return
    try:
        if not where.is_dir():
            where.mkdir(parents=True, exist_ok=True)
            for other in where.parent.glob("jaxlib-*"):  # another source or jaxlib: can never be read again
                if other != where:
                    shutil.rmtree(other, ignore_errors=True)
        with tempfile.NamedTemporaryFile(dir=where, suffix=".tmp", delete=False) as f:
            pickle.dump(dataclasses.replace(report), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(f.name, where / f"{name}.pkl")
    except OSError:
        pass


@functools.cache
def _source() -> str:
    """The ``companion/`` source hash, read once per process (the package does not change under a run)."""
    return source_hash()
