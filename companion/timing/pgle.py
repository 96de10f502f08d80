"""A latency profile for XLA's scheduler, written from the lab's cost model instead of a GPU run.

XLA's latency-hiding scheduler costs ops with an estimator. At jaxlib 0.10.2 none of its built-in
estimators knows the host link: every host transfer costs a constant (5000 µs with the
speed-of-light and approximate estimators GPU compiles use), and on Blackwell every kernel a
"T-shirt size" (notebook 04). The one estimator that takes real numbers is the *profile-guided*
one (PGLE): given ``--xla_gpu_pgle_profile_file_or_directory_path``, it reads a
``tensorflow.profiler.ProfiledInstructionsProto`` (text ``.pbtxt``) of ``costs { name cost_us }``
per instruction name, normally measured on a GPU (``JAX_ENABLE_PGLE``). ``write`` fills one in
from ``schedule``'s costs: each kernel's roofline time, each collective's time, and each host
transfer's bytes / the link's per-GPU bandwidth — so the scheduler plans with the link it will
run on.

How XLA reads it (``profile_guided_latency_estimator.cc`` and ``gpu_hlo_schedule.cc`` at the
commit jaxlib 0.10.2 pins, confirmed by compiling with ``TF_CPP_VMODULE=
profile_guided_latency_estimator=2``):

* only ``costs`` are read (``latencies`` are dropped on GPU), by the instruction's name at
  scheduling time — the names of the compile the profile was made from, with the same flags;
* an async pair's latency is the cost of the instruction its ``*-start`` wraps (for a host
  transfer, the dynamic-slice / dynamic-update-slice fusion inside its async computation), else
  of the ``*-start`` itself: ``write`` gives both the transfer's time;
* instructions missing from the profile fall back to the base estimator ("PGLE did not find
  relevant profiling info"); ``--xla_gpu_pgle_accuracy_checker=PGLE_STRICTNESS_LEVEL_WARN``
  logs "Found N instructions from the profile" and lists the missing ones, ``..._ERROR`` fails the
  compile. ``write`` names every scheduled instruction of the first compile, ``*-done`` ops at 0 µs, each
  under its name at scheduling time too: jaxlib 0.12 renames some after scheduling (an all-gather's
  start, peeled loop copies) and keeps the scheduler's name in the op's metadata (``scheduling_name``),
  and it makes device-side copies async (``fusion-start``, openxla/xla #44359), costed at their
  roofline time. Without those two, a 16-layer stack's second compile missed 18 of 675 instructions;
  with them, none (tests/test_flag_experiments.py);
* a profile is found by path (a ``.pbtxt``/``.pb`` file, or a folder of ``<fingerprint>.pbtxt``);
  its presence alone turns the latency-hiding scheduler on.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..xla import hlo
from ..hardware import targets
from .schedule import Simulator
from ..hardware.targets import HostLink

PROFILE_FLAG = "xla_gpu_pgle_profile_file_or_directory_path"
CHECKER_FLAG = "xla_gpu_pgle_accuracy_checker"


@dataclasses.dataclass(frozen=True)
class Profile:
    """What was written: per instruction name, its cost in µs."""

    path: Path
    costs_us: dict[str, float]
    link: str
    kernels: int
    transfers: int
    collectives: int
    async_copies: int = 0  # jaxlib 0.12's async device copies, at their roofline time

    def flags(self, checker: str = "PGLE_STRICTNESS_LEVEL_WARN") -> dict[str, str]:
        """The flags that make a compile read this profile (and report what it lacks)."""
        return {PROFILE_FLAG: str(self.path), CHECKER_FLAG: checker}

    def flag_string(self, checker: str = "PGLE_STRICTNESS_LEVEL_WARN") -> str:
        return " ".join(f"--{k}={v}" for k, v in self.flags(checker).items())


def costs(simulator: Simulator, link: HostLink | str | None = None) -> tuple[dict[str, float], dict[str, int]]:
    """``{instruction name: µs}`` from the simulator's program, and how many of each kind."""
    on = targets.host_link(link) if link is not None else simulator.target.link
    module = simulator.module
    out: dict[str, float] = {}
    counts = {"kernels": 0, "transfers": 0, "collectives": 0, "async copies": 0}
    for computation, ops in simulator.program.items():
        for op in ops:
            if op.action == "compute" and op.category == "compute":
                out[op.name] = op.seconds * 1e6  # zero-time ops too: a name the profile lacks falls back to XLA's guess
                counts["kernels"] += 1
            elif op.action == "done":
                out[op.name] = 0.0  # the wait itself costs nothing: the latency is the start's
            elif op.category == "transfer" and op.action in ("start", "compute"):
                us = simulator.transfer_seconds(op, on) * 1e6
                out[op.name] = us
                for name in _wrapped_names(module, computation, op.name):
                    out[name] = us
                counts["transfers"] += 1
            elif op.category == "collective" and op.seconds:
                out[op.name] = op.seconds * 1e6
                counts["collectives"] += 1
            elif op.category == "async" and op.action == "start":  # jaxlib 0.12's async device copies (#44359)
                out[op.name] = op.seconds * 1e6
                for name in _wrapped_names(module, computation, op.name):
                    out[name] = out[op.name]
                counts["async copies"] += 1
    return {**out, **_scheduling_names(module, out)}, counts


