"""Model configurations: typed, validated, with the published shapes.

``ModelConfig`` holds a decoder-only transformer; ``mla`` and ``moe`` switch on DeepSeek's
multi-head latent attention and routed experts. Dtypes follow MaxText's knobs:
``weight_dtype`` for the stored (master) parameters, ``dtype`` for activations and matmuls.
"""

from __future__ import annotations

import dataclasses
import difflib

import jax.numpy as jnp

DTYPES = ("float32", "bfloat16", "float16")
# flash: cuDNN's fused flash attention where JAX can emit it, the lab's blockwise flash kernel
# elsewhere (models/flash.py), as MaxText GPU runs use (attention: cudnn_flash_te); dot_product
# and chunked stay as teaching options (the [b, H, S, S] scores, or one query chunk of them).
ATTENTION_IMPLS = ("flash", "dot_product", "chunked")
FLASH_KERNELS = ("fused", "jax")
# how routed experts run (models/moe.py): grouped (a grouped GEMM, the lab's default), ragged_dot (MaxText's
# sparse path as jaxlib 0.10.2 compiles it), dense (MaxText's sparse_matmul: false)
MOE_DISPATCHES = ("grouped", "ragged_dot", "dense")
MOE_SCORE_FUNCTIONS = ("sigmoid", "softmax")


@dataclasses.dataclass(frozen=True)
class Mla:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and a compressed KV latent."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclasses.dataclass(frozen=True)
class Moe:
    """Routed experts: top-k routing, optional shared experts, and how the expert matmuls run.

    Routing (``score_function``, as MaxText's ``moe.py``): ``sigmoid`` (DeepSeek-V3: sigmoid scores,
    top-k chosen with a load-balancing bias, the chosen scores renormalised and scaled by
    ``routed_scaling_factor``) or ``softmax`` (Mixtral: top-k of the raw logits, softmax over the k).
    ``dispatch`` (``models/moe.py``): ``grouped`` (the default: MaxText's sparse path as a grouped
    GEMM), ``ragged_dot`` (the sparse path as jaxlib 0.10.2 compiles ``jax.lax.ragged_dot``) or
    ``dense`` (MaxText's ``sparse_matmul: false``). ``ragged_buffer_factor`` (sparse paths) sizes the
    receive buffer under expert parallelism as MaxText does: -1 for the worst case (never drops),
    else that many times the balanced size. ``capacity_factor`` (dense path): > 0 gives each expert
    that many times its balanced share of a sequence's assignments and drops the rest; <= 0 (MaxText's
    default, -1) runs every expert on every token. ``imbalance``: the routing assumption the step is
    priced under: the most-loaded expert-parallel device receives that many times the balanced rows.
    """

    num_experts: int
    experts_per_token: int
    expert_mlp_dim: int
    shared_experts: int = 1
    first_dense_layers: int = 0
    routed_scaling_factor: float = 1.0
    score_function: str = "sigmoid"
    dispatch: str = "grouped"
    capacity_factor: float = -1.0
    ragged_buffer_factor: float = -1.0
    imbalance: float = 1.0


