"""Causal flash attention: the memory behaviour of a fused attention kernel, in plain JAX.

MaxText GPU runs use cuDNN's fused flash attention (``attention: cudnn_flash_te``). The lab uses
the same cuDNN kernel wherever JAX emits it for the target (``kernel="cudnn"``, ``kernel_for``:
Llama's 128-dim heads, and MLA's 192/128 on Hopper and Blackwell with cuDNN 9.10; the cuDNN wheels
must be installed, as ``make`` does on Linux). The same choice lowers, for a TPU, to JAX's Pallas
TPU flash kernel (``pallas_attention``: ``jax.experimental.pallas.ops.tpu.flash_attention``'s
forward and backward kernels under a VJP of the lab's own, whose saved output and softmax
statistics carry the name ``context``, so that a policy can save or offload them: JAX's own
wrapper keeps them as unnamed residuals, and a policy naming ``context`` then spares nothing).
Everywhere else — CPU execution of the tiny models, float32 models, no cuDNN — this module's
``flash_attention`` stands in:

* forward: one scan over the (query block, key block) pairs at or below the diagonal (blocks
  above it are never computed, so never counted as FLOPs), an online softmax per query block;
  it keeps only the output and the log-sum-exp per row;
* backward (custom VJP): one scan over the same pairs, key-major, recomputing each pair's
  probabilities from the saved log-sum-exp: five block matmuls per pair against the forward's
  two (FlashAttention-2's recompute), dQ, dK and dV accumulated in fp32.

Working set: one ``[b, H, block, block]`` fp32 score block (and its gradient) at a time, the
output, the log-sum-exp ``[b, H, S]``, fp32 accumulators of the output (forward) and of dQ, dK,
dV (backward). One scan each way keeps the compiled program small.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ..ground import lowering

KERNELS = ("cudnn", "jax")


def block_size(seq: int, preferred: int) -> int:
    """The block: ``preferred`` when it divides ``seq`` (and is smaller), else the whole sequence."""
    return preferred if 0 < preferred < seq and seq % preferred == 0 else seq


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, block: int = 512) -> jax.Array:
    """Causal attention ``q [B,S,H,dq], k [B,S,Hkv,dq], v [B,S,Hkv,dv] -> [B,S,H,dv]`` (H a multiple of Hkv)."""
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"causal flash attention needs as many queries as keys, got {q.shape[1]} and {k.shape[1]}")
    return _flash(q, k, v, float(scale), block_size(q.shape[1], block))


def _blocks(x: jax.Array, blk: int) -> jax.Array:
    """[B, S, ...] -> [S/blk, B, blk, ...]: the block index leading."""
    B, S = x.shape[:2]
    return jnp.moveaxis(x.reshape(B, S // blk, blk, *x.shape[2:]), 1, 0)


def _unblock(x: jax.Array) -> jax.Array:
    """[nb, B, blk, ...] -> [B, nb * blk, ...]."""
    nb, B, blk = x.shape[:3]
    return jnp.moveaxis(x, 0, 1).reshape(B, nb * blk, *x.shape[3:])


def _pairs(nb: int, by_query: bool) -> tuple[jax.Array, jax.Array]:
    """(query block, key block) of every pair at or below the diagonal: the causal skip is static.
    Ordered query-major (the forward's online softmax) or key-major (the backward's dK, dV)."""
    pairs = [(i, j) for i in range(nb) for j in range(i + 1)]
    if not by_query:
        pairs.sort(key=lambda p: (p[1], p[0]))
    return jnp.array([p[0] for p in pairs], jnp.int32), jnp.array([p[1] for p in pairs], jnp.int32)


def _causal(i, j, blk: int) -> jax.Array:
    """[blk, blk] True where query row (block i) may see key column (block j)."""
    rows = i * blk + jnp.arange(blk)[:, None]
    return rows >= j * blk + jnp.arange(blk)[None, :]


def _scores(qi, kj, scale):
    """qi [B,blk,Hkv,G,dq], kj [B,blk,Hkv,dq] -> fp32 [B,Hkv,G,blk,blk]."""
    return jnp.einsum("bqhgd,bkhd->bhgqk", qi, kj, preferred_element_type=jnp.float32) * scale


def _index(x, i):
    return jax.lax.dynamic_index_in_dim(x, i, keepdims=False)


def _forward(q, k, v, scale, blk):
    """One scan over the block pairs at or below the diagonal, query-major, with every query
    block's running max, sum and output in the carry."""
    B, S, H, dq = q.shape
    Hkv, dv = k.shape[2], v.shape[3]
    G, nb = H // Hkv, S // blk
    qb = _blocks(q.reshape(B, S, Hkv, G, dq), blk)
    kb, vb = _blocks(k, blk), _blocks(v, blk)

    def step(carry, pair):
        m, l, acc = carry
        i, j = pair
        s = jnp.where(_causal(i, j, blk), _scores(_index(qb, i), _index(kb, j), scale), -jnp.inf)
        m_i, l_i, acc_i = _index(m, i), _index(l, i), _index(acc, i)
        m_new = jnp.maximum(m_i, s.max(-1))
        p = jnp.exp(s - m_new[..., None])
        correction = jnp.exp(m_i - m_new)
        l_i = l_i * correction + p.sum(-1)
        acc_i = acc_i * correction[..., None] + jnp.einsum("bhgqk,bkhd->bhgqd", p.astype(v.dtype), _index(vb, j),
                                                           preferred_element_type=jnp.float32)
        update = jax.lax.dynamic_update_index_in_dim
        return (update(m, m_new, i, 0), update(l, l_i, i, 0), update(acc, acc_i, i, 0)), None

    init = (jnp.full((nb, B, Hkv, G, blk), -jnp.inf, jnp.float32), jnp.zeros((nb, B, Hkv, G, blk), jnp.float32),
            jnp.zeros((nb, B, Hkv, G, blk, dv), jnp.float32))
    (m, l, acc), _ = jax.lax.scan(step, init, _pairs(nb, by_query=True))
    out = (acc / l[..., None]).astype(q.dtype)  # [nb, B, Hkv, G, blk, dv]
    out = jnp.moveaxis(out, 4, 2)  # [nb, B, blk, Hkv, G, dv]
    return _unblock(out).reshape(B, S, H, dv), m + jnp.log(l)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _flash(q, k, v, scale, blk):
    return _forward(q, k, v, scale, blk)[0]


