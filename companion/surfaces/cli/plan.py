"""``plan``: the planner's pick (per-tensor policy, batch, state levers, flags), its finalists compiled, its MaxText
export."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
import sys

from ...hardware import flags as xla_flags
from ...hardware import libtpu, targets

from .common import _flag_spec, _target


def _plan(args) -> int:
    """``plan``: the planner's search, its finalists compiled and simulated, the plan exported."""
    from ... import models
    from ...planning import plan
    from ...ground import sharding

    if args.objective != "throughput":
        raise ValueError(f"--objective {args.objective!r}: the planner maximizes throughput")
    for name in ("seq", "global_batch", "host_pool_gib", "gpus"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.max_compiles < 1:
        raise ValueError(f"--max-compiles must be positive, got {args.max_compiles}")
    if args.overrides and not args.maxtext_config:
        raise ValueError(f"override {args.overrides[0]!r}: key=value overrides need --maxtext-config FILE")
    target = _target(args)
    spec = _flag_spec(args.xla_flags)  # a bad flag fails before the search: libtpu's on a TPU, XLA:GPU's else
    flag_set = libtpu.resolve(spec) if target.is_tpu else xla_flags.resolve(spec)
    mesh = args.mesh
    if args.maxtext_config:
        from ...planning import maxtext

        if args.model or args.seq or args.mesh:
            raise ValueError("--model, --seq, --mesh and --maxtext-config all set the run: give one of them")
        run = maxtext.read(args.maxtext_config, args.overrides)
        run.check_target(target)
        cfg, seq, mesh = run.config(), run.seq, run.mesh(target.num_devices, target.topology.gpus_per_host)
    else:
        if args.model is None or args.seq is None:
            raise ValueError("--model and --seq are required (or --maxtext-config FILE)")
        cfg, seq = models.config(args.model), args.seq
        if mesh is not None:
            mesh = sharding.parse_mesh(mesh, target.num_devices)
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    if args.margin_gib is not None and args.margin_gib < 0:
        raise ValueError(f"--margin-gib must be >= 0, got {args.margin_gib}")
    margin = None if args.margin_gib is None else dataclasses.replace(plan.plan_margin(target),
                                                                      bytes=int(args.margin_gib * targets.GiB))
    result = plan.plan(cfg, target, seq, mesh, global_batch=args.global_batch, host_pool_gib=args.host_pool_gib,
                       max_compiles=args.max_compiles, flags=flag_set, progress=progress, margin=margin,
                       processes_per_node=args.processes_per_node, for_jaxlib=args.for_jaxlib)
    if args.maxtext_yaml:
        Path(args.maxtext_yaml).write_text(result.yaml())
    if args.json:
        print(json.dumps({**result.to_dict(), "yaml": result.yaml(),
                          **({"maxtext_yaml": args.maxtext_yaml} if args.maxtext_yaml else {})}, indent=1))
    else:
        print(result.summary())
        if args.maxtext_yaml:
            print(f"MaxText overrides written to {args.maxtext_yaml}")
        print(f"to run it:\n{result.command_line()}")
    return 0
