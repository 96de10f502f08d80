"""``flags``: XLA's flag catalog and presets, ``--check`` a flag string, ``--compare`` flag sets on one step."""

from __future__ import annotations

import json

from ...hardware import flags as xla_flags
from ...hardware import targets

from .common import _compiled


def _flags(args) -> int:
    if args.compare:
        return _compare(args)
    if args.check is not None:
        parsed = xla_flags.parse(args.check)
        print(f"ok: {len(parsed)} flag(s) valid for jaxlib {xla_flags.KNOWN_JAXLIB}")
        return 0
    if args.preset is not None:
        print(xla_flags.resolve(args.preset).xla_flags())
        return 0
    for f in xla_flags.CATALOG.values():
        print(f"{f.as_flag():70} [{f.topic}] {f.meaning}")
    return 0


def _compare(args) -> int:
    """``flags --compare A B ...``: the same train step compiled and simulated under each flag set."""
    from ...timing import experiments

    sets = {spec: spec for spec in args.compare}  # experiments.run checks every set before the first compile
    if args.link:
        targets.host_link(args.link)

    def compile_fn(flag_set):
        args.xla_flags = flag_set
        cfg, trainer, state, report = _compiled(args)
        return report

    runs = experiments.run(compile_fn, sets, link=args.link)
    rows = experiments.rows(runs)
    if args.json:
        print(json.dumps([{**row, "xla_flags": run.flag_set.xla_flags(), "simulation": run.simulation.to_dict(),
                           **run.sweep.to_dict()}
                          for row, run in zip(rows, runs)], indent=1))
    else:
        for row in rows:
            print(" | ".join(f"{k}: {v}" for k, v in row.items()))
    return 0
