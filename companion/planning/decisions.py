"""The planner's decisions held against the chip: which shapes, drawn how, before any pick or measurement.

A user comes for a decision (the per-tensor policy, the batch, the flags), not a step time. The experiment
(issue 52) asks the planner for its pick on shapes it has never seen, runs the pick and every alternative on the
lent TPU v5e, and scores the pick by its regret against the fastest measured: ``regret = 1 - pick / best``
(``regret``, its own module).
Its order is the point, and git holds it: this rule is committed first; the shapes it draws and the planner's
picks are committed after; the chip measures last. A fix is tested on a second set drawn with another seed,
committed after the fix.

**The rule** (``draw``). A shape is a Llama 3 decoder layer at width D (head dim 128, GQA groups of two, MLP 4 D,
the measured grid's vocabulary: ``measured.grid_model``'s family), stacked ``layers`` deep, at sequence S, with
or without the optimizer's moments offloaded to the host. Draw ``i`` takes its width, sequence and optimizer
offload from seeded cycles (every width and every sequence comes round before any repeats; offload alternates),
and its depth uniformly from the depths whose full-remat step at batch 1 the budget puts between
``DEPTH_WINDOW`` of the chip's usable HBM: near the limit, where a decision matters. The compiler then sorts it
(``classify``, compile-only at batch 1 on the chip lock's libtpu):

* ``near`` — full remat fits, at ``NEAR`` or more of usable HBM (within 5 % of the limit: the batch is 1 and
  the policy is the whole decision);
* ``offload_only`` — full remat does not fit, but it does with the host's levers pulled: the layer inputs
  offloaded (what trained at S 32K on the chip when full remat compiled to 115 % of usable HBM) and the
  optimizer's moments on the host (the shape's start may have them on the device: then moving them is part of
  the decision);
* ``open`` — full remat fits with room: the batch is part of the decision;
* rejected — nothing fits at batch 1.

A drawn shape is kept while its category's quota (``QUOTAS``) has room, until every quota is full.

The rule's first version (commit 25e8044) tried the layer inputs alone: sorting its first seven draws, compile-only,
showed them never rescue a refused draw (their excess was parameters, gradients and moments, not saved
activations), so the offload quota could not fill. This version adds the optimizer lever; it was changed before
any pick was made or any step measured.

Assumptions, said: one v5e chip (its runtime's fixed usable HBM); the planner's search is the one under test,
so the rule uses only the budget (to place depths) and the compiler (to sort), never the planner.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
import re
from typing import Callable, Iterator

import numpy as np

from .. import models
from ..ground import policies
from ..ground.state import StateConfig
from ..hardware import targets
from ..memory import budget

SEED = 52  # the first set's; a second set (after a fix) is drawn with another
TARGET = "tpu-v5e"
WIDTHS = (1536, 2048, 2560, 3072, 3584, 4096)
SEQS = (2048, 4096, 8192, 16384, 32768)
DEPTHS = tuple(range(1, 33))
DEPTH_WINDOW = (0.6, 1.25)  # full remat at batch 1 by the budget, as a share of usable HBM
NEAR = 0.95
QUOTAS = {"near": 3, "offload_only": 3, "open": 6}
# The second set tests the planner's fix (issue 52): drawn by the same rule with another seed, after the fix was
# committed. Five shapes, the first set's mix in proportion (a quarter near the limit, a quarter offload-only, the
# rest open), so that their runs fit the chip's 30 minutes for it (the first set's shapes took 11-13 runs each).
SETS = {"first": (SEED, QUOTAS), "second": (5300, {"near": 1, "offload_only": 1, "open": 3})}  # name -> (seed, quotas)
MAX_DRAWS = 60
INPUT_OFFLOAD = {"decoder_layer_input": "offload"}


@dataclasses.dataclass(frozen=True)
class Shape:
    """One shape of the experiment: the model (width, depth), the sequence and where the optimizer lives."""

    d_model: int
    layers: int
    seq: int
    optimizer_offload: bool

    @property
    def key(self) -> str:
        return f"D{self.d_model}-L{self.layers}-S{self.seq}" + ("+opt_offload" if self.optimizer_offload else "")

    def model(self) -> models.ModelConfig:
        """A Llama 3 layer at this width: head dim 128, GQA groups of two, MLP 4 D, a 32,000-token vocabulary, the
        Pallas flash kernel."""
        heads = self.d_model // 128
        return models.config("llama3-8b").replace(
            name=f"decision-D{self.d_model}-L{self.layers}", num_layers=self.layers, d_model=self.d_model,
            num_heads=heads, num_kv_heads=heads // 2, head_dim=128, mlp_dim=4 * self.d_model, vocab_size=32_000,
            flash_kernel="fused")  # the Pallas TPU flash kernel: what a TPU run uses

    def state(self) -> StateConfig:
        return StateConfig(optimizer_memory_host_offload=self.optimizer_offload)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "key": self.key}


@dataclasses.dataclass(frozen=True)
class Sorted:
    """A drawn shape as the compiler sorted it: its category (None: rejected), and the peaks it compiled to at
    batch 1 (bytes; None where XLA:TPU refused the program, with what it needed)."""

    draw: int
    shape: Shape
    category: str | None
    full_peak_bytes: int | None
    offload_peak_bytes: int | None = None
    usable_hbm_bytes: int = 0
    depths: tuple[int, ...] = ()  # the depths the draw chose from

    def to_dict(self) -> dict:
        return {"draw": self.draw, **self.shape.to_dict(), "category": self.category,
                "full_peak_bytes": self.full_peak_bytes, "offload_peak_bytes": self.offload_peak_bytes,
                "usable_hbm_bytes": self.usable_hbm_bytes, "depths": list(self.depths)}


# A compile at batch 1: (shape, policy) -> (fits, peak bytes or the bytes XLA:TPU said it needed).
Compile = Callable[[Shape, object], tuple[bool, int]]


def _cycle(values: tuple, rng: np.random.Generator) -> Iterator:
    """Every value once in a seeded order, then again in a new order, forever."""
    while True:
        yield from (values[i] for i in rng.permutation(len(values)))


def window_depths(d_model: int, seq: int, optimizer_offload: bool, target: targets.Target) -> tuple[int, ...]:
    """The depths whose full-remat step at batch 1 the budget puts inside ``DEPTH_WINDOW`` of usable HBM."""
    low, high = (share * target.usable_hbm_bytes for share in DEPTH_WINDOW)
    out = []
    for layers in DEPTHS:
        shape = Shape(d_model, layers, seq, optimizer_offload)
        b = budget.estimate(shape.model(), 1, seq, "full", {"fsdp": 1}, target=target, state=shape.state())
        if low <= b.device_bytes <= high:
            out.append(layers)
        elif b.device_bytes > high:
            break
    return tuple(out)


def draws(seed: int = SEED, target: targets.Target | None = None) -> Iterator[tuple[Shape, tuple[int, ...]]]:
    """The rule's draws in order, each with the depths it chose from (a draw with none is skipped)."""
    target = target or targets.target(TARGET)
    rng = np.random.default_rng(seed)
    widths, seqs = _cycle(WIDTHS, rng), _cycle(SEQS, rng)
    for i in range(MAX_DRAWS):
        d_model, seq, offload = next(widths), next(seqs), i % 2 == 1
        depths = window_depths(d_model, seq, offload, target)
        layers = int(rng.choice(depths)) if depths else 0
        if depths:
            yield Shape(d_model, layers, seq, offload), depths


