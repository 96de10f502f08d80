"""The simulator held against a real clock: measured TPU v5e steps beside their simulated time.

``benchmarks/bench_tpu_simulation.py`` compiles every measured step that ran (``companion.measured``) with
libtpu's compile-only v5e — the same program the chip ran, byte for byte — and replays it with the
simulator's v5e prices (``schedule.MATMUL_EFFICIENCY`` etc., from the chip's kernel microbenchmarks). This
module reads that result and says how wrong the simulator is:

* **absolute**: simulated over measured step time, per step; median and worst |error| on the held-out half
  (``measured.held_out``, fixed before the first comparison), XLA:TPU's ``optimal_seconds`` beside it;
* **paired**: every two steps of one shape (layers, batch, sequence, attention kernel) under different
  policies or flags, simulated ratio against measured ratio; the ranking wherever the measured ratio
  differs from 1 by more than the measured run-to-run spread;
* **the paired band's model-error term, first estimate**: the training half's largest |paired error|, tested
  on the held-out pairs — how many fall inside, and how many grid pairs the band still calls a ranking;
* **the band with a stated coverage, tested on fresh steps**: ``bands.conformal_band`` over every pair of
  both halves (``seen_band``), rounded up and committed as ``bands.PAIRED_MODEL_ERROR`` before the fresh
  steps were measured (``bench_measured.FRESH``, shapes the grid never ran); ``fresh_test`` holds that
  committed band against them — pairs inside, rankings, what the band calls.

Three groups, then (``StepError.group``): ``TRAINING`` and ``HELD_OUT`` (the grid's split) and ``FRESH``.

A comparison is a fact about the commit whose prices it froze (``commit`` in the result): change the
pricing (``schedule``, ``hlo``'s byte and FLOP counts, the v5e entries of ``targets``) and rerun the benchmark.
A whole re-run keeps the comparisons it replaces (``history``): once the held-out half has been seen, a
reprice is reported beside what came before it, never instead of it.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from ..timing import bands
from . import measured

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "tpu_simulation.json"
TRAINING, HELD_OUT, FRESH = "training", "held-out", "fresh"  # the groups (see the module's docstring)


def _group(held_out: bool, fresh: bool) -> str:
    return FRESH if fresh else HELD_OUT if held_out else TRAINING


@dataclasses.dataclass(frozen=True)
class StepError:
    """One measured step beside its simulation."""

    key: str
    measured_seconds: float
    simulated_seconds: float
    held_out: bool  # by the grid's split (``measured.held_out``); False for a fresh step
    xla_optimal_seconds: float | None  # XLA:TPU's cost analysis (a loop body counted once: not a step time)
    fresh: bool = False  # measured after the band was fixed (``bench_measured.FRESH``)

    @property
    def error(self) -> float:
        """Simulated over measured, less one (positive: the simulator is slow)."""
        return self.simulated_seconds / self.measured_seconds - 1

    @property
    def group(self) -> str:
        return _group(self.held_out, self.fresh)


@dataclasses.dataclass(frozen=True)
class PairError:
    """Two steps of one shape: ``a`` against ``b``, measured and simulated (a ratio over 1: ``a`` slower)."""

    a: str
    b: str
    measured_ratio: float
    simulated_ratio: float
    held_out: bool  # either step is held out (grid pairs only)
    spread: float  # the measured ratio's noise: the larger run-to-run spread of the two (the grid's where unrepeated)
    fresh: bool = False  # either step is fresh

    @property
    def group(self) -> str:
        return _group(self.held_out, self.fresh)

    @property
    def error(self) -> float:
        return self.simulated_ratio / self.measured_ratio - 1

    @property
    def measured_ranking(self) -> bool:
        """The measurement ranks the two: their difference exceeds the run-to-run spread."""
        return abs(self.measured_ratio - 1) > self.spread

    @property
    def agrees(self) -> bool:
        """The simulator ranks them the way the chip did."""
        return (self.simulated_ratio > 1) == (self.measured_ratio > 1)

    def called(self, band: float) -> bool:
        """The band calls a ranking (not a tie): the simulated ratio is off 1 by more than ``band``."""
        return abs(self.simulated_ratio - 1) > band


def _calls(band: float, pairs: "list[PairError] | tuple[PairError, ...]") -> dict:
    """What ``band`` calls a ranking (not a tie) among ``pairs``, and how many of those the chip ranked the other way."""
    called = [p for p in pairs if p.called(band)]
    return {"called_rankings": len(called), "called_and_wrong": sum(p.measured_ranking and not p.agrees for p in called)}


def _shape(step: measured.MeasuredStep) -> tuple:
    return step.layers, step.batch, step.seq, step.flash_kernel


@dataclasses.dataclass(frozen=True)
class Comparison:
    steps: tuple[StepError, ...]
    pairs: tuple[PairError, ...]
    commit: str  # the lab's commit whose constants were frozen for the run
    history: tuple[dict, ...] = ()  # the comparisons a whole re-run replaced: each one's commit and summary

    @property
    def grid_pairs(self) -> tuple[PairError, ...]:
        """The pairs of the grid's two halves (every pair but the fresh ones)."""
        return tuple(p for p in self.pairs if not p.fresh)

    def absolute(self, group: str = HELD_OUT) -> dict:
        """Median and worst |error| of one group's steps (``HELD_OUT``: the grid's reported half)."""
        errors = [abs(s.error) for s in self.steps if s.group == group]
        return {"steps": len(errors), "median_abs_error": statistics.median(errors), "worst_abs_error": max(errors)}

    def paired(self, group: str = HELD_OUT) -> dict:
        rows = [p for p in self.pairs if p.group == group]
        ranked = [p for p in rows if p.measured_ranking]
        return {"pairs": len(rows), "median_abs_error": statistics.median(abs(p.error) for p in rows),
                "worst_abs_error": max(abs(p.error) for p in rows), "measured_rankings": len(ranked),
                "rankings_agreeing": sum(p.agrees for p in ranked)}

    def band(self) -> float:
        """The first estimate of the paired band's model-error term: the training half's largest |paired error|."""
        return max(abs(p.error) for p in self.pairs if p.group == TRAINING)

    def band_test(self) -> dict:
        """The training half's band tested on the held-out pairs, and what it still calls a ranking (grid pairs)."""
        band, held = self.band(), [p for p in self.pairs if p.group == HELD_OUT]
        return {"band": band, "held_out_pairs": len(held), "inside": sum(abs(p.error) <= band for p in held),
                **_calls(band, self.grid_pairs), "pairs": len(self.grid_pairs)}

    def seen_band(self) -> dict:
        """``bands.conformal_band`` over every grid pair (the band fixed before the fresh steps), its coverage."""
        band, coverage = bands.conformal_band([p.error for p in self.grid_pairs])
        return {"band": band, "coverage": coverage, "grid_pairs": len(self.grid_pairs)}

    def fresh_test(self, band: float = bands.PAIRED_MODEL_ERROR) -> dict | None:
        """The committed band (``bands.PAIRED_MODEL_ERROR``, not one recomputed now) held against the fresh pairs
        (None before any was measured): their errors and rankings (``paired``), how many fall inside, what the
        band calls a ranking among them, and the chance that a band with its coverage holds them all anyway
        (``bands.chance_of_misses``: a test's power)."""
        fresh = [p for p in self.pairs if p.group == FRESH]
        if not fresh:
            return None
        inside = sum(abs(p.error) <= band for p in fresh)
        n = len(self.grid_pairs)
        return {"band": band, **self.paired(FRESH), "inside": inside, **_calls(band, fresh),
                "chance_of_as_many_misses": bands.chance_of_misses(n, n, len(fresh), len(fresh) - inside)}

    def worst(self, n: int = 3, group: str = HELD_OUT) -> list[StepError]:
        return sorted((s for s in self.steps if s.group == group), key=lambda s: -abs(s.error))[:n]


