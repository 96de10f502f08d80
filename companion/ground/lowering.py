"""The platform a step is being lowered for: set by the compiler, read by model code that picks a kernel by it.

``models.flash`` takes the Pallas TPU kernel only where the step is lowered for a TPU, so that a GPU step's
program carries no TPU branch (one changed XLA:GPU's schedule of a Llama 2 7B step by 0.6 %). The compiler
lowers inside ``lowering_for(platform)``; outside it, ``platform()`` is this process's backend. It sits below
both: the models must not reach up to the compiler to ask.
"""

from __future__ import annotations

import contextlib
import contextvars

import jax

_LOWERING_FOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("offload_lab_lowering_for", default=None)


def platform() -> str:
    """The platform the step being lowered is for (tpu, cuda or cpu), else this process's backend."""
    return _LOWERING_FOR.get() or jax.default_backend()


@contextlib.contextmanager
def lowering_for(name: str):
    """Lower inside this block for ``name``."""
    token = _LOWERING_FOR.set(name)
    try:
        yield
    finally:
        _LOWERING_FOR.reset(token)
