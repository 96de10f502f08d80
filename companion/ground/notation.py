"""The notation the series uses: one table, of which each notebook shows the rows it uses (``show("B", "S")``)."""

from __future__ import annotations

SYMBOLS: tuple[tuple[str, str], ...] = (
    ("B", "global batch (sequences per step)"),
    ("B_d, b", "sequences per device: B / (data x fsdp x expert), the mesh axes the batch is split over "
               "(the budget's formulas write b)"),
    ("S", "sequence length (tokens per sequence)"),
    ("D", "model width (embedding dimension)"),
    ("F", "MLP hidden width (Llama: mlp_dim)"),
    ("D_in", "the input width of a tensor's producing matmul: the FLOPs that recompute one byte of it are 2 x D_in / A "
             "(D for the attention projections and the MLP's up-projections, F for its down-projection)"),
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
    ("HBM", "the accelerator's device memory (a GPU's; notebook 08's is a TPU's); 'host' = pinned CPU memory "
            "(XLA memory space S(5))"),
)


def _names(symbol: str) -> tuple[str, ...]:
    """The names one row defines: "B_d, b" defines B_d and b."""
    return tuple(name.strip() for name in symbol.split(","))


def rows(*names: str) -> tuple[tuple[str, str], ...]:
    """The rows defining ``names``, in the table's order; every row where none is given."""
    known = {n for symbol, _ in SYMBOLS for n in _names(symbol)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no symbol {unknown[0]!r} in the notation; valid: {', '.join(sorted(known))}")
    return tuple((s, m) for s, m in SYMBOLS if not names or set(_names(s)) & set(names))


def markdown(*names: str) -> str:
    """The table as markdown: the rows defining ``names`` (a notebook shows only the symbols it uses), or all."""
    body = "\n".join(f"| {s} | {m} |" for s, m in rows(*names))
    return "| symbol | meaning |\n|---|---|\n" + body


def show(*names: str):
    """Display the table in a notebook: the rows defining ``names``, or all of them."""
    from IPython.display import Markdown, display

    display(Markdown(markdown(*names)))