def pairs_of(m: measured.Measurements, simulated: dict[str, float]) -> list[PairError]:
    """Every two simulated steps of one shape, slower over faster as measured (so a ratio is >= 1)."""
    ran = [s for s in m.steps if s.runs and s.key in simulated]
    # the noise floor of an unrepeated step: the grid's largest run-to-run spread (the fresh steps' spreads,
    # measured later, change no grid pair's ranking; for a fresh pair it is a floor fixed before it was measured)
    floor = max(s.spread for s in m.steps if s.spread is not None and not s.fresh)
    out = []
    for i, a in enumerate(ran):
        for b in ran[i + 1:]:
            if _shape(a) != _shape(b) or (a.policy, a.optimizer_offload, a.flags) == (b.policy, b.optimizer_offload, b.flags):
                continue
            slow, fast = (a, b) if a.seconds >= b.seconds else (b, a)
            spread = max(x if x is not None else floor for x in (slow.spread, fast.spread))
            out.append(PairError(slow.key, fast.key, slow.seconds / fast.seconds,
                                 simulated[slow.key] / simulated[fast.key],
                                 not (slow.fresh or fast.fresh) and (measured.held_out(slow.key) or measured.held_out(fast.key)),
                                 spread, slow.fresh or fast.fresh))
    return out


