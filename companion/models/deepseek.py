"""DeepSeek-V3: multi-head latent attention in every layer; the first layers have a dense
SwiGLU MLP, the rest routed experts (top-k of E, sigmoid scores with a balancing bias) plus a
shared expert. Two scanned stacks: dense layers, then MoE layers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ..sharding import AxisRules
from .configs import ModelConfig
from .layers import DecoderLayer, Embedding, LmHead, checkpoint_names, scan_layers, stack_layers


class DeepSeek(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, rules: AxisRules = AxisRules()):
        if cfg.mla is None:
            raise ValueError(f"{cfg.name} has no MLA config: build it with models.Llama")
        self.cfg = cfg
        self.embed = Embedding(cfg, rngs, rules)
        self.dense_layers = (stack_layers(lambda r: DecoderLayer(cfg, r, rules, routed=False),
                                          cfg.num_dense_layers, rngs) if cfg.num_dense_layers else None)
        self.moe_layers = (stack_layers(lambda r: DecoderLayer(cfg, r, rules, routed=True),
                                        cfg.num_moe_layers, rngs) if cfg.num_moe_layers else None)
        self.head = LmHead(cfg, rngs, rules)

    def checkpoint_names(self) -> frozenset[str]:
        return checkpoint_names(self.cfg)

    def __call__(self, tokens: jax.Array, policy=None, params_on_host: bool = False) -> jax.Array:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = self.embed(tokens, params_on_host)
        for stack in (self.dense_layers, self.moe_layers):
            if stack is not None:
                x = scan_layers(stack, x, positions, policy, params_on_host)
        return self.head(x, params_on_host)
