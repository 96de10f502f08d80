"""Accuracy of the analytic HBM budget against XLA, and of the rules of thumb, on a grid.

    .venv/bin/python benchmarks/bench_budget.py            # the whole grid (~14 minutes on 2 cores)
    .venv/bin/python benchmarks/bench_budget.py --quick    # every 4th configuration
    .venv/bin/python benchmarks/bench_budget.py --summarize  # the stored results' summary again, no compile

For each configuration the full train step is compiled for the GPU target (compile-only) and
the per-device bytes XLA assigns (device footprint and host temp) are compared with
``budget.estimate`` and with ``heuristics.estimates``. Results: benchmarks/results/budget.json.
Goal: on the real-size configurations median |error| <= 1 %, worst <= 3 % on device bytes, and
host bytes exact; the tiny models (MB-scale, where XLA's fixed-size buffers dominate) separately.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time

import _common  # noqa: F401  (sets sys.path)

import companion  # noqa: F401,E402

from companion import budget, compiler, heuristics, models, sharding, targets, train  # noqa: E402

CUSTOM = {"decoder_layer_input": "offload", "query_proj": "device", "key_proj": "device", "value_proj": "device",
          "mlpwi_0": "offload", "mlpwi_1": "offload"}
DOT = {"attention": "dot_product"}
CHUNKED = {"attention": "chunked"}
DENSE = {"dispatch": "dense", "capacity_factor": 1.25}  # MaxText's dense path as its Mixtral GPU test runs it
PIPELINED = "--xla_gpu_enable_pipelined_host_offloading=true"
ACC2, ACC4 = train.StateConfig(gradient_accumulation_steps=2), train.StateConfig(gradient_accumulation_steps=4)
OPT_HOST = train.StateConfig(optimizer_memory_host_offload=True)
PARAMS_HOST = train.StateConfig(parameter_memory_host_offload=True)
BOTH_HOST = train.StateConfig(optimizer_memory_host_offload=True, parameter_memory_host_offload=True)


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration: the model (with overrides), the policy, B, S, target, mesh, state and extra flags."""

    model: str
    policy: object
    batch: int
    seq: int
    target: str
    mesh: str
    overrides: dict = dataclasses.field(default_factory=dict)
    moe: dict = dataclasses.field(default_factory=dict)
    state: train.StateConfig = train.StateConfig()
    flags: str | None = None

    @property
    def tiny(self) -> bool:
        return self.model.startswith("tiny")

    def config(self):
        cfg = models.config(self.model, **self.overrides)
        return cfg.with_moe(**self.moe) if self.moe else cfg


