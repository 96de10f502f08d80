"""Seconds to simulate a compiled full-size train step (goal: at most 1 s after the compile).

    .venv/bin/python benchmarks/bench_schedule.py

Compiles Llama 3.1 405B and DeepSeek-V3 671B steps (MaxText's defaults; 64 GPUs, B64 S4096) with
and without host offload, then times ``schedule.prepare`` (pricing every op) and ``run`` (the
replay) ``REPEATS`` times each; the medians, the simulated step and the scheduled op counts go in
benchmarks/results/schedule.json.
"""

from __future__ import annotations

import statistics
import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402

from companion import compiler, schedule, targets, train  # noqa: E402

GOAL_SECONDS = 1.0
NOTES = ("DeepSeek-V3's routed experts run as grouped GEMMs (the lab's default --moe grouped, models/moe.py), priced "
         "as the grouped kernel they stand for; TFLOP/s are model FLOPs (companion.flops, MaxText's count).")
REPEATS = 3
CASES = [  # (model, target, mesh, policy, XLA flags on top of MaxText's)
    ("llama3.1-405b", "h100:8x8", None, "full", None),
    ("llama3.1-405b", "h100:8x8", None, "minimal_offloaded", "--xla_gpu_enable_pipelined_host_offloading=true"),
    ("deepseek-v3-671b", "gb200:16x4", {"fsdp": 8, "expert": 8}, "full", None),
    ("deepseek-v3-671b", "gb200:16x4", {"fsdp": 8, "expert": 8}, "minimal_offloaded",
     "--xla_gpu_enable_pipelined_host_offloading=true"),
]


def main() -> None:
    results = []
    for model, target, mesh, policy, flags in CASES:
        placement = compiler.place(targets.target(target), mesh)
        report = train.compile_step(train.trainer(model, policy), placement, batch=64, seq=4096, flags=flags)
        prepare, run = [], []
        for _ in range(REPEATS):
            t = time.perf_counter()
            sim = schedule.prepare(report)
            prepare.append(time.perf_counter() - t)
            t = time.perf_counter()
            result = sim.run()
            run.append(time.perf_counter() - t)
        total = statistics.median(prepare) + statistics.median(run)
        ops = sum(len(ops) for ops in sim.program.values())
        row = {"model": model, "target": target, "mesh": mesh or {"fsdp": 64}, "policy": policy, "flags": flags or "",
               "scheduled_ops": ops, "compile_seconds": round(report.compile_seconds, 2),
               "prepare_seconds": round(statistics.median(prepare), 3), "run_seconds": round(statistics.median(run), 3),
               "simulate_seconds": round(total, 3), "meets_goal": total <= GOAL_SECONDS,
               "step_seconds": result.step_seconds, "exposed_transfer_seconds": result.exposed_transfer_seconds,
               "exposed_collective_seconds": result.exposed_collective_seconds,
               "tflops_per_gpu": result.tflops_per_gpu, "mfu": result.mfu}
        print(f"{model:18} {policy:18} {ops:6} ops: prepare {row['prepare_seconds']:.3f} s + run "
              f"{row['run_seconds']:.3f} s; step {result.step_seconds:.2f} s, {result.tflops_per_gpu:.0f} TFLOP/s")
        results.append(row)
    _common.write("schedule", {"goal": f"simulate a compiled full-size step in <= {GOAL_SECONDS} s",
                               "repeats": REPEATS, "notes": NOTES, "results": results,
                               "worst_simulate_seconds": max(r["simulate_seconds"] for r in results)})


if __name__ == "__main__":
    main()
