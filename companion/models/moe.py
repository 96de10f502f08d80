"""Routed experts on a GPU, the three ways MaxText can run them (``Moe.dispatch``).

* ``grouped`` (the lab's default): MaxText's sparse path (``sparse_matmul: true``) with the
  expert matmuls run as a **grouped GEMM**, one kernel per projection and pass, as a tuned GPU
  deployment runs them (cuDNN's ragged-dot fusion, a CUTLASS or Transformer Engine grouped GEMM).
  jaxlib 0.10.2 cannot compile such a kernel without a GPU, so the lab compiles an opaque
  stand-in and prices it as that kernel (``models/grouped_gemm.py``).
* ``ragged_dot``: the same sparse path with ``jax.lax.ragged_dot``, which is what MaxText's code
  calls on GPU (``sparse_matmul: true, megablox: false``; Megablox is a TPU kernel). jaxlib
  0.10.2's XLA expands it densely (``RaggedDotRewriter``): every row times every local expert,
  E_local x the routed FLOPs, with ``[rows, E_local, K]`` temporaries. A lesson, not a bug to hide:
  it is what a pip-installed jaxlib runs.
* ``dense``: MaxText's ``sparse_matmul: false`` (in ``dense_experts``): with ``capacity_factor``
  > 0 each expert takes ``C = capacity_factor x S x k / E`` tokens per sequence, assignments
  beyond it are dropped, and the one-hot dispatch and combine einsums move tokens in and out of
  the ``[E, G, C, D]`` buffers; with ``capacity_factor`` <= 0 every expert runs on every token.

The sparse paths, per device (inside ``shard_map``): sort this device's ``rows = tokens x k``
(token, choice) pairs by expert; with expert parallelism (the ``expert`` mesh axis, EP ways)
send each row to the device holding its expert with ``jax.lax.ragged_all_to_all`` into a
**receive buffer shared by the device's local experts** (MaxText's ``get_ragged_buffer_size``:
``rows x min(EP, E/k)``, the worst case, unless ``ragged_buffer_factor`` > 0 makes it
``rows x factor``), sort the arrivals by local expert, run the gate, up and down matmuls over the
flat buffer with the rows per expert (``group_sizes``), and send the results back. Expert
weights are gathered over ``fsdp`` and their hidden width split over ``tensor``.

**Routing assumption and drops.** Balanced routing sends every device ``rows`` rows (each of its
local experts ``rows / E_local``). The priced work (``expected_rows``) is that times
``Moe.imbalance`` on the most-loaded device under expert parallelism (an expert-parallel step
waits for it), at most the buffer; without expert parallelism a device computes its own ``rows``
whatever the routing. Rows are dropped only where the receive buffer overflows: a device that
receives more than its buffer keeps the first senders' rows in sender order (each sender's rows
in expert order) and drops the rest, whose outputs are zero — ``dropped_rows`` states the rule,
``expected_drops`` its count under the routing assumption. The worst-case buffer never drops;
at EP = 1 nothing is ever dropped. The dense path drops per expert and sequence beyond ``C``
(``dense_dropped_rows``).

**Against MaxText.** The grouped path keeps MaxText's flat receive buffer (the grouped GEMM takes
the rows per expert, ``group_sizes``, not a per-expert ``[E_local, C, D]`` buffer), so its memory
at a ``ragged_buffer_factor`` is MaxText's, and its drop rule is MaxText's ``_truncate_matrix``: no
row is dropped that MaxText keeps. MaxText leaves a dropped row's output uninitialised
(``jax.lax.empty``); the lab zeroes it. Defaults are MaxText's: ``ragged_buffer_factor`` -1 (the
worst case), ``capacity_factor`` -1.

Checkpoint names as on MaxText's sparse path: the gate output ``mlpwi_0`` + ``moe_mlpwi_0``, the
up output ``moe_mlpwi_1`` only, the down output ``mlpwo`` + ``moe_mlpwo``; the dense path also
names the up output ``mlpwi_1``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec

from ..xla.hlo import ROUTED_EXPERTS_SCOPE
from ..ground.sharding import AxisRules, constrain, current_mesh_shape
from .grouped_gemm import grouped_matmul

SPARSE = ("grouped", "ragged_dot")
ACTIVATION = ("activation_batch", "activation_length", "activation_embed")
A2A_SCOPE = "moe_all_to_all"  # the ragged all-to-alls' named scope, "moe_all_to_all[rows=N]": the expected rows


# ----------------------------------------------------------------------------- sizes and the drop rule


@dataclasses.dataclass(frozen=True)
class RaggedSizes:
    """Static sizes of one device's sparse MoE, and the routing assumption's rows."""

    rows: int  # this device's (token, choice) pairs: local tokens x k; also what it receives, balanced
    buffer_rows: int  # the receive buffer shared by the local experts (= rows without expert parallelism)
    local_experts: int
    expert_ways: int
    imbalance: float = 1.0

    @property
    def expected_rows(self) -> int:
        """Rows the most-loaded device computes under the routing assumption (at most its buffer)."""
        if self.expert_ways == 1:
            return self.rows
        return min(self.buffer_rows, math.ceil(self.rows * self.imbalance))

    @property
    def expected_drops(self) -> int:
        """Rows the most-loaded device drops under the routing assumption."""
        if self.expert_ways == 1:
            return 0
        return max(0, math.ceil(self.rows * self.imbalance) - self.buffer_rows)


def ragged_sizes(local_tokens: int, top_k: int, num_experts: int, expert_ways: int,
                 ragged_buffer_factor: float = -1.0, imbalance: float = 1.0) -> RaggedSizes:
    """Sizes per device; the receive buffer as MaxText's ``get_ragged_buffer_size``."""
    rows = local_tokens * top_k
    if expert_ways == 1:
        buffer_rows = rows
    elif ragged_buffer_factor > 0:
        buffer_rows = int(rows * ragged_buffer_factor)
    else:  # the worst case: every row of the expert group lands on one device
        buffer_rows = int(rows * min(expert_ways, num_experts / top_k))
    return RaggedSizes(rows, buffer_rows, num_experts // expert_ways, expert_ways, imbalance)


def accepted_rows(sent: np.ndarray | jax.Array, buffer_rows: int):
    """The drop rule: ``sent[s, r]`` rows from sender ``s`` to receiver ``r`` land in ``r``'s buffer
    in sender order; a sender keeps the rows that fit, the rest are dropped. Works on NumPy
    (counts from a CPU run) and on traced arrays."""
    xp = jnp if isinstance(sent, jax.Array) else np
    before = xp.cumsum(sent, axis=0) - sent
    return xp.clip(buffer_rows - before, 0, sent)


def dropped_rows(choice: np.ndarray, num_experts: int, expert_ways: int, buffer_rows: int) -> np.ndarray:
    """Rows each receiving device drops, from the routing of every sender: ``choice [senders, tokens,
    k]`` (each sender's local tokens' expert choices), experts split into ``expert_ways`` blocks."""
    senders = choice.shape[0]
    local = num_experts // expert_ways
    sent = np.stack([np.bincount(choice[s].reshape(-1) // local, minlength=expert_ways) for s in range(senders)])
    return sent.sum(0) - accepted_rows(sent, buffer_rows).sum(0)


def expert_capacity(tokens_per_group: int, top_k: int, num_experts: int, capacity_factor: float) -> int:
    """The dense path's slots per expert and sequence: capacity_factor x the balanced share, as
    MaxText's ``generate_masks`` rounds it (``int(max(ceil(S k / E) x factor, factor))``)."""
    return int(max(math.ceil(tokens_per_group * top_k / num_experts) * capacity_factor, capacity_factor))


def dense_dropped_rows(choice: np.ndarray, num_experts: int, capacity: int) -> int:
    """Assignments the dense path drops: per sequence (``choice [B, S, k]``) and expert, those beyond
    ``capacity`` in token order (MaxText's cumulative-sum ranking)."""
    out = 0
    for sequence in choice:
        counts = np.bincount(sequence.reshape(-1), minlength=num_experts)
        out += int(np.maximum(counts - capacity, 0).sum())
    return out


# ----------------------------------------------------------------------------- the expert matmuls


def _matmul(buffer, w, group_sizes, sizes: RaggedSizes, kernel: str):
    with jax.named_scope(ROUTED_EXPERTS_SCOPE):
        if kernel == "grouped":
            return grouped_matmul(buffer, w, group_sizes, sizes.rows, sizes.expected_rows)
        return jax.lax.ragged_dot(buffer, w, group_sizes).astype(buffer.dtype)


def _swiglu(buffer, group_sizes, wi_0, wi_1, wo, sizes: RaggedSizes, kernel: str):
    """The routed experts' SwiGLU over a flat buffer grouped by local expert: gate, up, down."""
    run = functools.partial(_matmul, group_sizes=group_sizes, sizes=sizes, kernel=kernel)
    gate = checkpoint_name(checkpoint_name(run(buffer, wi_0), "mlpwi_0"), "moe_mlpwi_0")
    up = checkpoint_name(run(buffer, wi_1), "moe_mlpwi_1")
    down = run(jax.nn.silu(gate) * up, wo)
    return checkpoint_name(checkpoint_name(down, "mlpwo"), "moe_mlpwo")


# ----------------------------------------------------------------------------- one device


def _grouped_targets(run_sizes: jax.Array, run_group: jax.Array, num_groups: int, rows: int):
    """Rows arrive as consecutive runs (``run_sizes``), each of one group (``run_group``); runs of a
    group keep their order. Each arriving row's index in a buffer sorted by group (rows past the last
    run get ``rows``: out of range), and the rows per group. A counting sort by prefix sums."""
    group_sizes = jnp.zeros(num_groups, run_sizes.dtype).at[run_group].add(run_sizes)
    group_start = jnp.cumsum(group_sizes) - group_sizes
    before = jnp.cumsum(run_sizes) - run_sizes
    order = jnp.arange(run_sizes.shape[0])
    earlier = (run_group[None, :] == run_group[:, None]) & (order[None, :] < order[:, None])
    same_group_before = jnp.sum(jnp.where(earlier, run_sizes[None, :], 0), axis=1)
    run_target = group_start[run_group] + same_group_before
    run_of_row = jnp.repeat(order, run_sizes, total_repeat_length=rows)
    position = jnp.arange(rows)
    valid = position < jnp.sum(run_sizes)
    target = run_target[run_of_row] + position - before[run_of_row]
    return jnp.where(valid, target, rows), group_sizes


def _exchange(rows, out_rows: int, in_offsets, send_sizes, out_offsets, recv_sizes, axis: str, moved_rows: int,
              zeroed: bool):
    """Send ``send_sizes[j]`` rows from ``in_offsets[j]`` to device ``j`` of ``axis``, landing at its
    ``out_offsets[j]``: ``jax.lax.ragged_all_to_all`` on GPUs, named with the rows it carries under
    the routing assumption (``collectives.buffer_bytes`` prices those, not the padded buffer). The
    output buffer is ``zeroed`` (the combine's: dropped rows come back as zeros) or left
    uninitialised as MaxText's (``jax.lax.empty``; the dispatch's receive buffer, whose rows past
    what arrives are never read). XLA:CPU has no ragged all-to-all, so a CPU run (the tests) gathers every
    device's rows and picks its own runs: the same result."""
    shape = (out_rows, rows.shape[1])
    output = jnp.zeros(shape, rows.dtype) if zeroed else jax.lax.empty(shape, rows.dtype)

    def ragged(rows, in_offsets, send_sizes, out_offsets, recv_sizes):
        with jax.named_scope(f"{A2A_SCOPE}[rows={moved_rows}]"):
            return jax.lax.ragged_all_to_all(rows, output, in_offsets, send_sizes, out_offsets, recv_sizes,
                                             axis_name=axis)

    def gathered(rows, in_offsets, send_sizes, out_offsets, recv_sizes):
        me = jax.lax.axis_index(axis)
        everyone = jax.lax.all_gather(rows, axis)  # [senders, rows, D]
        starts, sizes, lands = (jax.lax.all_gather(v, axis)[:, me] for v in (in_offsets, send_sizes, out_offsets))
        out, index = output, jnp.arange(rows.shape[0])
        for sender in range(everyone.shape[0]):
            source = jnp.take(everyone[sender], jnp.minimum(starts[sender] + index, rows.shape[0] - 1), axis=0)
            target = jnp.where(index < sizes[sender], lands[sender] + index, out_rows)
            out = out.at[target].set(source, mode="drop")
        return out

    return jax.lax.platform_dependent(rows, in_offsets, send_sizes, out_offsets, recv_sizes, cuda=ragged,
                                      default=gathered)


def _device_experts(x, choice, weights, wi_0, wi_1, wo, *, num_experts: int, sizes: RaggedSizes, kernel: str, dtype,
                    expert_axis: str | None, fsdp_axis: str | None, tensor_axis: str | None):
    """One device's share: x [b, S, D] tokens, choice/weights [b, S, k]; expert weights local."""
    b, S, D = x.shape
    k = choice.shape[-1]
    wi_0, wi_1, wo = (w.astype(dtype) for w in (wi_0, wi_1, wo))
    if fsdp_axis is not None:  # the expert weights' embed dimension is split over fsdp: gather it
        wi_0, wi_1 = (jax.lax.all_gather(w, fsdp_axis, axis=1, tiled=True) for w in (wi_0, wi_1))
        wo = jax.lax.all_gather(wo, fsdp_axis, axis=2, tiled=True)
    tokens = x.reshape(b * S, D).astype(dtype)
    flat = choice.reshape(-1)
    order = jnp.argsort(flat, stable=True)  # (token, choice) pairs sorted by expert
    rows = jnp.take(tokens, order // k, axis=0)
    counts = jnp.bincount(flat, length=num_experts)  # rows per global expert on this device
    E_local = sizes.local_experts
    if expert_axis is None:  # the sorted rows are the buffer
        out_rows = _swiglu(rows, counts.astype(jnp.int32), wi_0, wi_1, wo, sizes, kernel)
    else:
        ways = sizes.expert_ways
        me = jax.lax.axis_index(expert_axis)
        all_counts = jax.lax.all_gather(counts, expert_axis).reshape(ways, ways, E_local)  # [sender, receiver, e]
        sent = all_counts.sum(2)
        kept = accepted_rows(sent, sizes.buffer_rows)  # the drop rule: rows each receiver's buffer holds
        kept_runs = jnp.clip(kept[:, :, None] - (jnp.cumsum(all_counts, 2) - all_counts), 0, all_counts)
        send = kept[me]  # what I send to each receiver
        in_offsets = jnp.cumsum(sent[me]) - sent[me]  # my rows for each receiver start there (sorted by expert)
        out_offsets = (jnp.cumsum(kept, axis=0) - kept)[me]  # where they land on each receiver
        recv = kept[:, me]
        arriving = _exchange(rows, sizes.buffer_rows, in_offsets, send, out_offsets, recv, expert_axis,
                             sizes.expected_rows, zeroed=False)
        # each sender's block arrives sorted by expert: runs (sender, local expert) in that order
        run_sizes = kept_runs[:, me, :].reshape(-1)
        run_group = jnp.tile(jnp.arange(E_local), ways)
        target, group_sizes = _grouped_targets(run_sizes, run_group, E_local, arriving.shape[0])
        # Move rows with gathers: a scatter of rows makes XLA keep a u32 copy of the buffer to pick a
        # winner; only the small index array is scattered (its targets are unique).
        source = jnp.full((arriving.shape[0],), arriving.shape[0], jnp.int32).at[target].set(
            jnp.arange(arriving.shape[0], dtype=jnp.int32), mode="drop", unique_indices=True)
        buffer = jnp.take(arriving, source, axis=0, mode="fill", fill_value=0)
        out_sorted = _swiglu(buffer, group_sizes.astype(jnp.int32), wi_0, wi_1, wo, sizes, kernel)
        out_arriving = jnp.take(out_sorted, target, axis=0, mode="fill", fill_value=0)
        # back to the senders: my buffer's blocks to where each sender's rows for me start
        back_in = jnp.cumsum(recv) - recv
        back_out = (jnp.cumsum(sent, axis=1) - sent)[:, me]
        out_rows = _exchange(out_arriving, sizes.rows, back_in, recv, back_out, send, expert_axis,
                             sizes.expected_rows, zeroed=True)
    if tensor_axis is not None:  # each device holds a slice of the hidden width: sum the partial outputs
        out_rows = jax.lax.psum(out_rows, tensor_axis)
    unsort = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype), unique_indices=True)
    per_choice = jnp.take(out_rows, unsort, axis=0).reshape(b, S, k, D)
    return jnp.einsum("bskd,bsk->bsd", per_choice, weights.astype(dtype))


def sparse_experts(x: jax.Array, choice: jax.Array, weights: jax.Array, wi_0: jax.Array, wi_1: jax.Array,
                   wo: jax.Array, *, num_experts: int, kernel: str, ragged_buffer_factor: float, imbalance: float,
                   dtype, rules: AxisRules) -> jax.Array:
    """The sparse path for tokens ``x [B, S, D]`` with choices and weights ``[B, S, k]``: the expert
    matmuls as a grouped GEMM (``kernel="grouped"``) or ``jax.lax.ragged_dot``.

    Under a mesh (``jax.set_mesh``) every device runs ``_device_experts`` on its share in a
    ``shard_map``; without one (a CPU run) the whole batch is one device's share.
    """
    mesh = current_mesh_shape()
    active = {a: n for a, n in mesh.items() if n > 1}
    batch_spec = rules.spec(("activation_batch", "activation_length", "activation_embed"), active)
    ways = active.get("expert", 1)
    local_tokens = x.shape[0] * x.shape[1] // math.prod(active.get(a, 1) for a in _axes(batch_spec))
    sizes = ragged_sizes(local_tokens, choice.shape[-1], num_experts, ways, ragged_buffer_factor, imbalance)
    run = functools.partial(_device_experts, num_experts=num_experts, sizes=sizes, kernel=kernel, dtype=dtype,
                            expert_axis="expert" if ways > 1 else None,
                            fsdp_axis="fsdp" if active.get("fsdp", 1) > 1 else None,
                            tensor_axis="tensor" if active.get("tensor", 1) > 1 else None)
    if not active:
        return run(x, choice, weights, wi_0, wi_1, wo)
    w_in = rules.spec(("exp", "embed_moe", "mlp_moe"), active)
    w_out = rules.spec(("exp", "mlp_moe", "embed_moe"), active)
    return jax.shard_map(run, in_specs=(batch_spec, batch_spec, batch_spec, w_in, w_in, w_out),
                         out_specs=batch_spec, check_vma=False)(x, choice, weights, wi_0, wi_1, wo)


def _axes(spec: PartitionSpec) -> tuple[str, ...]:
    out = []
    for entry in spec:
        if entry is None:
            continue
        out += [entry] if isinstance(entry, str) else list(entry)
    return tuple(out)


# ----------------------------------------------------------------------------- the dense path


def _dense_weights(choice: jax.Array, weights: jax.Array, num_experts: int) -> jax.Array:
    """The routing weights as ``[B, S, E]``: each token's top-k weights at its chosen experts, 0
    elsewhere (MaxText's ``reshape_and_update_weights``)."""
    return jnp.sum(jax.nn.one_hot(choice, num_experts, dtype=weights.dtype) * weights[..., None], axis=2)


def dense_masks(choice: jax.Array, weights: jax.Array, num_experts: int, capacity: int):
    """MaxText's ``generate_masks``: per sequence, each (token, choice) assignment ranked within its
    expert in token order (a cumulative sum over the ``S x k`` assignments); those past ``capacity``
    are dropped. Returns the dispatch mask (bool) and the combine mask (the routing weight at the
    slot), both ``[B, S, E, C]``."""
    B, S, k = choice.shape
    one_hot = jax.nn.one_hot(choice, num_experts, dtype=jnp.int32)  # [B, S, k, E]
    count = jnp.cumsum(one_hot.reshape(B, S * k, num_experts), axis=1).reshape(B, S, k, num_experts)
    kept = jnp.sum(one_hot * (count <= capacity), axis=2)  # [B, S, E]
    position = jnp.sum(one_hot * count, axis=2) * kept  # 1-based slot, 0 where dropped or not chosen
    slots = jax.nn.one_hot(position, capacity + 1, dtype=weights.dtype)[..., 1:]
    combine = _dense_weights(choice, weights, num_experts)[..., None] * kept[..., None] * slots
    return combine.astype(bool), combine


def dense_experts(x: jax.Array, choice: jax.Array, weights: jax.Array, wi_0: jax.Array, wi_1: jax.Array,
                  wo: jax.Array, *, capacity_factor: float, dtype, rules: AxisRules) -> jax.Array:
    """MaxText's dense path (``sparse_matmul: false``, ``dense_matmul``): with ``capacity_factor`` > 0,
    one-hot dispatch into ``[E, B, C, D]`` buffers (``BSM,BSEC->EBCM``), batched expert matmuls, and a
    weighted one-hot combine (``EBCM,BSEC->BSM``), the buffers sharded over ``expert`` (the einsums
    become all-to-alls); with ``capacity_factor`` <= 0 every expert on every token (``BSM,EMH->BSEH``)
    and a weighted sum over experts."""
    B, S, D = x.shape
    E, k = wi_0.shape[0], choice.shape[-1]
    x = x.astype(dtype)
    wi_0, wi_1, wo = (w.astype(dtype) for w in (wi_0, wi_1, wo))
    if capacity_factor <= 0:
        with jax.named_scope(ROUTED_EXPERTS_SCOPE):
            gate = checkpoint_name(checkpoint_name(jnp.einsum("bsd,edf->bsef", x, wi_0), "mlpwi_0"), "moe_mlpwi_0")
            up = checkpoint_name(checkpoint_name(jnp.einsum("bsd,edf->bsef", x, wi_1), "mlpwi_1"), "moe_mlpwi_1")
            out = jnp.einsum("bsef,efd->bsed", jax.nn.silu(gate) * up, wo)
        out = checkpoint_name(checkpoint_name(out, "mlpwo"), "moe_mlpwo")
        return constrain(jnp.einsum("bsed,bse->bsd", out, _dense_weights(choice, weights, E).astype(dtype)),
                         ACTIVATION, rules)
    C = expert_capacity(S, k, E, capacity_factor)
    masks = ("activation_batch", "activation_length", None, None)  # MaxText's mask_axes
    dispatch_mask, combine_mask = (constrain(m, masks, rules) for m in dense_masks(choice, weights.astype(dtype), E, C))
    slots = ("activation_exp", "activation_group", None, "activation_embed")
    hidden = ("activation_exp", "activation_group", None, "activation_mlp")
    buffer = constrain(jnp.einsum("bsd,bsec->ebcd", x, dispatch_mask.astype(dtype)), slots, rules)
    with jax.named_scope(ROUTED_EXPERTS_SCOPE):
        gate = constrain(jnp.einsum("ebcd,edf->ebcf", buffer, wi_0), hidden, rules)
        up = constrain(jnp.einsum("ebcd,edf->ebcf", buffer, wi_1), hidden, rules)
        gate = checkpoint_name(checkpoint_name(gate, "mlpwi_0"), "moe_mlpwi_0")
        up = checkpoint_name(checkpoint_name(up, "mlpwi_1"), "moe_mlpwi_1")
        out = constrain(jnp.einsum("ebcf,efd->ebcd", jax.nn.silu(gate) * up, wo), slots, rules)
    out = checkpoint_name(checkpoint_name(out, "mlpwo"), "moe_mlpwo")
    return constrain(jnp.einsum("ebcd,bsec->bsd", out, combine_mask), ACTIVATION, rules)


# ----------------------------------------------------------------------------- what a step's MoE is


KERNELS = {
    "grouped": "a grouped GEMM per projection and pass (the compile-only stand-in for cuDNN's ragged-dot fusion or a "
               "CUTLASS/Transformer Engine grouped kernel: what a tuned deployment runs)",
    "ragged_dot": "jax.lax.ragged_dot as jaxlib 0.10.2's XLA expands it: every row times every local expert "
                  "(what MaxText's sparse path runs from the pip wheels)",
    "dense": "MaxText's dense path: batched expert einsums over capacity slots, one-hot dispatch and combine",
}


@dataclasses.dataclass(frozen=True)
class MoeReport:
    """A step's routed experts per device: the path and the kernel it stands for, the buffer against
    MaxText's, and the routing assumption's rows and drops."""

    dispatch: str
    kernel: str
    rows: int  # (token, choice) rows a device sends
    buffer_rows: int  # sparse: the receive buffer; dense: E_local x sequences x capacity slots
    maxtext_buffer_rows: int  # MaxText's at the same factor
    imbalance: float
    expected_rows: int  # computed on the most-loaded device under the routing assumption
    expected_drops: int  # rows that device drops under it
    drop_rule: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        return (f"MoE {self.dispatch}: {self.kernel}; per device {self.rows:,} routed rows, buffer {self.buffer_rows:,} "
                f"rows (MaxText's at this factor: {self.maxtext_buffer_rows:,}); routing assumption: balanced x "
                f"{self.imbalance:g} on the most-loaded device: {self.expected_rows:,} rows computed, "
                f"{self.expected_drops:,} dropped ({self.drop_rule})")


def report(cfg, local_tokens: int, sequences: int, expert_ways: int) -> MoeReport:
    """What ``cfg``'s routed experts are on one device holding ``local_tokens`` tokens of ``sequences``
    sequences under ``expert_ways``-way expert parallelism."""
    m = cfg.moe
    k, E = m.experts_per_token, m.num_experts
    if m.dispatch == "dense":
        S = local_tokens // max(sequences, 1)
        if m.capacity_factor > 0:
            C = expert_capacity(S, k, E, m.capacity_factor)
            per_expert = math.ceil(S * k / E * m.imbalance)  # the most-loaded expert of a sequence
            drops = sequences * max(0, per_expert - C)
            rule = (f"each expert keeps C = {C} assignments per sequence in token order, the rest dropped "
                    "(MaxText's generate_masks); the imbalance is applied to one expert per sequence")
        else:
            C, drops, rule = S, 0, "every expert on every token: nothing dropped"
        slots = E // expert_ways * sequences * C
        return MoeReport("dense", KERNELS["dense"], local_tokens * k, slots, slots, m.imbalance,
                         min(slots, local_tokens * k), drops, rule)
    sizes = ragged_sizes(local_tokens, k, E, expert_ways, m.ragged_buffer_factor, m.imbalance)
    rule = ("nothing is dropped without expert parallelism" if expert_ways == 1 else
            "a device that receives more rows than its buffer keeps its senders' rows in sender order and drops the "
            "rest, as MaxText's _truncate_matrix (MaxText leaves the dropped rows' outputs uninitialised, the lab "
            "zeroes them)" if m.ragged_buffer_factor > 0 else "the worst-case buffer: nothing is ever dropped")
    return MoeReport(m.dispatch, KERNELS[m.dispatch], sizes.rows, sizes.buffer_rows, sizes.buffer_rows, m.imbalance,
                     sizes.expected_rows, sizes.expected_drops, rule)
