"""The step-time simulator against measurements: what ``benchmarks/gpu/harness.py`` recorded on GPUs.

The harness (run on a machine with NVIDIA GPUs) writes one JSON file: the GPU, its host link's
measured bandwidth per direction, and for each layer-stack configuration (model, layers, batch,
sequence, policy, XLA flags, GPUs) the measured median step seconds and peak bytes.
``calibrate(measurements)`` compiles the same configurations for the matching target (compile-only,
on any machine), replays each with ``companion.schedule`` and reports, per configuration, simulated
against measured step time (and compiled against measured peak): the simulator's error, and the
host-link bandwidth the simulation assumed against the one measured.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Callable, Mapping

from . import schedule
from ..hardware import targets

FORMAT = "offload-lab-gpu-harness/1"


@dataclasses.dataclass(frozen=True)
class StepMeasurement:
    """One configuration the harness timed."""

    model: str
    layers: int
    batch: int
    seq: int
    policy: str
    flags: str
    gpus: int
    step_seconds: float  # median of the repeats
    peak_bytes: int | None = None  # memory_stats()['peak_bytes_in_use'] on device 0

    @property
    def label(self) -> str:
        extra = f" {self.flags}" if self.flags else ""
        return f"{self.model} L{self.layers} B{self.batch} S{self.seq} {self.policy}{extra}"


@dataclasses.dataclass(frozen=True)
class Measurements:
    gpu: str  # the lab's GPU key
    device_kind: str
    link_bytes_per_s: dict[str, float]  # measured per GPU with every GPU transferring: d2h, h2d
    steps: tuple[StepMeasurement, ...]


def gpu_key(device_kind: str) -> str:
    """The lab's GPU key for a JAX ``device_kind`` (``NVIDIA H100 80GB HBM3`` -> ``h100``)."""
    found = targets.for_device_kind(device_kind, targets.GPUS)
    if found is not None:
        return found.key
    raise ValueError(f"no lab target for GPU {device_kind!r}; the lab knows: "
                     f"{', '.join(g.device_kind for g in targets.GPUS.values())}")


def load(source: str | Path | Mapping[str, Any]) -> Measurements:
    """Read a harness file (or its parsed JSON); a wrong format is a one-line error."""
    data = json.loads(Path(source).read_text()) if not isinstance(source, Mapping) else dict(source)
    if data.get("format") != FORMAT:
        raise ValueError(f"not a GPU harness file (format {data.get('format')!r}, expected {FORMAT!r})")
    steps = tuple(StepMeasurement(**{k: s[k] for k in StepMeasurement.__dataclass_fields__ if k in s})
                  for s in data.get("steps", []))
    link = {d: float(data["bandwidth"][d]["all_gpus_per_gpu_bytes_per_s"]) for d in targets.DIRECTIONS}
    return Measurements(gpu_key(data["device_kind"]), data["device_kind"], link, steps)


@dataclasses.dataclass(frozen=True)
class Comparison:
    label: str
    measured_seconds: float
    simulated_seconds: float
    measured_peak_bytes: int | None
    compiled_peak_bytes: int

    @property
    def error(self) -> float:
        """(simulated - measured) / measured."""
        return (self.simulated_seconds - self.measured_seconds) / self.measured_seconds


@dataclasses.dataclass(frozen=True)
class Calibration:
    gpu: str
    link_assumed_bytes_per_s: dict[str, float]
    link_measured_bytes_per_s: dict[str, float]
    comparisons: tuple[Comparison, ...]

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(c.error) for c in self.comparisons) if self.comparisons else 0.0

    def rows(self) -> list[dict[str, Any]]:
        return [{"configuration": c.label, "measured ms": round(c.measured_seconds * 1e3, 2),
                 "simulated ms": round(c.simulated_seconds * 1e3, 2), "error": f"{c.error:+.1%}",
                 "measured peak GiB": round(c.measured_peak_bytes / 2**30, 3) if c.measured_peak_bytes else None,
                 "compiled peak GiB": round(c.compiled_peak_bytes / 2**30, 3)} for c in self.comparisons]


def compile_stack(step: StepMeasurement, target: targets.Target):
    """The compile-only report of a measured configuration (its layer stack, flags and mesh)."""
    from ..compiling import compiler
    from .. import models
    from ..compiling import train

    cfg = models.config(step.model, num_layers=step.layers)
    return train.compile_layer_stack(cfg, step.policy, compiler.place(target, backend_kind="cuda"), step.batch,
                                     step.seq, flags=step.flags or None)


def calibrate(source, *, compile_fn: Callable[[StepMeasurement, targets.Target], Any] = compile_stack,
              cost_model: schedule.CostModel = schedule.CostModel()) -> Calibration:
    """Simulated against measured, per configuration of a harness file (see the module docstring).

    When a GPU machine is lent, run first, as one short script (the harness's own ``--help``):

        pip install -e ".[gpu]" && python benchmarks/gpu/harness.py --layers 4 --repeats 5 --out gpu.json

    (link bandwidth alone and all at once, four policies with and without pipelining, peaks, the
    #46231 gradient check: a few minutes on one 8-GPU host), then ``calibrate("gpu.json")`` anywhere.
    Until such a file exists, the simulator's error is the published runs' (``companion.published``,
    ``benchmarks/bench_calibration.py``)."""
    m = source if isinstance(source, Measurements) else load(source)
    comparisons = []
    assumed = {}
    for step in m.steps:
        target = targets.target(m.gpu, step.gpus)
        report = compile_fn(step, target)
        sim = schedule.prepare(report, target, cost_model=cost_model)
        assumed = sim.bandwidth(target.link)
        comparisons.append(Comparison(step.label, step.step_seconds, sim.run(max_events=0).step_seconds,
                                      step.peak_bytes, report.device.peak_bytes))
    return Calibration(m.gpu, assumed, m.link_bytes_per_s, tuple(comparisons))
