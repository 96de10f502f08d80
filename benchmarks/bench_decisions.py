"""The decision experiment (issue 52): the planner's pick on each committed shape against every alternative, on the
lent TPU v5e. Two parts, committed in this order:

    .venv-chip/bin/python benchmarks/bench_decisions.py --part picks [--only KEY ...] [--out DIR]
    python3 benchmarks/bench_decisions.py --part measure --out DIR [--only KEY ...]     # on the chip

``picks`` (compile-only, libtpu's v5e on the chip lock: what the chip runs): for each shape of
``results/decision_shapes.json``, the planner's pick and its other finalists that fit (the runners-up), each
MaxText preset at its own largest batch (``plan.largest_batch``: the budget's answer, then the compiler's boundary),
and full remat at the pick's batch and state; runs that are the same program (the same policy on the names the
model emits, batch and state) are measured once, under every role they hold. ``results/decision_picks.json`` is
committed before anything is measured. ``measure`` runs each of them on the chip (``measure.train_step``) and
writes their tokens/s: the best measured is the reference, ``regret = 1 - pick / best``
(``regret.regret``). ``--merge PART ...`` joins parts (one per process) into one result. ``explain``
(compile-only, after both are stored) compiles the pick and the best run of each shape the pick lost and
simulates them side by side per op class: ``results/decision_explained.json``. ``--set second``: the second set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import _common

from companion import compiler, freshness, policies, results, schedule, targets, train
from companion.planning import decisions, plan, regret

RESULTS = Path(__file__).resolve().parent / "results"


def _run(role: str, cfg, policy, batch: int, state: train.StateConfig, peak: int | None, seconds: float | None,
         seq: int) -> dict:
    """One run to measure: its role, its program's inputs, what it compiled to and what the lab predicts."""
    touched = policies.resolve(policy).touched(decisions.emitted(cfg))
    return {"roles": [role], "policy": policy, "touched": dict(sorted(touched.items())), "batch": batch,
            "state": dataclasses.asdict(state), "compiled_peak_bytes": peak,
            "simulated_step_seconds": seconds,
            "simulated_tokens_per_s": batch * seq / seconds if seconds else None}


def _program(cfg, run: dict, seq: int) -> dict:
    """``run`` with its compiled program's hash (``freshness.program_hash``: the report cache answers a compile the
    planner or the preset search already made)."""
    trainer = train.trainer(cfg, run["policy"], state=train.StateConfig(**run["state"]))
    report = train.compile_step(trainer, compiler.place(targets.target(decisions.TARGET)), run["batch"], seq)
    return {**run, "program": freshness.program_hash(report.hlo_text)}


def plan_job(shape: decisions.Shape) -> dict:
    """The planner's pick on ``shape``, its other finalists that fit and full remat at the pick's batch."""
    target = targets.target(decisions.TARGET)
    cfg, started = shape.model(), time.perf_counter()
    try:
        chosen = plan.plan(cfg, target, shape.seq)
    except ValueError as refused:  # the planner found nothing that compiles: its decision, and a loss if one fits
        return {"shape": shape.key, "job": "plan", "runs": [], "plan": {"error": str(refused)},
                "seconds": round(time.perf_counter() - started, 1)}
    pick = chosen.chosen
    runs = [_run("pick", cfg, pick.candidate.policy, pick.candidate.batch, pick.candidate.state, pick.device_bytes,
                 pick.step_seconds, shape.seq)]
    runs += [_run("runner_up", cfg, f.candidate.policy, f.candidate.batch, f.candidate.state, f.device_bytes,
                  f.step_seconds, shape.seq) for f in chosen.finalists if f.fits and f is not pick]
    full = _full_at(cfg, target, shape.seq, pick.candidate.batch, pick.candidate.state)
    return {"shape": shape.key, "job": "plan", "runs": [_program(cfg, r, shape.seq) for r in runs + ([full] if full else [])],
            "plan": {"label": pick.candidate.label(), "tie_break": chosen.tie_break,
                     "finalists": [f.to_dict() for f in chosen.finalists], "maxtext": chosen.overrides(),
                     "command_line": chosen.command_line()},
            "seconds": round(time.perf_counter() - started, 1)}


def preset_job(shape: decisions.Shape, name: str) -> dict:
    """MaxText's preset ``name`` at its own largest batch on ``shape`` (the shape's optimizer placement)."""
    target = targets.target(decisions.TARGET)
    cfg, started = shape.model(), time.perf_counter()
    found = plan.largest_batch(cfg, target, shape.seq, name, state=shape.state())
    runs = [_run(f"preset:{name}", cfg, name, found.batch, shape.state(), found.device_bytes, found.step_seconds,
                 shape.seq)] if found.batch else []
    return {"shape": shape.key, "job": f"preset:{name}", "runs": [_program(cfg, r, shape.seq) for r in runs],
            "preset": {"name": name, "batch": found.batch, "budget_batch": found.budget_batch,
                       "compiles": found.compiles, "device_bytes": found.device_bytes,
                       "next_device_bytes": found.next_device_bytes},
            "seconds": round(time.perf_counter() - started, 1)}


