"""What the commands share: the target, the step's inputs from arguments or a MaxText config, the batch, the step
arguments, printers."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...hardware import flags as xla_flags
from ...hardware import libtpu, targets
from ...models import configs as models_configs


PIPELINED_FLAG = xla_flags.PIPELINED_HOST_OFFLOADING


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
    from ...memory import fraction as fraction_lib

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
    from ...planning import maxtext

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
    from ... import models
    from ...planning import plan
    from ...ground import sharding

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
    if run is not None:
        run.check_target(target)
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
    from ...compiling.train import StateConfig

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
        from ...planning import maxtext

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
    from ...compiling import compiler
    from ...ground import sharding
    from ...compiling import train

    cfg, target, mesh, flag_set, state = _step_inputs(args)
    trainer = train.trainer(cfg, args.policy, state=state)
    args.fraction_needed = None
    if args.batch == MAX_BATCH:  # the budget's guess, compiled at it and one step further
        from ...planning import plan

        args.batch_max = plan.largest_batch(cfg, target, args.seq, args.policy, mesh, state, flag_set)
        if not args.batch_max.batch:
            raise ValueError(args.batch_max.summary())
        args.batch = args.batch_max.batch
        report = args.batch_max.report
    elif _needs_fraction(args):  # compiles at the budget's guess and one step below, or more
        from ...memory import fraction

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
    from ...ground import sharding
    from ...models import moe

    ways = sharding.batch_ways(mesh)
    return {"moe": moe.report(cfg, batch // ways * seq, max(batch // ways, 1), mesh.get("expert", 1))}


def _print_moe(moe: dict) -> None:
    if moe:
        print(moe["moe"].summary())


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