_SCHEDULING_NAME = re.compile(r'scheduling_name="([^"]+)"')


def _scheduling_names(module: hlo.HloModule, named: dict[str, float]) -> dict[str, float]:
    """The costs again under the names the scheduler knew the ops by, where a later pass renamed them: jaxlib 0.12
    records that name in each op's metadata (``scheduling_name``), and the next compile's scheduler asks by it."""
    out = {}
    for computation in module.computations.values():
        for instr in computation.instructions:
            found = _SCHEDULING_NAME.search(instr.attrs.get("metadata", ""))
            if found and found.group(1) != instr.name and instr.name in named:
                out[found.group(1)] = named[instr.name]
    return out


def _wrapped_names(module: hlo.HloModule, computation: str, name: str) -> list[str]:
    instr = module.computations[computation].by_name.get(name)
    if instr is None:
        return []
    return [module.computations[c].root.name for c in instr.called if c in module.computations]


def write(simulator: Simulator, path: str | Path, link: HostLink | str | None = None) -> Profile:
    """Write a ``ProfiledInstructionsProto`` text file for the compile behind ``simulator``, its
    transfers priced on ``link`` (default: the target's own host link)."""
    table, counts = costs(simulator, link)
    path = Path(path)
    if path.suffix != ".pbtxt":
        raise ValueError(f"profile path {str(path)!r} must end in .pbtxt (XLA reads the text format by that suffix)")
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f'costs {{ name: "{name}" cost_us: {us:.3f} }}' for name, us in sorted(table.items())]
    path.write_text("\n".join(lines) + "\n")
    link_key = targets.host_link(link).key if link is not None else simulator.target.link.key
    return Profile(path, table, link_key, counts["kernels"], counts["transfers"], counts["collectives"],
                   counts["async copies"])


def read(path: str | Path) -> dict[str, float]:
    """``{name: cost_us}`` of a profile text file (what ``write`` wrote, or a measured one)."""
    text = Path(path).read_text()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'costs\s*\{\s*name:\s*"([^"]+)"\s*cost_us:\s*([0-9.eE+-]+)\s*\}', text)}


def scheduler_transfer_costs(lhs, transfer_names: set[str]) -> dict[str, float]:
    """What XLA's own timeline (``dump.LhsSchedule``) put between each host transfer's start and done,
    in its units (µs with a profile): with the profile read, a transfer's bytes / bandwidth instead
    of a constant."""
    return {name: window for comp in lhs.computations.values()
            for name, window in comp.async_windows().items() if name in transfer_names}
