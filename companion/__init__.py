"""Offload Lab companion: measure and plan GPU memory for JAX LLM training.

Importing ``companion`` does two things before JAX starts:

* sets ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`` (unless already set), which lets the CUDA PJRT
  plugin register on a machine without a GPU driver, so that GPU targets can be compiled for
  (see ``companion.compiler``); on a GPU machine it only skips the plugin's version check;
* imports ``jax`` with file descriptor 2 captured, so the plugin's "Could not find cuda
  drivers" lines land in ``companion.JAX_IMPORT_LOG`` instead of notebook outputs.

Modules, from the ground up: ``targets`` and ``flags`` (data), ``hlo`` and ``dump`` (reading
XLA's output), ``compiler`` (function + target -> report), ``models`` and ``policies``,
``train`` and ``sharding``, ``budget``; ``widgets``, ``plots`` and ``cli`` on top.
"""

import os
import sys

from . import stderr as _stderr

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")

JAX_IMPORT_LOG = ""
if "jax" not in sys.modules:
    with _stderr.capture() as _log:
        import jax  # noqa: F401
    JAX_IMPORT_LOG = _log.text

def _check_xla_flags_env() -> None:
    """XLA aborts the process on an unknown XLA_FLAGS entry: say so before it gets the chance."""
    import warnings

    from . import flags

    try:
        flags.parse(os.environ.get("XLA_FLAGS", ""))
    except ValueError as err:
        warnings.warn(f"XLA_FLAGS would abort the process when JAX starts its backend: {err}", stacklevel=3)


_check_xla_flags_env()

__version__ = "0.1.0"
