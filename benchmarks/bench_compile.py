"""Compile seconds of the full train step for the full-size models (goal: under 10 s each).

    .venv/bin/python benchmarks/bench_compile.py

Each configuration is compiled ``REPEATS`` times in this process (compile-only, no GPU); the
median goes in benchmarks/results/compile.json with the lowering share and the memory report.
"""

from __future__ import annotations

import statistics
import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402
import jax  # noqa: E402

from companion import compiler, targets, train  # noqa: E402

GOAL_SECONDS = 10.0
REPEATS = 3
CASES = [
    ("llama3.1-405b", "h100:8x8", None, "full"),
    ("llama3.1-405b", "h100:8x8", None, "minimal_offloaded"),
    ("deepseek-v3-671b", "gb200:16x4", {"fsdp": 8, "expert": 8}, "full"),
    ("deepseek-v3-671b", "gb200:16x4", {"fsdp": 8, "expert": 8}, "minimal_offloaded"),
]


def measure(model, target_name, mesh, policy, batch=64, seq=4096) -> dict:
    placement = compiler.place(targets.target(target_name), mesh)
    trainer = train.trainer(model, policy)
    state = train.abstract_state(trainer, placement, batch, seq)
    lower, total = [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        with jax.set_mesh(placement.mesh):
            trainer.jit_step().lower(*state.arguments())
        lowered_at = time.perf_counter()
        report = compiler.compile(trainer.jit_step(), *state.arguments(), placement=placement)
        lower.append(lowered_at - start)
        total.append(report.compile_seconds)
    seconds = statistics.median(total)
    print(f"{model:18} {target_name:11} {policy:18} compile {seconds:6.2f} s (lowering {statistics.median(lower):.2f} s)")
    return {"model": model, "target": target_name, "mesh": dict(placement.mesh.shape), "policy": policy,
            "batch": batch, "seq": seq, "compile_seconds_median": round(seconds, 3),
            "compile_seconds_all": [round(s, 3) for s in total], "lowering_seconds_median": round(statistics.median(lower), 3),
            "meets_goal": seconds < GOAL_SECONDS, "device_peak_bytes": report.device.peak_bytes,
            "host_temp_bytes": report.host.temp_bytes}


def main() -> None:
    rows = [measure(*case) for case in CASES]
    _common.write("compile", {"goal_seconds": GOAL_SECONDS, "repeats": REPEATS, "results": rows})


if __name__ == "__main__":
    main()
