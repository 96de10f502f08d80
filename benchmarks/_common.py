"""Shared by the benchmark scripts: where results go, what machine produced them, and the stamp that says
whether they still hold (``companion.results.stamp``: written with every result)."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))


def machine() -> dict:
    import jax
    import jaxlib

    return {"python": platform.python_version(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "cpus": os.cpu_count(), "machine": platform.machine(), "date": time.strftime("%Y-%m-%d")}


def write(name: str, payload: dict, extends: bool = False) -> Path:
    """``benchmarks/results/<name>.json``: the payload with the machine and its stamp (the running script's code,
    the versions, and the table entries at the models and accelerators the payload names). ``extends``: the
    payload keeps rows of the stored result (a run of some steps): refused unless that result is fresh here, for
    one stamp cannot speak for rows that older code wrote."""
    from companion import freshness, results

    freshness.refuse_off_lock(results.producer())
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    if extends and path.exists():
        found = results.load(path)[1]
        if not found.fresh:
            raise SystemExit(f"{found.line()}: run every row, not a part of them")
    payload = {**payload, "stamp": results.stamp(payload)}
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **payload}, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return path