@dataclasses.dataclass(frozen=True)
class Rope:
    theta: float = 10_000.0
    # Llama 3.1 frequency scaling (factor 8 from an 8192 context); 0 = off
    llama3_factor: float = 0.0
    llama3_low_freq_factor: float = 1.0
    llama3_high_freq_factor: float = 4.0
    llama3_original_context: int = 8192
    # DeepSeek YaRN (factor 40 from a 4096 context); 0 = off
    yarn_factor: float = 0.0
    yarn_original_context: int = 4096
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_mscale: float = 1.0


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    d_model: int  # D
    num_layers: int  # L
    num_heads: int  # H
    num_kv_heads: int  # H_kv (= H without grouping; MLA uses H)
    head_dim: int  # d_h
    mlp_dim: int  # F (dense layers)
    rope: Rope = Rope()
    norm_eps: float = 1e-5
    mla: Mla | None = None
    moe: Moe | None = None
    weight_dtype: str = "float32"
    dtype: str = "bfloat16"
    attention: str = "flash"
    # MaxText's scan_layers: the decoder layers as one scanned stack (True), or unrolled, each layer its own
    # parameters and its own remat (False: MaxText's prevent_cse rule, models.layers.apply_layers)
    scan_layers: bool = True
    attention_chunk: int = 1024  # query block of the "chunked" attention
    flash_block: int = 512  # query/key block of the lab's flash kernel and of the Pallas TPU kernel (cuDNN picks its own)
    # "fused": the platform's fused flash kernel where it takes the shapes (cuDNN on a GPU, Pallas on a TPU), else the
    # lab's blockwise kernel; "jax": the lab's blockwise kernel everywhere (what the first measured TPU grid ran)
    flash_kernel: str = "fused"

    def __post_init__(self):
        positive = ["vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads", "head_dim", "mlp_dim"]
        for field in positive:
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {field} must be a positive integer, got {value!r}")
        for field in ("weight_dtype", "dtype"):
            if getattr(self, field) not in DTYPES:
                raise ValueError(f"{self.name}: {field} {getattr(self, field)!r} is not one of {', '.join(DTYPES)}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"{self.name}: attention {self.attention!r} is not one of {', '.join(ATTENTION_IMPLS)}")
        if self.flash_kernel not in FLASH_KERNELS:
            raise ValueError(f"{self.name}: flash_kernel {self.flash_kernel!r} is not one of {', '.join(FLASH_KERNELS)}")
        if not isinstance(self.scan_layers, bool):
            raise ValueError(f"{self.name}: scan_layers must be true or false, got {self.scan_layers!r}")
        for field in ("attention_chunk", "flash_block"):
            if getattr(self, field) < 1:
                raise ValueError(f"{self.name}: {field} must be positive, got {getattr(self, field)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.name}: num_kv_heads {self.num_kv_heads} does not divide num_heads {self.num_heads}")
        if self.mla is None and self.d_model % self.num_heads:
            raise ValueError(f"{self.name}: num_heads {self.num_heads} does not divide d_model {self.d_model}")
        if self.mla is not None:
            for field, value in dataclasses.asdict(self.mla).items():
                if not isinstance(value, int) or value < 1:
                    raise ValueError(f"{self.name}: mla.{field} must be a positive integer, got {value!r}")
            if self.mla.qk_rope_head_dim % 2:
                raise ValueError(f"{self.name}: mla.qk_rope_head_dim must be even for RoPE")
        elif self.head_dim % 2:
            raise ValueError(f"{self.name}: head_dim must be even for RoPE, got {self.head_dim}")
        if self.moe is not None:
            m = self.moe
            for field in ("num_experts", "experts_per_token", "expert_mlp_dim"):
                if getattr(m, field) < 1:
                    raise ValueError(f"{self.name}: moe.{field} must be positive, got {getattr(m, field)}")
            if m.experts_per_token > m.num_experts:
                raise ValueError(f"{self.name}: moe.experts_per_token {m.experts_per_token} exceeds "
                                 f"moe.num_experts {m.num_experts}")
            if not 0 <= m.first_dense_layers <= self.num_layers:
                raise ValueError(f"{self.name}: moe.first_dense_layers {m.first_dense_layers} is outside "
                                 f"0..{self.num_layers}")
            if m.dispatch not in MOE_DISPATCHES:
                raise ValueError(f"{self.name}: moe.dispatch {m.dispatch!r} is not one of {', '.join(MOE_DISPATCHES)}")
            if m.score_function not in MOE_SCORE_FUNCTIONS:
                raise ValueError(f"{self.name}: moe.score_function {m.score_function!r} is not one of "
                                 f"{', '.join(MOE_SCORE_FUNCTIONS)}")
            if m.shared_experts < 0:
                raise ValueError(f"{self.name}: moe.shared_experts must be >= 0, got {m.shared_experts}")
            if not (m.ragged_buffer_factor == -1 or m.ragged_buffer_factor > 0):
                raise ValueError(f"{self.name}: ragged_buffer_factor {m.ragged_buffer_factor} must be -1 (MaxText's "
                                 "worst-case buffer) or > 0 (that many times the balanced rows)")
            if not (m.capacity_factor == -1 or m.capacity_factor > 0):
                raise ValueError(f"{self.name}: capacity_factor {m.capacity_factor} must be -1 (every expert on every "
                                 "token) or > 0 (that many times each expert's balanced share)")
            worst = m.num_experts / m.experts_per_token
            if not 1 <= m.imbalance <= worst:
                raise ValueError(f"{self.name}: moe imbalance {m.imbalance} must be in [1, {worst:g}] (1: balanced "
                                 f"routing; {worst:g} = E/k: every row of an expert group on one device)")

    # ------------------------------------------------------------------ derived shapes

    @property
    def num_dense_layers(self) -> int:
        return self.moe.first_dense_layers if self.moe else self.num_layers

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers

    def stacks(self) -> tuple[tuple[str, int, bool], ...]:
        """The scanned layer stacks as the models build them: (attribute, layers, routed). Llama-style
        models (Llama, Mixtral) scan one stack of ``layers``, dense or all routed; DeepSeek scans its
        first dense layers, then its MoE layers."""
        if self.mla is None:
            if self.moe is not None and self.moe.first_dense_layers:
                raise ValueError(f"{self.name}: first dense layers need the DeepSeek model (MLA)")
            return (("layers", self.num_layers, self.moe is not None),)
        return tuple(s for s in (("dense_layers", self.num_dense_layers, False),
                                 ("moe_layers", self.num_moe_layers, True)) if s[1])

    @property
    def weight_bytes(self) -> int:
        return jnp.dtype(self.weight_dtype).itemsize

    @property
    def act_bytes(self) -> int:
        return jnp.dtype(self.dtype).itemsize

    def attention_params(self) -> int:
        D, H = self.d_model, self.num_heads
        if self.mla is None:
            return D * (H + 2 * self.num_kv_heads) * self.head_dim + H * self.head_dim * D
        m = self.mla
        return (D * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * H * m.qk_head_dim
                + D * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
                + m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim) + H * m.v_head_dim * D)

    def dense_mlp_params(self) -> int:
        return 3 * self.d_model * self.mlp_dim

    def expert_params(self) -> int:
        return 3 * self.d_model * self.moe.expert_mlp_dim

    def moe_params(self, active: bool = False) -> int:
        m = self.moe
        routed = m.experts_per_token if active else m.num_experts
        bias = m.num_experts if m.score_function == "sigmoid" else 0  # DeepSeek's balancing bias
        return (routed + m.shared_experts) * self.expert_params() + self.d_model * m.num_experts + bias

    def param_count(self, active: bool = False) -> int:
        """Parameters (``active``: those one token uses: top-k routed experts only)."""
        norms = 2 * self.d_model
        dense_layer = self.attention_params() + self.dense_mlp_params() + norms
        total = self.num_dense_layers * dense_layer
        if self.moe is not None:
            total += self.num_moe_layers * (self.attention_params() + self.moe_params(active) + norms)
        return total + 2 * self.vocab_size * self.d_model + self.d_model  # embed, head, final norm

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def with_moe(self, **changes) -> "ModelConfig":
        """The config with MoE fields changed (``cfg.with_moe(dispatch="capacity")``)."""
        if self.moe is None:
            raise ValueError(f"{self.name} has no routed experts")
        return dataclasses.replace(self, moe=dataclasses.replace(self.moe, **changes))


