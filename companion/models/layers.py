"""Transformer building blocks (Flax NNX), with MaxText's ``checkpoint_name`` strings.

Read top to bottom: parameters with logical axes, RMSNorm, RoPE, attention (grouped-query and
multi-head latent), the SwiGLU MLP, routed experts, and the scanned layer stack.

The checkpoint names are the contract with ``companion.policies``: a policy saves, offloads or
recomputes a tensor *by its name*. Each name sits where MaxText puts it:

==================  =====================================================  ===============
name                tensor                                                 shape
==================  =====================================================  ===============
decoder_layer_input the layer's input (residual stream)                    [B, S, D]
query_proj          Q after RoPE                                           [B, S, H, d_h]
key_proj            K after RoPE                                           [B, S, H_kv, d_h]
value_proj          V                                                      [B, S, H_kv, d_v]
context             flash attention's output (cuDNN path, as MaxText)      [B, S, H, d_v]
attention_out       attention output before the out projection, any path   [B, S, H, d_v]
out_proj            attention block output                                 [B, S, D]
mlpwi_0, mlpwi_1    gate and up projections (before SiLU)                  [B, S, F]
mlpwo               down projection                                        [B, S, D]
moe_mlpwi_0         routed experts' gate output (also mlpwi_0)             [rows, F_e]
moe_mlpwi_1         routed experts' up output (sparse paths: this name only) [rows, F_e]
moe_mlpwo           routed experts' down output (also mlpwo)               [rows, D]
query_wa_proj       MLA: Q down-projection                                 [B, S, q_lora]
mla_q               MLA: the same after its RMSNorm                        [B, S, q_lora]
kv_wa_proj          MLA: KV down-projection (latent + shared RoPE key)     [B, S, kv_lora + d_rope]
mla_kv              MLA: the KV latent after its RMSNorm                   [B, S, kv_lora]
==================  =====================================================  ===============

Routed-expert rows: the sparse paths' flat receive buffer, grouped by expert (``models/moe.py``);
the dense path's ``[E, G, C]`` slots (or ``[B, S, E]`` with every expert on every token), where
``mlpwi_1`` also names the up output, as on MaxText's dense path.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from ..ground.sharding import AxisRules, constrain
from . import flash, moe
from .configs import ModelConfig, Rope

BATCH, LENGTH = "activation_batch", "activation_length"
ACTIVATION = (BATCH, LENGTH, "activation_embed")


def checkpoint_names(cfg: ModelConfig) -> frozenset[str]:
    """The checkpoint names a config's layers emit, as placed in this module (see the table above)."""
    names = {"decoder_layer_input", "query_proj", "key_proj", "value_proj", "attention_out", "out_proj"}
    if cfg.attention == "flash":
        names.add("context")
    if cfg.mla is not None:
        names |= {"query_wa_proj", "mla_q", "kv_wa_proj", "mla_kv"}
    routed = cfg.moe is not None and cfg.num_moe_layers > 0
    dense_mlp = cfg.num_dense_layers > 0 or (routed and cfg.moe.shared_experts > 0)
    if dense_mlp:
        names |= {"mlpwi_0", "mlpwi_1", "mlpwo"}
    if routed:
        names |= {"mlpwi_0", "mlpwo", "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo"}
        if cfg.moe.dispatch == "dense":  # MaxText's dense path also names the up output mlpwi_1
            names.add("mlpwi_1")
    return frozenset(names)


class RouterBias(nnx.Variable):
    """DeepSeek's load-balancing bias: set by a balancing rule, not by gradients."""


def param(rngs: nnx.Rngs, shape: tuple[int, ...], logical_axes: tuple[str, ...], cfg: ModelConfig,
          fan_in: int | None = None) -> nnx.Param:
    """A normal(0, 1/fan_in) parameter stored in ``cfg.weight_dtype``, tagged with logical axes."""
    fan_in = fan_in or shape[0]
    value = jax.random.normal(rngs.params(), shape, jnp.float32) / math.sqrt(fan_in)
    return nnx.Param(value.astype(cfg.weight_dtype), logical_axes=logical_axes)


