"""The decision experiment's shapes (issue 52), drawn by ``companion.planning.decisions``' seeded rule and sorted
by libtpu's compile-only v5e at batch 1, on the chip lock (the lent chip's compiler: what it sorts is what the chip
will run).

    .venv-chip/bin/python benchmarks/bench_decision_shapes.py [--set second]   # -> results/decision_shapes[_second].json

Every draw is stored, kept or passed over, with the peaks it compiled to; ``decisions.kept`` reads the shapes
back. Written before the planner's picks and before any measurement (the rule's commit predates both).
"""

from __future__ import annotations

import argparse
import time

import _common

from companion import compiler, freshness, results, targets, train
from companion.planning import decisions


def compile_at_batch_1(shape: decisions.Shape, policy, placement) -> tuple[bool, int, float]:
    """(fits, peak bytes or what XLA:TPU said it needed, compile seconds) of ``shape`` at batch 1 under ``policy``
    (libtpu's default flags)."""
    trainer = train.trainer(shape.model(), policy, state=shape.state())
    started = time.perf_counter()
    try:
        report = train.compile_step(trainer, placement, 1, shape.seq)
    except compiler.DoesNotFit as refused:
        return False, refused.needed_bytes, time.perf_counter() - started
    return report.fits, report.device.peak_bytes, time.perf_counter() - started


def main() -> None:
    freshness.refuse_off_lock(results.producer())  # sorted by the chip's own compiler
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="first", choices=tuple(decisions.SETS),
                        help="which set: its seed and quotas (decisions.SETS)")
    args = parser.parse_args()
    seed, quotas = decisions.SETS[args.set]
    placement = compiler.place(targets.target(decisions.TARGET))
    seconds: list[float] = []

    def sort(shape, policy):
        fits, peak, took = compile_at_batch_1(shape, policy, placement)
        seconds.append(took)
        print(f"  {shape.key} {policy if isinstance(policy, str) else 'input offload'}: "
              f"{'fits' if fits else 'does not fit'} at {peak / 2**30:.2f} GiB ({took:.0f} s)", flush=True)
        return fits, peak

    drawn = decisions.draw(sort, seed=seed, quotas=quotas)
    shapes = decisions.kept(drawn, quotas)
    for s in drawn:
        print(f"draw {s.draw:2} {s.shape.key:32} {s.category or 'rejected'}{'  (kept)' if s in shapes else ''}")
    _common.write(decisions.shapes_result(args.set).stem,
                  {"seed": seed, "set": args.set, "rule": {"widths": decisions.WIDTHS, "seqs": decisions.SEQS,
                                                           "depth_window": decisions.DEPTH_WINDOW, "near": decisions.NEAR,
                                                           "quotas": quotas, "max_draws": decisions.MAX_DRAWS},
                         "draws": [s.to_dict() for s in drawn], "shapes": [s.shape.key for s in shapes],
                         "compile_seconds": round(sum(seconds), 1)})


if __name__ == "__main__":
    main()