# Real-size configurations first, the tiny models (MB-scale, where fixed buffers dominate) last.
GRID = [
    *[Case("llama3.1-8b", p, 8, 4096, "h100:1x8", "fsdp=8")
      for p in ("full", "minimal", "save_qkv_proj", "save_dot_except_mlp", "minimal_offloaded")],
    Case("llama3.1-8b", "full", 16, 2048, "h100:1x8", "fsdp=8"),
    Case("llama3.1-8b", "qkv_proj_offloaded", 16, 2048, "h100:1x8", "fsdp=8"),
    Case("llama3.1-8b", "full", 8, 4096, "h100:1x8", "fsdp=8", DOT),
    Case("llama3.1-8b", "minimal", 8, 4096, "h100:1x8", "fsdp=8", DOT),
    Case("llama3.1-8b", "full", 32, 4096, "h100:1x8", "fsdp=8", CHUNKED),
    Case("llama3.1-8b", "full", 8, 8192, "h200:1x8", "fsdp=4,tensor=2"),
    Case("llama3.1-8b", "minimal", 8, 8192, "h200:1x8", "fsdp=4,tensor=2"),
    Case("llama3.1-8b", "full", 8, 4096, "h100:1x8", "fsdp=4,tensor=2"),
    Case("llama3.1-8b", "full", 8, 8192, "h100:1x8", "fsdp=2,tensor=4"),
    Case("llama3.1-8b", "full", 8, 8192, "gh200:1x4", "fsdp=4"),
    Case("llama3.1-8b", "minimal_offloaded", 8, 8192, "gh200:1x4", "fsdp=4"),
    Case("llama3.1-8b", "full", 8, 4096, "b200:1x8", "fsdp=8"),
    Case("llama3.1-8b", "full", 32, 4096, "h100:1x8", "fsdp=8", state=ACC4),
    Case("llama3.1-8b", "minimal", 16, 4096, "h100:1x8", "fsdp=8", state=ACC2),
    Case("llama3.1-8b", "full", 16, 8192, "h100:1x8", "fsdp=8", state=ACC2),
    Case("llama3.1-8b", "full", 8, 4096, "h100:1x8", "fsdp=8", state=OPT_HOST),
    Case("llama3.1-8b", "full", 8, 4096, "h100:1x8", "fsdp=8", state=PARAMS_HOST),
    Case("llama3.1-8b", "minimal_offloaded", 8, 4096, "h100:1x8", "fsdp=8", flags=PIPELINED),
    Case("llama3.1-8b", "qkv_proj_offloaded", 8, 4096, "gh200:1x4", "fsdp=4", flags=PIPELINED),
    *[Case("llama3.1-70b", p, 64, 4096, "h100:8x8", "fsdp=64") for p in ("full", "minimal_offloaded", "save_out_proj")],
    Case("llama3.1-70b", "full", 64, 4096, "h100:8x8", "fsdp=8,tensor=8"),
    Case("llama3.1-70b", CUSTOM, 64, 4096, "h100:8x8", "fsdp=8,tensor=8"),
    Case("llama3.1-70b", "full", 32, 4096, "h100:4x8", "fsdp=8,tensor=4"),
    Case("llama3.1-70b", "full", 64, 4096, "h100:8x8", "fsdp=64", state=OPT_HOST),
    Case("llama3.1-70b", "full", 64, 4096, "b200:8x8", "fsdp=64"),
    *[Case("llama3.1-405b", p, 64, 4096, "h100:8x8", "fsdp=64") for p in ("full", "minimal", "minimal_offloaded")],
    Case("llama3.1-405b", "full", 64, 4096, "h100:8x8", "fsdp=8,tensor=8"),
    Case("llama3.1-405b", "save_qkv_proj", 16, 8192, "h200:2x8", "fsdp=16", {"num_layers": 16}),
    Case("llama3.1-405b", "qkv_proj_offloaded", 16, 8192, "h200:2x8", "fsdp=16", {"num_layers": 16}),
    Case("llama3.1-405b", "full", 64, 4096, "gb200:16x4", "fsdp=64"),
    Case("llama3.1-405b", "full", 64, 4096, "h100:8x8", "fsdp=64", state=BOTH_HOST),
    Case("llama3.1-405b", "full", 16, 4096, "h100:2x8", "fsdp=16", {**DOT, "num_layers": 8}),
    Case("llama3.1-405b", "minimal_offloaded", 64, 4096, "h100:8x8", "fsdp=64", flags=PIPELINED),
    # the other models MaxText's GPU configs name (configs/gpu/models/*.yml at e591f30), at their batch and
    # sequence on the systems bench_maxtext_configs states; Llama 2 7B scanned (its file unrolls the layers:
    # the compile is the answer there)
    Case("llama2-7b", "minimal_with_context", 32, 4096, "h100:1x8", "fsdp=8"),
    Case("llama2-70b", "full", 384, 4096, "h100:8x8", "fsdp=64"),
    Case("llama3-70b", "full", 256, 8192, "h100:8x8", "fsdp=64"),
    Case("llama3.1-405b", "full", 1024, 4096, "h100:128x8", "fsdp=1024"),
    # Mixtral 8x7B: MaxText's dense path at capacity -1 (mixtral_8x1b.yml: every expert on every token), and
    # the sparse paths (grouped, ragged_dot) at one sequence per GPU
    Case("mixtral-8x7b", "full", 512, 4096, "h100:8x8", "fsdp=64", moe={"dispatch": "dense", "capacity_factor": -1}),
    Case("mixtral-8x7b", "full", 256, 4096, "h100:8x8", "fsdp=64", moe={"dispatch": "dense", "capacity_factor": -1}),
    *[Case("mixtral-8x7b", p, 128, 4096, "h100:8x8", "fsdp=64", moe={"dispatch": d})
      for d in ("grouped", "ragged_dot") for p in ("full", "minimal_with_context")],
    # DeepSeek-V3 on each MoE path (models/moe.py): grouped (the default), ragged_dot, dense at capacity 1.25
    *[Case("deepseek-v3-671b", p, 64, 4096, "gb200:16x4", "fsdp=8,expert=8")
      for p in ("full", "minimal", "minimal_offloaded")],
    Case("deepseek-v3-671b", "full", 64, 4096, "gb200:16x4", "fsdp=8,expert=8", moe={"dispatch": "ragged_dot"}),
    Case("deepseek-v3-671b", "full", 64, 4096, "gb200:16x4", "fsdp=8,expert=8", moe=DENSE),
    Case("deepseek-v3-671b", "full", 128, 4096, "gb200:32x4", "fsdp=16,expert=8", state=OPT_HOST),
    # the whole model where its users run it: one sequence per GPU on 512 GB200 (notebook 07). Layer
    # stacks cut short do not compile to its structure: with 6 layers no MoE loop is left after XLA
    # peels 4 MoE layers, and the peeled layers' buffers are a large part of the real step's peak
    *[Case("deepseek-v3-671b", p, 512, 4096, "gb200:128x4", "fsdp=64,expert=8")
      for p in ("full", "minimal", "save_qkv_proj", "qkv_proj_offloaded")],
    Case("deepseek-v3-671b", "full", 512, 4096, "gb200:128x4", "fsdp=64,expert=8", moe=DENSE),
    Case("deepseek-v3-671b", "full", 512, 4096, "gb200:128x4", "fsdp=64,expert=8",
         moe={"dispatch": "ragged_dot", "ragged_buffer_factor": 2.0}),
    Case("deepseek-v3-671b", "full", 512, 4096, "gb200:128x4", "fsdp=64,expert=8", moe={"ragged_buffer_factor": 2.0}),
    Case("deepseek-v3-671b", "minimal_offloaded", 512, 4096, "gb200:128x4", "fsdp=64,expert=8", flags=PIPELINED),
    Case("deepseek-v3-671b", "full", 1024, 4096, "gb200:128x4", "fsdp=64,expert=8", state=ACC2),
    Case("deepseek-v3-671b", "full", 512, 4096, "gb200:128x4", "fsdp=64,expert=8", state=OPT_HOST),
    Case("deepseek-v3-671b", "full", 512, 4096, "gb200:128x4", "fsdp=64,expert=8", DOT),
    Case("deepseek-v3-671b", "full", 512, 4096, "gh200:128x4", "fsdp=64,expert=8"),
    *[Case("tiny-llama", p, 16, 512, "h100:1x2", "fsdp=2")
      for p in ("full", "save_dot_with_context_except_mlp", "minimal_offloaded", "save_out_proj")],
    *[Case("tiny-deepseek", p, 8, 256, "h100:1x2", "fsdp=2") for p in ("full", "minimal")],
    Case("tiny-deepseek", "full", 8, 256, "h100:1x2", "fsdp=2", moe=DENSE),
    Case("tiny-deepseek", "full", 8, 256, "h100:1x2", "fsdp=2", moe={"dispatch": "ragged_dot"}),
]


