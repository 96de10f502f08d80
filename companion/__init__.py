"""Offload Lab companion: measure and plan GPU memory for JAX LLM training.

Importing ``companion`` prepares JAX, once, before it starts:

* sets ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`` (unless already set), which lets the CUDA PJRT
  plugin register on a machine without a GPU driver, so that GPU targets can be compiled for
  (see ``companion.compiler``); on a GPU machine it only skips the plugin's version check;
* validates ``XLA_FLAGS`` and ``LIBTPU_INIT_ARGS`` (XLA and libtpu abort the process on an unknown
  flag): if one is bad, a warning says why and the backend is left unstarted, so ``compiler.backend()``
  raises a ValueError;
* imports ``jax`` and starts its backend with file descriptor 2 captured, so the plugin's
  "Could not find cuda drivers" lines land in ``companion.JAX_START_LOG``, not in notebooks
  (with ``XLA_FLAGS`` set, the backend starts uncaptured, so XLA's own errors stay visible) —
  except in a multi-process job (``companion.distributed``), whose backend may start only after
  ``jax.distributed.initialize``.

The modules sit in layers, one folder each (``companion/ground/`` ... ``companion/surfaces/``), imports pointing
only down: read from the folders by ``companion.ground.layers`` (held by ``tests/test_layers.py``) and drawn in
README's "Architecture" section (``scripts/architecture.py``). ``from companion import budget`` serves any module
by its short name (``_FACE``); ``import companion.budget``, the path before the folders, still works with a
``DeprecationWarning`` until the next version bump.
"""

import os
import sys
import warnings

from .ground import distributed as _distributed
from .hardware import flags as _flags
from .hardware import libtpu as _libtpu
from .ground import stderr as _stderr

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")


def _xla_flags_error() -> str | None:
    """Why ``XLA_FLAGS`` (or, on a TPU, libtpu's ``LIBTPU_INIT_ARGS``) would abort the backend's start, or None."""
    try:
        _flags.parse(os.environ.get("XLA_FLAGS", ""))
        _libtpu.check_environment(os.environ)
    except ValueError as err:
        return str(err)
    return None


def _in_a_cluster() -> bool:
    """A multi-process job (``distributed.Cluster.from_env``): its backend must start only after
    ``jax.distributed.initialize``, so importing companion leaves it unstarted."""
    try:
        return _distributed.Cluster.from_env() is not None
    except ValueError:  # reported where the job initializes
        return True


_error = _xla_flags_error()
_cluster = _in_a_cluster()
with _stderr.capture() as _log:
    import jax

    if _error is None and not os.environ.get("XLA_FLAGS") and not _cluster:
        jax.devices()  # start the backend now, while its log is captured
JAX_START_LOG = _log.text
if _error is None and os.environ.get("XLA_FLAGS") and not _cluster:
    # With user flags, start uncaptured: should XLA still refuse one (a value it rejects after our
    # checks), its fatal message must reach the terminal rather than a captured file.
    jax.devices()
if _error is not None and sys.argv[:1] != ["-m"]:  # `python -m companion` says it once, as its error
    warnings.warn(f"XLA_FLAGS or LIBTPU_INIT_ARGS would abort the process when JAX starts its backend: {_error}",
                  stacklevel=2)

__version__ = "0.1.0"

# The package's face: ``from companion import budget`` imports the module where its layer keeps it
# (``companion.memory.budget``), lazily, so importing ``companion`` stays cheap. The old dotted paths
# (``import companion.budget``) are deprecation shims, gone at the next version bump.
_FACE = {
    "answer": "companion.planning.answer",
    "attribution": "companion.measuring.attribution",
    "bands": "companion.timing.bands",
    "budget": "companion.memory.budget",
    "calibration": "companion.timing.calibration",
    "caveats": "companion.ground.caveats",
    "cli": "companion.surfaces.cli",
    "collectives": "companion.timing.collectives",
    "comparison": "companion.measuring.comparison",
    "compiler": "companion.compiling.compiler",
    "descriptors": "companion.xla.descriptors",
    "distributed": "companion.ground.distributed",
    "dump": "companion.xla.dump",
    "experiments": "companion.timing.experiments",
    "fit": "companion.hardware.fit",
    "flags": "companion.hardware.flags",
    "flops": "companion.models.flops",
    "fraction": "companion.memory.fraction",
    "freshness": "companion.ground.freshness",
    "heuristics": "companion.memory.heuristics",
    "hlo": "companion.xla.hlo",
    "layers": "companion.ground.layers",
    "libtpu": "companion.hardware.libtpu",
    "loop": "companion.measuring.loop",
    "lowering": "companion.ground.lowering",
    "maxtext": "companion.planning.maxtext",
    "measure": "companion.measuring.measure",
    "measured": "companion.measuring.measured",
    "notation": "companion.ground.notation",
    "pgle": "companion.timing.pgle",
    "pipelining": "companion.timing.pipelining",
    "plan": "companion.planning.plan",
    "plots": "companion.surfaces.plots",
    "policies": "companion.ground.policies",
    "published": "companion.timing.published",
    "report_cache": "companion.compiling.report_cache",
    "requirement": "companion.timing.requirement",
    "results": "companion.ground.results",
    "roofline": "companion.timing.roofline",
    "schedule": "companion.timing.schedule",
    "sharding": "companion.ground.sharding",
    "state": "companion.ground.state",
    "stderr": "companion.ground.stderr",
    "steps": "companion.timing.steps",
    "tables": "companion.surfaces.tables",
    "targets": "companion.hardware.targets",
    "train": "companion.compiling.train",
    "widgets": "companion.surfaces.widgets",
    "workaround": "companion.timing.workaround",
}


def __getattr__(name):
    if name in _FACE:
        import importlib

        return importlib.import_module(_FACE[name])
    raise AttributeError(f"module 'companion' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_FACE])
