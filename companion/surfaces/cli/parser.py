"""The command line: its parser (one subcommand per module of this package) and ``main``, which turns every error
into one line on stderr."""

from __future__ import annotations

import argparse
import sys

from ...hardware import flags as xla_flags
from ...hardware import targets

from .common import _add_overrides_argument, _add_step_arguments
from .targets import _targets
from .flags import _flags
from .compile import _compile
from .budget import _budget
from .simulate import _simulate
from .train import _train
from .plan import _plan
from .measure import _measure


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (naming the bad value) and exit status 1."""

    def error(self, message: str):
        self.exit(1, f"error: {message} (see `{self.prog} --help`)\n")


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
    p.add_argument("--margin-gib", type=float, default=None,
                   help="device headroom the compiled peak must leave: on a GPU the larger of this and 2 %% of usable "
                        "HBM (default 1.5); on a TPU this alone (default 0: XLA:TPU refuses at compile time what "
                        "would not fit)")
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
    p.add_argument("--model", default=None, help="a model config small enough for the local chip (default "
                                                 "tiny-llama)")
    p.add_argument("--maxtext-config", metavar="FILE",
                   help="a MaxText config instead of --model, --batch, --seq, --policy and --offload-optimizer; any "
                        "width MaxText's way: override_model_config=true and base_* keys, in the file or as KEY=VALUE")
    p.add_argument("--batch", type=int, default=None, help="global batch B (default 8)")
    p.add_argument("--seq", type=int, default=None, help="sequence length S (default 128)")
    p.add_argument("--policy", default=None, help="remat policy (default full)")
    p.add_argument("--offload-optimizer", action="store_true", help="optimizer_memory_host_offload")
    _add_overrides_argument(p)
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