def error(estimate: float, truth: float) -> float | None:
    if truth == 0:
        return 0.0 if estimate == 0 else None
    return 100.0 * (estimate - truth) / truth


def run(case: Case) -> dict:
    cfg = case.config()
    target = targets.target(case.target)
    mesh = sharding.parse_mesh(case.mesh, target.num_devices)
    placement = compiler.place(target, sharding.active_axes(mesh))
    trainer = train.trainer(cfg, case.policy, state=case.state)
    report = train.compile_step(trainer, placement, case.batch, case.seq, flags=case.flags)
    est = budget.estimate(cfg, case.batch, case.seq, case.policy, mesh, target=target, state=case.state,
                          flags=case.flags)
    peers = heuristics.estimates(cfg, case.batch, case.seq, case.policy, mesh)
    label = {**case.overrides, **({"moe": case.moe} if case.moe else {})}
    row = {
        "model": case.model, "overrides": label, "policy": est.policy, "batch": case.batch, "seq": case.seq,
        "target": target.name, "mesh": {k: v for k, v in mesh.items() if v > 1}, "tiny": case.tiny,
        "state": dataclasses.asdict(case.state), "flags": case.flags or "",
        "compiled_device_bytes": report.device.peak_bytes, "compiled_host_bytes": report.host.temp_bytes
        + report.host.argument_bytes,
        "analytic_device_bytes": est.device_bytes, "analytic_host_bytes": est.host_bytes,
        "device_error_pct": error(est.device_bytes, report.device.peak_bytes),
        "host_error_pct": error(est.host_bytes, report.host.temp_bytes + report.host.argument_bytes),
        "peak_phase": est.peak_phase, "compile_seconds": round(report.compile_seconds, 2),
        "usable_hbm_bytes": report.usable_hbm_bytes, "compiled_fits": report.fits, "analytic_fits": est.fits,
        "analytic_at_scheduler_limit": est.at_scheduler_limit,
        "peers": [{"rule": p.rule, "device_bytes": p.device_bytes,
                   "device_error_pct": error(p.device_bytes, report.device.peak_bytes)} for p in peers],
    }
    extra = " ".join(filter(None, [str(label)[:30] if label else "", "acc" + str(case.state.gradient_accumulation_steps)
                                   if case.state.gradient_accumulation_steps > 1 else "",
                                   "opt-host" if case.state.optimizer_memory_host_offload else "",
                                   "params-host" if case.state.parameter_memory_host_offload else "",
                                   "pipelined" if case.flags else ""]))
    print(f"{case.model:17} {extra:32} {est.policy:18} B{case.batch:<3} S{case.seq:<5} {target.name:11} "
          f"{','.join(f'{k}={v}' for k, v in row['mesh'].items()):16} device {row['device_error_pct']:+6.2f}% "
          f"host {row['host_error_pct'] if row['host_error_pct'] is not None else float('nan'):+6.2f}%", flush=True)
    return row


