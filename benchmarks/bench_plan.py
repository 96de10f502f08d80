"""The largest batch per policy, the planner, and compile time at real deployments.

    .venv/bin/python benchmarks/bench_plan.py [largest|planner|deployments ...]

* ``largest``: for every MaxText preset, naive and pipelined offload and optimizer offload, the largest
  global batch the budget fits under usable HBM and the compiler's boundary (compiled at it and one step
  further), with the simulated TFLOP/s per GPU at that batch (``plan.largest_batch``).
* ``planner``: ``plan.plan`` on Llama 3.1 405B (256 H100, S = 8192: the issue's acceptance command) and
  DeepSeek-V3 671B (512 GB200, S = 4096): seconds, candidates, the plan, its budget against its compile (a
  case the planner cannot fit is recorded with its one-line reason).
  Goal: a 405B plan in <= 60 s on 2 cores.
* ``deployments``: compile seconds and peaks of the full train step at 256 to 1024 GPUs.

Results: benchmarks/results/plan.json (each section rewritten when it runs, the others kept).
"""

from __future__ import annotations

import json
import sys
import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402

from companion import compiler, plan, sharding, targets, train  # noqa: E402

GOAL_SECONDS = 60.0
PIPELINED = "--xla_gpu_enable_pipelined_host_offloading=true"
OPT_OFFLOAD = train.StateConfig(optimizer_memory_host_offload=True)
# (label, policy, flags, state): every MaxText preset, the offloading ones naive and pipelined, and full
# remat with the optimizer's moments offloaded
VARIANTS = [(p, p, None, train.StateConfig()) for p in
            ("full", "save_out_proj", "save_qkv_proj", "save_dot_except_mlp", "save_dot_except_mlpwi",
             "save_dot_with_context_except_mlp", "minimal", "minimal_with_context")]
VARIANTS += [(f"{p} ({'pipelined' if f else 'naive'})", p, f, train.StateConfig())
             for p in ("qkv_proj_offloaded", "minimal_offloaded") for f in (None, PIPELINED)]
VARIANTS += [("full + optimizer offload", "full", None, OPT_OFFLOAD)]
THREE_WAYS = ("full", "minimal_offloaded (naive)", "minimal_offloaded (pipelined)")
# (model, target, mesh, sequence, XLA_PYTHON_CLIENT_MEM_FRACTION, variants: None = all). The full-size cases run at
# 0.85, the fraction MaxText's GPU launcher exports (tools/orchestration/gpu_multi_process_run.sh at e591f30): at
# JAX's 0.75 no preset fits one sequence per GPU of either model there
LARGEST_CASES = [
    ("llama3.1-8b", "h100:1x8", "fsdp=8", 4096, 0.75, None),
    ("llama3.1-405b", "h100:32x8", "fsdp=256", 4096, 0.85, None),
    # 256 GB200 do not fit full remat at one sequence per GPU even at 0.85 (compiled 158.4 GiB of 156.7): 512 do
    ("deepseek-v3-671b", "gb200:128x4", "fsdp=64,expert=8", 4096, 0.85, THREE_WAYS),  # ~30-60 s a compile
]
PLANNER_CASES = [  # (model, target, mesh or None: the planner's meshes, sequence)
    ("llama3.1-405b", "h100:32x8", None, 8192),
    ("deepseek-v3-671b", "gb200:128x4", "fsdp=64,expert=8", 4096),
]
DEPLOYMENTS = [  # (model, target, mesh, batch, sequence, policy, state)
    ("llama3.1-405b", "h100:64x8", "fsdp=512", 512, 8192, "full", OPT_OFFLOAD),
    ("llama3.1-405b", "h100:128x8", "fsdp=128,tensor=8", 128, 8192, "full", train.StateConfig()),
    ("deepseek-v3-671b", "h100:64x8", "fsdp=64,expert=8", 512, 4096, "full", train.StateConfig()),
    ("deepseek-v3-671b", "gb200:128x4", "fsdp=64,expert=8", 512, 4096, "full", train.StateConfig()),
    ("deepseek-v3-671b", "gb200:64x4", "fsdp=32,expert=8", 256, 4096, "full", train.StateConfig()),
]


