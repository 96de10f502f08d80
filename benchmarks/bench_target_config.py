"""What the full target config changes: XLA's own cost estimates with and without the rate tables.

    .venv/bin/python benchmarks/bench_target_config.py

The same real-size layer stack (Llama 3.1 8B, 2 layers, B=8, S=4096, 8 GPUs, minimal_offloaded,
MaxText's GPU flags) is compiled twice per GPU: with the lab's full ``GpuTargetConfigProto`` and
with the reduced one it rendered before (no ``scalar_unit_description`` / ``matrix_unit_description``,
the tables XLA's dot cost model reads). For each, from the latency-hiding scheduler's dump: its
estimate of the largest bf16 matmul against the roofline at peak, its estimate of a host transfer,
its estimated time of the step, and whether the compiled program (its memory and the order of its
instructions) changed. Results: benchmarks/results/target_config.json.
"""

from __future__ import annotations

import hashlib
import re

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402

from companion import compiler, hlo, models, roofline, targets, train  # noqa: E402

STACK = models.config("llama3.1-8b", num_layers=2)


def reduced(config: str) -> str:
    """The config without the unit rate tables (the field set the lab rendered before)."""
    return re.sub(r"  (scalar|matrix)_unit_description \{.*?\n  \}\n", "", config, flags=re.S)


FLAG_SETS = {"maxtext_gpu": "maxtext_gpu",  # cuBLAS matmuls (Triton gemm off)
             "xla_defaults_lhs": "none --xla_gpu_enable_latency_hiding_scheduler=true"}  # Triton gemm fusions


def measure(target: targets.Target, config: str, flags: str) -> dict:
    placement = compiler.place(target, target_config=config)
    r = train.compile_layer_stack(STACK, "minimal_offloaded", placement, 8, 4096, flags=flags, dump=True)
    ops = {op.name: op for op in r.dump.schedule.ops()}
    costs = [c for c in hlo.op_costs(hlo.parse_module(r.dump.module_text)) if c.name in ops and c.dtype == "bf16"]
    biggest = max(costs, key=lambda c: c.flops)
    transfers = {t.name for t in r.offload.transfers}
    spans = [done.end - start.start for comp in r.dump.schedule.computations.values()
             for start, done in comp.async_spans() if start.name in transfers]
    order = "\n".join(i.name for i in r.module.scheduled())
    return {
        "matmul": biggest.name, "matmul_gflop": round(biggest.flops / 1e9, 1),
        "xla_matmul_us": round(ops[biggest.name].cost, 1),
        "roofline_matmul_us": round(roofline.op_seconds(biggest, target.gpu) * 1e6, 1),
        "xla_shortest_host_transfer_us": round(min(spans), 1) if spans else None,
        "xla_step_us": round(sum(c.total_us for c in r.dump.schedule.computations.values()), 1),
        "device_peak_bytes": r.device.peak_bytes,
        "schedule_hash": hashlib.sha256(order.encode()).hexdigest()[:12],
    }


def main() -> None:
    rows = {}
    for key in ("h100", "b200", "gb200"):
        target = targets.target(key, "1x8")
        full = target.target_config_text()
        for label, flags in FLAG_SETS.items():
            row = {"full": measure(target, full, flags), "reduced": measure(target, reduced(full), flags)}
            f, r = row["full"], row["reduced"]
            row["schedule_changed"] = f["schedule_hash"] != r["schedule_hash"]
            row["memory_changed"] = f["device_peak_bytes"] != r["device_peak_bytes"]
            rows[f"{key} {label}"] = row
            print(f"{key:6} {label:17} {f['matmul']} {f['matmul_gflop']} GFLOP: roofline {f['roofline_matmul_us']} us, "
                  f"XLA full config {f['xla_matmul_us']} us, reduced {r['xla_matmul_us']} us | host transfer "
                  f"{f['xla_shortest_host_transfer_us']} us | step {f['xla_step_us']} vs {r['xla_step_us']} us | "
                  f"schedule changed {row['schedule_changed']}, memory changed {row['memory_changed']}", flush=True)
    _common.write("target_config", {"stack": "llama3.1-8b x2, B8 S4096, 1x8, minimal_offloaded",
                                    "flag_sets": FLAG_SETS, "results": rows})


if __name__ == "__main__":
    main()
