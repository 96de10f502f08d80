"""Write the series' three drawn concepts (``companion.surfaces.diagrams``) for its running example into
docs/figures/ as SVG: Llama 3.1 8B on 8 H100 (fsdp=8), B 8, S 4096 — the step of notebooks 01-04.

    .venv/bin/python scripts/diagrams.py            # rewrites docs/figures/{hbm_stack,offload_timeline,break_even}.svg
    .venv/bin/python scripts/diagrams.py --out DIR  # elsewhere (tests/test_diagrams.py compares the two)

The numbers are the lab's: the budget of the step with Q/K/V offloaded (``budget.estimate``), the MLP input's
bytes and recompute FLOPs per layer (``budget.tensor_tradeoffs``), the H100's dense bf16 peak, and PCIe Gen5's
per-GPU bandwidth with four GPUs transferring at once (``targets``' link table, its source there). The timeline
prices a layer's forward pass at the GPU's peak (a floor: real layers run slower, which hides more transfer).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "offload-lab"  # the same bytes on every run

from companion.hardware import targets  # noqa: E402
from companion.memory import budget  # noqa: E402
from companion.surfaces import diagrams  # noqa: E402

FIGURES = ROOT / "docs" / "figures"
MODEL, BATCH, SEQ, MESH, TARGET = "llama3.1-8b", 8, 4096, "fsdp=8", "h100:1x8"
TENSOR = "mlpwi_0"


def figures() -> dict:
    """Each diagram's Figure for the running example, by file stem."""
    target = targets.target(TARGET)
    step = budget.estimate(MODEL, BATCH, SEQ, "qkv_proj_offloaded", MESH, target.num_devices, target=target)
    tensor = next(t for t in budget.tensor_tradeoffs(MODEL, BATCH, SEQ, MESH, target.num_devices) if t.name == TENSOR)
    peak = target.gpu.bf16_dense_flops
    layer_forward = step.step_flops / 3 / tensor.layers / peak
    together = target.transferring_together()
    d2h = target.link.bandwidth_per_gpu("d2h", together)
    gb200 = targets.target("gb200:2x4")
    links = {f"PCIe Gen5, {together} GPUs at once": d2h,
             f"NVLink-C2C, {gb200.transferring_together()} GPUs per Grace":
                 gb200.link.bandwidth_per_gpu("d2h", gb200.transferring_together())}
    return {
        "hbm_stack": diagrams.hbm_stack(step),
        "offload_timeline": diagrams.offload_timelines(
            layer_forward, tensor.bytes_per_layer / d2h, 4,
            title=f"{MODEL}: each layer's {TENSOR} ({tensor.bytes_per_layer / 2**20:.0f} MiB) to the host over "
                  f"PCIe Gen5 ({d2h / 1e9:.0f} GB/s) while the next layer computes"),
        "break_even": diagrams.break_even(tensor.bytes_per_layer, tensor.recompute_flops_per_layer, target.gpu, links,
                                          name=TENSOR),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIGURES)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for stem, fig in figures().items():
        fig.savefig(args.out / f"{stem}.svg", metadata={"Date": None})
        print(f"wrote {args.out / stem}.svg")


if __name__ == "__main__":
    main()