def summary(rows: list[dict]) -> dict:
    def stats(values):
        values = [abs(v) for v in values if v is not None]
        if not values:
            return {"median_abs_pct": float("nan"), "worst_abs_pct": float("nan"), "n": 0}
        return {"median_abs_pct": round(statistics.median(values), 3), "worst_abs_pct": round(max(values), 3),
                "n": len(values)}

    real = [r for r in rows if not r["tiny"]]
    fitting = [r for r in real if r["compiled_fits"]]
    out = {"device": stats(r["device_error_pct"] for r in real),
           # where a plan lives: the compiled step fits usable HBM. Over it, XLA's scheduler is past its
           # memory limit and its schedule (what it serializes, what it keeps) is not one anyone runs
           "device_fitting": stats(r["device_error_pct"] for r in fitting),
           "device_over_usable_hbm": stats(r["device_error_pct"] for r in real if not r["compiled_fits"]),
           "fits_verdicts_agree": {"agree": sum(r["compiled_fits"] == r["analytic_fits"] for r in real),
                                   "n": len(real),
                                   "disagree": [f"{r['model']} {r['policy']} B{r['batch']} {r['target']} "
                                                f"{r['mesh']} {r['overrides']} {r['state']}"
                                                for r in real if r["compiled_fits"] != r["analytic_fits"]],
                                   # of those, the ones the budget flags: the heap's packing decides there
                                   "disagree_at_scheduler_limit": sum(
                                       r["compiled_fits"] != r["analytic_fits"] and r.get("analytic_at_scheduler_limit",
                                                                                         False) for r in real),
                                   "at_scheduler_limit": sum(r.get("analytic_at_scheduler_limit", False) for r in real)},
           "device_tiny": stats(r["device_error_pct"] for r in rows if r["tiny"]) if len(real) < len(rows) else None,
           "host_offloading": stats(r["host_error_pct"] for r in rows if r["compiled_host_bytes"]),
           "same_step_other_gpu": same_step_other_gpu(real),
           # DeepSeek-V3 by MoE path (models/moe.py): the budget's band on each program
           "deepseek_by_moe_path": {path: stats(r["device_error_pct"] for r in real if r["model"].startswith("deepseek")
                                                and r["overrides"].get("moe", {}).get("dispatch", "grouped") == path)
                                    for path in ("grouped", "ragged_dot", "dense")},
           "peers": {}}
    for i, rule in enumerate(p["rule"].split(" + ")[0] for p in rows[0]["peers"]):
        out["peers"][rule] = stats(r["peers"][i]["device_error_pct"] for r in rows)
    return out


