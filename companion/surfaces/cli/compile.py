"""``compile``: a model's full training step compiled for a target, its per-device report."""

from __future__ import annotations

import dataclasses
import json

from .common import (
    _choices_out, _compiled, _fraction_out, _moe, _print_fraction, _print_maxtext, _print_moe, _print_notes
)


def _compile(args) -> int:
    from ...compiling.compiler import DoesNotFit

    try:
        cfg, trainer, state, report = _compiled(args)
    except DoesNotFit as refused:  # XLA:TPU's verdict, not a failure of the command
        print(json.dumps(refused.to_dict(), indent=1) if args.json else str(refused))
        return 0
    moe = _moe(cfg, args.batch, args.seq, report.mesh)
    out = {"model": cfg.name, "policy": trainer.policy.name, "batch": args.batch, "seq": args.seq,
           "params": cfg.param_count(), "attention": cfg.attention,
           **{k: v.to_dict() for k, v in moe.items()},
           "state": dataclasses.asdict(state), **report.to_dict(), **_fraction_out(args), **_choices_out(args),
           **({"maxtext": args.maxtext_out} if args.maxtext_out else {})}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        _print_notes(args, report.flag_set)
        print(report.summary())
        _print_moe(moe)
        _print_fraction(args)
        _print_maxtext(args.maxtext_out)
    return 0
