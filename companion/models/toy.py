"""A stack of MLP layers scanned over depth: the smallest model where offload shows.

Each layer computes ``z = x @ w_in`` (named ``"hidden"``, shape [B, F]), ``h = tanh(z)`` and
``x' = x + tanh(h @ w_out)``. Under ``jax.checkpoint`` with a policy, ``"hidden"`` is what a
policy can save on device, offload to pinned host memory, or leave to be recomputed.
The bytes a policy offloads are exactly ``hidden_bytes(...)``: one [B, F] array per layer.

The name sits on the matmul's output, as MaxText's names do: that is the tensor the backward
pass reads (tanh's derivative is computed from its output, which XLA recomputes from ``z`` with
one elementwise op). A name on ``tanh(z)`` instead would save a tensor autodiff never reads, and
both matmuls would be recomputed anyway. Saving ``"hidden"`` spares the first matmul's
recompute; the second matmul's output is unnamed, so it is recomputed under every policy but
one that saves every matmul output (``dots_with_no_batch_dims_saveable`` and its offloading twin).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

HIDDEN = "hidden"


@dataclasses.dataclass(frozen=True)
class MlpStack:
    layers: int = 8
    width: int = 1024  # D
    hidden: int = 4096  # F
    dtype: str = "bfloat16"

    def __post_init__(self):
        for field in ("layers", "width", "hidden"):
            if getattr(self, field) < 1:
                raise ValueError(f"MlpStack.{field} must be positive, got {getattr(self, field)}")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"w_in": (self.layers, self.width, self.hidden), "w_out": (self.layers, self.hidden, self.width)}

    def hidden_bytes(self, batch: int) -> int:
        """Bytes of every layer's named activation for a batch of ``batch`` rows."""
        return self.layers * batch * self.hidden * jnp.dtype(self.dtype).itemsize

    def init(self, key: jax.Array) -> dict[str, jax.Array]:
        k_in, k_out = jax.random.split(key)
        shapes = self.param_shapes()
        return {
            "w_in": (jax.random.normal(k_in, shapes["w_in"]) / self.width ** 0.5).astype(self.dtype),
            "w_out": (jax.random.normal(k_out, shapes["w_out"]) / self.hidden ** 0.5).astype(self.dtype),
        }


NAME_ON = ("matmul", "tanh")


def forward(params: dict, x: jax.Array, policy=None, name_on: str = "matmul") -> jax.Array:
    """Run the stack; ``policy`` is a ``jax.checkpoint_policies`` policy (None: save nothing).
    ``name_on="tanh"`` puts the name on the activation instead: the teaching counter-example."""
    if name_on not in NAME_ON:
        raise ValueError(f"name_on={name_on!r}: choose one of {', '.join(NAME_ON)}")

    def layer(x, w):
        z = x @ w["w_in"]
        if name_on == "matmul":
            h = jnp.tanh(checkpoint_name(z, HIDDEN))  # the matmul output: what the backward pass reads
        else:
            h = checkpoint_name(jnp.tanh(z), HIDDEN)  # a copy of tanh's output that autodiff never reads
        return x + jnp.tanh(h @ w["w_out"]), None

    x, _ = jax.lax.scan(jax.checkpoint(layer, policy=policy), x, params)
    return x


def loss(params: dict, x: jax.Array, policy=None, name_on: str = "matmul") -> jax.Array:
    return jnp.mean(jnp.square(forward(params, x, policy, name_on).astype(jnp.float32)))


def grad_fn(policy=None, name_on: str = "matmul"):
    """``(params, x) -> grads``: the backward pass is where saved activations are read."""
    return jax.grad(lambda params, x: loss(params, x, policy, name_on))
