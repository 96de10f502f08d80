"""The step-time simulator held against published runs (goal: the whole script in <= 10 min on 2 cores).

    .venv/bin/python benchmarks/bench_calibration.py

For each run in ``companion.published.RUNS`` it compiles the lab's closest configuration, replays it at
the simulator's frozen constants and over their measured spread (``bands.sweep``) and writes
benchmarks/results/calibration.json:

* ``absolute`` runs: measured and simulated step seconds, the error (simulated / measured - 1) and what
  differs. Their worst |error| is ``worst_abs_error``, the calibration term of every ``error_band_abs``
  (``bands.ABSOLUTE_ERROR`` must equal it; tests/test_bands.py checks). The constants were frozen from
  kernel measurements before these comparisons (bands.SWEEP and schedule.CostModel say where each
  comes from): none is fitted here.
* ``leave_one_out``: what one global scale factor fitted on the other absolute runs would predict for
  each run — the held-out error of the simplest correction. It is reported, not applied.
* ``order`` runs (C2, another framework's parallelism): tokens/s per GPU, an order-of-magnitude check.
* ``relative`` runs (C4): the published speedup against the simulated one with its paired band,
  priced on the lab's GB200 link and on GB300's measured link (C5, a labelled what-if).
* ``c2_buffer_what_ifs``: C2's step at each MoE receive buffer of ``published.C2_BUFFER_FACTORS`` (set by
  design, not fitted: C2 stays a held-out check), split by cause (``published.split``), with C2's error.
"""

from __future__ import annotations

import dataclasses
import math
import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402

from companion import bands, published  # noqa: E402

GOAL_SECONDS = 600.0
ACCEPT_C1_1VM = 0.15  # the issue's acceptance: C1's single-node step within +-15 %


def _leave_one_out(rows: list[dict]) -> dict:
    """Each absolute run predicted with a global scale fitted (geometric mean) on the others."""
    out = {}
    for row in rows:
        others = [r for r in rows if r is not row]
        scale = math.exp(sum(math.log(r["measured_step_seconds"] / r["simulated_step_seconds"]) for r in others)
                         / len(others))
        out[row["key"]] = {"scale": scale, "error": row["simulated_step_seconds"] * scale / row["measured_step_seconds"] - 1}
    return out


def main() -> None:
    t_start = time.perf_counter()
    rows, comparisons = [], {}
    for run in published.RUNS:
        t = time.perf_counter()
        c = published.compare(run)
        comparisons[run.key] = c
        row = c.to_dict() | {"seconds": round(time.perf_counter() - t, 1)}
        rows.append(row)
        err = "" if c.error is None else f"error {c.error:+.1%}"
        measured = c.measured_step_seconds
        print(f"{run.key:15} measured {measured if measured is None else round(measured, 3)!s:>7} s  simulated "
              f"{c.simulated_step_seconds:.3f} s  {err:15} ({row['seconds']:.0f} s)", flush=True)

    absolute = [r for r in rows if r["kind"] == "absolute"]
    worst = max(abs(r["error"]) for r in absolute)
    loo = _leave_one_out(absolute)

    relative = []
    for run in published.RUNS:
        if run.kind != "relative" or run.relative_to is None:
            continue
        for link in (None, published.C5_LINK):
            fast = published.compare(run, link, comparisons[run.key].report) if link else comparisons[run.key]
            base = comparisons[run.relative_to]
            base = published.compare(published.run(run.relative_to), link, base.report) if link else base
            ranking = bands.rank(fast.sweep, base.sweep, (run.key, run.relative_to))
            relative.append({"key": run.key, "against": run.relative_to, "host_link": fast.link,
                             "what_if": link is not None, "measured_ratio": run.measured_ratio,
                             "simulated_ratio": ranking.ratio, "paired_band": [ranking.low, ranking.high],
                             "tie": ranking.tie, "summary": ranking.summary()})
            print(f"{run.key} / {run.relative_to} on {fast.link}: simulated {ranking.ratio:.3f} "
                  f"({ranking.low:.3f}-{ranking.high:.3f}) vs published {run.measured_ratio}", flush=True)

    c2 = published.run("C2-dsv3-256")
    what_ifs = []
    for name, factor in published.C2_BUFFER_FACTORS.items():
        c = published.compare(dataclasses.replace(c2, moe={**c2.moe, "ragged_buffer_factor": factor}))
        what_ifs.append({"buffer": name, "ragged_buffer_factor": factor, "simulated_step_seconds": c.simulated_step_seconds,
                         "measured_step_seconds": c.measured_step_seconds, "error": c.error,
                         "device_peak_bytes": c.report.device.peak_bytes, "split_seconds": published.split(c)})
        print(f"C2 with the buffer {name}: simulated {c.simulated_step_seconds:.3f} s, error {c.error:+.1%}", flush=True)

    c1 = next(r for r in rows if r["key"] == "C1-1vm")
    total = time.perf_counter() - t_start
    _common.write("calibration", {
        "goal": f"the whole comparison in <= {GOAL_SECONDS:.0f} s on this machine; C1's single-node step within "
                f"+-{ACCEPT_C1_1VM:.0%} with frozen constants",
        "seconds": round(total, 1), "meets_time_goal": total <= GOAL_SECONDS,
        "c1_single_node_error": c1["error"], "meets_c1_goal": abs(c1["error"]) <= ACCEPT_C1_1VM,
        "worst_abs_error": round(worst, 3),
        "median_abs_error": sorted(abs(r["error"]) for r in absolute)[len(absolute) // 2],
        "mean_error": sum(r["error"] for r in absolute) / len(absolute),
        "leave_one_out": loo, "worst_leave_one_out_error": max(abs(v["error"]) for v in loo.values()),
        "runs": rows, "relative": relative, "c2_buffer_what_ifs": what_ifs,
        "notes": "error = simulated / measured - 1 (negative: the simulator is faster than the run). Constants frozen "
                 "from kernel measurements (bands.SWEEP, schedule.CostModel) before any comparison; worst_abs_error "
                 "is bands.ABSOLUTE_ERROR. C2 (order) is outside the error; C4 is relative; the GB300 link (C5) is a "
                 "what-if for GB200."})
    print(f"worst |error| {worst:.1%}; leave-one-out worst {max(abs(v['error']) for v in loo.values()):.1%}; "
          f"{total:.0f} s")


if __name__ == "__main__":
    main()
