"""``python -m companion ...``: the lab's checks for scripts and CI.

Subcommands: ``targets`` (the GPU catalog and host links), ``flags`` (the XLA flag catalog and
presets, ``--check`` a flag string, ``--compare`` flag sets on one step), ``compile`` (the full
train step of a model for a target, per-device report), ``budget`` (the analytic per-device memory
budget of the same step, no compile), ``simulate`` (compile, then replay the schedule on the GPU's
streams: step time), ``plan`` (search per-tensor remat/offload, batch and state levers for the most
simulated throughput that fits, and export it for MaxText). Every verdict is against usable HBM (``--mem-fraction`` of the card, default
0.75 as JAX's allocator); compiles use MaxText's GPU flags unless ``--xla-flags`` says otherwise.
Errors are one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
import sys

from . import flags as xla_flags
from . import libtpu, targets
from .models import configs as models_configs

PIPELINED_FLAG = xla_flags.PIPELINED_HOST_OFFLOADING


def _targets(args) -> int:
    fraction = targets.check_mem_fraction(args.mem_fraction)
    rows = [g.to_dict() | {"default_topology": targets.DEFAULT_TOPOLOGY[g.key], "mem_fraction": fraction,
                           "usable_hbm_bytes": targets.allocator_limit_bytes(g.hbm_bytes, fraction),
                           "host_link_detail": g.host_link.to_dict()} for g in targets.GPUS.values()]
    if args.json:
        print(json.dumps({"gpus": rows, "tpus": [t.to_dict() for t in targets.TPUS.values()],
                          "host_links": {k: link.to_dict() for k, link in targets.HOST_LINKS.items()}}, indent=1))
        return 0
    print(f"{'gpu':6} {'name':32} {'HBM GiB':>8} {'usable':>7} {'HBM TB/s':>8} {'bf16 TF/s':>9} {'SMs':>4}  {'cc':5} "
          f"{'host link':28} {'GB/s/dir per GPU':>16}  topology")
    for g in targets.GPUS.values():
        link = g.host_link
        per_gpu = f"{link.bandwidth_per_gpu('d2h') / 1e9:.0f}/{link.bandwidth_per_gpu('h2d') / 1e9:.0f}"
        print(f"{g.key:6} {g.name:32} {g.hbm_bytes / targets.GiB:8.1f} "
              f"{targets.allocator_limit_bytes(g.hbm_bytes, fraction) / targets.GiB:7.1f} {g.hbm_bandwidth / 1e12:8.2f} "
              f"{g.bf16_dense_flops / 1e12:9.0f} {g.sm_count:4}  {g.cc:5} {link.name:28} {per_gpu:>16}  "
              f"{targets.DEFAULT_TOPOLOGY[g.key]}")
    for t in targets.TPUS.values():
        link = t.host_link
        print(f"{t.key:6} {t.name:32} {t.hbm_bytes / targets.GiB:8.1f} {t.usable_hbm_bytes / targets.GiB:7.2f} "
              f"{t.hbm_bandwidth / 1e12:8.2f} {t.bf16_dense_flops / 1e12:9.0f} {'-':>4}  {'-':5} {link.name:28} "
              f"{link.bandwidth_per_gpu('d2h') / 1e9:.0f}/{link.bandwidth_per_gpu('h2d') / 1e9:.0f}{'':>11}  "
              f"{t.topology_name}")
    print(f"usable = {fraction:.2f} x HBM on a GPU (JAX's allocator, {targets.MEM_FRACTION_ENV}), the runtime's fixed "
          "limit on a TPU; per device = out/back with every device sharing the link busy")
    return 0


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
    from . import experiments

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


# what a MaxText config decides, and the flags that would say it a second time
_MAXTEXT_DECIDES = {"model": None, "batch": None, "seq": None, "policy": "full", "mesh": None, "attention": None,
                    "moe": None, "capacity_factor": None, "ragged_buffer_factor": None, "moe_imbalance": None,
                    "grad_accum": 1,
                    "offload_optimizer": False, "offload_params": False}


NEEDED = "needed"  # --mem-fraction needed: search the smallest fraction that fits (companion.fraction)


def _needs_fraction(args) -> bool:
    return getattr(args, "mem_fraction", None) == NEEDED


def _target(args) -> targets.Target:
    """``--target`` (a GPU key, or GPU:TOPOLOGY), ``--gpus`` and ``--mem-fraction``, checked together
    (``needed``: the search's ceiling until the search says)."""
    from . import fraction as fraction_lib

    chip = targets.accelerator(args.target.split(":", 1)[0])
    if chip.platform == "tpu":  # no allocator share to set: refused only when given
        if args.mem_fraction != targets.DEFAULT_MEM_FRACTION:
            raise ValueError(f"--mem-fraction {args.mem_fraction}: {chip.key}'s runtime gives a program a fixed "
                             f"{chip.usable_hbm_bytes / targets.GiB:.2f} GiB (no allocator share); leave it out")
        fraction = None
    else:
        try:
            fraction = fraction_lib.CEILING if _needs_fraction(args) else targets.check_mem_fraction(args.mem_fraction)
        except ValueError as err:
            raise ValueError(f"{err}; or --mem-fraction {NEEDED}: the smallest that fits") from None
    if ":" in args.target:
        target = targets.target(args.target, mem_fraction=fraction)
    else:
        target = targets.target(args.target, args.gpus, mem_fraction=fraction)
    if args.gpus is not None and target.num_devices != args.gpus:
        raise ValueError(f"--target {args.target} has {target.num_devices} GPUs but --gpus is {args.gpus}")
    return target


def _maxtext_run(args):
    """The MaxText run of ``--maxtext-config`` and its ``key=value`` overrides (None without it); refuses
    flags that it also sets."""
    if not getattr(args, "maxtext_config", None):
        if args.overrides:
            raise ValueError(f"override {args.overrides[0]!r}: key=value overrides need --maxtext-config FILE")
        if args.model is None or args.batch is None or args.seq is None:
            raise ValueError("--model, --batch and --seq are required (or --maxtext-config FILE)")
        return None
    from . import maxtext

    if getattr(args, "maxtext_run", None) is not None:  # read once (flags --compare compiles several times)
        return args.maxtext_run
    # --moe grouped|ragged_dot picks the kernel of MaxText's sparse path (no MaxText key does: the jaxlib does)
    kernel = args.moe if args.moe in ("grouped", "ragged_dot") else None
    both = [f"--{k.replace('_', '-')}" for k, default in _MAXTEXT_DECIDES.items()
            if getattr(args, k) != default and not (k == "moe" and kernel)]
    if both:
        raise ValueError(f"{', '.join(both)} and --maxtext-config both set the run: give one of them")
    run = args.maxtext_run = maxtext.read(args.maxtext_config, args.overrides, sparse_kernel=kernel or "ragged_dot")
    args.model, args.seq, args.policy = run.model, run.seq, run.policy
    args.batch = 1  # until the target's GPUs give MaxText's global batch (_step_inputs)
    return run


MAX_BATCH = "max"  # --batch max


def _batch(text: str):
    """``--batch``: a whole number of sequences, or ``max``."""
    if text.strip().lower() == MAX_BATCH:
        return MAX_BATCH
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of sequences, or max") from None


def _step_inputs(args):
    """Validated (model config, target, full mesh, flag set, state) of a ``compile``/``budget``
    command line, or of its ``--maxtext-config``."""
    from . import models, plan, sharding

    run = _maxtext_run(args)
    if args.batch == MAX_BATCH and (run is not None or _needs_fraction(args)):
        raise ValueError("--batch max searches the batch at a given memory fraction for --model: not with "
                         "--maxtext-config or --mem-fraction needed")
    for name in ("batch", "seq"):
        if getattr(args, name) != MAX_BATCH and getattr(args, name) < 1:
            raise ValueError(f"--{name} must be positive, got {getattr(args, name)}")
    if args.gpus is not None and args.gpus < 1:
        raise ValueError(f"--gpus must be positive, got {args.gpus}")
    target = _target(args)  # cheap checks first
    spec = _flag_spec(args.xla_flags)
    if target.is_tpu:
        if getattr(args, "pipelined", False):
            raise ValueError(f"--pipelined sets --{PIPELINED_FLAG}, an XLA:GPU flag; {target.name} compiles with "
                             "libtpu's flags (--xla-flags maxtext_host_offload: MaxText's TPU host-offload set)")
        flag_set = libtpu.resolve(spec)
    else:
        if getattr(args, "pipelined", False):
            spec = f"{spec or ''} --{PIPELINED_FLAG}=true".strip()
        flag_set = xla_flags.resolve(spec, workarounds=not args.no_workarounds)
    cfg = models.config(args.model, **({"attention": args.attention} if args.attention else {}))
    moe = {k: v for k, v in (("dispatch", args.moe), ("capacity_factor", args.capacity_factor),
                               ("ragged_buffer_factor", args.ragged_buffer_factor), ("imbalance", args.moe_imbalance))
           if v is not None}
    if moe:
        if cfg.moe is None:
            raise ValueError(f"--moe, --capacity-factor, --ragged-buffer-factor and --moe-imbalance need a model with "
                             f"routed experts; {cfg.name} has none")
        cfg = cfg.with_moe(**moe)  # each value checked by ModelConfig: one line naming it and its range
    from .train import StateConfig

    if run is not None:
        args.batch = run.global_batch(target.num_devices)
        return run.config(), target, run.mesh(target.num_devices, target.topology.gpus_per_host), flag_set, run.state
    state = StateConfig(gradient_accumulation_steps=args.grad_accum, optimizer_memory_host_offload=args.offload_optimizer,
                        parameter_memory_host_offload=args.offload_params)
    if args.mesh is None and cfg.moe is not None:
        mesh, why = plan.default_mesh(cfg, target)
        args.mesh_note = why
        return cfg, target, mesh, flag_set, state
    return cfg, target, sharding.parse_mesh(args.mesh, target.num_devices), flag_set, state


def _flag_spec(spec):
    """``--xla-flags``, with ``env`` read as the run's own ``XLA_FLAGS`` on XLA's defaults (``flags.from_environment``);
    a resolved ``FlagSet`` (``flags --compare``) as it is."""
    if isinstance(spec, str) and spec.split(maxsplit=1)[:1] == ["env"]:
        import os

        return f"{xla_flags.from_environment(os.environ)} {spec[3:].strip()}".strip()
    return spec


def _maxtext_out(args, cfg, target, mesh, flag_set, state, host_bytes: int) -> dict:
    """``--maxtext-yaml``: the step as MaxText overrides (written to the file) and its command line,
    with the environment a GPU run needs; plus what a ``--maxtext-config`` left unmodelled."""
    out = {}
    if getattr(args, "maxtext_run", None) is not None:
        out["not_modelled"] = list(args.maxtext_run.not_modelled)
        out["notes"] = list(args.maxtext_run.notes)
    if getattr(args, "maxtext_yaml", None):
        from . import maxtext

        values = maxtext.overrides(cfg, args.policy, args.batch, args.seq, mesh, target.num_devices,
                                   target.topology.gpus_per_host, state)
        exported = xla_flags.export(flag_set, mem_fraction=target.mem_fraction,
                                    host_pool_gib=targets.host_pool_gib(host_bytes) if host_bytes else None,
                                    offloads=bool(host_bytes))
        env = {**exported["env"], "XLA_FLAGS": exported["XLA_FLAGS"]}
        Path(args.maxtext_yaml).write_text(maxtext.to_yaml(values))
        out.update({"yaml": args.maxtext_yaml, "overrides": values, "environment": env,
                    "command_line": maxtext.command_line(values, env), "jaxlib": exported["jaxlib"],
                    "caveats": exported["caveats"]})
    return out


def _print_maxtext(out: dict) -> None:
    if out.get("not_modelled"):
        print(f"MaxText keys the lab does not model: {', '.join(out['not_modelled'])}")
    if "command_line" in out:
        print(f"MaxText overrides written to {out['yaml']}; to run it (flags for jaxlib {out['jaxlib']}):\n"
              f"{out['command_line']}")
        for c in out["caveats"]:
            print(f"CAVEAT {c['key']}: {c['risk']} Workaround: {c['workaround']} Check: {c['check']}")


def _compiled(args):
    """(model config, trainer, state, report) of a ``compile``/``simulate`` command line."""
    from . import compiler, sharding, train

    cfg, target, mesh, flag_set, state = _step_inputs(args)
    trainer = train.trainer(cfg, args.policy, state=state)
    args.fraction_needed = None
    if args.batch == MAX_BATCH:  # the budget's guess, compiled at it and one step further
        from . import plan

        args.batch_max = plan.largest_batch(cfg, target, args.seq, args.policy, mesh, state, flag_set)
        if not args.batch_max.batch:
            raise ValueError(args.batch_max.summary())
        args.batch = args.batch_max.batch
        report = args.batch_max.report
    elif _needs_fraction(args):  # compiles at the budget's guess and one step below, or more
        from . import fraction

        args.fraction_needed = fraction.needed(cfg, target, args.batch, args.seq, args.policy, mesh, state, flag_set)
        report = args.fraction_needed.report
    else:
        placement = compiler.place(target, sharding.active_axes(mesh))
        report = train.compile_step(trainer, placement, args.batch, args.seq, flags=flag_set)
    args.maxtext_out = _maxtext_out(args, cfg, target, mesh, flag_set, state, report.host.total_bytes)
    return cfg, trainer, state, report


def _moe(cfg, batch: int, seq: int, mesh) -> dict:
    """The step's routed experts (``models.moe.report``: the path, its kernel, buffer, routing assumption
    and drops), for the JSON and a line of text; empty for a model without them."""
    if cfg.moe is None:
        return {}
    from . import sharding
    from .models import moe

    ways = sharding.batch_ways(mesh)
    return {"moe": moe.report(cfg, batch // ways * seq, max(batch // ways, 1), mesh.get("expert", 1))}


def _print_moe(moe: dict) -> None:
    if moe:
        print(moe["moe"].summary())


def _compile(args) -> int:
    from .compiler import DoesNotFit

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


def _choices_out(args) -> dict:
    """``_choices`` for the JSON: the mesh note and ``--batch max``'s search."""
    largest = getattr(args, "batch_max", None)
    return {**({"mesh_note": args.mesh_note} if getattr(args, "mesh_note", None) else {}),
            **({"batch_max": largest if isinstance(largest, int) else largest.to_dict()} if largest else {})}


def _fraction_out(args) -> dict:
    needed = getattr(args, "fraction_needed", None)
    return {"fraction_needed": needed.to_dict()} if needed is not None else {}


def _print_fraction(args) -> None:
    needed = getattr(args, "fraction_needed", None)
    if needed is not None:
        print(needed.summary())


def _print_notes(args, flag_set) -> None:
    """What the lab read differently from the run as written: MaxText's own rejections, the flags left out,
    the mesh it chose, the batch ``--batch max`` found."""
    run = getattr(args, "maxtext_run", None)
    for note in (*(run.notes if run is not None else ()), *flag_set.notes, *_choices(args)):
        print(f"note: {note}")


def _choices(args) -> list[str]:
    """What the lab chose where the command line left it open."""
    out = [getattr(args, "mesh_note", None)]
    largest = getattr(args, "batch_max", None)
    out.append(largest.summary() if largest is not None and not isinstance(largest, int) else
               f"--batch max: B={largest} by the budget (no compile; `compile --batch max` confirms it)"
               if largest else None)
    return [n for n in out if n]


def _simulate(args) -> int:
    from . import bands, schedule

    link = targets.host_link(args.link) if args.link else None  # a bad key fails before the compile
    if args.against:
        from . import policies

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


def _train(args) -> int:
    """Train a small model on this machine's devices, or as one process of a jax.distributed job
    (``distributed.Cluster.from_env``), with Orbax checkpoints to resume from."""
    import jax

    from . import distributed, loop

    cluster = distributed.Cluster.from_env()  # a bad address or rank fails here, before JAX waits for peers
    config = loop.RunConfig(model=args.model, steps=args.steps, batch=args.batch, seq=args.seq, policy=args.policy,
                            seed=args.seed, checkpoint_dir=args.checkpoint_dir, save_every=args.save_every)
    if cluster is not None:
        cluster.initialize()
    result = loop.run(config)
    out = {"process_id": jax.process_index(), "num_processes": result.num_processes,
           "num_devices": result.num_devices, "resumed_from": result.resumed_from, "saved": list(result.saved),
           "losses": {str(k): v for k, v in result.losses.items()}}
    if args.json:
        print(json.dumps(out))
    else:
        for step, loss in result.losses.items():
            print(f"step {step}: loss {loss:.6f}")
        print(f"{result.num_processes} process(es), {result.num_devices} devices; resumed from "
              f"{result.resumed_from}; saved {list(result.saved)}")
    return 0


def _budget(args) -> int:
    from . import budget, models, policies

    cfg, target, mesh, flag_set, state = _step_inputs(args)
    policy = policies.resolve(args.policy, emitted=models.checkpoint_names(cfg))
    if args.batch == MAX_BATCH:
        from . import plan

        args.batch = args.batch_max = plan.budget_largest_batch(cfg, target, args.seq, policy, mesh, state, flag_set)
        if not args.batch:
            raise ValueError(f"--batch max: not even one sequence per batch shard fits {target.name} by the budget")
    smallest = None
    if _needs_fraction(args):  # the budget's answer alone: a first guess that `compile` confirms
        from . import fraction

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
            from . import fraction

            print(f"the budget fits from XLA_PYTHON_CLIENT_MEM_FRACTION={smallest:.2f}" if smallest else
                  f"the budget fits at no XLA_PYTHON_CLIENT_MEM_FRACTION up to {fraction.CEILING:.2f}",
                  "(the budget's answer, no compile; `compile ... --mem-fraction needed` confirms it with two compiles "
                  "or more)")
        _print_maxtext(mx)
    return 0


def _plan(args) -> int:
    """``plan``: the planner's search, its finalists compiled and simulated, the plan exported."""
    from . import models, plan, sharding

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
    flag_set = xla_flags.resolve(_flag_spec(args.xla_flags))  # a bad flag fails before the search
    target = _target(args)
    mesh = args.mesh
    if args.maxtext_config:
        from . import maxtext

        if args.model or args.seq or args.mesh:
            raise ValueError("--model, --seq, --mesh and --maxtext-config all set the run: give one of them")
        run = maxtext.read(args.maxtext_config, args.overrides)
        cfg, seq, mesh = run.config(), run.seq, run.mesh(target.num_devices, target.topology.gpus_per_host)
    else:
        if args.model is None or args.seq is None:
            raise ValueError("--model and --seq are required (or --maxtext-config FILE)")
        cfg, seq = models.config(args.model), args.seq
        if mesh is not None:
            mesh = sharding.parse_mesh(mesh, target.num_devices)
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    if args.margin_gib < 0:
        raise ValueError(f"--margin-gib must be >= 0, got {args.margin_gib}")
    margin = dataclasses.replace(plan.PLAN_MARGIN, bytes=int(args.margin_gib * targets.GiB))
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


def _add_step_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a model config, e.g. llama3.1-405b, deepseek-v3-671b, tiny-llama")
    p.add_argument("--maxtext-config", metavar="FILE",
                   help="a MaxText config (model_name and overrides, YAML) instead of --model, --batch, --seq, "
                        "--policy, --mesh and the attention, MoE and state flags; keys the lab does not model are listed")
    p.add_argument("--maxtext-yaml", metavar="OUT",
                   help="also write the step as MaxText overrides (YAML) to OUT and print its command line with the "
                        "environment (XLA_FLAGS, XLA_PYTHON_CLIENT_MEM_FRACTION, XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB)")
    p.add_argument("--target", default="h100", help="GPU key (h100, h200, gh200, b200, gb200) or GPU:TOPOLOGY (h100:8x8)")
    p.add_argument("--gpus", type=int, default=None, help="number of GPUs (whole hosts); default: the GPU's usual system")
    p.add_argument("--mesh", default=None, help="mesh axes, e.g. fsdp=64 or fsdp=8,tensor=8 (one may be -1)")
    p.add_argument("--batch", type=_batch, help="global batch B (sequences per step), or max: the largest that fits "
                                                "device and host (budget: the budget's answer; compile and simulate: "
                                                "confirmed by compiling at it and one step further)")
    p.add_argument("--seq", type=int, help="sequence length S")
    p.add_argument("--policy", default="full", help="a MaxText remat_policy preset or a custom .json spec")
    p.add_argument("--attention", choices=models_configs.ATTENTION_IMPLS, default=None,
                   help="attention: flash (the default: cuDNN's fused kernel where JAX can emit it, else the lab's "
                        "blockwise kernel), dot_product or chunked (teaching options)")
    p.add_argument("--moe", choices=models_configs.MOE_DISPATCHES, default=None,
                   help="routed experts: grouped (the default: MaxText's sparse path as a grouped GEMM, a tuned "
                        "run's kernel), ragged_dot (the sparse path as pip jaxlib runs jax.lax.ragged_dot: "
                        "E_local x the FLOPs) or dense (MaxText's sparse_matmul: false)")
    p.add_argument("--capacity-factor", type=float, default=None,
                   help="the dense path's capacity_factor: > 0 drops past that many times an expert's balanced "
                        "share, -1 (MaxText's default) runs every expert on every token")
    p.add_argument("--ragged-buffer-factor", type=float, default=None,
                   help="the sparse paths' receive buffer under expert parallelism: -1 worst case (MaxText's "
                        "default, never drops), else that many times the balanced rows")
    p.add_argument("--moe-imbalance", type=float, default=None,
                   help="routing assumption for the priced work: the most-loaded expert-parallel device receives "
                        "this many times the balanced rows (default 1.0: balanced)")
    p.add_argument("--grad-accum", type=int, default=1, help="gradient_accumulation_steps (default 1)")
    p.add_argument("--offload-optimizer", action="store_true", help="optimizer_memory_host_offload")
    p.add_argument("--offload-params", action="store_true", help="parameter_memory_host_offload")
    p.add_argument("--mem-fraction", default=targets.DEFAULT_MEM_FRACTION,
                   help="share of HBM JAX's allocator takes (XLA_PYTHON_CLIENT_MEM_FRACTION; default 0.75), or "
                        "'needed': the smallest at which the step fits (budget: its answer; compile, simulate: "
                        "confirmed by compiling there and one step below)")
    p.add_argument("--xla-flags", default=None,
                   help="a preset (maxtext_gpu: the default; none: XLA's defaults), optionally followed by "
                        "--name=value flags; flags alone go on top of maxtext_gpu (validated first); 'env': this "
                        "shell's XLA_FLAGS on XLA's defaults, as the run would see them")
    _add_overrides_argument(p)
    p.add_argument("--no-workarounds", action="store_true",
                   help="leave out the lab's fixes for the installed jaxlib (on 0.10.2: the wrong offload memcpy "
                        "descriptors, openxla/xla #46231; 0.12 needs none)")
    p.add_argument("--json", action="store_true", help="one JSON object")


def _add_overrides_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="MaxText command-line overrides of --maxtext-config, as MaxText's train takes them (a later "
                        "one wins; values typed as YAML)")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (naming the bad value) and exit status 1."""

    def error(self, message: str):
        self.exit(1, f"error: {message} (see `{self.prog} --help`)\n")


def _local_target() -> targets.Target:
    """The lab's target for this machine's first accelerator (one device)."""
    import jax

    kind = jax.local_devices()[0].device_kind
    found = targets.for_device_kind(kind)
    if found is not None:
        return targets.target(found.key, "1")
    raise ValueError(f"this machine's {kind!r} is not in the lab's catalog ({', '.join(targets.ACCELERATORS)})")


def _measure(args) -> int:
    """``measure``: the train step run on this machine's accelerator (see ``companion.measure``)."""
    from . import compiler, measure, models, train

    measure.require_accelerator()
    if args.steps < 1 or args.processes < 1 or args.batch < 1 or args.seq < 1:
        raise ValueError("--steps, --processes, --batch and --seq must be positive")
    if args.processes > 1:
        return _measure_processes(args)
    target = _local_target()
    cfg = models.config(args.model)
    state = train.StateConfig(optimizer_memory_host_offload=args.offload_optimizer)
    trainer = train.trainer(cfg, args.policy, state=state)
    record = measure.train_step(trainer, compiler.place(target), args.batch, args.seq, flags=args.xla_flags,
                                steps=args.steps, warmup=args.warmup, footprint=args.footprint, trace_dir=args.trace)
    out = {"model": cfg.name, "target": target.name, "batch": args.batch, "seq": args.seq,
           "policy": trainer.policy.name, **record}
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    verdict, timing = record["verdict"], record.get("timing")
    print(f"{cfg.name} B={args.batch} S={args.seq} {trainer.policy.name} on {target.name}: {verdict['status']}"
          + (f" ({verdict['stage']}: {verdict['message']})" if verdict["status"] != "runs" else ""))
    if timing:
        print(f"  step {timing['median'] * 1e3:.2f} ms median of {len(timing['seconds'])} (min {timing['min'] * 1e3:.2f}, "
              f"max {timing['max'] * 1e3:.2f}) after {timing['warmup']} warm-up; loss {record['loss']:.4f}")
        c = record["compile"]
        print(f"  compiled peak {c['peak_bytes'] / targets.GiB:.2f} GiB of {c['usable_hbm_bytes'] / targets.GiB:.2f}; "
              f"host {c['host_bytes'] / targets.GiB:.2f} GiB")
    if record.get("runtime_footprint"):
        print(f"  runtime footprint {record['runtime_footprint'] / targets.GiB:.2f} GiB "
              "(buffers in use + the program's reservation)")
    if "filler_peak" in record:
        print(f"  footprint by filler {record['filler_peak']['footprint_bytes'] / targets.GiB:.2f} GiB")
    if "trace" in record:
        t = record["trace"]
        print(f"  trace: device busy {t['busy_seconds'] * 1e3:.1f} ms, waiting on async ops {t['wait_seconds'] * 1e3:.1f} ms, "
              f"host transfers in flight {sum(t['transfer_seconds'].values()) * 1e3:.1f} ms ({t['overlap']:.0%} beside compute)")
    return 0


def _measure_processes(args) -> int:
    """``measure --processes N``: the same measurement in N separate processes, one after the other (one
    program holds a chip), and the run-to-run spread of their medians."""
    import subprocess

    from . import measure

    argv = [sys.executable, "-m", "companion", "measure", "--model", args.model, "--batch", str(args.batch),
            "--seq", str(args.seq), "--policy", args.policy, "--steps", str(args.steps), "--warmup",
            str(args.warmup), "--json"] + (["--offload-optimizer"] if args.offload_optimizer else []) + (
            [f"--xla-flags={args.xla_flags}"] if args.xla_flags else [])
    medians = []
    for _ in range(args.processes):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode:
            raise ValueError(f"a measuring process failed: {done.stderr.strip().splitlines()[-1:]}")
        record = json.loads(done.stdout)
        if "timing" not in record:
            raise ValueError(f"the step does not run: {record['verdict']}")
        medians.append(record["timing"]["median"])
    out = {"process_medians": medians, "spread": measure.spread(medians)}
    print(json.dumps(out, indent=1) if args.json else
          f"{args.processes} processes: medians {', '.join(f'{m * 1e3:.2f}' for m in medians)} ms; "
          f"run-to-run spread {out['spread']:.2%}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m companion", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("targets", help="list the GPU target catalog and host links")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--mem-fraction", type=float, default=targets.DEFAULT_MEM_FRACTION,
                   help="share of HBM JAX's allocator takes, for the usable-HBM column")
    p.set_defaults(run=_targets)
    p = sub.add_parser("flags", help="list the XLA flag catalog, print a preset, or --check an XLA_FLAGS string")
    p.add_argument("--check", metavar="XLA_FLAGS", help="validate this flag string; exit 1 if it is not valid")
    p.add_argument("--preset", choices=tuple(xla_flags.PRESETS), help="print a preset as an XLA_FLAGS string")
    p.add_argument("--compare", action="append", metavar="FLAGS",
                   help="compile the step given by --model/--batch/--seq/... under each of these flag sets (a preset "
                        "and/or --name=value flags; repeat or list several) and print one row per set")
    p.add_argument("--link", default=None, help="with --compare: price host transfers on this host link")
    _add_step_arguments(p)
    p.set_defaults(run=_flags)
    p = sub.add_parser("compile", help="compile a model's full train step for a target; per-device memory report")
    _add_step_arguments(p)
    p.set_defaults(run=_compile)
    p = sub.add_parser("budget", help="the analytic per-device memory budget of the same train step (no compile)")
    _add_step_arguments(p)
    p.set_defaults(run=_budget)
    p = sub.add_parser("simulate", help="compile the train step, then replay its schedule on the GPU's streams: "
                                        "step time, exposed transfers and collectives, TFLOP/s per GPU")
    _add_step_arguments(p)
    p.add_argument("--pipelined", action="store_true",
                   help="pipelined host offloading (--xla_gpu_enable_pipelined_host_offloading=true)")
    p.add_argument("--link", default=None, help="price host transfers on this host link instead of the GPU's own "
                                                "(a what-if): " + ", ".join(targets.HOST_LINKS))
    p.add_argument("--against", metavar="POLICY", default=None,
                   help="also compile the step under POLICY and rank the two by tokens/s over the simulator's "
                        "constants' measured spread (a tie where the ranking flips inside it)")
    p.set_defaults(run=_simulate)
    p = sub.add_parser("plan", help="search remat/offload per tensor, batch, pipelined offload and the state levers "
                                    "for the most simulated throughput that fits; export it for MaxText")
    p.add_argument("--model", help="a model config, e.g. llama3.1-405b, deepseek-v3-671b")
    p.add_argument("--maxtext-config", metavar="FILE", help="a MaxText config: its model, sequence, attention, MoE and "
                                                            "mesh (the planner chooses the rest)")
    p.add_argument("--target", default="h100", help="GPU key or GPU:TOPOLOGY")
    p.add_argument("--gpus", type=int, default=None, help="number of GPUs (whole hosts)")
    p.add_argument("--mesh", default=None, help="one mesh (e.g. fsdp=32,tensor=8); default: try all-FSDP and FSDP "
                                                "with tensor (dense) or expert (MoE) parallelism")
    p.add_argument("--seq", type=int, default=None, help="sequence length S")
    p.add_argument("--global-batch", type=int, default=None,
                   help="fix the global batch (the planner then chooses gradient accumulation); default: the largest "
                        "each candidate fits")
    p.add_argument("--objective", default="throughput",
                   help="what to maximize: throughput (simulated tokens/s per GPU)")
    p.add_argument("--host-pool-gib", type=int, default=None,
                   help="the pinned host pool per GPU you will set (XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB); default: the "
                        "plan sizes it, up to 75 %% of the host RAM behind each GPU")
    p.add_argument("--max-compiles", type=int, default=4, help="finalists to compile and simulate (default 4)")
    p.add_argument("--margin-gib", type=float, default=1.5,
                   help="device headroom the compiled peak must leave: the larger of this and 2 %% of usable HBM "
                        "(default 1.5)")
    p.add_argument("--processes-per-node", type=int, default=1,
                   help="the launcher layout the export states: 1 (MaxText's gpu_multi_process_run.sh, default) to "
                        "one per GPU")
    p.add_argument("--for-jaxlib", default=None, metavar="VERSION",
                   help="spell the exported XLA flags for this jaxlib (default: the installed one): renamed flags "
                        "respelled, flags its XLA lacks dropped, the #46231 fix added where it has the bug")
    p.add_argument("--mem-fraction", type=float, default=targets.DEFAULT_MEM_FRACTION,
                   help="XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75)")
    p.add_argument("--xla-flags", default=None, help="the flag set to plan under (default maxtext_gpu); the planner "
                                                     "turns pipelined host offloading on or off itself")
    p.add_argument("--maxtext-yaml", metavar="OUT", help="also write the plan's MaxText overrides (YAML) to OUT")
    p.add_argument("--json", action="store_true", help="one JSON object")
    _add_overrides_argument(p)
    p.set_defaults(run=_plan)
    p = sub.add_parser("measure", help="run the train step on this machine's TPU or GPU: time, spread across "
                                       "processes, real footprint, profiler trace (one line without one)")
    p.add_argument("--model", default="tiny-llama", help="a model config small enough for the local chip")
    p.add_argument("--batch", type=int, default=8, help="global batch B")
    p.add_argument("--seq", type=int, default=128, help="sequence length S")
    p.add_argument("--policy", default="full", help="remat policy")
    p.add_argument("--offload-optimizer", action="store_true", help="optimizer_memory_host_offload")
    p.add_argument("--xla-flags", default=None, help="flags for the local compiler (on a TPU: a libtpu preset, "
                                                     "libtpu_defaults or maxtext_host_offload, and/or --name=value)")
    p.add_argument("--steps", type=int, default=5, help="timed calls after the warm-up")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    p.add_argument("--processes", type=int, default=1, help="repeat in this many separate processes: the spread")
    p.add_argument("--footprint", action="store_true", help="also bisect the real footprint with a filler array (hangs on a TPU: its runtime waits past the limit)")
    p.add_argument("--trace", metavar="DIR", default=None, help="also trace one call with jax.profiler into DIR")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=_measure)
    p = sub.add_parser("train", help="train a small model on this machine's devices (or as one process of a "
                                     "jax.distributed job set up by its environment), with Orbax checkpoints")
    p.add_argument("--model", default="tiny-llama", help="a model small enough for this machine (tiny-llama, tiny-deepseek)")
    p.add_argument("--steps", type=int, default=10, help="train until this step (resuming after a checkpoint)")
    p.add_argument("--batch", type=int, default=8, help="global batch B")
    p.add_argument("--seq", type=int, default=64, help="sequence length S")
    p.add_argument("--policy", default="full", help="remat policy")
    p.add_argument("--seed", type=int, default=0, help="parameter initialization seed")
    p.add_argument("--checkpoint-dir", default=None, help="save (and resume from) Orbax checkpoints here")
    p.add_argument("--save-every", type=int, default=None, help="save every N steps (default: at the end)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # An XLA_FLAGS value starts with "--", which argparse would take for an option.
    for i, token in enumerate(argv[:-1]):
        if token in ("--check", "--xla-flags") and argv[i + 1].startswith("--"):
            argv[i:i + 2] = [f"{token}={argv[i + 1]}"]
            break
    argv = _join_compare_values(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # MaxText's overrides may come after options (argparse takes one run of positionals only)
        if not hasattr(args, "overrides") or any(token.startswith("-") for token in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    try:
        return args.run(args)
    except (ValueError, OSError, MemoryError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1


def _join_compare_values(argv: list[str]) -> list[str]:
    """``--compare A B C`` -> ``--compare=A --compare=B --compare=C``: each value is a flag set, which
    may itself start with ``--``."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] != "--compare":
            out.append(argv[i])
            i += 1
            continue
        i += 1
        while i < len(argv) and (not argv[i].startswith("--") or argv[i].startswith("--xla")):
            out.append(f"--compare={argv[i]}")
            i += 1
    return out


if __name__ == "__main__":
    sys.exit(main())