def _flash_fwd(q, k, v, scale, blk):
    out, lse = _forward(q, k, v, scale, blk)
    return out, (q, k, v, out, lse)


def _flash_bwd(scale, blk, residuals, d_out):
    """One scan over the same pairs, key-major: each pair recomputes its probabilities from the
    saved log-sum-exp and adds to dQ, dK and dV (fp32 accumulators in the carry)."""
    q, k, v, out, lse = residuals
    B, S, H, dq = q.shape
    Hkv, dv = k.shape[2], v.shape[3]
    G, nb = H // Hkv, S // blk
    qb = _blocks(q.reshape(B, S, Hkv, G, dq), blk)
    kb, vb = _blocks(k, blk), _blocks(v, blk)
    dob = _blocks(d_out.reshape(B, S, Hkv, G, dv), blk)
    # D = rowsum(dO * O), the softmax backward's correction term, [nb, B, Hkv, G, blk]
    delta = jnp.einsum("bshgd,bshgd->bhgs", d_out.reshape(B, S, Hkv, G, dv).astype(jnp.float32),
                       out.reshape(B, S, Hkv, G, dv).astype(jnp.float32))
    delta = jnp.moveaxis(delta.reshape(B, Hkv, G, nb, blk), 3, 0)

    def step(carry, pair):
        dq_acc, dk_acc, dv_acc = carry
        i, j = pair
        qi, kj, vj, doi = _index(qb, i), _index(kb, j), _index(vb, j), _index(dob, i)
        s = jnp.where(_causal(i, j, blk), _scores(qi, kj, scale), -jnp.inf)
        p = jnp.exp(s - _index(lse, i)[..., None])  # [B, Hkv, G, blk, blk]
        dv_j = jnp.einsum("bhgqk,bqhgd->bkhd", p.astype(doi.dtype), doi, preferred_element_type=jnp.float32)
        dp = jnp.einsum("bqhgd,bkhd->bhgqk", doi, vj, preferred_element_type=jnp.float32)
        ds = (p * (dp - _index(delta, i)[..., None])).astype(qi.dtype)
        dq_i = jnp.einsum("bhgqk,bkhd->bqhgd", ds, kj, preferred_element_type=jnp.float32) * scale
        dk_j = jnp.einsum("bhgqk,bqhgd->bkhd", ds, qi, preferred_element_type=jnp.float32) * scale
        add = jax.lax.dynamic_update_index_in_dim
        return (add(dq_acc, _index(dq_acc, i) + dq_i, i, 0), add(dk_acc, _index(dk_acc, j) + dk_j, j, 0),
                add(dv_acc, _index(dv_acc, j) + dv_j, j, 0)), None

    init = (jnp.zeros((nb, B, blk, Hkv, G, dq), jnp.float32), jnp.zeros((nb, B, blk, Hkv, dq), jnp.float32),
            jnp.zeros((nb, B, blk, Hkv, dv), jnp.float32))
    (dq_acc, dk_acc, dv_acc), _ = jax.lax.scan(step, init, _pairs(nb, by_query=False))
    return (_unblock(dq_acc).reshape(B, S, H, dq).astype(q.dtype), _unblock(dk_acc).astype(k.dtype),
            _unblock(dv_acc).astype(v.dtype))