def jobs(shape: decisions.Shape) -> list[str]:
    """One shape's compile-only jobs: the plan, then each distinct preset (each its own process on the chip's host)."""
    return ["plan", *(f"preset:{name}" for name in decisions.distinct_presets(shape.model()))]


def assemble(shape: decisions.Shape, parts: list[dict]) -> dict:
    """One shape's entry from its jobs: the plan, the presets, and every distinct run with all its roles."""
    by_job = {p["job"]: p for p in parts if p["shape"] == shape.key}
    missing = [job for job in jobs(shape) if job not in by_job]
    if missing:
        raise SystemExit(f"{shape.key}: no part for {', '.join(missing)}")
    ordered = [by_job[job] for job in jobs(shape)]
    return {"shape": shape.key, "plan": by_job["plan"]["plan"],
            "presets": {p["preset"]["name"]: p["preset"] for p in ordered[1:]},
            "runs": decisions.merge_roles([r for p in ordered for r in p["runs"]]),
            "compile_seconds": round(sum(p["seconds"] for p in ordered), 1)}


def _full_at(cfg, target, seq: int, batch: int, state: train.StateConfig) -> dict | None:
    """Full remat at the pick's batch and state, where it fits (None where XLA:TPU refuses it)."""
    trainer = train.trainer(cfg, "full", state=state)
    try:
        report = train.compile_step(trainer, compiler.place(target), batch, seq)
    except compiler.DoesNotFit:
        return None
    if not report.fits:
        return None
    return _run("full_at_pick_batch", cfg, "full", batch, state, report.device.peak_bytes,
                schedule.simulate(report, target).step_seconds, seq)


