"""Llama 3.1: token embedding, L decoder layers (grouped-query attention with RoPE, SwiGLU
MLP, RMSNorm before each) scanned over depth, a final RMSNorm and an untied output head."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ..sharding import AxisRules
from .configs import ModelConfig
from .layers import DecoderLayer, Embedding, LmHead, scan_layers, stack_layers

CHECKPOINT_NAMES = frozenset({"decoder_layer_input", "query_proj", "key_proj", "value_proj", "context",
                              "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"})


class Llama(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, rules: AxisRules = AxisRules()):
        if cfg.mla is not None or cfg.moe is not None:
            raise ValueError(f"{cfg.name} has MLA or MoE: build it with models.DeepSeek")
        self.cfg = cfg
        self.embed = Embedding(cfg, rngs, rules)
        self.layers = stack_layers(lambda r: DecoderLayer(cfg, r, rules, routed=False), cfg.num_layers, rngs)
        self.head = LmHead(cfg, rngs, rules)

    @staticmethod
    def checkpoint_names() -> frozenset[str]:
        return CHECKPOINT_NAMES

    def __call__(self, tokens: jax.Array, policy=None) -> jax.Array:
        """Logits [B, S, V] (float32) for tokens [B, S]; ``policy`` is the per-layer remat policy."""
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = self.embed(tokens)
        x = scan_layers(self.layers, x, positions, policy)
        return self.head(x)
