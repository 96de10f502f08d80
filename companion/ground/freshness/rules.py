"""What the rule keys, declared: the stamp's rule number, the provenance files outside every key, the price tables
and their coordinates."""

from __future__ import annotations

import dataclasses
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[2]  # this module sits in companion/ground/freshness/
ROOT = PACKAGE.parent
RULE = 2  # of the stamp: 1 hashed every byte of companion/ (``source_hash``); 2 is this module's

# Files that write and stamp results but compute none of their numbers: outside every fingerprint.
# (a path ending in "/" is a folder: every file in it)
PROVENANCE = ("companion/ground/results.py", "companion/ground/freshness/", "benchmarks/_common.py")


@dataclasses.dataclass(frozen=True)
class Table:
    """A price table or config catalog: the module-level name that holds it in its home module (the module's own
    name, wherever in the package it sits), the coordinate its keys are (``by``), at the top level (``depth`` 0)
    or under each top-level entry (1), and the modules whose code reads every entry (``whole_in``: a result
    whose code reaches one depends on the whole table)."""

    name: str
    home: str
    by: str
    depth: int = 0
    whole_in: tuple[str, ...] = ()


COORDINATES = ("model", "accelerator", "price family", "host link", "link kind")
TABLES: tuple[Table, ...] = (
    Table("CONFIGS", "configs", "model"),
    # the budget asks the oldest GPU's compute capability whether cuDNN attention can run (budget.attention_kernel)
    Table("GPUS", "targets", "accelerator", whole_in=("budget",)),
    Table("TPUS", "targets", "accelerator"),
    Table("HOST_LINKS", "targets", "host link"),
    Table("FABRICS", "targets", "accelerator"),
    Table("MATMUL_EFFICIENCY", "schedule", "price family"),
    Table("HBM_EFFICIENCY", "schedule", "price family"),
    Table("KERNEL_GAP_SECONDS", "schedule", "price family"),
    Table("GROUPED_GEMM_EFFICIENCY", "schedule", "price family"),
    Table("TRANSFER_KERNEL_SM_SHARE", "schedule", "link kind"),
    Table("SWEEP", "bands", "price family", depth=1),
    Table("LINK_SWEEP", "bands", "host link"),
    Table("KERNEL_LINK_SWEEP", "bands", "host link"),
)
ANY = "any"  # a depth-1 table's entry that holds for every coordinate (``bands.SWEEP``)

# Coordinates a producer's rows do not name but its code reads, with the reason (checked by the re-derivation).
EXTRA_COORDINATES: dict[str, dict[str, tuple[str, ...]]] = {
    # the chip grid's model is Llama 3 8B's layer at 1B-class width (``measured.grid_model``), on one v5e
    "benchmarks/bench_measured.py": {"model": ("llama3-8b",), "accelerator": ("tpu-v5e",)},
    "benchmarks/bench_tpu_simulation.py": {"model": ("llama3-8b",), "accelerator": ("tpu-v5e",)},
    # the decision experiment's shapes: Llama 3's layer at other widths and depths (``decisions.Shape.model``)
    "benchmarks/bench_decision_shapes.py": {"model": ("llama3-8b",), "accelerator": ("tpu-v5e",)},
    # and the planner's picks on them, measured on the chip
    "benchmarks/bench_decisions.py": {"model": ("llama3-8b",), "accelerator": ("tpu-v5e",)},
}
