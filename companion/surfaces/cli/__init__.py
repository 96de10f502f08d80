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

from .parser import build_parser, main  # noqa: F401  (each command is a module of its own)
