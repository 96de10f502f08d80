"""Compile seconds of the full train step for the full-size models (the lab's goal: under 10 s each).

    .venv/bin/python benchmarks/bench_compile.py

Each configuration is compiled ``REPEATS`` times cold (XLA's kernel cache emptied before each: every
kernel generated) and ``REPEATS`` times warm (the cache the cold compiles filled: what a second compile of
the same model, or another policy of it, costs; ``compiler.kernel_cache_file``), in this process. The
medians go in benchmarks/results/compile.json with where the cold compile's time goes — JAX's lowering,
XLA's HLO passes (``GpuCompiler::RunHloPasses``) and its backend (``RunBackend``: scheduling, buffer
assignment, then code generation by LLVM and ptxas for each fused kernel, their CPU seconds summed over
the compile's threads), from XLA's own scoped timers — and the kernels generated, and the scheduled
kernels by kind (fusion emitter or custom call). Run it on an otherwise idle machine: compile seconds are wall-clock.

The 671B step is the acceptance configuration of the MoE paths: 64 GB200 at fsdp=8,expert=8, B=64,
S=4096, ``full``, one row per ``--moe`` path (grouped: the lab's default; ragged_dot; dense with
capacity factor 1.25). ``BEFORE``: the same step before the grouped GEMM (commit cd5e463: the lab's
tile loop, ``dropless``, and the scatter-based ``capacity`` path, which had no kernel cache), measured
the way this script measures a cold compile (a fresh process each, median of 3) on 2026-12-05; and as
``compile.json`` recorded it on 2026-12-03 (median of 3 in one process).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile

import _common  # noqa: F401  (sets sys.path)

GOAL_SECONDS = 10.0
REPEATS = 3
DS_MESH = "fsdp=8,expert=8"
BEFORE = {"dropless (tile loop)": 34.84, "capacity (scatter)": 25.27,  # cd5e463, fresh processes, 2026-12-05
          "dropless (tile loop), in one process, 2026-12-03": 51.015, "capacity (scatter), 2026-12-03": 27.815}
# (model, target, mesh, policy, MoE changes)
CASES = [
    ("llama3.1-405b", "h100:8x8", "fsdp=64", "full", {}),
    ("llama3.1-405b", "h100:8x8", "fsdp=64", "minimal_offloaded", {}),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "full", {"dispatch": "grouped"}),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "minimal_offloaded", {"dispatch": "grouped"}),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "full", {"dispatch": "ragged_dot"}),
    ("deepseek-v3-671b", "gb200:16x4", DS_MESH, "full", {"dispatch": "dense", "capacity_factor": 1.25}),
]

# One compile in a fresh process (so that no in-process cache helps), printing its parts.
_ONE = """
import json, sys, time
import companion, jax
from companion import compiler, models, sharding, targets, train
model, target_name, mesh_text, policy, moe = sys.argv[1:6]
cfg = models.config(model)
cfg = cfg.with_moe(**json.loads(moe)) if json.loads(moe) else cfg
target = targets.target(target_name)
placement = compiler.place(target, sharding.active_axes(sharding.parse_mesh(mesh_text, target.num_devices)))
trainer = train.trainer(cfg, policy)
state = train.abstract_state(trainer, placement, 64, 4096)
start = time.perf_counter()
with jax.set_mesh(placement.mesh), compiler._compute_capability(placement):
    trainer.jit_step().lower(*state.arguments())
lowering = time.perf_counter() - start
report = compiler.compile(trainer.jit_step(), *state.arguments(), placement=placement)
kinds = {}
for instr in report.module.scheduled():
    if instr.opcode in ("fusion", "custom-call") or instr.opcode.endswith("-start") and instr.opcode != "copy-start":
        kind = instr.custom_call_target or instr.name.split(".")[0].split("_fusion")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
print(json.dumps({"seconds": report.compile_seconds, "lowering": lowering, "peak": report.device.peak_bytes,
                  "host_temp": report.host.temp_bytes, "kernel_kinds": kinds, "log": report.compiler_log}))
