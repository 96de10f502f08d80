"""The notation every notebook uses (one table, shown at the top of each)."""

from __future__ import annotations

SYMBOLS: tuple[tuple[str, str], ...] = (
    ("B", "global batch (sequences per step); B_d = B / (data x fsdp) per device"),
    ("S", "sequence length (tokens per sequence)"),
    ("D", "model width (embedding dimension)"),
    ("F", "MLP hidden width (Llama: mlp_dim)"),
    ("L", "number of decoder layers"),
    ("H, H_kv", "query heads, key/value heads; d_h = head dimension"),
    ("V", "vocabulary size"),
    ("E, k", "routed experts, experts per token (MoE)"),
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
