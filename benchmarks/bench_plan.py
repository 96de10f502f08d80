"""The largest batch each MaxText preset fits, and how long finding it takes (``plan.largest_batch``).

    .venv/bin/python benchmarks/bench_plan.py

For each configuration and preset: the budget's largest global batch under usable HBM, the compiler's
boundary (compiled at it and one step further), the compiled peaks, the compiles it took and the
wall-clock seconds. Results: benchmarks/results/plan.json. Goal: a preset's answer in <= 60 s on 2 cores.
"""

from __future__ import annotations

import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402

from companion import plan, targets  # noqa: E402

GOAL_SECONDS = 60.0
POLICIES = ("full", "save_qkv_proj", "qkv_proj_offloaded", "minimal", "minimal_offloaded")
CASES = [  # (model, target, mesh, sequence, XLA_PYTHON_CLIENT_MEM_FRACTION)
    ("llama3.1-8b", "h100:1x8", "fsdp=8", 4096, 0.75),
    ("llama3.1-405b", "h100:32x8", "fsdp=256", 4096, 0.9),  # MaxText's GPU recipes raise the fraction
]


def main() -> None:
    rows = []
    for model, target_key, mesh, seq, fraction in CASES:
        target = targets.target(target_key, mem_fraction=fraction)
        for policy in POLICIES:
            start = time.perf_counter()
            r = plan.largest_batch(model, target, seq, policy, mesh)
            seconds = time.perf_counter() - start
            rows.append({**r.to_dict(), "mem_fraction": fraction, "seconds": round(seconds, 1),
                         "meets_goal": seconds <= GOAL_SECONDS})
            print(f"{model:14} {target_key:10} S{seq:<5} {policy:20} budget {r.budget_batch:5d} compiled {r.batch:5d} "
                  f"({r.device_bytes / 2**30:5.1f} GiB; next {r.next_device_bytes / 2**30:5.1f} of "
                  f"{r.usable_hbm_bytes / 2**30:.1f}) {r.compiles} compiles, {seconds:.0f} s", flush=True)
    _common.write("plan", {"goal_seconds": GOAL_SECONDS, "results": rows})


if __name__ == "__main__":
    main()