def committed_runs(paths: list[Path]) -> dict[str, list[dict]]:
    """Per shape, the distinct runs (by program) of committed picks: merged results' entries or jobs' parts."""
    runs: dict[str, list[dict]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for entry in data.get("entries", []) + data.get("parts", []):
            runs[entry["shape"]] = decisions.merge_roles(runs.get(entry["shape"], []) + entry["runs"])
    return runs


def regret_table(picks: list[Path], measured: list[Path], set_name: str = "first") -> dict:
    """``regret.regret_table`` over stored files; the goal judged over the shapes measured."""
    table, waiting = regret.regret_table([json.loads(Path(p).read_text()) for p in picks],
                                            [json.loads(Path(p).read_text()) for p in measured],
                                            decisions.committed_shapes(decisions.shapes_result(set_name)))
    return {"regrets": [r.to_dict() for r in table], "not_measured": waiting,
            "goal": regret.goal_met(table) if table else None}


def explain(key: str, runs: list[dict]) -> dict:
    """Why the pick lost on one shape: the pick and the fastest measured run compiled again (the report cache answers)
    and simulated side by side, busy seconds per op class (``StepSimulation.time_by_kind``) and the exposed waits,
    with the chip's step beside each. ``runs``: the shape's committed runs joined to their measured tokens/s."""
    shape = decisions.shape_of(key)
    target = targets.target(decisions.TARGET)
    placement = compiler.place(target)
    ran = [r for r in runs if r.get("tokens_per_s")]
    pick = next(r for r in runs if "pick" in r["roles"])
    best = max(ran, key=lambda r: r["tokens_per_s"])
    out = {"shape": key, "runs": []}
    for role, run in (("pick", pick), ("best", best)):
        trainer = train.trainer(shape.model(), run["policy"], state=train.StateConfig(**run["state"]))
        report = train.compile_step(trainer, placement, run["batch"], shape.seq)
        sim = schedule.simulate(report, target)
        out["runs"].append({"role": role, "roles": run["roles"], "batch": run["batch"], "policy": run["policy"],
                            "state": run["state"], "measured_step_seconds": run["batch"] * shape.seq / run["tokens_per_s"],
                            "tokens_per_s": run["tokens_per_s"], "simulated_step_seconds": sim.step_seconds,
                            "compute_seconds": sim.compute_seconds,
                            "exposed_transfer_seconds": sim.exposed_transfer_seconds,
                            "recompute_flops": sim.recompute_flops, "hardware_flops": sim.hardware_flops,
                            "model_flops": sim.model_flops, "time_by_kind": dict(sim.time_by_kind),
                            "host_bytes": sim.host_bytes, "peak_device_bytes": sim.peak_device_bytes})
    return out


def measure_runs(key: str, runs: list[dict], steps: int, warmup: int, done: set[str] = frozenset(),
                 save=lambda out: None) -> list[dict]:
    """Each run of one shape on this machine's chip (but the programs in ``done``): the measured record beside it,
    ``save``d after each run (a part cut off by the chip's time limit keeps what it measured)."""
    from companion.measuring import measure

    shape = decisions.shape_of(key)
    placement = compiler.place(targets.target(decisions.TARGET))  # the chip itself where one is attached
    out = []
    for run in (r for r in runs if r["program"] not in done):
        trainer = train.trainer(shape.model(), run["policy"], state=train.StateConfig(**run["state"]))
        record = measure.train_step(trainer, placement, run["batch"], shape.seq, steps=steps, warmup=warmup)
        seconds = (record.get("timing") or {}).get("median")
        out.append({**run, "measured": record, "tokens_per_s": run["batch"] * shape.seq / seconds if seconds else None})
        print(f"  {key} {'/'.join(run['roles'])} B={run['batch']}: "
              f"{out[-1]['tokens_per_s'] or 0:,.0f} tokens/s", flush=True)
        save(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("picks", "measure", "explain"), required=True)
    parser.add_argument("--only", nargs="*", default=None, help="only these shape keys")
    parser.add_argument("--job", default=None, help="picks: only this job of each shape (plan, preset:NAME)")
    parser.add_argument("--list-jobs", action="store_true", help="picks: print 'KEY JOB' per job and stop")
    parser.add_argument("--out", default=None, help="write this part's JSON here (one per process), not results/")
    parser.add_argument("--merge", nargs="*", default=None, help="join these parts' JSON into the result")
    parser.add_argument("--picks", nargs="*", type=Path, default=None,
                        help="measure: the committed picks (merged result or jobs' parts; default results/decision_picks.json)")
    parser.add_argument("--done", nargs="*", type=Path, default=[], help="measure: parts already measured (skipped)")
    parser.add_argument("--set", default="first", choices=tuple(decisions.SETS),
                        help="which drawn set (decisions.SETS): its shapes, and its results' names")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    shapes = [s for s in decisions.committed_shapes(decisions.shapes_result(args.set)) if not args.only or s.key in args.only]
    if args.list_jobs:
        print("\n".join(f"{s.key} {job}" for s in shapes for job in jobs(s)))
        return
    freshness.refuse_off_lock(results.producer())  # the chip's own compiler and runtime
    name = {"picks": "decision_picks", "measure": "decision_measured", "explain": "decision_explained"}[args.part]
    name += "" if args.set == "first" else f"_{args.set}"
    if args.part == "explain":  # the losses (regret over the goal's 2 %), from the stored picks and measurements
        picks = json.loads((RESULTS / name.replace("explained", "picks")).with_suffix(".json").read_text())
        measured = json.loads((RESULTS / name.replace("explained", "measured")).with_suffix(".json").read_text())
        tokens = {r["program"]: r["tokens_per_s"] for e in measured["entries"] for r in e["runs"]}
        table, _ = regret.regret_table([picks], [measured], shapes)
        lost = [r.shape for r in table if r.regret > regret.GOAL_REGRET and r.pick != regret.REFUSED]
        runs = {e["shape"]: [{**r, "tokens_per_s": tokens.get(r["program"])} for r in e["runs"]] for e in picks["entries"]}
        _common.write(name, {"entries": [explain(key, runs[key]) for key in lost]})
        return
    if args.merge:
        parts = [p for path in args.merge for p in json.loads(Path(path).read_text())["parts"]]
        if args.part == "picks":
            entries = [assemble(s, parts) for s in shapes]
        else:
            entries = [{"shape": s.key, "runs": [r for p in parts if p["shape"] == s.key for r in p["runs"]]}
                       for s in shapes]
        _common.write(name, {"entries": entries, "shapes": [s.key for s in shapes]})
        return
    if args.part == "picks":
        parts = [plan_job(s) if job == "plan" else preset_job(s, job.split(":", 1)[1])
                 for s in shapes for job in jobs(s) if args.job in (None, job)]
        for p in parts:
            print(f"{p['shape']} {p['job']}: {len(p['runs'])} run(s), {p['seconds']:.0f} s", flush=True)
    else:
        runs = committed_runs(args.picks or [RESULTS / f"{name.replace('measured', 'picks')}.json"])
        done = {r["program"] for path in args.done for p in json.loads(Path(path).read_text())["parts"] for r in p["runs"]}
        parts = []
        for s in (s for s in shapes if s.key in runs):
            parts.append({"shape": s.key, "runs": []})
            measure_runs(s.key, runs[s.key], args.steps, args.warmup, done,
                         save=lambda out: (parts[-1].update(runs=list(out)), _save(args, name, parts)))
    _save(args, name, parts)


def _save(args, name: str, parts: list[dict]) -> None:
    """A part's JSON, one file per process: ``--out`` or results/parts."""
    Path(args.out or RESULTS / "parts").mkdir(parents=True, exist_ok=True)
    tag = "_".join([*(args.only or ["all"]), *([args.job.replace(":", "-")] if args.job else [])]).replace("+", "_")
    (Path(args.out or RESULTS / "parts") / f"{name}-{tag}.json").write_text(json.dumps({"parts": parts}, indent=1))


if __name__ == "__main__":
    main()
