"""``python -m companion ...``: the lab's checks for scripts and CI.

Subcommands: ``targets`` (the GPU catalog), ``flags`` (the XLA flag catalog, ``--check``
a flag string), ``compile`` (the full train step of a model for a target, per-device report),
``budget`` (the analytic per-device memory budget of the same step, no compile).
Errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import flags as xla_flags
from . import targets


def _targets(args) -> int:
    rows = [g.to_dict() | {"default_topology": targets.DEFAULT_TOPOLOGY[g.key]} for g in targets.GPUS.values()]
    if args.json:
        print(json.dumps({"gpus": rows, "host_links": {k: {
            "name": link.name, "bidirectional_bytes_per_s": link.bidirectional_bytes_per_s,
            "per_direction_bytes_per_s": link.per_direction_bytes_per_s, "note": link.note}
            for k, link in targets.HOST_LINKS.items()}}, indent=1))
        return 0
    print(f"{'gpu':6} {'name':30} {'HBM GiB':>8} {'HBM TB/s':>8} {'bf16 TF/s':>9} {'SMs':>4}  {'cc':5} "
          f"{'host link':28} {'GB/s/dir':>8}  topology")
    for g in targets.GPUS.values():
        print(f"{g.key:6} {g.name:30} {g.hbm_bytes / targets.GiB:8.1f} {g.hbm_bandwidth / 1e12:8.2f} "
              f"{g.bf16_dense_flops / 1e12:9.0f} {g.sm_count:4}  {g.cc:5} "
              f"{g.host_link.name:28} {g.host_link.per_direction_bytes_per_s / 1e9:8.0f}  "
              f"{targets.DEFAULT_TOPOLOGY[g.key]}")
    return 0


def _flags(args) -> int:
    if args.check is not None:
        parsed = xla_flags.parse(args.check)
        print(f"ok: {len(parsed)} flag(s) valid for jaxlib {xla_flags.KNOWN_JAXLIB}")
        return 0
    for f in xla_flags.CATALOG.values():
        print(f"{f.as_flag():70} [{f.topic}] {f.meaning}")
    return 0


def _step_inputs(args):
    """Validated (model config, target, full mesh) of a ``compile``/``budget`` command line."""
    from . import models, sharding

    for name in ("batch", "seq"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be positive, got {getattr(args, name)}")
    xla_flags.parse(args.xla_flags)  # cheap checks first: a typo should not wait for a compile
    cfg = models.config(args.model, **({"attention": args.attention} if args.attention else {}))
    target = targets.target(args.target) if ":" in args.target else targets.target(args.target, args.gpus)
    if args.gpus is not None and target.num_devices != args.gpus:
        raise ValueError(f"--target {args.target} has {target.num_devices} GPUs but --gpus is {args.gpus}")
    return cfg, target, sharding.parse_mesh(args.mesh, target.num_devices)


def _compile(args) -> int:
    from . import compiler, sharding, train

    cfg, target, mesh = _step_inputs(args)
    placement = compiler.place(target, sharding.active_axes(mesh))
    trainer = train.trainer(cfg, args.policy)
    report = train.compile_step(trainer, placement, args.batch, args.seq, flags=args.xla_flags)
    out = {"model": cfg.name, "policy": trainer.policy.name, "batch": args.batch, "seq": args.seq,
           "params": cfg.param_count(), **report.to_dict()}
    print(json.dumps(out, indent=1) if args.json else report.summary())
    return 0


def _budget(args) -> int:
    from . import budget, models, policies

    cfg, target, mesh = _step_inputs(args)
    policy = policies.resolve(args.policy, emitted=models.checkpoint_names(cfg))
    result = budget.estimate(cfg, args.batch, args.seq, policy, mesh, hbm_bytes=target.gpu.hbm_bytes)
    if args.json:
        print(json.dumps({"target": target.name, "num_devices": target.num_devices, **result.to_dict()}, indent=1))
    else:
        print(f"{target.name} ({target.gpu.name}, {target.num_devices} GPUs)")
        print(result.table())
    return 0


def _add_step_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a model config, e.g. llama3.1-405b, deepseek-v3-671b, tiny-llama")
    p.add_argument("--target", default="h100", help="GPU key (h100, h200, b200, gb200) or GPU:TOPOLOGY (h100:8x8)")
    p.add_argument("--gpus", type=int, default=None, help="number of GPUs (whole hosts); default: the GPU's usual system")
    p.add_argument("--mesh", default=None, help="mesh axes, e.g. fsdp=64 or fsdp=8,tensor=8 (one may be -1)")
    p.add_argument("--batch", type=int, required=True, help="global batch B (sequences per step)")
    p.add_argument("--seq", type=int, required=True, help="sequence length S")
    p.add_argument("--policy", default="full", help="a MaxText remat_policy preset or a custom .json spec")
    p.add_argument("--attention", choices=("dot_product", "chunked"), default=None, help="attention implementation")
    p.add_argument("--xla-flags", default=None, help="XLA flags for this compile (validated first)")
    p.add_argument("--json", action="store_true", help="one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m companion", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("targets", help="list the GPU target catalog")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=_targets)
    p = sub.add_parser("flags", help="list the XLA flag catalog, or --check an XLA_FLAGS string")
    p.add_argument("--check", metavar="XLA_FLAGS", help="validate this flag string; exit 1 if it is not valid")
    p.set_defaults(run=_flags)
    p = sub.add_parser("compile", help="compile a model's full train step for a target; per-device memory report")
    _add_step_arguments(p)
    p.set_defaults(run=_compile)
    p = sub.add_parser("budget", help="the analytic per-device memory budget of the same train step (no compile)")
    _add_step_arguments(p)
    p.set_defaults(run=_budget)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # An XLA_FLAGS value starts with "--", which argparse would take for an option.
    for i, token in enumerate(argv[:-1]):
        if token in ("--check", "--xla-flags") and argv[i + 1].startswith("--"):
            argv[i:i + 2] = [f"{token}={argv[i + 1]}"]
            break
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
