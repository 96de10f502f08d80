"""Flag experiments: the same step compiled under several XLA flag sets, side by side.

``run(compile_fn, flag_sets)`` compiles once per flag set (``compile_fn(flag_set) -> CompileReport``,
e.g. a layer stack or a train step), replays each schedule with ``companion.schedule`` and returns
one ``FlagRun`` per set: device peak, host bytes, counted FLOPs, the async host transfers and how
many of them XLA put enough compute under, collectives, the simulated step and its exposed time,
compile seconds — and the flags that differ from the first set (the baseline). Each run is also
re-priced over the simulator's constants' measured spread (``bands.sweep``), so ``rows`` ranks it
against the baseline with the paired band: a tie where the ranking flips inside the sweep. Nothing is
cached on disk: a notebook keeps the runs it made in memory.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Mapping

from . import bands, hlo, schedule
from . import flags as xla_flags
from .targets import HostLink

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class FlagRun:
    """One compile under one flag set, and its replay."""

    label: str
    flag_set: xla_flags.FlagSet
    changed: dict[str, Any]  # against the baseline's flags (None: left at XLA's default)
    baseline_preset: str
    report: Any  # compiler.CompileReport
    simulator: schedule.Simulator
    simulation: schedule.StepSimulation
    sweep: bands.Sweep

    @property
    def cover(self) -> dict[str, dict[str, float]]:
        return schedule.summarize_cover(schedule.transfer_cover(self.simulator))

    def describe_change(self) -> str:
        """What differs from the baseline: the flags, or another preset and its own overrides."""
        if self.flag_set.preset != self.baseline_preset:
            parts = [f"preset {self.flag_set.preset}"]
            if self.flag_set.overrides:
                parts.append(xla_flags.to_xla_flags(self.flag_set.overrides))
            level = self.flag_set.overrides.get(xla_flags.JAX_OPTIMIZATION_LEVEL)
            if level:
                parts.append(f"--{xla_flags.JAX_OPTIMIZATION_LEVEL}={level}")
            return " ".join(p for p in parts if p)
        return " ".join(f"{k}={xla_flags.format_value(v) if v is not None else '(default)'}"
                        for k, v in self.changed.items()) or "(baseline)"

    def seconds_per_layer(self, layers: int) -> float:
        """One decoder layer's forward and backward in the loops' steady state: each scanned loop's
        simulated iteration over the layers one iteration holds (``round(layers / trips)``: 2 where XLA
        double-buffers the loop, whatever iterations pipelining peels). The entry computation's first
        and last layers are left out, so a deep step's time is about ``layers`` x this."""
        total = 0.0
        for loop in hlo.loops(self.simulator.module):
            seconds = self.simulation.loop_iteration_seconds.get(loop.body)
            if seconds is not None and loop.trips:
                total += seconds / max(1, round(layers / loop.trips))
        return total

    def attribution(self, baseline: "FlagRun") -> dict[str, float]:
        """Where the step's change against ``baseline`` comes from, in seconds: exposed host transfers,
        exposed collectives, and the rest (compute and launch order); the three add up to the change."""
        s, b = self.simulation, baseline.simulation
        transfers = s.exposed_transfer_seconds - b.exposed_transfer_seconds
        collectives = s.exposed_collective_seconds - b.exposed_collective_seconds
        return {"transfers": transfers, "collectives": collectives,
                "rest": s.step_seconds - b.step_seconds - transfers - collectives}

    def row(self, baseline: "FlagRun | None" = None, layers: int | None = None) -> dict[str, Any]:
        """The run's table row; against ``baseline``, its tokens/s ratio with the paired band (or a tie)
        and the change of its step split by cause; with ``layers``, the steady-state time per layer."""
        r, s = self.report, self.simulation
        cover = self.cover
        transfers = sum(c["transfers"] for c in cover.values())
        covered = sum(c["covered"] for c in cover.values())
        return {
            "flag set": self.label,
            "changed": self.describe_change(),
            "device peak GiB": round(r.device.peak_bytes / GiB, 3),
            "host GiB": round(r.host.total_bytes / GiB, 3),
            "TFLOP": round(r.flops.total / 1e12, 2),
            "host transfers (covered)": f"{transfers} ({covered})",
            "collectives": sum(r.collectives.counts.values()),
            "step ms": round(s.step_seconds * 1e3, 1),
            "vs baseline": ("-" if baseline is None or baseline is self
                            else bands.rank(self.sweep, baseline.sweep, (self.label, baseline.label)).short()),
            "exposed transfers ms": round(s.exposed_transfer_seconds * 1e3, 1),
            "exposed collectives ms": round(s.exposed_collective_seconds * 1e3, 1),
            **({} if layers is None else {"ms per layer (steady)": round(self.seconds_per_layer(layers) * 1e3, 2)}),
            "change ms: transfers / collectives / rest": (
                "-" if baseline is None or baseline is self
                else " / ".join(f"{v * 1e3:+.1f}" for v in self.attribution(baseline).values())),
            "compile": f"{r.compile_seconds:.1f} s (wall clock)",
        }


def run(compile_fn: Callable[..., Any], flag_sets: Mapping[str, Any], *, link: HostLink | str | None = None,
        cost_model: schedule.CostModel = schedule.CostModel(), dump: Collection[str] = ()) -> list[FlagRun]:
    """Compile and replay under each flag set (``{label: spec}``, a spec as ``flags.resolve`` takes
    it); the first is the baseline. Every spec is validated before the first compile.
    ``compile_fn(flag_set)`` compiles; for the labels in ``dump`` it is called as
    ``compile_fn(flag_set, dump=True)`` (XLA's dumps: the scheduler's own schedule, live ranges)."""
    if not flag_sets:
        raise ValueError("no flag sets to compare: give at least one, e.g. {'maxtext': None, 'xla defaults': 'none'}")
    resolved = {label: xla_flags.resolve(spec) for label, spec in flag_sets.items()}
    base = next(iter(resolved.values()))
    runs = []
    for label, flag_set in resolved.items():
        report = compile_fn(flag_set, dump=True) if label in dump else compile_fn(flag_set)
        sim = schedule.prepare(report, cost_model=cost_model)
        runs.append(FlagRun(label, flag_set, xla_flags.differences(base, flag_set), base.preset, report, sim,
                            sim.run(link), bands.sweep(report, link=link)))
    return runs


def rows(runs: list[FlagRun], layers: int | None = None) -> list[dict[str, Any]]:
    """Table rows, each ranked against the first run (the baseline); ``layers``: the step's decoder
    layers, for the steady-state time per layer."""
    return [r.row(runs[0], layers) for r in runs]
