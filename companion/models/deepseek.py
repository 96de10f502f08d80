"""DeepSeek-V3: multi-head latent attention in every layer; the first layers have a dense
SwiGLU MLP, the rest routed experts (top-k of E, sigmoid scores with a balancing bias) plus a
shared expert. Two scanned stacks: dense layers, then MoE layers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ..ground.sharding import AxisRules
from .configs import ModelConfig
from .layers import DecoderLayer, Embedding, LmHead, apply_layers, build_layers, checkpoint_names


class DeepSeek(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, rules: AxisRules = AxisRules()):
        if cfg.mla is None:
            raise ValueError(f"{cfg.name} has no MLA config: build it with models.Llama")
        self.cfg = cfg
        self.embed = Embedding(cfg, rngs, rules)
        stacks = {name: build_layers(lambda r, routed=routed: DecoderLayer(cfg, r, rules, routed=routed), count, rngs,
                                     cfg.scan_layers) for name, count, routed in cfg.stacks()}
        self.dense_layers = stacks.get("dense_layers")  # None where the config has none
        self.moe_layers = stacks.get("moe_layers")
        self.head = LmHead(cfg, rngs, rules)

    def checkpoint_names(self) -> frozenset[str]:
        return checkpoint_names(self.cfg)

    def __call__(self, tokens: jax.Array, policy=None, params_on_host: bool = False,
                 prevent_cse: bool = False) -> jax.Array:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = self.embed(tokens, params_on_host)
        for stack in (self.dense_layers, self.moe_layers):
            if stack is not None:
                x = apply_layers(stack, x, positions, policy, params_on_host, prevent_cse)
        return self.head(x, params_on_host)
