"""Accuracy of the analytic HBM budget against XLA, and of the rules of thumb, on a grid.

    .venv/bin/python benchmarks/bench_budget.py            # the whole grid (~4 minutes on 2 cores)
    .venv/bin/python benchmarks/bench_budget.py --quick    # every 4th configuration

For each configuration the full train step is compiled for the GPU target (compile-only) and
the per-device bytes XLA assigns (device footprint and host temp) are compared with
``budget.estimate`` and with ``heuristics.estimates``. Results: benchmarks/results/budget.json.
Goal: median |error| <= 1 %, worst <= 3 %, on device bytes and on host bytes.
"""

from __future__ import annotations

import statistics
import sys
import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402

from companion import budget, compiler, heuristics, models, sharding, targets, train  # noqa: E402

CUSTOM = {"decoder_layer_input": "offload", "query_proj": "device", "key_proj": "device", "value_proj": "device",
          "mlpwi_0": "offload", "mlpwi_1": "offload"}
CHUNKED = {"attention": "chunked"}

# (model, overrides, policy, batch, seq, target, mesh)
GRID = [
    *[("llama3.1-8b", {}, p, 8, 4096, "h100:1x8", "fsdp=8")
      for p in ("full", "minimal", "save_qkv_proj", "save_dot_except_mlp", "minimal_offloaded")],
    ("llama3.1-8b", {}, "full", 16, 2048, "h100:1x8", "fsdp=8"),
    ("llama3.1-8b", {}, "qkv_proj_offloaded", 16, 2048, "h100:1x8", "fsdp=8"),
    ("llama3.1-8b", CHUNKED, "full", 32, 4096, "h100:1x8", "fsdp=8"),
    ("llama3.1-8b", CHUNKED, "minimal", 32, 4096, "h100:1x8", "fsdp=8"),
    ("llama3.1-8b", CHUNKED, "full", 8, 8192, "h200:1x8", "fsdp=4,tensor=2"),
    *[("llama3.1-70b", {}, p, 64, 4096, "h100:8x8", "fsdp=64") for p in ("full", "minimal_offloaded", "save_out_proj")],
    ("llama3.1-70b", {}, "full", 64, 4096, "h100:8x8", "fsdp=8,tensor=8"),
    ("llama3.1-70b", {}, CUSTOM, 64, 4096, "h100:8x8", "fsdp=8,tensor=8"),
    *[("llama3.1-405b", {}, p, 64, 4096, "h100:8x8", "fsdp=64") for p in ("full", "minimal", "minimal_offloaded")],
    ("llama3.1-405b", {}, "full", 64, 4096, "h100:8x8", "fsdp=8,tensor=8"),
    ("llama3.1-405b", {**CHUNKED, "num_layers": 16}, "save_qkv_proj", 16, 8192, "h200:2x8", "fsdp=16"),
    ("llama3.1-405b", {**CHUNKED, "num_layers": 16}, "qkv_proj_offloaded", 16, 8192, "h200:2x8", "fsdp=16"),
    ("llama3.1-405b", {}, "full", 64, 4096, "gb200:16x4", "fsdp=64"),
    *[("tiny-llama", {}, p, 16, 512, "h100:1x2", "fsdp=2")
      for p in ("full", "save_dot_with_context_except_mlp", "minimal_offloaded", "save_out_proj")],
    *[("deepseek-v3-671b", {}, p, 64, 4096, "gb200:16x4", "fsdp=8,expert=8")
      for p in ("full", "minimal", "minimal_offloaded")],
    *[("deepseek-v3-671b", {"num_layers": 6}, p, 8, 4096, "b200:1x8", "expert=8")
      for p in ("full", "save_qkv_proj", "qkv_proj_offloaded")],
    *[("tiny-deepseek", {}, p, 8, 256, "h100:1x2", "fsdp=2") for p in ("full", "minimal")],
]


def error(estimate: float, truth: float) -> float | None:
    if truth == 0:
        return 0.0 if estimate == 0 else None
    return 100.0 * (estimate - truth) / truth


def run(case) -> dict:
    name, overrides, policy, batch, seq, target_name, mesh_text = case
    cfg = models.config(name, **overrides)
    target = targets.target(target_name)
    mesh = sharding.parse_mesh(mesh_text, target.num_devices)
    placement = compiler.place(target, sharding.active_axes(mesh))
    report = train.compile_step(train.trainer(cfg, policy), placement, batch, seq)
    est = budget.estimate(cfg, batch, seq, policy, mesh, hbm_bytes=target.gpu.hbm_bytes)
    peers = heuristics.estimates(cfg, batch, seq, policy, mesh)
    row = {
        "model": name, "overrides": overrides, "policy": est.policy, "batch": batch, "seq": seq,
        "target": target.name, "mesh": {k: v for k, v in mesh.items() if v > 1},
        "compiled_device_bytes": report.device.peak_bytes, "compiled_host_bytes": report.host.temp_bytes,
        "analytic_device_bytes": est.device_bytes, "analytic_host_bytes": est.host_bytes,
        "device_error_pct": error(est.device_bytes, report.device.peak_bytes),
        "host_error_pct": error(est.host_bytes, report.host.temp_bytes),
        "peak_phase": est.peak_phase, "compile_seconds": round(report.compile_seconds, 2),
        "xla_remat_warning": any("rematerialization" in w for w in report.compiler_warnings),
        "peers": [{"rule": p.rule, "device_bytes": p.device_bytes,
                   "device_error_pct": error(p.device_bytes, report.device.peak_bytes)} for p in peers],
    }
    print(f"{name:17} {str(overrides)[:34]:34} {est.policy:18} B{batch:<3} S{seq:<5} {target.name:11} "
          f"{','.join(f'{k}={v}' for k, v in row['mesh'].items()):16} device {row['device_error_pct']:+6.2f}% "
          f"host {row['host_error_pct'] if row['host_error_pct'] is not None else float('nan'):+6.2f}%", flush=True)
    return row


def summary(rows: list[dict]) -> dict:
    def stats(values):
        values = [abs(v) for v in values if v is not None]
        return {"median_abs_pct": round(statistics.median(values), 3), "worst_abs_pct": round(max(values), 3),
                "n": len(values)}

    out = {"device": stats(r["device_error_pct"] for r in rows),
           "host_offloading": stats(r["host_error_pct"] for r in rows if r["compiled_host_bytes"]),
           "peers": {}}
    for i, rule in enumerate(p["rule"].split(" + ")[0] for p in rows[0]["peers"]):
        out["peers"][rule] = stats(r["peers"][i]["device_error_pct"] for r in rows)
    return out


def main() -> None:
    grid = GRID[::4] if "--quick" in sys.argv else GRID
    start = time.perf_counter()
    rows = [run(case) for case in grid]
    result = {"goal": {"median_abs_pct": 1.0, "worst_abs_pct": 3.0}, "summary": summary(rows),
              "configurations": len(rows), "seconds": round(time.perf_counter() - start, 1), "results": rows}
    s = result["summary"]
    print(f"device: median {s['device']['median_abs_pct']:.2f}%, worst {s['device']['worst_abs_pct']:.2f}% | "
          f"host (offloading configs): median {s['host_offloading']['median_abs_pct']:.2f}%, "
          f"worst {s['host_offloading']['worst_abs_pct']:.2f}%")
    for rule, st in s["peers"].items():
        print(f"  {rule:32} median {st['median_abs_pct']:.1f}%, worst {st['worst_abs_pct']:.1f}%")
    _common.write("budget" if grid is GRID else "budget_quick", result)


if __name__ == "__main__":
    main()