def load(path: str | Path = RESULTS, m: measured.Measurements | None = None) -> Comparison:
    data = json.loads(Path(path).read_text())
    m = m or measured.load()
    steps = tuple(StepError(r["key"], r["measured_seconds"], r["simulated_seconds"], r["held_out"],
                            r.get("xla_optimal_seconds"), r.get("fresh", False)) for r in data["steps"])
    simulated = {s.key: s.simulated_seconds for s in steps}
    return Comparison(steps, tuple(pairs_of(m, simulated)), data.get("commit", ""), tuple(data.get("history", ())))


# ----------------------------------------------------------------------------- tables (notebook 08)


def step_rows(c: Comparison, group: str = HELD_OUT) -> list[dict]:
    """One row per step of a group: measured, simulated, error, XLA:TPU's ``optimal_seconds``."""
    return [{"step": s.key, "measured ms": s.measured_seconds * 1e3, "simulated ms": s.simulated_seconds * 1e3,
             "error": f"{s.error:+.1%}", "XLA optimal_seconds": s.xla_optimal_seconds}
            for s in c.steps if s.group == group]


def pair_rows(c: Comparison, group: str = HELD_OUT) -> list[dict]:
    """One row per pair of a group, and what its band calls (the fresh pairs: the seen band; else the first)."""
    band = c.seen_band()["band"] if group == FRESH else c.band()
    return [{"slower": p.a, "faster": p.b, "measured": p.measured_ratio, "simulated": p.simulated_ratio,
             "error": f"{p.error:+.1%}", "measured ranks": p.measured_ranking, "agrees": p.agrees,
             "band calls": "ranking" if p.called(band) else "tie"}
            for p in c.pairs if p.group == group]


def break_even_rows(m: measured.Measurements, d_model: int = 2048, kv_dim: int = 1024, qkv_out: int = 4096) -> list[dict]:
    """The break-even rule (``roofline.break_even_bandwidth``) for offloading the context and Q/K/V instead
    of recomputing them, per sequence length of the grid's sweep, beside the measured ratio of
    ``context_offload`` over ``full``. Per token and layer the policy moves the context and Q (``d_model``
    each) and K, V (``kv_dim`` each) in bf16, and spares the Q/K/V projections (2 x ``d_model`` x
    ``qkv_out`` FLOPs) and causal attention's forward (2 x S x ``d_model``)."""
    from ..timing import roofline
    from ..hardware import targets

    chip = targets.TPUS["tpu-v5e"]
    link = min(chip.host_link.achievable_d2h, chip.host_link.achievable_h2d)
    rows = []
    for r in measured.sequence_sweep(m, "context_offload", "full"):
        moved = 2 * (2 * d_model + 2 * kv_dim)
        spared = 2 * d_model * qkv_out + 2 * r["S"] * d_model
        rows.append({"S": r["S"], "break-even GB/s": roofline.break_even_bandwidth(moved, spared, chip) / 1e9,
                     "link GB/s": link / 1e9, "rule says": "offload" if link > roofline.break_even_bandwidth(
                         moved, spared, chip) else "recompute",
                     "measured offload / full": r["ratio"], "full fits": r["full ms"] is not None})
    return rows
