"""What is trained, as JAX code: Llama, Mixtral, DeepSeek-V3 with MaxText's checkpoint names, and MaxText's
count of their FLOPs (``flops``).

``toy`` is a scanned MLP stack (notebook 00); ``Llama`` and ``DeepSeek`` are Flax NNX decoders
with MaxText's checkpoint names, built from a ``ModelConfig`` (``config("llama3.1-405b")``).
``build(cfg)`` makes concrete parameters; ``abstract(cfg)`` only their shapes (no allocation).
"""

from __future__ import annotations

from flax import nnx

from ..ground.sharding import AxisRules
from .configs import CONFIGS, Mla, ModelConfig, Moe, Rope, config
from .deepseek import DeepSeek
from .llama import Llama


def model_class(cfg: ModelConfig):
    return DeepSeek if cfg.mla is not None else Llama


def checkpoint_names(cfg: ModelConfig | str) -> frozenset[str]:
    """The checkpoint names a config's model emits (without building it)."""
    from .layers import checkpoint_names as names

    return names(config(cfg))


def build(cfg: ModelConfig | str, seed: int = 0, rules: AxisRules = AxisRules()) -> nnx.Module:
    cfg = config(cfg)
    return model_class(cfg)(cfg, rngs=nnx.Rngs(seed), rules=rules)


def abstract(cfg: ModelConfig | str, rules: AxisRules = AxisRules()) -> nnx.Module:
    """The model with ``ShapeDtypeStruct`` parameters: shapes and dtypes, nothing allocated."""
    cfg = config(cfg)
    return nnx.eval_shape(lambda: model_class(cfg)(cfg, rngs=nnx.Rngs(0), rules=rules))


__all__ = ["CONFIGS", "checkpoint_names", "DeepSeek", "Llama", "Mla", "ModelConfig", "Moe", "Rope", "abstract", "build", "config",
           "model_class"]
