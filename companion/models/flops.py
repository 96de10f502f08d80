"""Model FLOPs: the numerator of TFLOP/s and MFU, the same for every policy of a model at a batch.

``model_flops(cfg, per_device_batch, seq)`` is MaxText's ``calculate_tflops_training_per_device``
(``src/maxtext/utils/maxtext_utils.py`` lines 1149-1392 and its helpers at lines 648-771,
AI-Hypercomputer/maxtext e591f30, 2026-08-22), re-implemented for the lab's model families, in
FLOPs per device per optimizer step:

* weights: ``3 x (FFN + (QKV + out projection) x L + unembedding)`` — forward and backward; the
  FFN is SwiGLU, ``6 T D F`` per layer (``T = per_device_batch x S``); a MoE layer counts the
  router (``2 T D E``) and ``k`` routed experts (+ shared experts) — dropless, whatever the
  capacity or the kernel; DeepSeek's first layers are dense; the embedding lookup counts 0.
* attention: ``3 x L x`` the causal half of ``4 T S H d_h`` (MLA: ``2 T S H (d_qk + d_v) / 2``).
* no recompute, no padding, no dispatch einsums, no device division: "per device" comes from the
  per-device batch (MaxText's ``per_device_batch_size``, fractional allowed); gradient
  accumulation multiplies both terms, which the lab's whole-step batch already contains.

What the compiled program executes — recompute, padding, dispatch einsums, ``ragged_dot``'s
dense expansion — is ``hardware_flops`` (``hlo.flop_summary``), never this.
"""

from __future__ import annotations

import dataclasses

from .configs import ModelConfig


@dataclasses.dataclass(frozen=True)
class ModelFlops:
    """MaxText's count for one device and one optimizer step, in FLOPs."""

    weights: float  # learnable-weight matmuls, forward + backward
    attention: float  # causal attention, forward + backward

    @property
    def total(self) -> float:
        return self.weights + self.attention

    def to_dict(self) -> dict:
        return {"weights": self.weights, "attention": self.attention, "total": self.total}


def _ffn(T: float, D: int, F: int) -> float:
    """``calculate_ffn_mamtul_tflops_per_device``: SwiGLU's two input matmuls and its output one."""
    return 2 * T * F * D * 2 + 2 * T * F * D


def _attention(cfg: ModelConfig, T: float, S: int) -> tuple[float, float, float]:
    """(QKV projections, causal attention, out projection) FLOPs of one layer, forward."""
    D, H = cfg.d_model, cfg.num_heads
    if cfg.mla is None:
        qkv = 2 * T * D * (H + 2 * cfg.num_kv_heads) * cfg.head_dim
        return qkv, 4 * T * S * H * cfg.head_dim / 2, 2 * T * D * H * cfg.head_dim
    m = cfg.mla  # calculate_mla_tflops_per_device, q_lora_rank > 0
    q = 2 * T * (D * m.q_lora_rank + m.q_lora_rank * H * m.qk_head_dim)
    kv = 2 * T * (D * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim))
    attention = 2 * T * S * H * (m.qk_head_dim + m.v_head_dim) / 2
    return q + kv, attention, 2 * T * D * H * m.v_head_dim


def _ffn_all_layers(cfg: ModelConfig, T: float) -> float:
    D = cfg.d_model
    if cfg.moe is None:
        return _ffn(T, D, cfg.mlp_dim) * cfg.num_layers
    m = cfg.moe
    router = 2 * T * D * m.num_experts
    experts = _ffn(T, D, m.expert_mlp_dim) * (m.experts_per_token + m.shared_experts)
    return _ffn(T, D, cfg.mlp_dim) * cfg.num_dense_layers + (router + experts) * cfg.num_moe_layers


def model_flops(cfg: ModelConfig, per_device_batch: float, seq: int) -> ModelFlops:
    """MaxText's training FLOPs per device per step for ``per_device_batch`` sequences of ``seq``."""
    T = per_device_batch * seq
    qkv, attention, projection = _attention(cfg, T, seq)
    L = cfg.num_layers
    unembedding = 2 * T * cfg.d_model * cfg.vocab_size
    return ModelFlops(3 * (_ffn_all_layers(cfg, T) + (qkv + projection) * L + unembedding), 3 * attention * L)


def layer_stack_flops(cfg: ModelConfig, per_device_batch: float, seq: int) -> ModelFlops:
    """The same count for the decoder layers alone (``train.compile_layer_stack``: no unembedding)."""
    full = model_flops(cfg, per_device_batch, seq)
    return ModelFlops(full.weights - 3 * 2 * per_device_batch * seq * cfg.d_model * cfg.vocab_size, full.attention)