def same_step_other_gpu(rows: list[dict]) -> dict:
    """The grid's steps compiled for more than one GPU with every tensor the same size (the budget's
    bytes equal too): how far apart XLA's schedules for each GPU put the peak. Its latency-hiding
    scheduler orders the step by each GPU's cost model, so which buffers are live at the peak differs;
    a budget that does not model the scheduler misses at least half the spread on one of them."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        key = json.dumps([r["model"], r["overrides"], r["policy"], r["batch"], r["seq"], r["mesh"], r["state"],
                          r["flags"], r["analytic_device_bytes"]], sort_keys=True)
        groups.setdefault(key, []).append(r)
    pairs = []
    for group in groups.values():
        if len({r["target"].split(":")[0] for r in group}) < 2:
            continue
        compiled = [r["compiled_device_bytes"] for r in group]
        first = group[0]
        pairs.append({"step": f"{first['model']} {first['policy']} B={first['batch']} S={first['seq']} "
                              + ",".join(f"{k}={v}" for k, v in first["mesh"].items()),
                      "targets": [r["target"] for r in group], "compiled_device_bytes": compiled,
                      "analytic_device_bytes": first["analytic_device_bytes"],
                      "compiled_fits": [r["compiled_fits"] for r in group],
                      "spread_pct": round(100 * (max(compiled) - min(compiled)) / min(compiled), 2)})
    return {"pairs": pairs, "worst_spread_pct": max((p["spread_pct"] for p in pairs), default=None)}


def summarize_stored(path) -> None:
    """Recompute the summary of stored results (``--summarize``: no compile) and write it back."""
    stored = json.loads(path.read_text())
    stored["summary"] = summary(stored["results"])
    path.write_text(json.dumps(stored, indent=1) + "\n")
    print(f"summarized {path.relative_to(_common.ROOT)} again ({len(stored['results'])} stored configurations)")


def main() -> None:
    if "--summarize" in sys.argv:
        summarize_stored(_common.RESULTS / "budget.json")
        return
    grid = GRID[::4] if "--quick" in sys.argv else GRID
    start = time.perf_counter()
    rows = [run(case) for case in grid]
    result = {"goal": {"median_abs_pct": 1.0, "worst_abs_pct": 3.0}, "summary": summary(rows),
              "configurations": len(rows), "seconds": round(time.perf_counter() - start, 1), "results": rows}
    s = result["summary"]
    print(f"device (real-size, compiled step fits usable HBM): median {s['device_fitting']['median_abs_pct']:.2f}%, "
          f"worst {s['device_fitting']['worst_abs_pct']:.2f}% (n={s['device_fitting']['n']}); over usable HBM: median "
          f"{s['device_over_usable_hbm']['median_abs_pct']:.2f}%, worst {s['device_over_usable_hbm']['worst_abs_pct']:.2f}% "
          f"(n={s['device_over_usable_hbm']['n']}); fits verdicts agree {s['fits_verdicts_agree']['agree']}/"
          f"{s['fits_verdicts_agree']['n']} (of the others, {s['fits_verdicts_agree']['disagree_at_scheduler_limit']} "
          f"flagged at the scheduler's limit)")
    print(f"device (real-size): median {s['device']['median_abs_pct']:.2f}%, worst {s['device']['worst_abs_pct']:.2f}%"
          + (f" | tiny models: median {s['device_tiny']['median_abs_pct']:.2f}%, worst "
             f"{s['device_tiny']['worst_abs_pct']:.2f}%" if s["device_tiny"] else "") + " | "
          f"host (offloading configs): median {s['host_offloading']['median_abs_pct']:.2f}%, "
          f"worst {s['host_offloading']['worst_abs_pct']:.2f}%")
    for rule, st in s["peers"].items():
        print(f"  {rule:32} median {st['median_abs_pct']:.1f}%, worst {st['worst_abs_pct']:.1f}%")
    _common.write("budget" if grid is GRID else "budget_quick", result)


if __name__ == "__main__":
    main()