_flash.defvjp(_flash_fwd, _flash_bwd)


def flops(batch: int, heads: int, qk_dim: int, v_dim: int, pairs: float) -> tuple[float, float]:
    """(forward, backward) matmul FLOPs over ``pairs`` query-key pairs: QK^T and PV forward; the
    backward recomputes QK^T and adds dV = P^T dO, dP = dO V^T, dQ = dS K and dK = dS^T Q."""
    forward = 2 * batch * heads * pairs * (qk_dim + v_dim)
    backward = 2 * batch * heads * pairs * (3 * qk_dim + 2 * v_dim)
    return forward, backward


def causal_pairs(seq: int) -> int:
    """Query-key pairs of causal attention: each query sees itself and the keys before it."""
    return seq * (seq + 1) // 2


@functools.cache
def cudnn_available() -> bool:
    """cuDNN's library loads (the nvidia-cudnn-cu12 wheel JAX's CUDA plugin uses): JAX can then emit
    cuDNN's fused attention for GPU targets, also on a machine without a GPU."""
    try:
        from jax._src.cudnn.fused_attention_stablehlo import check_cudnn_version

        check_cudnn_version()
    except Exception:
        return False
    return True


def cudnn_attention(q, k, v, scale: float) -> jax.Array:
    """cuDNN's fused causal flash attention (XLA custom call ``__cudnn$fmhaSoftmax``), through the
    call ``jax.nn.dot_product_attention(implementation="cudnn")`` makes, which also takes MLA's
    query/key and value head dims that differ."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    return cudnn.dot_product_attention(q, k, v, scale=scale, mask_type=cudnn.MaskType.CAUSAL)


CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MLA_VERSION = 91000  # jax 0.10.2 (fused_attention_stablehlo.check_is_flash_attention): MLA needs cuDNN 9.10


def kernel_for(qk_dim: int, v_dim: int, dtype: str = "bfloat16", capability: tuple[int, int] | None = None) -> str:
    """``cudnn`` when JAX 0.10.2 emits cuDNN's kernel for these head dims and dtype on a GPU of
    compute ``capability``, else ``jax``.

    JAX's rules (``check_is_flash_attention``): fp16/bf16, a head dim that is a multiple of 8, at
    most 128 before Hopper and 256 from Hopper on; query/key and value dims that differ (MLA's
    192/128) from Hopper on with cuDNN 9.10. Without ``capability``, JAX's own check answers: the
    local GPU's, or, while ``compiler.compile`` lowers a step for a compile-only target, that
    target's (JAX would otherwise refuse the larger dims on a machine without a GPU).
    """
    if capability is None:
        from jax._src.cudnn import fused_attention_stablehlo as cudnn

        hopper = cudnn.check_compute_capability("9.0")
    else:
        hopper = tuple(capability) >= (9, 0)
    head_dims = qk_dim % 8 == 0 and max(qk_dim, v_dim) <= (256 if hopper else 128)
    mla = qk_dim != v_dim
    fits = head_dims and str(dtype) in CUDNN_DTYPES and (not mla or (hopper and _cudnn_version() >= CUDNN_MLA_VERSION))
    return "cudnn" if fits and cudnn_available() else "jax"


@functools.cache
def _cudnn_version() -> int:
    from jax._src.cudnn.fused_attention_stablehlo import check_cudnn_version

    return check_cudnn_version() if cudnn_available() else 0


def attention(q, k, v, scale: float, kernel: str, block: int, pallas: bool = True) -> jax.Array:
    """Causal flash attention with ``kernel`` on a GPU: ``cudnn`` (lowered as cuDNN's kernel for GPU
    targets) or ``jax``; with ``pallas``, the Pallas TPU kernel where the step is lowered for a TPU
    (``lowering.platform``) and the kernel takes the shapes. Elsewhere (e.g. a CPU run of the
    same model) ``flash_attention``."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; choose one of: {', '.join(KERNELS)}")
    fallback = functools.partial(flash_attention, scale=scale, block=block)
    fused = {"cuda": functools.partial(cudnn_attention, scale=scale)} if kernel == "cudnn" else {}
    if pallas and lowering.platform() == "tpu" and pallas_fits(q.shape, k.shape, v.shape):
        fused["tpu"] = functools.partial(pallas_attention, scale=scale, block=block)
    if not fused:
        return fallback(q, k, v)
    return jax.lax.platform_dependent(q, k, v, **fused, default=fallback)


