"""Llama 3.1: token embedding, L decoder layers (grouped-query attention with RoPE, SwiGLU
MLP, RMSNorm before each) scanned over depth, a final RMSNorm and an untied output head."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ..sharding import AxisRules
from .configs import ModelConfig
from .layers import DecoderLayer, Embedding, LmHead, checkpoint_names, scan_layers, stack_layers


class Llama(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, rules: AxisRules = AxisRules()):
        if cfg.mla is not None or cfg.moe is not None:
            raise ValueError(f"{cfg.name} has MLA or MoE: build it with models.DeepSeek")
        self.cfg = cfg
        self.embed = Embedding(cfg, rngs, rules)
        self.layers = stack_layers(lambda r: DecoderLayer(cfg, r, rules, routed=False), cfg.num_layers, rngs)
        self.head = LmHead(cfg, rngs, rules)

    def checkpoint_names(self) -> frozenset[str]:
        return checkpoint_names(self.cfg)

    def __call__(self, tokens: jax.Array, policy=None, params_on_host: bool = False) -> jax.Array:
        """Logits [B, S, V] (float32) for tokens [B, S]; ``policy`` is the per-layer remat policy;
        ``params_on_host``: the parameters live in pinned host memory (each comes over when used)."""
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = self.embed(tokens, params_on_host)
        x = scan_layers(self.layers, x, positions, policy, params_on_host)
        return self.head(x, params_on_host)