def classify(shape: Shape, compile_at_batch_1: Compile, usable_hbm_bytes: int) -> tuple[str | None, int, int | None]:
    """The shape's category, full remat's peak and (where full remat does not fit) the peak with the host's levers
    pulled (``offloaded``)."""
    full_fits, full_peak = compile_at_batch_1(shape, "full")
    if full_fits:
        return ("near" if full_peak >= NEAR * usable_hbm_bytes else "open"), full_peak, None
    offload_fits, offload_peak = compile_at_batch_1(offloaded(shape), INPUT_OFFLOAD)
    return ("offload_only" if offload_fits else None), full_peak, offload_peak


def offloaded(shape: Shape) -> Shape:
    """The shape with the optimizer's moments on the host (the lever the sort pulls with the layer inputs)."""
    return dataclasses.replace(shape, optimizer_offload=True)


def draw(compile_at_batch_1: Compile, seed: int = SEED, quotas: dict[str, int] | None = None,
         target: targets.Target | None = None) -> list[Sorted]:
    """Every draw the rule made until each quota was full (kept and passed over alike, in order)."""
    target = target or targets.target(TARGET)
    left = dict(quotas or QUOTAS)
    out = []
    for i, (shape, depths) in enumerate(draws(seed, target)):
        category, full_peak, offload_peak = classify(shape, compile_at_batch_1, target.usable_hbm_bytes)
        out.append(Sorted(i, shape, category, full_peak, offload_peak, target.usable_hbm_bytes, depths))
        if category is not None and left.get(category, 0) > 0:
            left[category] -= 1
        if not any(left.values()):
            break
    return out


