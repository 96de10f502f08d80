"""MaxText's own GPU configs, as MaxText runs them: the memory fraction each needs on a stated system.

    .venv/bin/python benchmarks/bench_maxtext_configs.py

Every ``src/maxtext/configs/gpu/models/*.yml`` of AI-Hypercomputer/maxtext at e591f30 (copies in
tests/data/maxtext/configs) is read as MaxText assembles it (``maxtext.read``) on the system it states
here — one A3 node (8 H100) for the 7-8B files, eight (64 H100, FSDP across nodes as MaxText's multi-node
recipes set it) for the 70B and Mixtral files, 128 for the 405B (``128vm.sh``'s system) — and answered
with ``fraction.needed``: the budget's guess (none for unscanned layers: the compile is the answer),
then the compiles at the answer and one step below. For the two unscanned files the scanned twin
(``scan_layers=true``) is answered too: their compiled peaks and compile seconds, side by side. Every
compile starts from an empty XLA kernel cache (cold: what a first compile costs).

Writes benchmarks/results/maxtext_configs.json; tests/test_maxtext_configs.py asserts the verdicts.
"""

from __future__ import annotations

import os
import tempfile
import time

import _common

CONFIGS = _common.ROOT / "tests" / "data" / "maxtext" / "configs" / "gpu" / "models"
MULTI_NODE = ["dcn_fsdp_parallelism=-1", "dcn_data_parallelism=1"]  # FSDP over the nodes too (as 128vm.sh sets it)
# (file, target, overrides): the stated system
CASES = [
    ("llama2_7b.yml", "h100:1x8", []),
    ("llama2_7b.yml", "h100:1x8", ["scan_layers=true"]),
    ("llama3_8b.yml", "h100:1x8", []),
    ("llama2_70b.yml", "h100:8x8", MULTI_NODE),
    ("llama3_70b.yml", "h100:8x8", MULTI_NODE),
    ("llama3.1_405b.yml", "h100:128x8", MULTI_NODE),
    ("mixtral_8x1b.yml", "h100:8x8", MULTI_NODE),
    ("mixtral_8x2b.yml", "h100:8x8", MULTI_NODE),
    ("mixtral_8x7b.yml", "h100:8x8", MULTI_NODE),
    ("mixtral_8x7b.yml", "h100:8x8", [*MULTI_NODE, "scan_layers=true"]),
]


def answer(file: str, target_spec: str, overrides: list[str]) -> dict:
    from companion import fraction, maxtext, targets

    run = maxtext.read(CONFIGS / file, overrides)
    target = targets.target(target_spec)
    cfg, n = run.config(), target.num_devices
    batch, mesh = run.global_batch(n), run.mesh(n, target.topology.gpus_per_host)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["OFFLOAD_LAB_KERNEL_CACHE"] = cache  # cold: every kernel generated
        t0 = time.perf_counter()
        needed = fraction.needed(cfg, target, batch, run.seq, run.policy, mesh, run.state)
        seconds = time.perf_counter() - t0
    print(f"{file} {' '.join(overrides)} on {target.name}: {needed.summary()}", flush=True)
    return {"file": file, "target": target.name, "overrides": overrides, "model": cfg.name,
            "layers": cfg.num_layers, "scan_layers": cfg.scan_layers, "policy": run.policy, "batch": batch,
            "seq": run.seq, "mesh": mesh, "moe": run.moe, "notes": list(run.notes), **needed.to_dict(),
            "seconds": round(seconds, 1)}


def main() -> None:
    rows = [answer(*case) for case in CASES]
    pairs = []
    for file in ("llama2_7b.yml", "mixtral_8x7b.yml"):
        row = {r["scan_layers"]: r for r in rows if r["file"] == file}
        pairs.append({"file": file, **{key: {("scanned" if scan else "unscanned"): r[key] for scan, r in row.items()}
                                       for key in ("fraction", "needed_bytes")},
                      "needed_ratio": round(row[False]["needed_bytes"] / row[True]["needed_bytes"], 3),
                      "seconds_per_compile": {("scanned" if scan else "unscanned"):
                                              round(r["compile_seconds"] / r["compiles"], 1) for scan, r in row.items()}})
    _common.write("maxtext_configs", {"results": rows, "unscanned_vs_scanned": pairs})


if __name__ == "__main__":
    main()