# ----------------------------------------------------------------------------- the catalog

_LLAMA31_ROPE = Rope(theta=500_000.0, llama3_factor=8.0)
_DEEPSEEK_ROPE = Rope(theta=10_000.0, yarn_factor=40.0)

CONFIGS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        ModelConfig("tiny-llama", vocab_size=256, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                    head_dim=16, mlp_dim=128, rope=Rope(theta=10_000.0), flash_block=16),
        ModelConfig("tiny-deepseek", vocab_size=256, d_model=64, num_layers=3, num_heads=4, num_kv_heads=4,
                    head_dim=16, mlp_dim=128, norm_eps=1e-6, rope=Rope(theta=10_000.0),
                    mla=Mla(q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16),
                    moe=Moe(num_experts=8, experts_per_token=2, expert_mlp_dim=32, shared_experts=1,
                            first_dense_layers=1, routed_scaling_factor=2.5),
                    flash_block=16),
        # MaxText's model configs (src/maxtext/configs/models/<name>.yml at AI-Hypercomputer/maxtext e591f30):
        # base_emb_dim, base_num_decoder_layers, base_num_query_heads, base_num_kv_heads, head_dim, base_mlp_dim,
        # vocab_size, rope_max_timescale (10000 where the file leaves it to base.yml); Mixtral's num_experts,
        # num_experts_per_tok and base_moe_mlp_dim, its routing MaxText's default for the mixtral block
        # (moe.py get_topk: top-k of the raw logits, softmax over the k), no shared experts
        ModelConfig("llama2-7b", vocab_size=32000, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=32,
                    head_dim=128, mlp_dim=11008, rope=Rope(theta=10_000.0)),
        ModelConfig("llama2-70b", vocab_size=32000, d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8,
                    head_dim=128, mlp_dim=28672, rope=Rope(theta=10_000.0)),
        ModelConfig("llama3-8b", vocab_size=128256, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8,
                    head_dim=128, mlp_dim=14336, rope=Rope(theta=500_000.0)),
        ModelConfig("llama3-70b", vocab_size=128256, d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8,
                    head_dim=128, mlp_dim=28672, rope=Rope(theta=500_000.0)),
        ModelConfig("mixtral-8x7b", vocab_size=32000, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8,
                    head_dim=128, mlp_dim=14336, rope=Rope(theta=1_000_000.0),
                    moe=Moe(num_experts=8, experts_per_token=2, expert_mlp_dim=14336, shared_experts=0,
                            score_function="softmax")),
        ModelConfig("mixtral-8x22b", vocab_size=32768, d_model=6144, num_layers=56, num_heads=48, num_kv_heads=8,
                    head_dim=128, mlp_dim=16384, rope=Rope(theta=1_000_000.0),
                    moe=Moe(num_experts=8, experts_per_token=2, expert_mlp_dim=16384, shared_experts=0,
                            score_function="softmax")),
        ModelConfig("tiny-mixtral", vocab_size=256, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                    head_dim=16, mlp_dim=32, rope=Rope(theta=10_000.0), flash_block=16,
                    moe=Moe(num_experts=4, experts_per_token=2, expert_mlp_dim=32, shared_experts=0,
                            score_function="softmax")),
        ModelConfig("llama3.1-8b", vocab_size=128256, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8,
                    head_dim=128, mlp_dim=14336, rope=_LLAMA31_ROPE),
        ModelConfig("llama3.1-70b", vocab_size=128256, d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8,
                    head_dim=128, mlp_dim=28672, rope=_LLAMA31_ROPE),
        ModelConfig("llama3.1-405b", vocab_size=128256, d_model=16384, num_layers=126, num_heads=128,
                    num_kv_heads=8, head_dim=128, mlp_dim=53248, rope=_LLAMA31_ROPE),
        ModelConfig("deepseek-v3-671b", vocab_size=129280, d_model=7168, num_layers=61, num_heads=128,
                    num_kv_heads=128, head_dim=128, mlp_dim=18432, norm_eps=1e-6, rope=_DEEPSEEK_ROPE,
                    mla=Mla(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                            v_head_dim=128),
                    moe=Moe(num_experts=256, experts_per_token=8, expert_mlp_dim=2048, shared_experts=1,
                            first_dense_layers=3, routed_scaling_factor=2.5)),
    )
}

