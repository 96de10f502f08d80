"""Notebook 05's stack (16 Llama 3.1 8B layers, B 8, S 4096, ``minimal_offloaded``, 8xH100) under its flag sets,
compiled by the installed jaxlib: one JSON per jaxlib for docs/what-changed-0.12.md (scripts/what_changed.py).

    .venv/bin/python scripts/reference_stack.py            # the main lock's jaxlib
    <a jax 0.10.2 venv>/bin/python scripts/reference_stack.py

Flags are written as the current XLA spells them and respelled for the installed jaxlib (``flags.for_jaxlib``);
the lab's #46231 workaround is applied where that jaxlib has the bug, as every compile of the lab does."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import companion  # noqa: E402,F401

import jax  # noqa: E402

from companion import compiler, experiments, flags, models, targets, train  # noqa: E402

PIPELINED = {"xla_gpu_enable_pipelined_host_offloading": True}
FLAG_SETS = {  # notebook 05's, as {name: value} on top of MaxText's flags ("none": XLA's defaults)
    "MaxText's flags": {},
    "scheduler flag off": {"xla_gpu_enable_latency_hiding_scheduler": False},
    "pipelined host offload": PIPELINED,
    "async limit 4 and pipelined": {"xla_gpu_experimental_parallel_async_compute_limit": 4, **PIPELINED},
    "no loop double buffering": {"xla_gpu_enable_while_loop_double_buffering": False},
    "no pipelined collectives": {f"xla_gpu_pipeline_{op}": "OFF" for op in ("all_gather", "reduce_scatter",
                                                                             "all_reduce")},
    "XLA's defaults": None,
}


def main() -> None:
    stack, policy, batch, seq = models.config("llama3.1-8b", num_layers=16), "minimal_offloaded", 8, 4096
    placement = compiler.place(targets.target("h100", "1x8"))

    def spec(extra):
        return "none" if extra is None else flags.for_jaxlib(extra, flags.INSTALLED_JAXLIB)[0]

    runs = experiments.run(lambda fs: train.compile_layer_stack(stack, policy, placement, batch, seq, flags=fs),
                           {label: spec(extra) for label, extra in FLAG_SETS.items()})
    rows = [{"label": r.label, "flags": r.flag_set.xla_flags(), "workarounds": list(r.flag_set.workarounds),
             "device_peak_bytes": r.report.device.peak_bytes, "host_bytes": r.report.host.temp_bytes,
             "d2h_ops": r.report.offload.d2h_ops, "h2d_ops": r.report.offload.h2d_ops,
             "engines": r.report.offload.engines(), "descriptors": r.report.offload.checks.verdict,
             "step_seconds": r.simulation.step_seconds,
             "seconds_per_layer": r.seconds_per_layer(stack.num_layers)} for r in runs]
    out = ROOT / "docs" / "data" / f"reference-stack-jaxlib-{flags.INSTALLED_JAXLIB}.json"
    out.write_text(json.dumps({"jax": jax.__version__, "jaxlib": flags.INSTALLED_JAXLIB,
                               "date": time.strftime("%Y-%m-%d"), "step": "notebook 05: 16 Llama 3.1 8B layers, "
                               "B 8, S 4096, minimal_offloaded, h100:1x8", "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
