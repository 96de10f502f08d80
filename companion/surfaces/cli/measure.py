"""``measure``: steps timed on the local accelerator, held against the lab's prediction."""

from __future__ import annotations

import json
import sys

from ...hardware import targets


def _local_target() -> targets.Target:
    """The lab's target for this machine's first accelerator (one device)."""
    import jax

    kind = jax.local_devices()[0].device_kind
    found = targets.for_device_kind(kind)
    if found is not None:
        return targets.target(found.key, "1")
    raise ValueError(f"this machine's {kind!r} is not in the lab's catalog ({', '.join(targets.ACCELERATORS)})")


def _measured_step(args):
    """The model config and state ``measure`` runs: ``--model`` and its flags (defaults: tiny-llama, B 8, S 128,
    full remat), or a MaxText config and its ``KEY=VALUE`` overrides (one process's run: its
    per_device_batch_size on this one chip); sets ``args.batch``, ``seq`` and ``policy``."""
    from ... import models
    from ...ground.state import StateConfig

    if args.steps < 1 or args.processes < 1:
        raise ValueError("--steps and --processes must be positive")
    if args.maxtext_config is None:
        if args.overrides:
            raise ValueError(f"override {args.overrides[0]!r}: key=value overrides need --maxtext-config FILE")
        args.model, args.batch = args.model or "tiny-llama", 8 if args.batch is None else args.batch
        args.seq, args.policy = 128 if args.seq is None else args.seq, args.policy or "full"
        if args.batch < 1 or args.seq < 1:
            raise ValueError("--batch and --seq must be positive")
        return models.config(args.model), StateConfig(optimizer_memory_host_offload=args.offload_optimizer)
    from ...planning import maxtext

    both = [flag for flag, value in (("--model", args.model), ("--batch", args.batch), ("--seq", args.seq),
                                     ("--policy", args.policy), ("--offload-optimizer", args.offload_optimizer or None))
            if value is not None]
    if both:
        raise ValueError(f"{', '.join(both)} and --maxtext-config both set the run: give one of them")
    run = maxtext.read(args.maxtext_config, args.overrides)
    args.batch, args.seq, args.policy = run.global_batch(1), run.seq, run.policy
    if args.batch < 1:
        raise ValueError(f"per_device_batch_size {run.per_device_batch_size} gives no whole sequence on one chip")
    args.model, args.model_dims = run.model, dict(run.dims)  # the dimensions the run changes from the model's file
    return run.config(), run.state


def _measure(args) -> int:
    """``measure``: the train step run on this machine's accelerator (see ``companion.measure``)."""
    from ...compiling import compiler
    from ...measuring import measure
    from ...compiling import train

    cfg, state = _measured_step(args)  # bad input first: a chip is not needed to say so
    measure.require_accelerator()
    if args.processes > 1:
        return _measure_processes(args)
    target = _local_target()
    trainer = train.trainer(cfg, args.policy, state=state)
    record = measure.train_step(trainer, compiler.place(target), args.batch, args.seq, flags=args.xla_flags,
                                steps=args.steps, warmup=args.warmup, footprint=args.footprint, trace_dir=args.trace)
    dims = getattr(args, "model_dims", None) or {}
    out = {"model": cfg.name, **({"model_dims": dims} if dims else {}), "target": target.name, "batch": args.batch,
           "seq": args.seq, "policy": trainer.policy.name, **record}
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    verdict, timing = record["verdict"], record.get("timing")
    named = cfg.name + (f" ({', '.join(f'{k} {v}' for k, v in dims.items())})" if dims else "")
    print(f"{named} B={args.batch} S={args.seq} {trainer.policy.name} on {target.name}: {verdict['status']}"
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

    from ...measuring import measure

    run = (["--maxtext-config", args.maxtext_config, *args.overrides] if args.maxtext_config else
           ["--model", args.model, "--batch", str(args.batch), "--seq", str(args.seq), "--policy", args.policy]
           + (["--offload-optimizer"] if args.offload_optimizer else []))
    argv = [sys.executable, "-m", "companion", "measure", *run, "--steps", str(args.steps), "--warmup",
            str(args.warmup), "--json"] + ([f"--xla-flags={args.xla_flags}"] if args.xla_flags else [])
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