def largest() -> list[dict]:
    rows = []
    for model, target_key, mesh, seq, fraction, only in LARGEST_CASES:
        target = targets.target(target_key, mem_fraction=fraction)
        for label, policy, flags, state in VARIANTS:
            if only is not None and label not in only:
                continue
            start = time.perf_counter()
            r = plan.largest_batch(model, target, seq, policy, mesh, state=state, flags=flags)
            seconds = time.perf_counter() - start
            rows.append({**r.to_dict(), "label": label, "flags": flags or "", "mem_fraction": fraction,
                         "seconds": round(seconds, 1)})
            print(f"{model:14} {target_key:10} S{seq:<5} {label:34} budget {r.budget_batch:5d} compiled {r.batch:5d} "
                  f"({r.device_bytes / 2**30:5.1f} GiB; next {r.next_device_bytes / 2**30:5.1f} of "
                  f"{r.usable_hbm_bytes / 2**30:.1f}) {r.tflops_per_gpu:5.0f} TFLOP/s, {r.compiles} compiles, "
                  f"{seconds:.0f} s", flush=True)
    return rows


def planner() -> list[dict]:
    rows = []
    for model, target_key, mesh, seq in PLANNER_CASES:
        target = targets.target(target_key)
        start = time.perf_counter()
        try:
            p = plan.plan(model, target, seq, mesh)
        except ValueError as err:
            rows.append({"model": model, "target": target_key, "mesh_given": mesh, "seq": seq, "error": str(err),
                         "seconds": round(time.perf_counter() - start, 1)})
            print(f"{model}: {err}", flush=True)
            continue
        seconds = time.perf_counter() - start
        k = p.chosen
        rows.append({"model": model, "target": target_key, "mesh_given": mesh, "seq": seq, "seconds": round(seconds, 1),
                     "meets_goal": seconds <= GOAL_SECONDS, "searched": p.searched, "feasible": p.feasible,
                     "compiles": len(p.finalists), "plan": p.to_dict()})
        print(p.summary(), flush=True)
        print(f"{model}: {seconds:.1f} s; budget {k.candidate.device_bytes / 2**30:.2f} GiB vs compiled "
              f"{k.device_bytes / 2**30:.2f} ({k.prediction_error:+.1%})", flush=True)
    return rows


def deployments() -> list[dict]:
    rows = []
    for model, target_key, mesh, batch, seq, policy, state in DEPLOYMENTS:
        target = targets.target(target_key)
        m = sharding.parse_mesh(mesh, target.num_devices)
        start = time.perf_counter()
        report = train.compile_step(train.trainer(model, policy, state=state),
                                    compiler.place(target, sharding.active_axes(m)), batch, seq)
        seconds = time.perf_counter() - start
        rows.append({"model": model, "target": target_key, "num_devices": target.num_devices, "mesh": mesh,
                     "batch": batch, "seq": seq, "policy": policy, "state": state.__dict__,
                     "compile_seconds": round(report.compile_seconds, 1), "wall_seconds": round(seconds, 1),
                     "device_peak_bytes": report.device.peak_bytes, "fits": report.fits})
        print(f"{model:16} {target_key:11} {mesh:18} B={batch} S={seq}: compile {report.compile_seconds:.1f} s "
              f"(wall {seconds:.1f} s), peak {report.device.peak_bytes / 2**30:.1f} GiB", flush=True)
    return rows


SECTIONS = {"largest": largest, "planner": planner, "deployments": deployments}


def main(names: list[str]) -> None:
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    path = _common.RESULTS / "plan.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    payload = {"goal_seconds": GOAL_SECONDS, **{k: old[k] for k in SECTIONS if k in old}}
    for name in names or list(SECTIONS):  # written after each section: a long run keeps what it finished
        payload[name] = SECTIONS[name]()
        _common.write("plan", payload)


if __name__ == "__main__":
    main(sys.argv[1:])
