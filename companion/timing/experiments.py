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

from . import bands
from ..xla import hlo
from . import schedule
from ..hardware import flags as xla_flags
from ..hardware.targets import HostLink

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

    def loop_layers(self, layers: int) -> list[tuple[hlo.Loop, int]]:
        """Each scanned loop of the step and the decoder layers one of its iterations holds
        (``layers_per_iteration``)."""
        module = self.simulator.module
        held = layers_per_iteration(module, layers)
        return [(loop, held[loop.body]) for loop in hlo.loops(module)]

    def seconds_per_layer(self, layers: int) -> float:
        """One decoder layer's forward and backward in the loops' steady state: each scanned loop's
        simulated iteration over the layers that iteration holds, read off the compiled loop body
        (``layers_per_iteration``: 2 where XLA double-buffers the loop, 1 where it does not, whatever
        iterations pipelining or double buffering peel into the entry computation). Loops that hold no
        layer (no matmul of one) are left out, and so are the layers peeled into the entry computation,
        so a deep step's time is about ``layers`` x this."""
        total = 0.0
        for loop, held in self.loop_layers(layers):
            seconds = self.simulation.loop_iteration_seconds.get(loop.body)
            if seconds is not None and loop.trips and held:
                total += seconds / held
        return total

    def loops_column(self, layers: int) -> str:
        """The loops as the table shows them: trips x layers per iteration, e.g. ``7x2, 6x2``."""
        return ", ".join(f"{loop.trips}x{held}" for loop, held in self.loop_layers(layers))

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
        and the change of its step split by cause; with ``layers``, its loops (trips x the layers one iteration
        holds) and the steady-state time per layer."""
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
            **({} if layers is None else {"loops: trips x layers": self.loops_column(layers),
                                          "ms per layer (steady)": round(self.seconds_per_layer(layers) * 1e3, 2)}),
            "change ms: transfers / collectives / rest": (
                "-" if baseline is None or baseline is self
                else " / ".join(f"{v * 1e3:+.1f}" for v in self.attribution(baseline).values())),
            "compile": f"{r.compile_seconds:.1f} s (wall clock)",
        }


def _matmuls_by_name(module: hlo.HloModule, instructions) -> dict[str, float]:
    """Matmul FLOPs per execution of each of ``instructions`` (a fusion's or call's own inner matmuls
    included), summed by the JAX op name of its largest matmul."""
    out: dict[str, float] = {}
    for instr in instructions:
        if instr.opcode == "while":
            continue
        flops, _, largest = hlo.inner_matmuls(module, instr, hlo.GROUPED_GEMM_TILE_ROWS)
        if flops and largest is not None:
            out[largest.op_name] = out.get(largest.op_name, 0.0) + flops
    return out


def layers_per_iteration(module: hlo.HloModule, layers: int) -> dict[str, int]:
    """The decoder layers one iteration of each loop holds (by loop body), in a step of ``layers``
    scanned layers.

    The rule: every layer runs each of its matmuls (by JAX op name) once per step, wherever XLA put
    it: in the loop body, or in an iteration peeled into the entry computation (double buffering,
    pipelined host offload). So a body's matmul FLOPs per iteration, over the FLOPs the whole step
    executes under the same op names, is the body's share of the layers:
    ``round(layers x body FLOPs / step FLOPs of those names)``. Not the trip count: double-buffered,
    16 layers run as 7 trips of 2 with 2 layers peeled, and pipelined, the backward loop as 6 trips
    of 2 with 4 peeled (``round(16 / 6)`` would say 3). 0 for a loop with no matmul: no layer in it."""
    step: dict[str, float] = {}
    for instr in module.scheduled():
        executions = module.executions(instr)
        for name, flops in _matmuls_by_name(module, [instr]).items():
            step[name] = step.get(name, 0.0) + flops * executions
    out = {}
    for loop in hlo.loops(module):
        body = _matmuls_by_name(module, module.computations[loop.body].instructions)
        out[loop.body] = (max(1, round(layers * sum(body.values()) / sum(step[n] for n in body)))
                          if body else 0)
    return out


def _computes(module: hlo.HloModule, instr: hlo.Instruction) -> str:
    """What a kernel computes: its own opcode, a fusion's root op, or for a multi-output fusion the ops
    its outputs come from (through copies)."""
    root = hlo.wrapped_root(module, instr) if instr.opcode == "fusion" else None
    if root is None:
        return instr.opcode
    if root.opcode != "tuple":
        return root.opcode
    inner = module.computations[root.computation].by_name
    made = set()
    for name in root.operands:
        op = inner.get(name)
        while op is not None and op.opcode in ("copy", "bitcast") and op.operands and op.operands[0] in inner:
            op = inner[op.operands[0]]
        if op is not None:
            made.add(op.opcode)
    return f"{' + '.join(sorted(made)) or 'tuple'} (multi-output)"


def memory_bound_kernels(simulators: Mapping[str, schedule.Simulator], at_least: float = 0.5e-3) -> list[dict[str, Any]]:
    """The memory-bound kernels (op class ``other_compute``) of two or more compiles of the same step,
    side by side: simulated seconds per step (each kernel's roofline time x its executions) by what the
    kernel computes (its root op) and its phase, with the largest output among them; the rows where the
    first two compiles differ by at least ``at_least`` seconds, then a row of the rest and one of every
    memory-bound kernel."""
    labels = list(simulators)
    per: dict[tuple[str, str], dict[str, float]] = {}
    largest: dict[tuple[str, str], hlo.ArrayShape] = {}
    for label, sim in simulators.items():
        module, counts = sim.module, sim.module.execution_counts
        for comp, ops in sim.program.items():
            by_name = module.computations[comp].by_name
            for op in ops:
                if op.category == "compute" and op.op_class == "other_compute":
                    instr = by_name[op.name]
                    key = (_computes(module, instr), hlo.phase_of(instr.op_name))
                    per.setdefault(key, dict.fromkeys(labels, 0.0))[label] += op.seconds * counts.get(comp, 0)
                    out = max(hlo.flatten_shape(instr.shape), key=lambda a: a.bytes)
                    if key not in largest or out.bytes > largest[key].bytes:
                        largest[key] = out

    def row(what: str, phase: str, seconds: dict[str, float], shape: Any = "") -> dict[str, Any]:
        return {"memory-bound kernels": what, "phase": phase, "largest output": f"`{shape}`" if shape else "",
                **{f"{label} ms": f"{seconds[label] * 1e3:.1f}" for label in labels},
                "difference ms": f"{(seconds[labels[0]] - seconds[labels[1]]) * 1e3:+.1f}"}

    def total(keys) -> dict[str, float]:
        return {label: sum(per[k][label] for k in keys) for label in labels}

    differ = sorted((k for k, v in per.items() if abs(v[labels[0]] - v[labels[1]]) >= at_least),
                    key=lambda k: per[k][labels[1]] - per[k][labels[0]])
    return ([row(*k, per[k], largest[k]) for k in differ]
            + [row("the rest", "", total(set(per) - set(differ))), row("all memory-bound kernels", "", total(per))])


def compute_split(simulator: schedule.Simulator, result: schedule.StepSimulation) -> dict[str, str]:
    """A replayed step's compute stream, ms: its busy time split into the kernels' own time (by op class)
    and what the replay added to it: SMs held by the #46231 workaround's transfer kernels and by NCCL
    while a collective runs beside a kernel; device copies (their own stream) beside them."""
    kernels = simulator.op_seconds()
    nccl = result.compute_seconds - result.transfer_kernel_sm_seconds - kernels
    kinds = result.time_by_kind
    return {"compute": f"{result.compute_seconds * 1e3:.1f}", "kernels alone": f"{kernels * 1e3:.1f}",
            "matmuls": f"{kinds.get('matmul', 0.0) * 1e3:.1f}", "attention": f"{kinds.get('attention', 0.0) * 1e3:.1f}",
            "memory-bound kernels": f"{kinds.get('other_compute', 0.0) * 1e3:.1f}",
            "SMs held by transfer kernels": f"{result.transfer_kernel_sm_seconds * 1e3:.1f}",
            "SMs held by NCCL": f"{nccl * 1e3:.1f}", "device copies": f"{kinds.get('copy', 0.0) * 1e3:.1f}"}


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