def kept(sorted_draws: list[Sorted], quotas: dict[str, int] | None = None) -> list[Sorted]:
    """The shapes of the experiment: each category's first draws, up to its quota."""
    left = dict(quotas or QUOTAS)
    out = []
    for s in sorted_draws:
        if s.category is not None and left.get(s.category, 0) > 0:
            left[s.category] -= 1
            out.append(s)
    return out


SHAPES_RESULT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "decision_shapes.json"


def shapes_result(set_name: str = "first") -> Path:
    """Where a set's drawn shapes are stored: ``decision_shapes.json`` for the first, ``decision_shapes_NAME.json``."""
    if set_name not in SETS:
        raise ValueError(f"decision set {set_name!r}: choose one of {', '.join(SETS)}")
    return SHAPES_RESULT if set_name == "first" else SHAPES_RESULT.with_name(f"decision_shapes_{set_name}.json")


def shape_of(key: str) -> Shape:
    """A shape back from its key (``D2048-L4-S4096+opt_offload``)."""
    found = re.fullmatch(r"D(\d+)-L(\d+)-S(\d+)(\+opt_offload)?", key)
    if found is None:
        raise ValueError(f"shape {key!r}: give D<width>-L<layers>-S<seq>, +opt_offload when the optimizer is on the host")
    return Shape(int(found[1]), int(found[2]), int(found[3]), found[4] is not None)


def committed_shapes(path: Path = SHAPES_RESULT) -> list[Shape]:
    """The experiment's shapes as the rule kept them (``decision_shapes.json``, committed before any pick)."""
    return [shape_of(key) for key in json.loads(path.read_text())["shapes"]]


def emitted(cfg: models.ModelConfig) -> frozenset[str]:
    """The checkpoint names the model's layer emits: what a policy can touch."""
    return models.checkpoint_names(cfg)


def distinct_presets(cfg: models.ModelConfig) -> list[str]:
    """MaxText's presets that differ on the names ``cfg`` emits (the first of each equal group; no_remat aside):
    the alternatives the experiment measures, each a different program."""
    seen, out = set(), []
    for name, preset in policies.PRESETS.items():
        touched = tuple(sorted(preset.touched(emitted(cfg)).items()))
        if name != "no_remat" and touched not in seen:
            seen.add(touched)
            out.append(name)
    return out


def merge_roles(runs: list[dict]) -> list[dict]:
    """One run per compiled program (its ``program`` hash), with every role it holds."""
    out: dict[str, dict] = {}
    for r in runs:
        if r["program"] in out:
            out[r["program"]]["roles"] += [role for role in r["roles"] if role not in out[r["program"]]["roles"]]
        else:
            out[r["program"]] = {**r, "roles": list(r["roles"])}
    return list(out.values())
