"""Dropless routed experts: tokens sorted by expert and a block-sparse grouped matmul.

MaxText's default MoE for DeepSeek (``sparse_matmul: true``, ``capacity_factor: -1``) drops no
token: every token's ``k`` expert choices become rows, sorted by expert, multiplied by their
expert's weights with a grouped matmul (``jax.lax.ragged_dot`` on GPU), and summed back with the
router's weights. On jaxlib 0.10.2's GPU compiler ``ragged_dot`` is decomposed into a dense matmul
over every expert (E times the routed FLOPs), so the lab builds the grouped matmul itself:

* ``gmm``: each expert's rows padded to a multiple of ``tile`` rows, a loop over tiles multiplying
  each tile by its expert's weights (a custom VJP: the backward pass is two more such loops, dX
  and dW). Tiles up to the *balanced* count run in a loop with a static trip count; any tiles
  beyond (only with imbalanced routing) run in a second loop whose trip count is data-dependent.
  Compiled FLOPs are therefore the routed work plus the per-expert tile padding (and one trip of
  the dynamic loop, which the lab's counter counts once and marks inexact).
* ``experts``: per device (inside ``shard_map``), sort the rows; with expert parallelism (the
  ``expert`` mesh axis) send them to the device holding their expert with
  ``jax.lax.ragged_all_to_all`` into a receive buffer of MaxText's size (the worst case
  ``rows x min(EP, E/k)`` unless ``ragged_buffer_factor`` > 0), sort them again by local
  expert, run the three grouped matmuls (expert weights gathered over ``fsdp``, their hidden
  width split over ``tensor``), and send the results back.

Checkpoint names as on MaxText's sparse path: the gate output ``mlpwi_0`` + ``moe_mlpwi_0``, the
up output ``moe_mlpwi_1`` only, the down output ``mlpwo`` + ``moe_mlpwo``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec

from ..sharding import AxisRules, current_mesh_shape


# ----------------------------------------------------------------------------- grouped matmul


def _tiles(n_static: int, n_used: jax.Array, body, init):
    """Run ``body(t, carry)`` for tiles 0..n_used-1: the first ``n_static`` in a counted loop (all of
    them, used or not: unused tiles are zero rows), the rest in a loop with a dynamic trip count."""
    carry = jax.lax.fori_loop(0, n_static, body, init)

    def more(state):
        return state[0] < n_used

    def step(state):
        t, c = state
        return t + 1, body(t, c)

    return jax.lax.while_loop(more, step, (jnp.int32(n_static), carry))[1]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def gmm(x: jax.Array, w: jax.Array, tile_expert: jax.Array, n_used: jax.Array, tile: int, n_static: int) -> jax.Array:
    """Grouped matmul: rows ``x [R, K]`` (grouped by expert, each group padded to whole tiles) times
    ``w [E, K, N]``: tile ``t`` of ``tile`` rows uses expert ``tile_expert[t]``; ``n_used`` tiles hold rows."""
    return _gmm(x, w, tile_expert, n_used, tile, n_static)


GMM_SCOPE = "grouped_matmul"  # in the op_name of every op of the grouped matmul (FLOP accounting)


def _gmm(x, w, tile_expert, n_used, tile, n_static):
    out = jnp.zeros((x.shape[0], w.shape[2]), x.dtype)

    def body(t, out):
        rows = jax.lax.dynamic_slice_in_dim(x, t * tile, tile)
        weights = jax.lax.dynamic_index_in_dim(w, tile_expert[t], keepdims=False)
        return jax.lax.dynamic_update_slice_in_dim(out, (rows @ weights).astype(x.dtype), t * tile, 0)

    with jax.named_scope(GMM_SCOPE):
        return _tiles(n_static, n_used, body, out)


def _gmm_fwd(x, w, tile_expert, n_used, tile, n_static):
    return _gmm(x, w, tile_expert, n_used, tile, n_static), (x, w, tile_expert, n_used)


def _gmm_bwd(tile, n_static, residuals, d_out):
    x, w, tile_expert, n_used = residuals
    d_x = _gmm(d_out, jnp.swapaxes(w, 1, 2), tile_expert, n_used, tile, n_static)

    def body(t, d_w):  # dW[e] += rows_t^T dOut_t for the tile's expert
        rows = jax.lax.dynamic_slice_in_dim(x, t * tile, tile)
        grads = jax.lax.dynamic_slice_in_dim(d_out, t * tile, tile)
        e = tile_expert[t]
        update = jnp.einsum("rk,rn->kn", rows, grads, preferred_element_type=jnp.float32)
        current = jax.lax.dynamic_index_in_dim(d_w, e, keepdims=True)
        return jax.lax.dynamic_update_index_in_dim(d_w, current + update[None], e, 0)

    with jax.named_scope(GMM_SCOPE):
        d_w = _tiles(n_static, n_used, body, jnp.zeros(w.shape, jnp.float32))
    return d_x, d_w.astype(w.dtype), None, None


gmm.defvjp(_gmm_fwd, _gmm_bwd)


# ----------------------------------------------------------------------------- sizes


@dataclasses.dataclass(frozen=True)
class DroplessSizes:
    """Static sizes of one device's dropless MoE: rows, buffers and tiles."""

    rows: int  # this device's (token, choice) pairs: local tokens x k
    buffer_rows: int  # rows after the all-to-all (the receive buffer; = rows without expert parallelism)
    local_experts: int
    tile: int
    padded_rows: int  # the tile-padded buffer: buffer_rows + local_experts x tile (every group rounded up)
    static_tiles: int  # tiles of the counted loop: the balanced routing's tiles

    @property
    def tiles(self) -> int:
        return self.padded_rows // self.tile


