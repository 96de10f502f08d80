"""The notation every notebook uses (one table, shown at the top of each)."""

from __future__ import annotations

SYMBOLS: tuple[tuple[str, str], ...] = (
    ("B", "global batch (sequences per step)"),
    ("B_d, b", "sequences per device: B / (data x fsdp x expert), the mesh axes the batch is split over "
               "(the budget's formulas write b)"),
    ("S", "sequence length (tokens per sequence)"),
    ("D", "model width (embedding dimension)"),
    ("F", "MLP hidden width (Llama: mlp_dim)"),
    ("L", "number of decoder layers"),
    ("H, H_kv", "query heads, key/value heads; d_h = head dimension (MLA: d_qk for queries and keys, d_v for values)"),
    ("V", "vocabulary size"),
    ("E, k", "routed experts, experts per token (MoE); E_local = E / expert, the experts on one device"),
    ("F_e, F_shared", "hidden width of one routed expert, of the shared expert (MoE)"),
    ("R", "rows of the sparse MoE's receive buffer per device (b x S x k routed rows, x min(EP, E/k) at MaxText's "
          "worst case, or x ragged_buffer_factor)"),
    ("G, C", "dense MoE: sequences per device, and the slots each expert takes per sequence (capacity)"),
    ("S_c", "query rows per chunk (the chunked attention)"),
    ("A, W", "bytes per element of activations (compute dtype, bf16: 2) and of weights (fp32: 4)"),
    ("N", "number of GPUs (devices) in the mesh"),
    ("P", "parameters"),
    ("GiB", "2^30 bytes (GB = 10^9 bytes, used for bandwidths: GB/s)"),
    ("HBM", "the GPU's device memory; 'host' = pinned CPU memory (XLA memory space S(5))"),
)


def markdown() -> str:
    rows = "\n".join(f"| {s} | {m} |" for s, m in SYMBOLS)
    return "| symbol | meaning |\n|---|---|\n" + rows


def show():
    """Display the table in a notebook."""
    from IPython.display import Markdown, display

    display(Markdown(markdown()))