# ----------------------------------------------------------------------------- TPU: Pallas

PALLAS_MIN_BLOCK = 128  # the Pallas TPU kernel's smallest block (MIN_BLOCK_SIZE in its module)


def pallas_fits(q_shape, k_shape, v_shape) -> bool:
    """The Pallas TPU kernel takes these shapes: one head dim for Q, K and V (no MLA), and a sequence
    of whole 128-row blocks."""
    seq, qk_dim, v_dim = q_shape[1], q_shape[-1], v_shape[-1]
    return qk_dim == v_dim and seq == k_shape[1] and seq % PALLAS_MIN_BLOCK == 0


def _pallas_blocks(seq: int, block: int):
    """The kernel's tiles: ``block`` rows of queries and keys (the lab's flash block, 512 by default;
    the sequence when shorter), one sequence at a time, the same tiles in both backward kernels."""
    from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash

    b = min(block_size(seq, block), seq)
    b = b if b % PALLAS_MIN_BLOCK == 0 else PALLAS_MIN_BLOCK
    return tpu_flash.BlockSizes(block_q=b, block_k_major=b, block_k=b, block_b=1, block_q_major_dkv=b,
                                block_k_major_dkv=b, block_k_dkv=b, block_q_dkv=b, block_k_major_dq=b,
                                block_k_dq=b, block_q_dq=b)


def pallas_attention(q, k, v, scale: float, block: int = 512) -> jax.Array:
    """Causal attention ``q [B,S,H,d], k/v [B,S,Hkv,d] -> [B,S,H,d]`` with JAX's Pallas TPU flash kernels.

    The kernels take ``[B, H, S, d]`` with as many K/V heads as query heads: K and V are transposed and
    their heads repeated for grouped-query attention (their gradients summed back by autodiff)."""
    groups = q.shape[2] // k.shape[2]
    heads_first = functools.partial(jnp.swapaxes, axis1=1, axis2=2)
    qh, kh, vh = heads_first(q), heads_first(jnp.repeat(k, groups, axis=2)), heads_first(jnp.repeat(v, groups, axis=2))
    return heads_first(_pallas(qh, kh, vh, float(scale), _pallas_blocks(q.shape[1], block)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _pallas(q, k, v, scale, blocks):
    return _pallas_fwd(q, k, v, scale, blocks)[0]


def _pallas_fwd(q, k, v, scale, blocks):
    """The forward kernel with its softmax statistics (row max ``m`` and sum ``l``), all three named
    ``context``: under a policy that saves or offloads ``context`` (with Q, K and V) the backward
    kernels read them instead of running the forward kernel again."""
    from jax.ad_checkpoint import checkpoint_name
    from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash

    with jax.named_scope(f"flash_mha_fwd_block_k_major={blocks.block_k_major}"):  # how hlo finds and counts it
        out, l, m = tpu_flash._flash_attention_impl(q, k, v, None, None, True, True, scale, blocks.block_b,
                                                    blocks.block_q, blocks.block_k_major, blocks.block_k, False)
    out, l, m = checkpoint_name((out, l, m), "context")
    return out, (q, k, v, out, l, m)


def _pallas_bwd(scale, blocks, residuals, d_out):
    """JAX's two backward kernels (dK and dV, then dQ) on the saved statistics, as its own VJP runs them."""
    from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash

    q, k, v, out, l, m = residuals
    di = jnp.sum(out.astype(jnp.float32) * d_out.astype(jnp.float32), axis=-1)
    common = dict(sm_scale=scale, causal=True, mask_value=tpu_flash.DEFAULT_MASK_VALUE, debug=False)
    dk, dv = tpu_flash._flash_attention_bwd_dkv(
        q, k, v, None, None, l, m, d_out, di, block_q_major=blocks.block_q_major_dkv, block_k_major=blocks.block_k_major_dkv,
        block_k=blocks.block_k_dkv, block_q=blocks.block_q_dkv, **common)
    dq, _ = tpu_flash._flash_attention_bwd_dq(
        q, k, v, None, None, l, m, d_out, di, block_q_major=blocks.block_q_dq, block_k_major=blocks.block_k_major_dq,
        block_k=blocks.block_k_dq, **common)
    return dq, dk, dv


_pallas.defvjp(_pallas_fwd, _pallas_bwd)


def pairs_in_blocks(seq: int, block: int) -> int:
    """Query-key pairs the block-causal loops compute: whole blocks at or below the diagonal."""
    blk = block_size(seq, block)
    nb = seq // blk
    return blk * blk * nb * (nb + 1) // 2

