"""The planner's decisions judged: each shape's pick against the fastest run the chip measured,
``regret = 1 - pick / best`` (tokens/s), the experiment's goal, and the losses read side by side.

The shapes, their rule and the runs' programs are ``decisions``'; this module only reads what the chip measured
against what was committed before it (``stored``: a set as ``benchmarks/results`` holds it).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from .decisions import Shape, committed_shapes, merge_roles, shapes_result


# The experiment's goal (issue 52): regret <= 2 % on at least 90 % of the shapes, and a median regret <= 1 %.
GOAL_REGRET, GOAL_SHARE, GOAL_MEDIAN = 0.02, 0.90, 0.01


@dataclasses.dataclass(frozen=True)
class Regret:
    """One shape's pick against the best measured run: ``regret = 1 - pick / best`` (tokens/s on the chip)."""

    shape: str
    pick: str  # the pick's roles and batch
    pick_tokens_per_s: float
    best: str
    best_tokens_per_s: float
    runs: int  # runs measured on the shape
    not_run: int = 0  # committed runs the chip did not measure (its time went to the ones predicted closest)
    not_run_gap: float | None = None  # 1 - the fastest of them, simulated, / the best run, simulated

    @property
    def regret(self) -> float:
        return 1 - self.pick_tokens_per_s / self.best_tokens_per_s

    def settled(self, margin: float) -> bool:
        """Whether the best stands: every run the chip did not measure is simulated more than ``margin`` (the
        simulator's worst paired error, ``paired_error``) below it. Where not, the regret is a lower bound."""
        return self.not_run_gap is None or self.not_run_gap > margin

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "regret": self.regret}


def _name(run: dict) -> str:
    return f"{'/'.join(run['roles'])} B={run['batch']}"


REFUSED = "the planner refused (nothing it compiled fit)"


def regret(shape: str, runs: list[dict], refused: bool = False) -> Regret:
    """The pick's regret on one shape from its runs, each with ``roles``, ``batch``, ``tokens_per_s`` (None where it
    failed on the chip), ``not_run`` (True where the chip never ran it) and ``simulated_tokens_per_s``. A planner
    that ``refused`` a shape where a run trains loses it whole (regret 1); a pick that was not measured has no
    regret to give (ValueError). Runs not measured are counted, with how far below the best the fastest of them is
    simulated: the best stands only as far as that gap is wider than the simulator's error."""
    ran = [r for r in runs if r.get("tokens_per_s")]
    best = max(ran, key=lambda r: r["tokens_per_s"]) if ran else None
    if best is None:
        raise ValueError(f"{shape}: nothing ran: no regret to give")
    unrun = [r.get("simulated_tokens_per_s") for r in runs if r.get("not_run")]
    simulated = [v for v in unrun if v] if best.get("simulated_tokens_per_s") else []
    gap = 1 - max(simulated) / best["simulated_tokens_per_s"] if simulated else None
    not_run = {"not_run": len(unrun), "not_run_gap": gap}
    if refused:
        return Regret(shape, REFUSED, 0.0, _name(best), best["tokens_per_s"], len(ran), **not_run)
    pick = next((r for r in runs if "pick" in r["roles"]), None)
    if pick is None or not pick.get("tokens_per_s"):
        raise ValueError(f"{shape}: the pick was not measured ({'absent' if pick is None else 'it did not run'})")
    return Regret(shape, _name(pick), pick["tokens_per_s"], _name(best), best["tokens_per_s"], len(ran), **not_run)


def goal_met(regrets: list[Regret], margin: float | None = None) -> dict:
    """The goal's two parts over the shapes judged: the share within ``GOAL_REGRET`` and the median. With a
    ``margin``, a shape whose regret is only a lower bound (``Regret.settled``) is judged where the bound already
    misses the goal and left out (``unsettled``) where it does not."""
    judged = [r for r in regrets if margin is None or r.settled(margin) or r.regret > GOAL_REGRET]
    values = sorted(r.regret for r in judged)
    if not values:
        raise ValueError("no shape measured: no regret to judge")
    share = sum(v <= GOAL_REGRET for v in values) / len(values)
    median = float(np.median(values))
    return {"shapes": len(values), "within_2_percent": share, "median": median,
            "met": share >= GOAL_SHARE and median <= GOAL_MEDIAN,
            "unsettled": [r.shape for r in regrets if r not in judged]}


def paired_error(picks: dict, measured: dict) -> float:
    """The simulator's worst paired error over one set's measured runs: for every two runs of a shape, how far
    the simulated ratio of their tokens/s is from the measured one, ``|sim_a / sim_b / (meas_a / meas_b) - 1|``."""
    tokens = {r["program"]: r["tokens_per_s"] for e in measured.get("entries", []) for r in e["runs"]}
    worst = 0.0
    for entry in picks.get("entries", []):
        ran = [(r["simulated_tokens_per_s"], tokens[r["program"]]) for r in merge_roles(entry["runs"])
               if tokens.get(r["program"]) and r.get("simulated_tokens_per_s")]
        for i, (sim_a, meas_a) in enumerate(ran):
            for sim_b, meas_b in ran[i + 1:]:
                worst = max(worst, abs(sim_a / sim_b / (meas_a / meas_b) - 1))
    return worst