def dropless_sizes(local_tokens: int, top_k: int, num_experts: int, expert_ways: int, tile: int,
                   ragged_buffer_factor: float = -1.0) -> DroplessSizes:
    """Sizes per device; the receive buffer follows MaxText's ``get_ragged_buffer_size``."""
    rows = local_tokens * top_k
    local_experts = num_experts // expert_ways
    if expert_ways == 1:
        buffer_rows = rows
    elif ragged_buffer_factor > 0:
        buffer_rows = int(rows * ragged_buffer_factor)
    else:  # the worst case: every row of the expert group lands on one device
        buffer_rows = int(rows * min(expert_ways, num_experts / top_k))
    per_expert = math.ceil(rows / local_experts / tile)  # balanced: rows / local experts each
    padded = -(-(buffer_rows + local_experts * tile) // tile) * tile
    return DroplessSizes(rows, buffer_rows, local_experts, tile, padded, min(per_expert * local_experts, padded // tile))


# ----------------------------------------------------------------------------- one device


def _grouped_mlp(buffer, group_sizes, wi_0, wi_1, wo, sizes: DroplessSizes, dtype):
    """The routed experts' SwiGLU on a tile-padded buffer whose rows are grouped by local expert
    (``group_sizes`` rows each, every group rounded up to whole tiles): gate, up, down."""
    E, tile = sizes.local_experts, sizes.tile
    ends = jnp.cumsum(-(-group_sizes // tile) * tile)
    tile_expert = jnp.minimum(jnp.searchsorted(ends, jnp.arange(sizes.tiles) * tile, side="right"), E - 1)
    n_used = (ends[-1] // tile).astype(jnp.int32)
    run = functools.partial(gmm, tile_expert=tile_expert, n_used=n_used, tile=tile, n_static=sizes.static_tiles)
    gate = checkpoint_name(checkpoint_name(run(buffer, wi_0.astype(dtype)), "mlpwi_0"), "moe_mlpwi_0")
    up = checkpoint_name(run(buffer, wi_1.astype(dtype)), "moe_mlpwi_1")
    down = run(jax.nn.silu(gate) * up, wo.astype(dtype))
    return checkpoint_name(checkpoint_name(down, "mlpwo"), "moe_mlpwo")


def _padded_targets(run_sizes: jax.Array, run_group: jax.Array, num_groups: int, rows: int, sizes: DroplessSizes):
    """Rows arrive as consecutive runs (``run_sizes``), each of one group (``run_group``); runs of a
    group keep their order. Each arriving row's index in the tile-padded buffer grouped by group
    (invalid rows past the last run get one past the buffer), and the rows per group.

    A counting sort: no sort kernel, just prefix sums over the runs."""
    group_sizes = jnp.zeros(num_groups, run_sizes.dtype).at[run_group].add(run_sizes)
    padded = -(-group_sizes // sizes.tile) * sizes.tile
    group_start = jnp.cumsum(padded) - padded
    # within its group, a run starts after the group's earlier runs
    before = jnp.cumsum(run_sizes) - run_sizes
    order = jnp.arange(run_sizes.shape[0])
    earlier = (run_group[None, :] == run_group[:, None]) & (order[None, :] < order[:, None])
    same_group_before = jnp.sum(jnp.where(earlier, run_sizes[None, :], 0), axis=1)
    run_target = group_start[run_group] + same_group_before
    run_of_row = jnp.repeat(order, run_sizes, total_repeat_length=rows)
    position = jnp.arange(rows)
    valid = position < jnp.sum(run_sizes)
    target = run_target[run_of_row] + position - before[run_of_row]
    return jnp.where(valid, target, sizes.padded_rows), group_sizes


def _exchange(rows, out_rows: int, in_offsets, send_sizes, out_offsets, recv_sizes, axis: str):
    """Send ``send_sizes[j]`` rows from ``in_offsets[j]`` to device ``j`` of ``axis``, landing at its
    ``out_offsets[j]``: ``jax.lax.ragged_all_to_all`` on GPUs. XLA:CPU has no ragged all-to-all, so a
    CPU run (the tests) gathers every device's rows and picks its own runs: the same result."""
    output = jnp.zeros((out_rows, rows.shape[1]), rows.dtype)

    def ragged(rows, in_offsets, send_sizes, out_offsets, recv_sizes):
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


def _device_experts(x, choice, weights, wi_0, wi_1, wo, *, num_experts: int, sizes: DroplessSizes, dtype,
                    expert_axis: str | None, fsdp_axis: str | None, tensor_axis: str | None):
    """One device's share: x [b, S, D] tokens, choice/weights [b, S, k]; expert weights local."""
    b, S, D = x.shape
    k = choice.shape[-1]
    if fsdp_axis is not None:  # the expert weights' embed dimension is split over fsdp: gather it
        wi_0, wi_1 = (jax.lax.all_gather(w.astype(dtype), fsdp_axis, axis=1, tiled=True) for w in (wi_0, wi_1))
        wo = jax.lax.all_gather(wo.astype(dtype), fsdp_axis, axis=2, tiled=True)
    tokens = x.reshape(b * S, D).astype(dtype)
    flat = choice.reshape(-1)
    order = jnp.argsort(flat, stable=True)  # (token, choice) pairs sorted by expert
    rows = jnp.take(tokens, order // k, axis=0)
    counts = jnp.bincount(flat, length=num_experts)  # rows per global expert on this device
    E_local = sizes.local_experts
    if expert_axis is None:
        arriving, run_sizes, run_group = rows, counts, jnp.arange(num_experts)
    else:
        ways = num_experts // E_local
        me = jax.lax.axis_index(expert_axis)
        send = counts.reshape(ways, E_local).sum(1)  # rows to each expert shard
        all_counts = jax.lax.all_gather(counts, expert_axis)  # [senders, num_experts]
        matrix = all_counts.reshape(ways, ways, E_local).sum(2)  # [sender, receiver]
        in_offsets = jnp.cumsum(send) - send
        out_offsets = (jnp.cumsum(matrix, axis=0) - matrix)[me]  # where my rows land on each receiver
        recv = matrix[:, me]
        arriving = _exchange(rows, sizes.buffer_rows, in_offsets, send, out_offsets, recv, expert_axis)
        # each sender's block arrives sorted by expert: runs (sender, local expert) in that order
        run_sizes = jax.lax.dynamic_slice_in_dim(all_counts, me * E_local, E_local, axis=1).reshape(-1)
        run_group = jnp.tile(jnp.arange(E_local), ways)
    target, group_sizes = _padded_targets(run_sizes, run_group, E_local, arriving.shape[0], sizes)
    # Move rows with gathers: a scatter of rows with possibly repeated targets makes XLA keep a u32
    # copy of the buffer to pick a winner; only the small index array is scattered (its targets are unique).
    source = jnp.full((sizes.padded_rows,), arriving.shape[0], jnp.int32).at[target].set(
        jnp.arange(arriving.shape[0], dtype=jnp.int32), mode="drop", unique_indices=True)
    buffer = jnp.take(arriving, source, axis=0, mode="fill", fill_value=0)
    out_padded = _grouped_mlp(buffer, group_sizes, wi_0, wi_1, wo, sizes, dtype)
    out_arriving = jnp.take(out_padded, target, axis=0, mode="fill", fill_value=0)
    if expert_axis is None:
        out_rows = out_arriving
    else:
        back_in = jnp.cumsum(recv) - recv
        back_out = (jnp.cumsum(matrix, axis=1) - matrix)[:, me]  # my block's place in each sender's rows
        out_rows = _exchange(out_arriving, sizes.rows, back_in, recv, back_out, send, expert_axis)
    if tensor_axis is not None:  # each device holds a slice of the hidden width: sum the partial outputs
        out_rows = jax.lax.psum(out_rows, tensor_axis)
    unsort = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype), unique_indices=True)
    per_choice = jnp.take(out_rows, unsort, axis=0).reshape(b, S, k, D)
    return jnp.einsum("bskd,bsk->bsd", per_choice, weights.astype(dtype))


def experts(x: jax.Array, choice: jax.Array, weights: jax.Array, wi_0: jax.Array, wi_1: jax.Array, wo: jax.Array, *,
            num_experts: int, tile: int, ragged_buffer_factor: float, dtype, rules: AxisRules) -> jax.Array:
    """Dropless routed experts for tokens ``x [B, S, D]`` with choices and weights ``[B, S, k]``.

    Under a mesh (``jax.set_mesh``) every device runs ``_device_experts`` on its share in a
    ``shard_map``; without one (a CPU run) the whole batch is one device's share.
    """
    mesh = current_mesh_shape()
    active = {a: n for a, n in mesh.items() if n > 1}
    batch_spec = rules.spec(("activation_batch", "activation_length", "activation_embed"), active)
    ways = active.get("expert", 1)
    local_tokens = x.shape[0] * x.shape[1] // math.prod(active.get(a, 1) for a in _axes(batch_spec))
    sizes = dropless_sizes(local_tokens, choice.shape[-1], num_experts, ways, tile, ragged_buffer_factor)
    run = functools.partial(_device_experts, num_experts=num_experts, sizes=sizes, dtype=dtype,
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
