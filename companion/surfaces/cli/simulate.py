"""``simulate``: compile, then replay the schedule on the accelerator's streams: the step time and its band."""

from __future__ import annotations

import argparse
import json

from ...hardware import targets

from .common import (
    PIPELINED_FLAG, _choices_out, _compiled, _fraction_out, _moe, _print_fraction, _print_moe, _print_notes
)


def _simulate(args) -> int:
    from ...timing import bands, schedule

    link = targets.host_link(args.link) if args.link else None  # a bad key fails before the compile
    if args.against:
        from ...ground import policies

        policies.resolve(args.against)  # likewise a bad policy
    cfg, trainer, state, report = _compiled(args)
    sim = schedule.simulate(report, link=link)
    swept = bands.sweep(report, link=link)
    ranking = None
    if args.against:  # the same step under another policy, ranked sample by sample
        _, other, _, other_report = _compiled(argparse.Namespace(**{**vars(args), "policy": args.against}))
        ranking = bands.rank(swept, bands.sweep(other_report, link=link), (trainer.policy.name, other.policy.name))
    moe = _moe(cfg, args.batch, args.seq, report.mesh)
    if args.json:
        out = {"model": cfg.name, "policy": trainer.policy.name, "batch": args.batch, "seq": args.seq,
               "pipelined": bool(report.flags.get(PIPELINED_FLAG, False)), **sim.to_dict(), **swept.to_dict(),
               **({"ranking": ranking.to_dict() | {"summary": ranking.summary()}} if ranking else {}),
               **{k: v.to_dict() for k, v in moe.items()},
               "fits": report.fits, "usable_hbm_bytes": report.usable_hbm_bytes, **_fraction_out(args),
               **_choices_out(args),
               "flag_set": report.flag_set.to_dict(), "offload_checks": report.offload.checks.to_dict()}
        print(json.dumps(out, indent=1))
    else:
        _print_notes(args, report.flag_set)
        print(report.summary())
        _print_moe(moe)
        _print_fraction(args)
        print(sim.summary())
        print(swept.summary())
        if ranking:
            print(ranking.summary())
    return 0