PUBLISHED_PARAMS = {"llama2-7b": 6.74e9, "llama2-70b": 68.98e9, "llama3-8b": 8.03e9, "llama3-70b": 70.55e9,
                    "mixtral-8x7b": 46.7e9, "mixtral-8x22b": 140.6e9, "llama3.1-8b": 8.03e9, "llama3.1-70b": 70.6e9,
                    "llama3.1-405b": 405.9e9, "deepseek-v3-671b": 671e9}
# active per token: Mistral AI's model cards (12.9B of 46.7B, 39B of 141B), DeepSeek-V3's paper (37B)
PUBLISHED_ACTIVE_PARAMS = {"mixtral-8x7b": 12.9e9, "mixtral-8x22b": 39.1e9, "deepseek-v3-671b": 37e9}


def config(name: str | ModelConfig, **overrides) -> ModelConfig:
    """A catalog config by name, with optional field overrides (``config("llama3.1-8b", num_layers=4)``)."""
    if isinstance(name, ModelConfig):
        base = name
    elif name not in CONFIGS:
        close = difflib.get_close_matches(name, list(CONFIGS), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown model {name!r}{hint}; choose one of: {', '.join(CONFIGS)}")
    else:
        base = CONFIGS[name]
    return base.replace(**overrides) if overrides else base