def matmul(spec: str, x: jax.Array, w: nnx.Param, dtype: str) -> jax.Array:
    """Einsum in the compute dtype (weights cast from their stored dtype)."""
    return jnp.einsum(spec, x, w[...].astype(dtype))


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, cfg: ModelConfig):
        self.eps = cfg.norm_eps
        self.scale = nnx.Param(jnp.ones((dim,), cfg.weight_dtype), logical_axes=("norm",))

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y * self.scale[...].astype(jnp.float32)).astype(x.dtype)


# ----------------------------------------------------------------------------- RoPE


def rope_frequencies(dim: int, rope: Rope) -> jax.Array:
    """Inverse frequencies [dim/2], with Llama 3.1 or YaRN context-extension scaling."""
    inv = 1.0 / rope.theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    if rope.llama3_factor:
        wavelength = 2 * jnp.pi / inv
        low = rope.llama3_original_context / rope.llama3_low_freq_factor
        high = rope.llama3_original_context / rope.llama3_high_freq_factor
        smooth = (rope.llama3_original_context / wavelength - rope.llama3_low_freq_factor) / (
            rope.llama3_high_freq_factor - rope.llama3_low_freq_factor)
        blended = (1 - smooth) * inv / rope.llama3_factor + smooth * inv
        inv = jnp.where(wavelength > low, inv / rope.llama3_factor, jnp.where(wavelength < high, inv, blended))
    if rope.yarn_factor:
        def correction_dim(rotations):
            return dim * math.log(rope.yarn_original_context / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))
        lo = max(math.floor(correction_dim(rope.yarn_beta_fast)), 0)
        hi = min(math.ceil(correction_dim(rope.yarn_beta_slow)), dim - 1)
        ramp = jnp.clip((jnp.arange(dim // 2, dtype=jnp.float32) - lo) / max(hi - lo, 1e-3), 0, 1)
        inv = inv / rope.yarn_factor * ramp + inv * (1 - ramp)
    return inv


def yarn_softmax_scale(rope: Rope) -> float:
    """YaRN's attention temperature correction (1 without YaRN), applied squared to the softmax."""
    return 0.1 * rope.yarn_mscale * math.log(rope.yarn_factor) + 1.0 if rope.yarn_factor > 1 else 1.0


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotate the last dimension of x [B, S, heads, d] (rotate-half convention)."""
    angles = positions[:, :, None, None].astype(jnp.float32) * inv_freq  # [B, S, 1, d/2]
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


# ----------------------------------------------------------------------------- attention


def attend(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, cfg: ModelConfig) -> jax.Array:
    """Causal softmax attention: q [B,S,H,d], k [B,T,H_kv,d], v [B,T,H_kv,d_v] -> [B,S,H,d_v].

    "flash" (the default) is a fused kernel's memory: cuDNN's flash attention for GPU targets
    where JAX can emit it, the Pallas TPU kernel for TPUs (``cfg.flash_kernel`` "fused"), else the
    lab's blockwise kernel (``models/flash.py``); its output is named ``context`` as on MaxText's
    cuDNN path (the Pallas kernel's softmax statistics too). "dot_product" materialises the [B, H, S, T]
    logits; "chunked" walks query blocks of ``cfg.attention_chunk`` rows and recomputes each
    block in the backward pass.
    """
    if cfg.attention == "flash":
        fused = cfg.flash_kernel == "fused"
        kernel = flash.kernel_for(q.shape[-1], v.shape[-1], q.dtype.name) if fused else "jax"
        return checkpoint_name(flash.attention(q, k, v, scale, kernel, cfg.flash_block, pallas=fused), "context")
    B, S, H, _ = q.shape
    groups = H // k.shape[2]
    q = q.reshape(B, S, k.shape[2], groups, q.shape[-1])

    def block(q_block, q_offset):
        logits = jnp.einsum("bskgd,btkd->bkgst", q_block, k, preferred_element_type=jnp.float32) * scale
        rows = q_offset + jnp.arange(q_block.shape[1])[:, None]
        logits = jnp.where(rows >= jnp.arange(k.shape[1])[None, :], logits, -1e30)
        probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
        return jnp.einsum("bkgst,btkd->bskgd", probs, v)

    chunk = cfg.attention_chunk
    if cfg.attention == "chunked" and S > chunk and S % chunk == 0:
        blocks = q.reshape(B, S // chunk, chunk, *q.shape[2:]).swapaxes(0, 1)
        offsets = jnp.arange(S // chunk) * chunk
        out = jax.lax.map(lambda args: jax.checkpoint(block)(*args), (blocks, offsets))
        out = out.swapaxes(0, 1).reshape(B, S, *out.shape[3:])
    else:
        out = block(q, 0)
    return out.reshape(B, S, H, v.shape[-1])


class Attention(nnx.Module):
    """Grouped-query attention (Llama): H query heads share H_kv key/value heads."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, rules: AxisRules):
        D, H, Hkv, dh = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.cfg, self.rules = cfg, rules
        self.wq = param(rngs, (D, H, dh), ("embed", "heads", "head_dim"), cfg)
        self.wk = param(rngs, (D, Hkv, dh), ("embed", "kv_heads", "head_dim"), cfg)
        self.wv = param(rngs, (D, Hkv, dh), ("embed", "kv_heads", "head_dim"), cfg)
        self.wo = param(rngs, (H, dh, D), ("heads", "head_dim", "embed"), cfg, fan_in=H * dh)

    def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        cfg, dt = self.cfg, self.cfg.dtype
        heads, kv_heads = (BATCH, LENGTH, "activation_heads", None), (BATCH, LENGTH, "activation_kv_heads", None)
        q = constrain(matmul("bsd,dhk->bshk", x, self.wq, dt), heads, self.rules)
        k = constrain(matmul("bsd,dhk->bshk", x, self.wk, dt), kv_heads, self.rules)
        v = constrain(matmul("bsd,dhk->bshk", x, self.wv, dt), kv_heads, self.rules)
        inv_freq = rope_frequencies(cfg.head_dim, cfg.rope)
        q = checkpoint_name(apply_rope(q, positions, inv_freq), "query_proj")
        k = checkpoint_name(apply_rope(k, positions, inv_freq), "key_proj")
        v = checkpoint_name(v, "value_proj")
        context = checkpoint_name(attend(q, k, v, cfg.head_dim ** -0.5, cfg), "attention_out")
        out = constrain(matmul("bshk,hkd->bsd", context, self.wo, dt), ACTIVATION, self.rules)
        return checkpoint_name(out, "out_proj")


class MlaAttention(nnx.Module):
    """Multi-head latent attention (DeepSeek-V3): Q through a low-rank bottleneck; K and V
    expanded from a small shared latent plus one RoPE key shared by all heads."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, rules: AxisRules):
        m, D, H = cfg.mla, cfg.d_model, cfg.num_heads
        self.cfg, self.rules = cfg, rules
        self.wq_a = param(rngs, (D, m.q_lora_rank), ("embed", "q_lora"), cfg)
        self.q_norm = RMSNorm(m.q_lora_rank, cfg)
        self.wq_b = param(rngs, (m.q_lora_rank, H, m.qk_head_dim), ("q_lora_up", "heads", "head_dim"), cfg)
        self.wkv_a = param(rngs, (D, m.kv_lora_rank + m.qk_rope_head_dim), ("embed", "kv_lora"), cfg)
        self.kv_norm = RMSNorm(m.kv_lora_rank, cfg)
        self.wkv_b = param(rngs, (m.kv_lora_rank, H, m.qk_nope_head_dim + m.v_head_dim),
                           ("kv_lora_up", "heads", "head_dim"), cfg)
        self.wo = param(rngs, (H, m.v_head_dim, D), ("heads", "head_dim", "embed"), cfg, fan_in=H * m.v_head_dim)

    def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        cfg, m, dt = self.cfg, self.cfg.mla, self.cfg.dtype
        heads = (BATCH, LENGTH, "activation_heads", None)
        inv_freq = rope_frequencies(m.qk_rope_head_dim, cfg.rope)

        q_latent = checkpoint_name(matmul("bsd,dr->bsr", x, self.wq_a, dt), "query_wa_proj")
        q_latent = checkpoint_name(self.q_norm(q_latent), "mla_q")
        q = constrain(matmul("bsr,rhk->bshk", q_latent, self.wq_b, dt), heads, self.rules)
        q_nope, q_rope = jnp.split(q, [m.qk_nope_head_dim], axis=-1)
        q = jnp.concatenate([q_nope, apply_rope(q_rope, positions, inv_freq)], axis=-1)
        q = checkpoint_name(q, "query_proj")

        kv_latent = checkpoint_name(matmul("bsd,dr->bsr", x, self.wkv_a, dt), "kv_wa_proj")
        kv_latent, k_rope = jnp.split(kv_latent, [m.kv_lora_rank], axis=-1)
        kv_latent = checkpoint_name(self.kv_norm(kv_latent), "mla_kv")
        k_rope = apply_rope(k_rope[:, :, None, :], positions, inv_freq)
        kv = constrain(matmul("bsr,rhk->bshk", kv_latent, self.wkv_b, dt), heads, self.rules)
        k_nope, v = jnp.split(kv, [m.qk_nope_head_dim], axis=-1)
        k = jnp.concatenate([k_nope, jnp.broadcast_to(k_rope, (*k_nope.shape[:3], m.qk_rope_head_dim))], axis=-1)
        k, v = checkpoint_name(k, "key_proj"), checkpoint_name(v, "value_proj")

        scale = m.qk_head_dim ** -0.5 * yarn_softmax_scale(cfg.rope) ** 2
        context = checkpoint_name(attend(q, k, v, scale, cfg), "attention_out")
        out = constrain(matmul("bshk,hkd->bsd", context, self.wo, dt), ACTIVATION, self.rules)
        return checkpoint_name(out, "out_proj")


# ----------------------------------------------------------------------------- MLPs


class Mlp(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, hidden: int, rngs: nnx.Rngs, rules: AxisRules):
        D = cfg.d_model
        self.cfg, self.rules = cfg, rules
        self.wi_0 = param(rngs, (D, hidden), ("embed", "mlp"), cfg)
        self.wi_1 = param(rngs, (D, hidden), ("embed", "mlp"), cfg)
        self.wo = param(rngs, (hidden, D), ("mlp", "embed"), cfg)

    def __call__(self, x: jax.Array) -> jax.Array:
        dt, hidden = self.cfg.dtype, (BATCH, LENGTH, "activation_mlp")
        gate = checkpoint_name(constrain(matmul("bsd,df->bsf", x, self.wi_0, dt), hidden, self.rules), "mlpwi_0")
        up = checkpoint_name(constrain(matmul("bsd,df->bsf", x, self.wi_1, dt), hidden, self.rules), "mlpwi_1")
        out = constrain(matmul("bsf,fd->bsd", jax.nn.silu(gate) * up, self.wo, dt), ACTIVATION, self.rules)
        return checkpoint_name(out, "mlpwo")


class RoutedExperts(nnx.Module):
    """Routed experts (MaxText's ``RoutedMoE``): a router choosing ``k`` of ``E`` experts per token
    (``Moe.score_function``: DeepSeek-V3's sigmoid scores with a load-balancing bias, or Mixtral's
    softmax over the top-k logits), the experts' SwiGLU run the way ``Moe.dispatch`` says
    (``models/moe.py``: a grouped GEMM, ``jax.lax.ragged_dot``, or MaxText's dense path), and
    optional always-on shared experts."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, rules: AxisRules):
        m, D = cfg.moe, cfg.d_model
        self.cfg, self.rules = cfg, rules
        self.router = nnx.Param((jax.random.normal(rngs.params(), (D, m.num_experts)) / math.sqrt(D)
                                 ).astype(jnp.float32), logical_axes=("embed", "router"))
        if m.score_function == "sigmoid":
            self.router_bias = RouterBias(jnp.zeros((m.num_experts,), jnp.float32), logical_axes=("router",))
        experts = (m.num_experts, D, m.expert_mlp_dim)
        self.wi_0 = param(rngs, experts, ("exp", "embed_moe", "mlp_moe"), cfg, fan_in=D)
        self.wi_1 = param(rngs, experts, ("exp", "embed_moe", "mlp_moe"), cfg, fan_in=D)
        self.wo = param(rngs, (m.num_experts, m.expert_mlp_dim, D), ("exp", "mlp_moe", "embed_moe"), cfg,
                        fan_in=m.expert_mlp_dim)
        self.shared = Mlp(cfg, m.shared_experts * m.expert_mlp_dim, rngs, rules) if m.shared_experts else None

    def route(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Expert choices [B, S, k] and their combine weights [B, S, k] (MaxText's ``get_topk``)."""
        m = self.cfg.moe
        logits = jnp.einsum("bsd,de->bse", x.astype(jnp.float32), self.router[...])
        if m.score_function == "softmax":  # top-k of the raw logits, softmax over the k chosen
            top, choice = jax.lax.top_k(logits, m.experts_per_token)
            return choice, jax.nn.softmax(top, axis=-1) * m.routed_scaling_factor
        scores = jax.nn.sigmoid(logits)  # chosen with the bias, weighted without it
        _, choice = jax.lax.top_k(scores + jax.lax.stop_gradient(self.router_bias[...]), m.experts_per_token)
        weights = jnp.take_along_axis(scores, choice, axis=-1)
        weights = weights / (jnp.sum(weights, axis=-1, keepdims=True) + 1e-20) * m.routed_scaling_factor
        return choice, weights

    def __call__(self, x: jax.Array) -> jax.Array:
        m, dt = self.cfg.moe, self.cfg.dtype
        choice, weights = self.route(x)
        w = (self.wi_0[...], self.wi_1[...], self.wo[...])
        if m.dispatch == "dense":
            routed = moe.dense_experts(x, choice, weights, *w, capacity_factor=m.capacity_factor, dtype=dt,
                                       rules=self.rules)
        else:
            routed = moe.sparse_experts(x, choice, weights, *w, num_experts=m.num_experts, kernel=m.dispatch,
                                        ragged_buffer_factor=m.ragged_buffer_factor, imbalance=m.imbalance,
                                        dtype=dt, rules=self.rules)
        routed = constrain(routed, ACTIVATION, self.rules)
        return routed + self.shared(x) if self.shared is not None else routed


# ----------------------------------------------------------------------------- layers and the stack


class DecoderLayer(nnx.Module):
    """Pre-norm block: x + attention(norm(x)), then + mlp(norm(x)) (dense or routed experts)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, rules: AxisRules, *, routed: bool):
        self.rules = rules
        self.attention_norm = RMSNorm(cfg.d_model, cfg)
        self.attention = (MlaAttention if cfg.mla else Attention)(cfg, rngs, rules)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg)
        self.mlp = RoutedExperts(cfg, rngs, rules) if routed else Mlp(cfg, cfg.mlp_dim, rngs, rules)

    def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        x = checkpoint_name(constrain(x, ACTIVATION, self.rules), "decoder_layer_input")
        x = x + self.attention(self.attention_norm(x), positions)
        return x + self.mlp(self.mlp_norm(x))


def stack_layers(make, count: int, rngs: nnx.Rngs) -> nnx.Module:
    """``count`` layers with stacked parameters (leading axis "layers"), for ``scan_layers``."""

    @nnx.split_rngs(splits=count)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def build(layer_rngs):
        return make(layer_rngs)

    layers = build(rngs)
    for _, variable in nnx.iter_graph(layers):
        if isinstance(variable, nnx.Variable):
            variable.set_metadata(logical_axes=("layers", *variable.get_metadata()["logical_axes"]))
    return layers


def build_layers(make, count: int, rngs: nnx.Rngs, scanned: bool) -> nnx.Module:
    """``count`` layers: stacked for ``lax.scan`` (``scanned``), or a list of separate layers, each with its own
    parameters (MaxText's ``scan_layers: false``)."""
    return stack_layers(make, count, rngs) if scanned else nnx.List([make(rngs) for _ in range(count)])


def apply_layers(layers: nnx.Module, x: jax.Array, positions: jax.Array, policy=None, params_on_host: bool = False,
                 prevent_cse: bool = False) -> jax.Array:
    """Run a stack of layers: ``scan_layers`` for a stacked one; for a list (``scan_layers: false``) each layer in
    turn, each its own ``jax.checkpoint`` with ``prevent_cse`` (MaxText's ``should_prevent_cse_in_remat``: on for
    unscanned layers, off under gradient accumulation on a GPU; ``models/__init__.prevent_cse``)."""
    if not isinstance(layers, nnx.List):
        return scan_layers(layers, x, positions, policy, params_on_host, prevent_cse)
    for layer in layers:
        graphdef, state = nnx.split(layer)

        def body(state, carry, graphdef=graphdef):
            return nnx.merge(graphdef, on_device(state, params_on_host))(carry, positions)

        if policy is not None:
            body = jax.checkpoint(body, policy=policy, prevent_cse=prevent_cse)
        x = body(state, x)
    return x


def on_device(tree, params_on_host: bool):
    """Bring parameters kept in pinned host memory to the device (MaxText's
    ``parameter_memory_host_offload``); a no-op when they live on the device."""
    return jax.tree.map(lambda x: jax.device_put(x, jax.memory.Space.Device), tree) if params_on_host else tree


def scan_layers(layers: nnx.Module, x: jax.Array, positions: jax.Array, policy=None,
                params_on_host: bool = False, prevent_cse: bool = False) -> jax.Array:
    """Run stacked layers with ``lax.scan``; with a policy, each layer is a ``jax.checkpoint``.

    ``policy=None`` means no remat at all (autodiff keeps every residual it needs).
    ``params_on_host``: each layer's weights come from pinned host memory when the layer runs.
    ``prevent_cse``: ``jax.checkpoint``'s optimization barriers; off, as in MaxText, because inside
    a scan the recompute and the forward pass are in different loops (notebook 02 compiles both).
    """
    graphdef, state = nnx.split(layers)

    def body(carry, layer_state):
        return nnx.merge(graphdef, on_device(layer_state, params_on_host))(carry, positions), None

    if policy is not None:
        body = jax.checkpoint(body, policy=policy, prevent_cse=prevent_cse)
    x, _ = jax.lax.scan(body, x, state)
    return x


# ----------------------------------------------------------------------------- embedding and head


class Embedding(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, rules: AxisRules):
        self.cfg, self.rules = cfg, rules
        self.table = param(rngs, (cfg.vocab_size, cfg.d_model), ("vocab", "embed"), cfg, fan_in=1)

    def __call__(self, tokens: jax.Array, params_on_host: bool = False) -> jax.Array:
        x = jnp.take(on_device(self.table[...], params_on_host), tokens, axis=0).astype(self.cfg.dtype)
        return constrain(x, ACTIVATION, self.rules)


class LmHead(nnx.Module):
    """Final RMSNorm and the (untied) projection to the vocabulary; logits in float32."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, rules: AxisRules):
        self.cfg, self.rules = cfg, rules
        self.norm = RMSNorm(cfg.d_model, cfg)
        self.kernel = param(rngs, (cfg.d_model, cfg.vocab_size), ("embed", "vocab"), cfg)

    def __call__(self, x: jax.Array, params_on_host: bool = False) -> jax.Array:
        norm = self.norm
        if params_on_host:
            graphdef, state = nnx.split(self.norm)
            norm = nnx.merge(graphdef, on_device(state, True))
        kernel = on_device(self.kernel[...], params_on_host)
        logits = jnp.einsum("bsd,dv->bsv", norm(x), kernel.astype(self.cfg.dtype), preferred_element_type=jnp.float32)
        return constrain(logits, (BATCH, LENGTH, "activation_vocab"), self.rules)
