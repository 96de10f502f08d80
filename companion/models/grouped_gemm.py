"""A grouped GEMM for the routed experts: one kernel per projection and pass, as a tuned GPU run has.

``grouped_matmul(x, w, group_sizes)`` multiplies the rows of a flat buffer ``x [R, K]``, grouped by
expert (``group_sizes[e]`` consecutive rows each; rows past their sum are padding and give zeros),
by their expert's weights ``w [E, K, N]``. Its backward pass is two more grouped GEMMs: dgrad
(``dY [R, N]`` by each expert's ``w^T``) and wgrad (``x^T dY`` per expert: ``[E, K, N]``).

What a tuned GPU deployment runs here is one grouped kernel per pass (cuDNN's ragged-dot fusion,
a CUTLASS or Transformer Engine grouped GEMM): each expert's weights read once, the routed rows
tiled per expert. jaxlib 0.10.2 cannot compile such a kernel for a GPU target without a GPU: its
XLA expands ``jax.lax.ragged_dot`` densely (``--moe ragged_dot`` shows that program), and cuDNN's
fusion fails in the compile-only autotuner (``../shared/research/moe-on-gpu.md`` §2). So, for GPU
targets, each pass is compiled as an **opaque custom call** (``hlo.GROUPED_GEMM_TARGET``): XLA
sees its operands, its result and nothing inside, which is what a grouped kernel is to XLA's
buffer assignment and scheduler. Its attributes say what it stands for — the pass (``kind``), the
rows routed to this device under balanced routing (``routed_rows``) and the rows the priced
kernel computes under the step's routing assumption (``expected_rows``: balanced x the
imbalance factor on the most-loaded device, at most the buffer) — and ``companion.schedule``
prices it as that kernel (``hlo.grouped_gemm_cost``).

A compile-only custom call needs an FFI handler registered under its target name before XLA
emits its thunk, though the handler never runs. The lab registers an existing jaxlib CUDA
handler (``cu_lu_pivots_to_permutation``) under the stand-in's name: compile-only XLA accepts it,
and on a real GPU the call would fail its argument check rather than compute; the lab refuses
to trace the stand-in where JAX has real GPUs (run ``--moe ragged_dot`` or ``dense`` there).
On the CPU (tests, small runs) every pass computes for real with ``jax.lax.ragged_dot``, so the
custom VJP below is checked against autodiff of the other paths.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..xla.hlo import GROUPED_GEMM_TARGET

KINDS = ("fprop", "dgrad", "wgrad")


@functools.cache
def _register_stand_in() -> None:
    """Register the stand-in's target for CUDA compiles (once per process)."""
    if jax.default_backend() == "gpu":
        raise ValueError("--moe grouped is a compile-only stand-in for a grouped GEMM and cannot run on the "
                         "GPUs of this machine: use --moe ragged_dot (MaxText's sparse path) or --moe dense")
    try:
        from jax_cuda12_plugin import _linalg
    except ImportError:  # no CUDA plugin: GPU targets compile on the CPU backend, which never takes this branch
        return
    jax.ffi.register_ffi_target(GROUPED_GEMM_TARGET, _linalg.registrations()["cu_lu_pivots_to_permutation"],
                                platform="CUDA")


def _pass(kind: str, a: jax.Array, b: jax.Array, group_sizes: jax.Array, out: jax.ShapeDtypeStruct,
          routed_rows: int, expected_rows: int) -> jax.Array:
    """One grouped-GEMM pass: the stand-in custom call on CUDA, ``ragged_dot`` elsewhere."""

    def reference(a, b, group_sizes):
        if kind == "fprop":  # a = x [R, K], b = w [E, K, N]
            return jax.lax.ragged_dot(a, b, group_sizes).astype(out.dtype)
        if kind == "dgrad":  # a = dY [R, N], b = w [E, K, N]
            return jax.lax.ragged_dot(a, jnp.swapaxes(b, 1, 2), group_sizes).astype(out.dtype)
        # wgrad: a = x [R, K], b = dY [R, N]; the transpose of the forward with respect to w
        _, transpose = jax.vjp(lambda w: jax.lax.ragged_dot(a, w, group_sizes), jnp.zeros(out.shape, a.dtype))
        return transpose(b.astype(a.dtype))[0].astype(out.dtype)

    def stand_in(a, b, group_sizes):
        _register_stand_in()
        return jax.ffi.ffi_call(GROUPED_GEMM_TARGET, out)(
            a, b, group_sizes, kind=kind, routed_rows=np.int64(routed_rows), expected_rows=np.int64(expected_rows))

    return jax.lax.platform_dependent(a, b, group_sizes, cuda=stand_in, default=reference)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def grouped_matmul(x: jax.Array, w: jax.Array, group_sizes: jax.Array, routed_rows: int,
                   expected_rows: int) -> jax.Array:
    """``x [R, K]`` grouped by expert (``group_sizes [E]``) times ``w [E, K, N]`` -> ``[R, N]`` in
    ``x``'s dtype; ``routed_rows`` and ``expected_rows`` describe the routing for the pricing."""
    return _pass("fprop", x, w, group_sizes, jax.ShapeDtypeStruct((x.shape[0], w.shape[2]), x.dtype),
                 routed_rows, expected_rows)


def _forward(x, w, group_sizes, routed_rows, expected_rows):
    return grouped_matmul(x, w, group_sizes, routed_rows, expected_rows), (x, w, group_sizes)


def _backward(routed_rows, expected_rows, residuals, d_out):
    x, w, group_sizes = residuals
    d_x = _pass("dgrad", d_out, w, group_sizes, jax.ShapeDtypeStruct(x.shape, x.dtype), routed_rows, expected_rows)
    d_w = _pass("wgrad", x, d_out, group_sizes, jax.ShapeDtypeStruct(w.shape, w.dtype), routed_rows, expected_rows)
    return d_x, d_w, None


grouped_matmul.defvjp(_forward, _backward)
