"""The memory fraction a run needs: the smallest ``XLA_PYTHON_CLIENT_MEM_FRACTION`` at which its step fits.

XLA's latency-hiding scheduler plans for the memory limit it is given (``GetSchedulerMemoryLimit``: the
allocator limit less the step's arguments, x 0.95) and fills it, so a step's compiled peak moves with
the fraction: the answer is a search, not a division. ``needed`` takes the budget's answer — the
smallest fraction at which the analytic budget fits — as its first guess (for an unscanned stack,
which the budget does not model, the compiled peak at the ceiling divided by the card's HBM), then
compiles the step there and one step (``STEP``) below: the answer is the smallest fraction whose
compiled step fits (``fit.check``) with the one below shown not to, or that it fits at none up to
``CEILING`` and the usable HBM per GPU it would need. Its cost is two compiles or more (each listed).

``CEILING`` is an assumption: above ~0.95 of the card, CUDA's context, cuBLAS/cuDNN workspaces and
NCCL's buffers, which live outside JAX's pool, are left too little (MaxText's own GPU scripts set at
most 0.94, ``XLA_PYTHON_CLIENT_MEM_FRACTION`` in AI-Hypercomputer/maxtext at e591f30).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Mapping

from ..hardware import fit
from ..ground import sharding
from ..hardware.targets import GiB, Target

STEP = 0.01
CEILING = 0.95
MAX_COMPILES = 6


@dataclasses.dataclass(frozen=True)
class Point:
    """One compile of the search: the fraction, the compiled peak and pinned host bytes, the verdict."""

    fraction: float
    device_bytes: int
    host_bytes: int
    usable_hbm_bytes: int
    fits: bool
    compile_seconds: float


@dataclasses.dataclass(frozen=True)
class Needed:
    """The smallest fraction a step fits at (None: none up to ``CEILING``), and how it was found."""

    target: str
    hbm_bytes: int
    budget_fraction: float | None  # the budget's smallest (None: none, or not modelled: unscanned)
    fraction: float | None  # the compiler's smallest
    points: tuple[Point, ...]  # every compile, in order
    note: str = ""
    reports: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)  # fraction -> CompileReport

    @property
    def report(self):
        """The compile at the answer (at the ceiling when none fits)."""
        return self.reports[self.fraction if self.fraction is not None else max(self.reports)]

    @property
    def confirmed(self) -> bool:
        """Whether the compiles show the answer: the fraction fits and the one below does not (or, for
        none, the ceiling does not fit); False where the search ran out of compiles first."""
        seen = {p.fraction: p.fits for p in self.points}
        if self.fraction is None:
            return seen.get(CEILING) is False
        below = round(self.fraction - STEP, 2)
        return seen.get(self.fraction) is True and (below < STEP or seen.get(below) is False)

    @property
    def compiles(self) -> int:
        return len(self.points)

    @property
    def compile_seconds(self) -> float:
        return sum(p.compile_seconds for p in self.points)

    @property
    def needed_bytes(self) -> int:
        """Usable HBM per GPU the step needs: its compiled peak at the answer (at the ceiling when none)."""
        at = self.fraction if self.fraction is not None else max(p.fraction for p in self.points)
        return next(p.device_bytes for p in self.points if p.fraction == at)

    def summary(self) -> str:
        tried = ", ".join(f"{p.fraction:.2f} ({p.device_bytes / GiB:.1f} GiB of {p.usable_hbm_bytes / GiB:.1f}: "
                          f"{'fits' if p.fits else 'over'})" for p in sorted(self.points, key=lambda p: p.fraction))
        cost = f"{self.compiles} compiles, {self.compile_seconds:.0f} s"
        budget = self.note or ("the budget's guess " + (f"{self.budget_fraction:.2f}" if self.budget_fraction
                                                        is not None else "none up to the ceiling"))
        if self.fraction is None:
            head = (f"fits at no XLA_PYTHON_CLIENT_MEM_FRACTION up to {CEILING:.2f} on {self.target}: it needs "
                    f"{self.needed_bytes / GiB:.1f} GiB usable per GPU ({self.needed_bytes / self.hbm_bytes:.0%} of "
                    f"the card's {self.hbm_bytes / GiB:.1f} GiB)")
        else:
            head = f"needs XLA_PYTHON_CLIENT_MEM_FRACTION={self.fraction:.2f} on {self.target}"
        unconfirmed = "" if self.confirmed else f" (not confirmed: the search stopped after {MAX_COMPILES} compiles)"
        return f"{head}{unconfirmed}; compiled at {tried}; {budget}; cost {cost}"

    def to_dict(self) -> dict:
        return {"target": self.target, "hbm_bytes": self.hbm_bytes, "budget_fraction": self.budget_fraction,
                "fraction": self.fraction, "confirmed": self.confirmed, "needed_bytes": self.needed_bytes,
                "compiles": self.compiles,
                "compile_seconds": round(self.compile_seconds, 3), "note": self.note,
                "points": [dataclasses.asdict(p) for p in self.points], "ceiling": CEILING}


def grid() -> list[float]:
    """The fractions the search tries: ``STEP`` apart up to ``CEILING``."""
    return [round(k * STEP, 2) for k in range(1, round(CEILING / STEP) + 1)]


def smallest(fits_at: Callable[[float], bool]) -> float | None:
    """The smallest grid fraction at which ``fits_at`` (monotone in the fraction) holds; None if none."""
    fractions = grid()
    if not fits_at(fractions[-1]):
        return None
    low, high = -1, len(fractions) - 1  # fits_at(fractions[high]) holds
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fits_at(fractions[mid]) else (mid, high)
    return fractions[high]


def budget_fraction(cfg, target: Target, batch: int, seq: int, policy, mesh: Mapping[str, int], state=None,
                    flags=None, margin: fit.Margin = fit.NO_MARGIN) -> float | None:
    """The smallest fraction at which the analytic budget fits (no compile): the search's first guess.
    The budget does not model unscanned layers (``scan_layers: false``): compile them."""
    from . import budget as budget_lib

    if not cfg.scan_layers:
        raise ValueError(f"{cfg.name} with scan_layers false: {budget_lib.UNSCANNED}")

    def fits_at(f: float) -> bool:
        t = target.with_mem_fraction(f)
        b = budget_lib.estimate(cfg, batch, seq, policy, mesh, target=t, state=state, flags=flags)
        return fit.check(b.device_bytes, b.host_bytes, t, margin).fits

    return smallest(fits_at)


def search(point_at: Callable[[float], Point], guess: float, hbm_bytes: int) -> float | None:
    """The smallest grid fraction whose compile fits, with the one below it compiled and over (None: none
    fits up to ``CEILING``), assuming a step that fits at a fraction fits at every larger one. From
    ``guess`` it keeps the bracket (largest fraction seen over, smallest seen to fit) and compiles next
    where the last peak says it would just fit — the smallest fraction whose usable HBM holds it, as the
    peak moves little with the fraction — kept inside the bracket. ``point_at(f)`` compiles at f
    (memoized by the caller); at most ``MAX_COMPILES``."""
    fractions = grid()

    def index(f: float) -> int:
        return min(range(len(fractions)), key=lambda k: abs(fractions[k] - f))

    over, fits = -1, None  # bracket, as grid indices: the largest seen over, the smallest seen to fit
    i = index(guess)
    for _ in range(MAX_COMPILES):
        p = point_at(fractions[i])
        holds = index(min(CEILING, math.ceil(p.device_bytes / hbm_bytes / STEP - 1e-9) * STEP))
        if p.fits:
            fits = i if fits is None else min(fits, i)
        else:
            over = max(over, i)
        if fits is not None and fits - over == 1:
            return fractions[fits]
        if fits is None and over == len(fractions) - 1:
            return None
        upper = fits - 1 if fits is not None else len(fractions) - 1
        i = min(max(holds, over + 1), upper)
    return fractions[fits] if fits is not None else None  # out of compiles: the smallest seen to fit


def needed(cfg, target: Target, batch: int, seq: int, policy, mesh: Mapping[str, int], state=None, flags=None,
           margin: fit.Margin = fit.NO_MARGIN) -> Needed:
    """The smallest ``XLA_PYTHON_CLIENT_MEM_FRACTION`` at which the step fits ``target`` (see the module
    docstring); ``mesh`` the full mesh, ``state`` MaxText's state levers."""
    from ..compiling import compiler, train

    state = state or train.StateConfig()
    trainer = train.trainer(cfg, policy, state=state)
    points: dict[float, Point] = {}
    reports = {}

    def point_at(f: float) -> Point:
        if f not in points:
            t = target.with_mem_fraction(f)
            t0 = time.perf_counter()
            report = reports[f] = train.compile_step(trainer, compiler.place(t, sharding.active_axes(mesh)), batch, seq,
                                                     flags=flags)
            device, host = report.device.peak_bytes, report.host.total_bytes
            points[f] = Point(f, device, host, t.usable_hbm_bytes, fit.check(device, host, t, margin).fits,
                              time.perf_counter() - t0)
        return points[f]

    note, guess = "", None
    if cfg.scan_layers:
        guess = budget_fraction(cfg, target, batch, seq, policy, mesh, state, flags, margin)
    else:
        note = "unscanned layers: the budget does not model them, the compile is the answer"
    first = guess
    if first is None:  # start where the compiled peak at the ceiling would fit
        first = min(CEILING, math.ceil(point_at(CEILING).device_bytes / target.hbm_bytes / STEP) * STEP)
    fraction = search(point_at, first, target.hbm_bytes)
    return Needed(target.name, target.hbm_bytes, guess, fraction, tuple(points.values()), note, reports)