def regret_table(picks: list[dict], measured: list[dict], shapes: list[Shape]) -> tuple[list[Regret], list[str]]:
    """Each shape's regret, and the shapes not yet measured. ``picks``: the committed picks (merged results with
    ``entries`` or jobs' ``parts``); ``measured``: the chip's parts. Every committed run keeps all its roles, its
    measured tokens/s joined by program; a shape whose plan the planner refused is a loss where anything ran."""
    runs: dict[str, list[dict]] = {}
    refused = set()
    for data in picks:
        for entry in data.get("entries", []) + data.get("parts", []):
            runs[entry["shape"]] = merge_roles(runs.get(entry["shape"], []) + entry["runs"])
            if "error" in entry.get("plan", {}):
                refused.add(entry["shape"])
    tokens = {r["program"]: r["tokens_per_s"] for data in measured
              for p in data.get("entries", []) + data.get("parts", []) for r in p["runs"]}
    table, waiting = [], []
    for shape in shapes:
        joined = [{**r, "tokens_per_s": tokens.get(r["program"]), "not_run": r["program"] not in tokens}
                  for r in runs.get(shape.key, [])]
        if not any(r["program"] in tokens for r in joined):
            waiting.append(shape.key)
            continue
        table.append(regret(shape.key, joined, refused=shape.key in refused))
    return table, waiting


def regret_rows(table: list[Regret], margin: float | None = None) -> list[dict]:
    """The regret table as rows (``tables.markdown``), worst first: the pick and the best measured, tokens/s each;
    with a ``margin``, a regret that is only a lower bound (``Regret.settled``) reads ">= x"."""
    return [{"shape": r.shape, "pick": r.pick, "pick tokens/s": round(r.pick_tokens_per_s),
             "best": r.best, "best tokens/s": round(r.best_tokens_per_s), "runs": r.runs,
             "not run (simulated below the best)": f"{r.not_run} ({r.not_run_gap:.0%})" if r.not_run_gap is not None
             else str(r.not_run),
             "regret": ("" if margin is None or r.settled(margin) else ">= ") + f"{r.regret:.1%}"}
            for r in sorted(table, key=lambda r: (-r.regret, r.shape))]


def loss_rows(entry: dict, kinds: int = 6) -> list[dict]:
    """Why a pick lost (one entry of ``decision_explained.json``): the pick and the best run side by side, their
    measured and simulated steps, the exposed host transfers, the recompute, and the op classes that keep the
    compute stream busiest (simulated seconds; streams overlap, so the classes do not add up to the step)."""
    pick, best = entry["runs"]
    top = sorted(set(pick["time_by_kind"]) | set(best["time_by_kind"]),
                 key=lambda k: -max(pick["time_by_kind"].get(k, 0.0), best["time_by_kind"].get(k, 0.0)))[:kinds]
    rows = [("batch", pick["batch"], best["batch"]),
            ("measured step (s)", pick["measured_step_seconds"], best["measured_step_seconds"]),
            ("simulated step (s)", pick["simulated_step_seconds"], best["simulated_step_seconds"]),
            ("exposed host transfers (s)", pick["exposed_transfer_seconds"], best["exposed_transfer_seconds"]),
            ("recompute (TFLOP)", pick["recompute_flops"] / 1e12, best["recompute_flops"] / 1e12),
            *((f"busy: {k} (s)", pick["time_by_kind"].get(k, 0.0), best["time_by_kind"].get(k, 0.0)) for k in top)]
    return [{"": name, f"pick ({'/'.join(pick['roles'])})": _short(a), f"best ({'/'.join(best['roles'])})": _short(b)}
            for name, a, b in rows]


def seen_by_simulator(entry: dict) -> dict:
    """One explained loss: how much faster per token the best run was than the pick, on the chip and in the
    simulator — where the simulator ranked the best first too, the planner's search never compiled it."""
    pick, best = entry["runs"]
    measured = pick["measured_step_seconds"] / pick["batch"] / (best["measured_step_seconds"] / best["batch"]) - 1
    simulated = pick["simulated_step_seconds"] / pick["batch"] / (best["simulated_step_seconds"] / best["batch"]) - 1
    return {"shape": entry["shape"], "best": "/".join(best["roles"]) + f" B={best['batch']}",
            "best faster on the chip": f"{measured:.1%}", "best faster, simulated": f"{simulated:.1%}",
            "simulator ranked the best first": simulated > 0}


def _short(value) -> str | int:
    return value if isinstance(value, int) else f"{value:.3f}"


@dataclasses.dataclass(frozen=True)
class Stored:
    """One set's stored experiment: the committed picks, the chip's measurements, the losses explained."""

    shapes: tuple[Shape, ...]
    picks: dict  # decision_picks[_SET].json: per shape, the plan, the presets and every distinct run
    measured: dict  # decision_measured[_SET].json: per shape, the runs the chip measured
    explained: dict  # decision_explained[_SET].json: per lost shape, the pick and the best side by side ({} before)

    def regrets(self) -> tuple[list[Regret], list[str]]:
        return regret_table([self.picks], [self.measured], list(self.shapes))

    def paired_error(self) -> float:
        """The simulator's worst paired error over this set's measured runs (``paired_error``)."""
        return paired_error(self.picks, self.measured)

    def loss(self, shape: str) -> dict:
        """The explained entry of a shape the pick lost (``loss_rows`` reads it)."""
        found = next((e for e in self.explained.get("entries", []) if e["shape"] == shape), None)
        if found is None:
            lost = ", ".join(e["shape"] for e in self.explained.get("entries", [])) or "none"
            raise ValueError(f"shape {shape!r}: no explained loss; the explained shapes are: {lost}")
        return found


def stored(set_name: str = "first") -> Stored:
    """A set's experiment as ``benchmarks/results`` holds it (the shapes, picks, measurements, explained losses)."""
    path = shapes_result(set_name)
    suffix = "" if set_name == "first" else f"_{set_name}"

    def read(name: str) -> dict:
        found = path.with_name(f"{name}{suffix}.json")
        return json.loads(found.read_text()) if found.exists() else {}

    return Stored(tuple(committed_shapes(path)), read("decision_picks"), read("decision_measured"),
                  read("decision_explained"))
