"""Stored rows recomputed from their own fields and compared with what is stored, field for field: the check
that a result's stamp (``companion.freshness``) keys everything that decides its numbers.

    .venv/bin/python benchmarks/rederive.py                    # CI: the sample (``SAMPLES``), <= 120 s on 2 cores
    .venv/bin/python benchmarks/rederive.py --all central      # every row of one result
    .venv/bin/python benchmarks/rederive.py --stored DIR       # the stored results in DIR (a planted drift)
    .venv/bin/python benchmarks/rederive.py --all tpu_simulation --restamp   # stamp it where every row reproduces
    .venv-chip/bin/python benchmarks/rederive.py --only tpu_simulation   # the chip's sample, on the chip lock

A result of the lent chip (``freshness.CHIP_PRODUCERS``) is re-derived only on the chip lock, the compiler that
wrote it (``make test-chip`` runs its sample); elsewhere it is skipped with a line saying so.

For each sampled row it calls the function that wrote the row (the benchmark's own) with the row's stored inputs,
and compares the new row with the stored one: every field equal, floats to the bit, but the wall-clock fields
(``VARIES``). While it recomputes, it records every price-table and config entry the code reads
(``freshness.recording``) and checks that the result's stamp holds each (a read outside the stamp's coordinates
would be a change the stamp could miss). It prints each result's freshness line (stale results are recomputed
too: a sample that still reproduces says the change did not move those rows). It exits 1 naming each row that
did not reproduce or read outside its stamp. ``--restamp`` (with ``--all``) writes this checkout's stamp into a
result whose every row, and every part derived from its rows, reproduced: what rerunning its benchmark would write.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import _common

from companion import freshness, results

# A row's fields a rerun legitimately changes: how long its compile, or its search, took on this machine.
VARIES = frozenset({"compile_seconds", "seconds", "wall_seconds"})


@dataclasses.dataclass(frozen=True)
class Deriver:
    """How to recompute rows of one stored result: the script that writes it, the rows to sample (a rule over the
    stored rows, so that a rerun that reorders them samples the same), every row, a row's name in a message, the
    recomputation, and the parts of the file its benchmark derives from the stored rows (``whole``)."""

    producer: str
    sample: Callable[[dict], list[dict]]
    every: Callable[[dict], list[dict]]
    name: Callable[[dict], str]
    derive: Callable[[dict], dict]
    whole: Callable[[Path], dict] = lambda path: {}


# ----------------------------------------------------------------------------- central.json (bench_central.row)

_SPACE_META = ("space", "mesh_name", "plan_spec", "plan_pipelined", "plan_estimated_tflops")


def _central(row: dict) -> dict:
    import bench_central
    from companion import targets, train

    target = targets.target(row["target"], mem_fraction=row["mem_fraction"])
    extra = {}
    if "ragged_buffer_factor" in row:  # the published space's rows (the planner's choice among them: as stored)
        extra = dict(state=train.StateConfig(optimizer_memory_host_offload=row["optimizer_offload"]),
                     factor=row["ragged_buffer_factor"], **{k: row[k] for k in _SPACE_META if k in row})
    return bench_central.row(row["model"], target, row["mesh"], row["seq"], row["batch"], row["label"], row["policy"],
                             row["flags"], row["dispatch"], **extra)


def _central_name(r: dict) -> str:
    return f"{r['model']} {r['target']} {r['mesh']} B={r['batch']} {r['label']} at {r['mem_fraction']}"


def _central_sample(data: dict) -> list[dict]:
    """The 405B on 256 H100 (a step over usable HBM among them) and the first two 8B steps on 8 H100."""
    rows = data["rows"]
    return ([r for r in rows if r["model"] == "llama3.1-405b"]
            + [r for r in rows if r["model"] == "llama3.1-8b" and r["target"] == "h100:1x8"][:2])


# ----------------------------------------------------------------------------- plan.json (bench_plan)

def _plan_largest(row: dict) -> dict:
    from companion import plan, targets, train

    target = targets.target(row["target"], mem_fraction=row["mem_fraction"])
    found = plan.largest_batch(row["model"], target, row["seq"], row["policy"], dict(row["mesh"]),
                               state=train.StateConfig(**row["state"]), flags=row["flags"] or None)
    return {**found.to_dict(), "label": row["label"], "flags": row["flags"], "mem_fraction": row["mem_fraction"]}


def _plan_deployment(row: dict) -> dict:
    from companion import compiler, sharding, targets, train

    target = targets.target(row["target"])
    mesh = sharding.parse_mesh(row["mesh"], target.num_devices)
    report = train.compile_step(train.trainer(row["model"], row["policy"], state=train.StateConfig(**row["state"])),
                                compiler.place(target, sharding.active_axes(mesh)), row["batch"], row["seq"])
    return {"model": row["model"], "target": row["target"], "num_devices": target.num_devices, "mesh": row["mesh"],
            "batch": row["batch"], "seq": row["seq"], "policy": row["policy"],
            "state": dataclasses.asdict(train.StateConfig(**row["state"])),
            "device_peak_bytes": report.device.peak_bytes, "fits": report.fits}


def _plan_row(row: dict) -> dict:
    return _plan_largest(row) if "budget_batch" in row else _plan_deployment(row)


def _plan_rows(data: dict) -> list[dict]:
    return [*data["largest"], *data["deployments"]]


def _plan_sample(data: dict) -> list[dict]:
    """The first 405B preset whose search took one compile, and the first 405B deployment."""
    return ([next(r for r in data["largest"] if r["model"] == "llama3.1-405b" and r["compiles"] == 1)]
            + [next(r for r in data["deployments"] if r["model"] == "llama3.1-405b")])


# ----------------------------------------------------------------------------- tpu_simulation.json

def _tpu_step(row: dict) -> dict:
    import bench_measured
    import bench_tpu_simulation
    from companion import compiler, measured, targets

    step = next(s for s in measured.load().steps if s.key == row["key"])
    grid = {s.key: s for s in bench_measured.STEPS}
    placement = compiler.place(targets.target(bench_measured.TARGET))
    out = bench_tpu_simulation.simulate_step(grid[row["key"]], placement, step.op_seconds)
    return {**out, "measured_seconds": step.seconds,
            **({"held_out": False, "fresh": True} if step.fresh else {"held_out": measured.held_out(step.key)})}


TPU_SAMPLE = ("L4-B2-S8192-full+pallas",)  # one step, the Pallas kernel's (~30 s with libtpu's start)


def _tpu_summary(path: Path) -> dict:
    import bench_tpu_simulation

    return {"summary": bench_tpu_simulation.summary(path)}


DERIVERS: dict[str, Deriver] = {
    "central": Deriver("benchmarks/bench_central.py", _central_sample, lambda d: d["rows"], _central_name, _central),
    # the published space: no CI sample (each row a DeepSeek-V3 compile on 256 or 512 GPUs); --all central_space
    "central_space": Deriver("benchmarks/bench_central.py", lambda d: [], lambda d: d["rows"], _central_name, _central),
    "plan": Deriver("benchmarks/bench_plan.py", _plan_sample, _plan_rows,
                    lambda r: f"{r['model']} {r['target']} {r.get('label', r['policy'])} "
                              f"{'largest batch' if 'budget_batch' in r else 'B=%s' % r['batch']}", _plan_row),
    "tpu_simulation": Deriver("benchmarks/bench_tpu_simulation.py",
                              lambda d: [r for r in d["steps"] if r["key"] in TPU_SAMPLE], lambda d: d["steps"],
                              lambda r: r["key"], _tpu_step, _tpu_summary),
}


# ----------------------------------------------------------------------------- comparing

def differences(stored: Any, now: Any, path: str = "") -> list[str]:
    """Each field where ``now`` differs from ``stored`` (``path: stored -> now``), but the row's own ``VARIES``."""
    if isinstance(stored, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(stored) | set(now), key=str):
            if not path and key in VARIES:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in now or key not in stored:
                out.append(f"{where}: {'absent' if key not in stored else repr(stored[key])[:80]} -> "
                           f"{'absent' if key not in now else repr(now[key])[:80]}")
            else:
                out += differences(stored[key], now[key], where)
        return out
    if isinstance(stored, list) and isinstance(now, list) and len(stored) == len(now):
        return [d for i, (a, b) in enumerate(zip(stored, now)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if stored == now else [f"{path}: {repr(stored)[:80]} -> {repr(now)[:80]}"]


@contextlib.contextmanager
def programs() -> Iterator[list[str]]:
    """Within the block, the hash of every program ``compiler.compile`` compiles (``freshness.program_hash``)."""
    from companion import compiler

    seen: list[str] = []
    original = compiler.compile

    def compile_and_note(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(freshness.program_hash((out[0] if isinstance(out, tuple) else out).hlo_text))
        return out

    compiler.compile = compile_and_note
    try:
        yield seen
    finally:
        compiler.compile = original


def check(name: str, data: dict, rows: list[dict], deriver: Deriver) -> list[str]:
    """Recompute ``rows`` of result ``name``; each failure as one line naming the row. A row that stores the
    hashes of the programs it compiled (``programs``; none does yet: ``freshness`` says why) is held to them."""
    stamp = data.get("stamp") or {}
    failures = []
    for row in rows:
        start = time.perf_counter()
        with freshness.recording() as reads, programs() as compiled:
            now = json.loads(json.dumps(deriver.derive(row)))  # as it would be stored (tuples as lists)
        if "programs" in row:
            now["programs"] = compiled
        found = differences(row, now)
        outside = freshness.uncovered(reads, stamp) if stamp.get("rule") == freshness.RULE else []
        verdict = "reproduces" if not found else f"DOES NOT reproduce ({len(found)} fields)"
        print(f"  {deriver.name(row)}: {verdict}, {len(reads)} table entries read, programs "
              f"{', '.join(compiled) or 'none'}, {time.perf_counter() - start:.1f} s", flush=True)
        failures += [f"{name}: {deriver.name(row)}: {d}" for d in found]
        failures += [f"{name}: {deriver.name(row)}: read {r}, which its stamp does not hold" for r in outside]
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", nargs="*", default=None, choices=sorted(DERIVERS), help="every row of these")
    parser.add_argument("--stored", type=Path, default=_common.RESULTS, help="the folder of stored results")
    parser.add_argument("--restamp", action="store_true", help="with --all: stamp each result that reproduced whole")
    parser.add_argument("--only", nargs="+", default=None, choices=sorted(DERIVERS), help="the samples of these only")
    args = parser.parse_args()
    if args.restamp and not args.all:
        parser.error("--restamp needs --all NAME: a stamp speaks for every row")
    start, failures = time.perf_counter(), []
    locked, on_chip_lock = freshness.locked_versions(), freshness.on_chip_lock()
    for name, deriver in DERIVERS.items():
        if (args.all is not None and name not in args.all) or (args.only is not None and name not in args.only):
            continue
        if deriver.producer in freshness.CHIP_PRODUCERS and not on_chip_lock:
            print(f"{name}: skipped here: a result of the lent chip is re-derived on the chip lock ("
                  + ", ".join(f"{k} {v}" for k, v in locked.items()) + "; make test-chip)", flush=True)
            continue
        path = args.stored / f"{name}.json"
        data, fresh = results.load(path)
        print(fresh.line(), flush=True)
        rows = deriver.every(data) if args.all is not None else deriver.sample(data)
        found = check(name, data, rows, deriver)
        if args.all is not None:
            whole = deriver.whole(path)
            found += [f"{name}: {d}" for d in differences({k: data.get(k) for k in whole}, whole)]
        failures += found
        if args.restamp and not found:
            restamp(path, data, deriver, len(rows))
    print(f"re-derived in {time.perf_counter() - start:.0f} s")
    if failures:
        print(f"{len(failures)} failures:\n" + "\n".join(failures))
        sys.exit(1)


def restamp(path: Path, data: dict, deriver: Deriver, rows: int) -> None:
    """This checkout's stamp into ``path``, with what earned it: every row re-derived here, at this commit."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=_common.ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "companion", "benchmarks/*.py"], capture_output=True,
                           text=True, cwd=_common.ROOT).stdout.strip()
    data["stamp"] = {**freshness.stamp(deriver.producer, data),
                     "rederived": {"rows": rows, "commit": head, "uncommitted_changes": bool(dirty),
                                   "date": time.strftime("%Y-%m-%d")}}
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{path.name}: restamped, every one of its {rows} rows re-derived at {head[:12]}")


if __name__ == "__main__":
    main()
