"""Where the simulator errs, op by op: a traced step's measured seconds per op against its simulated ones, by cause.

The chip's profiler gives every op's seconds per step by its HLO name (``measured.MeasuredStep.op_seconds``;
the steps ``bench_measured.TRACED`` lists); ``benchmarks/bench_tpu_simulation.py`` stores the same program's
priced ops (``priced_ops``: compiled here with libtpu's compile-only v5e, byte for byte the chip's program, so
the names pair up). Each op falls under the first of ``CAUSES`` whose rule it meets; a cause's error is its
ops' measured seconds less their simulated seconds (positive: the simulator is fast there). The compute
stream's seconds only: waits the replay counts as exposed time appear here as the trace's done ops.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from . import measured
from .comparison import RESULTS

SMALL_MATMUL_FLOPS = 4e9  # per execution; the lab's blockwise flash kernel's matmuls are 1.07e9 (512 x 512 x 128, 16 heads)


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One op's seconds per step, measured and simulated (0 where one side has no op of that name)."""

    name: str
    measured: float
    simulated: float
    op_class: str | None  # the priced op's class (``hlo.OP_CLASSES``); None: the simulator prices no op of that name
    flops: float  # per execution
    executions: int

    @property
    def error(self) -> float:
        return self.measured - self.simulated


# The causes, in the order an op is tested against them (the first rule it meets names its cause).
CAUSES: tuple[tuple[str, Callable[[OpTime], bool]], ...] = (
    ("waits on async copies (the trace's done ops)", lambda o: o.op_class is None),
    ("priced ops the trace does not show", lambda o: o.measured == 0),
    ("ops priced at zero (no bytes counted)", lambda o: o.simulated == 0),
    ("attention kernels (Pallas)", lambda o: o.op_class == "attention"),
    (f"small matmuls (< {SMALL_MATMUL_FLOPS / 1e9:g} GFLOP each)",
     lambda o: o.op_class == "matmul" and o.flops < SMALL_MATMUL_FLOPS),
    ("large matmuls", lambda o: o.op_class == "matmul"),
    ("copies", lambda o: o.op_class == "copy"),
    ("other memory-bound ops", lambda o: True),
)


def cause_of(op: OpTime) -> str:
    return next(name for name, rule in CAUSES if rule(op))


def priced_ops(simulator) -> dict[str, list]:
    """Every op the replay puts on the compute stream: name -> [simulated seconds per step, class, FLOPs per
    execution, executions per step] (a ``schedule.Simulator``'s program, loops by their trip counts)."""
    counts = simulator.module.execution_counts
    out: dict[str, list] = {}
    for computation, ops in simulator.program.items():
        for op in ops:
            if op.action == "compute" and counts.get(computation, 0):
                n = counts[computation]
                out[op.name] = [op.seconds * n, op.op_class or op.category, op.flops, n]
    return out


def op_times(priced: dict[str, list], measured_ops: dict[str, float]) -> list[OpTime]:
    """Priced ops and measured ops paired by name, the largest |error| first."""
    rows = []
    for name in set(priced) | set(measured_ops):
        seconds, op_class, flops, executions = priced.get(name, [0.0, None, 0.0, 0])
        rows.append(OpTime(name, measured_ops.get(name, 0.0), seconds, op_class, flops, executions))
    return sorted(rows, key=lambda o: (-abs(o.error), o.name))


def by_cause(ops: list[OpTime]) -> list[dict]:
    """One row per cause: its ops, measured and simulated milliseconds per step, and the error; largest first."""
    rows: dict[str, dict] = {}
    for op in ops:
        cause = cause_of(op)
        row = rows.setdefault(cause, {"cause": cause, "ops": 0, "measured ms": 0.0, "simulated ms": 0.0})
        row["ops"] += 1
        row["measured ms"] += op.measured * 1e3
        row["simulated ms"] += op.simulated * 1e3
    for row in rows.values():
        row["error ms"] = row["measured ms"] - row["simulated ms"]
    return sorted(rows.values(), key=lambda r: -abs(r["error ms"]))


def load(path: str | Path = RESULTS, m: measured.Measurements | None = None) -> dict[str, list[OpTime]]:
    """Each traced step of the stored comparison (``ops`` beside it) with its ops, measured against simulated."""
    m = m or measured.load()
    data = json.loads(Path(path).read_text())
    return {r["key"]: op_times(r["ops"], m.step(r["key"]).op_seconds) for r in data["steps"] if r.get("ops")}