"""
_TIMER = re.compile(r"GpuCompiler::(RunHloPasses|RunBackend) for \S+ time: ([\d.]+) (s|ms)")
_KERNEL = re.compile(r"CompileToPtx for \S+ time: ([\d.]+) (s|ms|us)")
_PTXAS = re.compile(r"PtxToCubin for \S+ time: ([\d.]+) (s|ms|us)")


def _seconds(value: str, unit: str) -> float:
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def compile_once(case, cache: str, timers: bool = False) -> dict:
    """One compile in a new process with the kernel cache in ``cache``; with ``timers``, XLA's scoped
    timers of its phases and kernels too (their logging slows the compile: those seconds are not used)."""
    import json

    model, target, mesh, policy, moe = case
    env = {**os.environ, "OFFLOAD_LAB_KERNEL_CACHE": cache}
    if timers:
        env.update({"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "gpu_compiler=1,nvptx_compiler=1"})
    run = subprocess.run([sys.executable, "-c", _ONE, model, target, mesh, policy, json.dumps(moe)],
                         capture_output=True, text=True, env=env, cwd=_common.ROOT, timeout=900)
    if run.returncode:
        raise RuntimeError(run.stderr[-2000:])
    out = json.loads(run.stdout.strip().splitlines()[-1])
    log = out.pop("log")  # XLA's log of the compile, which compiler.compile captures
    for phase, value, unit in _TIMER.findall(log):
        out[phase] = _seconds(value, unit)
    llvm, ptxas = _KERNEL.findall(log), _PTXAS.findall(log)
    out["kernels_generated"] = len(llvm)
    out["llvm_cpu_seconds"] = sum(_seconds(v, u) for v, u in llvm)  # summed over the compile's threads
    out["ptxas_cpu_seconds"] = sum(_seconds(v, u) for v, u in ptxas)
    return out


def measure(case) -> dict:
    model, target, mesh, policy, moe = case
    with tempfile.TemporaryDirectory() as cache:
        def emptied() -> str:
            for f in os.listdir(cache):
                os.remove(os.path.join(cache, f))
            return cache

        parts = compile_once(case, emptied(), timers=True)  # where a cold compile's time goes
        cold = [compile_once(case, emptied()) for _ in range(REPEATS)]
        warm = [compile_once(case, cache) for _ in range(REPEATS)]
        warm_parts = compile_once(case, cache, timers=True)

    def median(runs, key):
        return round(statistics.median(r[key] for r in runs), 3)

    row = {"model": model, "target": target, "mesh": mesh, "policy": policy, "moe": moe, "batch": 64, "seq": 4096,
           "cold_seconds_median": median(cold, "seconds"), "cold_seconds_all": [round(r["seconds"], 3) for r in cold],
           "warm_seconds_median": median(warm, "seconds"), "warm_seconds_all": [round(r["seconds"], 3) for r in warm],
           "cold_parts": {"lowering": median(cold, "lowering"), "hlo_passes": round(parts["RunHloPasses"], 3),
                          "backend": round(parts["RunBackend"], 3),
                          "backend_llvm_cpu": round(parts["llvm_cpu_seconds"], 3),
                          "backend_ptxas_cpu": round(parts["ptxas_cpu_seconds"], 3),
                          "note": "XLA's scoped timers in one more cold compile, whose logging slows it"},
           "scheduled_kernels_by_kind": cold[0]["kernel_kinds"],
           "kernels_generated_cold": parts["kernels_generated"], "kernels_generated_warm": warm_parts["kernels_generated"],
           "meets_goal_cold": median(cold, "seconds") < GOAL_SECONDS,
           "meets_goal_warm": median(warm, "seconds") < GOAL_SECONDS,
           "device_peak_bytes": cold[0]["peak"], "host_temp_bytes": cold[0]["host_temp"]}
    p = row["cold_parts"]
    print(f"{model:18} {policy:18} {str(moe):48} cold {row['cold_seconds_median']:6.2f} s (lowering {p['lowering']:.2f}, "
          f"HLO passes {p['hlo_passes']:.2f}, backend {p['backend']:.2f}; {row['kernels_generated_cold']} kernels) "
          f"warm {row['warm_seconds_median']:6.2f} s ({row['kernels_generated_warm']} kernels)", flush=True)
    return row


def main() -> None:
    rows = [measure(case) for case in CASES]
    grouped = next(r for r in rows if r["moe"].get("dispatch") == "grouped" and r["policy"] == "full")
    _common.write("compile", {"goal_seconds": GOAL_SECONDS, "repeats": REPEATS, "before": BEFORE,
                              "grouped_cold_over_before": round(grouped["cold_seconds_median"]
                                                                / BEFORE["dropless (tile loop)"], 3),
                              "grouped_warm_over_before": round(grouped["warm_seconds_median"]
                                                                / BEFORE["dropless (tile loop)"], 3),
                              "results": rows})


if __name__ == "__main__":
    main()
