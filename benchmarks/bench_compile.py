"""Compile seconds of the full train step for the full-size models (goal: under 10 s each).

    .venv/bin/python benchmarks/bench_compile.py

Each configuration is compiled ``REPEATS`` times in this process (compile-only, no GPU); the
median goes in benchmarks/results/compile.json with the lowering share and the memory report.
Run it on an otherwise idle machine: compile seconds are wall-clock.
"""

from __future__ import annotations

import statistics
import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402
import jax  # noqa: E402

from companion import compiler, models, targets, train  # noqa: E402

GOAL_SECONDS = 10.0
REPEATS = 3
DS_MESH = {"fsdp": 8, "expert": 8}
# (model, target, mesh, policy, config changes, XLA flags); the defaults are MaxText's: flash
# attention, dropless MoE, MaxText's GPU flags. The 671B variants after them show where its
# compile time goes (each one change from the default).
CASES = [
    ("llama3.1-405b", "h100:8x8", None, "full", {}, None),
    ("llama3.1-405b", "h100:8x8", None, "minimal_offloaded", {}, None),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "full", {}, None),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "minimal_offloaded", {}, None),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "full", {}, "none"),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "full", {"moe": "capacity"}, None),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "full", {"moe": "capacity", "attention": "dot_product"}, "none"),
]


def configure(model: str, changes: dict):
    cfg = models.config(model, **{k: v for k, v in changes.items() if k != "moe"})
    return cfg.with_moe(dispatch=changes["moe"]) if "moe" in changes else cfg


def measure(model, target_name, mesh, policy, changes, flags, batch=64, seq=4096) -> dict:
    placement = compiler.place(targets.target(target_name), mesh)
    trainer = train.trainer(configure(model, changes), policy)
    state = train.abstract_state(trainer, placement, batch, seq)
    lower, total = [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        with jax.set_mesh(placement.mesh):
            trainer.jit_step().lower(*state.arguments())
        lowered_at = time.perf_counter()
        report = compiler.compile(trainer.jit_step(), *state.arguments(), placement=placement, flags=flags)
        lower.append(lowered_at - start)
        total.append(report.compile_seconds)
    seconds = statistics.median(total)
    variant = ",".join(f"{k}={v}" for k, v in changes.items()) + (f" flags={flags}" if flags else "")
    print(f"{model:18} {target_name:11} {policy:18} {variant or 'defaults':38} compile {seconds:6.2f} s "
          f"(lowering {statistics.median(lower):.2f} s)", flush=True)
    return {"model": model, "target": target_name, "mesh": dict(placement.mesh.shape), "policy": policy,
            "changes": changes, "flags": report.flag_set.describe(),
            "batch": batch, "seq": seq, "compile_seconds_median": round(seconds, 3),
            "compile_seconds_all": [round(s, 3) for s in total], "lowering_seconds_median": round(statistics.median(lower), 3),
            "meets_goal": seconds < GOAL_SECONDS, "device_peak_bytes": report.device.peak_bytes,
            "host_temp_bytes": report.host.temp_bytes}


def main() -> None:
    rows = [measure(*case) for case in CASES]
    _common.write("compile", {"goal_seconds": GOAL_SECONDS, "repeats": REPEATS, "results": rows})


if __name__ == "__main__":
    main()
