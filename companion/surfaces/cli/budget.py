"""``budget``: the analytic per-device memory budget of the same step, no compile."""

from __future__ import annotations

import json

from .common import (
    MAX_BATCH, _choices_out, _maxtext_out, _moe, _needs_fraction, _print_maxtext, _print_moe, _print_notes,
    _step_inputs
)


def _budget(args) -> int:
    from ...memory import budget
    from ... import models
    from ...ground import policies

    cfg, target, mesh, flag_set, state = _step_inputs(args)
    policy = policies.resolve(args.policy, emitted=models.checkpoint_names(cfg))
    if args.batch == MAX_BATCH:
        from ...planning import plan

        args.batch = args.batch_max = plan.budget_largest_batch(cfg, target, args.seq, policy, mesh, state, flag_set)
        if not args.batch:
            raise ValueError(f"--batch max: not even one sequence per batch shard fits {target.name} by the budget")
    smallest = None
    if _needs_fraction(args):  # the budget's answer alone: a first guess that `compile` confirms
        from ...memory import fraction

        smallest = fraction.budget_fraction(cfg, target, args.batch, args.seq, policy, mesh, state, flag_set)
        target = target.with_mem_fraction(smallest or fraction.CEILING)
    result = budget.estimate(cfg, args.batch, args.seq, policy, mesh, target=target, state=state, flags=flag_set)
    mx = _maxtext_out(args, cfg, target, mesh, flag_set, state, result.host_bytes)
    moe = _moe(cfg, args.batch, args.seq, mesh)
    if args.json:
        out = {"target": target.name, "num_devices": target.num_devices, **result.to_dict(),
               **{k: v.to_dict() for k, v in moe.items()},
               "flag_set": flag_set.to_dict(), **({"maxtext": mx} if mx else {}), **_choices_out(args),
               **({"budget_fraction": smallest} if _needs_fraction(args) else {})}
        if policy.offloads:
            out["offload"] = {"checks": {"verdict": "not compiled", "note": "the memcpy-descriptor check needs the "
                                         "compiled HLO: run `compile`", "workarounds": list(flag_set.workarounds)}}
        print(json.dumps(out, indent=1))
    else:
        _print_notes(args, flag_set)
        print(f"{target.name} ({target.gpu.name}, {target.num_devices} GPUs)")
        print(result.table())
        _print_moe(moe)
        if _needs_fraction(args):
            from ...memory import fraction

            print(f"the budget fits from XLA_PYTHON_CLIENT_MEM_FRACTION={smallest:.2f}" if smallest else
                  f"the budget fits at no XLA_PYTHON_CLIENT_MEM_FRACTION up to {fraction.CEILING:.2f}",
                  "(the budget's answer, no compile; `compile ... --mem-fraction needed` confirms it with two compiles "
                  "or more)")
        _print_maxtext(mx)
    return 0
