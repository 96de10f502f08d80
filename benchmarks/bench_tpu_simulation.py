"""The simulator held against the chip: every measured TPU v5e step that ran, compiled here with libtpu's
compile-only v5e (the same program, byte for byte: ``measured.compile_agreement``), replayed and priced
by ``companion.schedule`` with the v5e price table (``schedule.MATMUL_EFFICIENCY`` etc., from the chip's
kernel microbenchmarks, never from these steps), beside the measured median and XLA:TPU's own
``optimal_seconds``.

    python benchmarks/bench_tpu_simulation.py [--only W ...]   # -> benchmarks/results/tpu_simulation.json

Which steps may inform modelling choices and which are only reported is fixed by ``measured.held_out``
(committed before this benchmark's first run); the fresh steps (``bench_measured.FRESH``, measured after the
band was fixed) are added with ``--only`` at the prices the comparison froze; ``companion.comparison`` reads
the result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import _common

import bench_measured
from companion import attribution, compiler, measured, results, schedule, targets


def simulate_step(step: bench_measured.Step, placement, measured_ops: dict[str, float]) -> dict:
    """One step compiled and replayed; a step the chip traced per op (``measured_ops``) also keeps its priced ops
    (``attribution.priced_ops``: those over the trace's floor, and every op the trace names)."""
    started = time.perf_counter()
    report = bench_measured.compile_step(step, placement)
    compiled = time.perf_counter() - started
    simulator = schedule.prepare(report)
    sim = simulator.run()
    ops = {}
    if measured_ops:
        ops = {name: row for name, row in attribution.priced_ops(simulator).items()
               if row[0] >= bench_measured.TRACE_OP_FLOOR_SECONDS or name in measured_ops}
    return {"key": step.key, "compile_seconds": compiled, "peak_bytes": report.device.peak_bytes,
            "simulated_seconds": sim.step_seconds, "compute_seconds": sim.compute_seconds,
            "exposed_transfer_seconds": sim.exposed_transfer_seconds, "exposed_other_seconds": sim.exposed_other_seconds,
            "time_by_kind": {k: v for k, v in sim.time_by_kind.items() if v},
            "xla_optimal_seconds": (report.xla_cost or {}).get("optimal_seconds"), **({"ops": ops} if ops else {})}


def main() -> None:
    from companion import freshness

    freshness.refuse_off_lock(results.producer())  # the chip's results: on the chip lock only
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--summary-only", action="store_true", help="recompute the summary of the stored steps")
    args = parser.parse_args()
    if args.summary_only:
        return summarize()
    m = measured.load()
    placement = compiler.place(targets.target(bench_measured.TARGET))
    path = _common.RESULTS / "tpu_simulation.json"
    stored = json.loads(path.read_text()) if (args.only and path.exists()) else {}
    rows = {r["key"]: r for r in stored.get("steps", [])}
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=_common.ROOT).stdout.strip()
    # --only adds steps to a stored comparison: it keeps the commit that froze the prices, and says when each
    # added step was simulated (the prices must be that commit's: tests/test_comparison.py holds them equal)
    commit, added = stored.get("commit", head), dict(stored.get("added", {}))
    # a whole re-run reprices every step at this checkout; the comparisons it replaces stay on record (their
    # commit and summary): the held-out half was seen before a reprice, and the record says so
    earlier = json.loads(path.read_text()) if (not args.only and path.exists()) else {}
    history = [*earlier.get("history", []), {"commit": earlier["commit"], "summary": earlier.get("summary")}] \
        if earlier else stored.get("history", [])
    grid = {s.key: s for s in bench_measured.STEPS}
    for step in m.steps:
        if not step.runs or (args.only and not any(w in step.key for w in args.only)):
            continue
        row = simulate_step(grid[step.key], placement, step.op_seconds)
        rows[step.key] = {**row, "measured_seconds": step.seconds, **({"held_out": False, "fresh": True} if step.fresh
                          else {"held_out": measured.held_out(step.key)})}
        if stored:
            added[step.key] = head
        print(f"{step.key:52} measured {step.seconds * 1e3:8.1f} ms  simulated {row['simulated_seconds'] * 1e3:8.1f} ms "
              f"({row['simulated_seconds'] / step.seconds - 1:+6.1%})  compile {row['compile_seconds']:.0f} s", flush=True)
        _common.write("tpu_simulation", {"stamp": results.stamp(), "commit": commit,
                                         "cost_model": {k: schedule.__dict__[k]["tpu-v5e"] for k in
                                                        ("MATMUL_EFFICIENCY", "HBM_EFFICIENCY", "KERNEL_GAP_SECONDS")},
                                         **({"added": added} if added else {}),
                                         **({"history": history} if history else {}), "steps": list(rows.values())},
                      extends=bool(stored))
    summarize()


def summarize() -> None:
    """The goals (issue #41) against the stored comparison, written beside its steps."""
    path = _common.RESULTS / "tpu_simulation.json"
    data, found = results.load(path)
    if not found.fresh:  # the summary is this checkout's reading of the steps: it may join only steps it would write
        raise SystemExit(f"{found.line()}: rerun the comparison, not its summary alone")
    data["summary"] = summary(path)
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["summary"], indent=1))


def summary(path) -> dict:
    """The goals (issue #41) against the comparison stored at ``path``."""
    from companion import comparison

    c = comparison.load(path)
    held, paired, band = c.absolute(comparison.HELD_OUT), c.paired(comparison.HELD_OUT), c.band_test()
    fresh = c.fresh_test()  # the committed band (bands.PAIRED_MODEL_ERROR) against the fresh pairs
    return {
        "held_out_steps": held, "training_steps": c.absolute(comparison.TRAINING), "held_out_pairs": paired,
        "training_pairs": c.paired(comparison.TRAINING), "band": band, "seen_band": c.seen_band(),
        **({"fresh_steps": c.absolute(comparison.FRESH), "fresh": fresh} if fresh else {}),
        "goals": {"held-out step median |error| <= 15 %": held["median_abs_error"] <= 0.15,
                  "held-out paired median |error| <= 5 %": paired["median_abs_error"] <= 0.05,
                  "rankings agree where measured differences exceed the spread":
                      paired["rankings_agreeing"] == paired["measured_rankings"],
                  "every held-out pair inside the band": band["inside"] == band["held_out_pairs"],
                  **({"fresh rankings agree where measured differences exceed the spread":
                      fresh["rankings_agreeing"] == fresh["measured_rankings"],
                      "every fresh pair inside the committed band": fresh["inside"] == fresh["pairs"]} if fresh else {})}}


if __name__ == "__main__":
    main()
