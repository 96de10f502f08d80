"""The Llama family: token embedding, L decoder layers (grouped-query attention with RoPE, an
RMSNorm before each block) scanned over depth, a final RMSNorm and an untied output head. Each
layer's MLP is a SwiGLU (Llama 2, 3, 3.1) or routed experts (Mixtral: MaxText's ``mixtral``
decoder block, the same layer with ``MoeBlock`` in place of the MLP)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ..ground.sharding import AxisRules
from .configs import ModelConfig
from .layers import DecoderLayer, Embedding, LmHead, apply_layers, build_layers, checkpoint_names


class Llama(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, rules: AxisRules = AxisRules()):
        if cfg.mla is not None:
            raise ValueError(f"{cfg.name} has MLA: build it with models.DeepSeek")
        (_, count, routed), = cfg.stacks()
        self.cfg = cfg
        self.embed = Embedding(cfg, rngs, rules)
        self.layers = build_layers(lambda r: DecoderLayer(cfg, r, rules, routed=routed), count, rngs, cfg.scan_layers)
        self.head = LmHead(cfg, rngs, rules)

    def checkpoint_names(self) -> frozenset[str]:
        return checkpoint_names(self.cfg)

    def __call__(self, tokens: jax.Array, policy=None, params_on_host: bool = False,
                 prevent_cse: bool = False) -> jax.Array:
        """Logits [B, S, V] (float32) for tokens [B, S]; ``policy`` is the per-layer remat policy;
        ``params_on_host``: the parameters live in pinned host memory (each comes over when used);
        ``prevent_cse``: the remat's CSE barriers for unscanned layers (``layers.apply_layers``)."""
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = self.embed(tokens, params_on_host)
        x = apply_layers(self.layers, x, positions, policy, params_on_host, prevent_cse)
        return self.head(x, params_on_host)
