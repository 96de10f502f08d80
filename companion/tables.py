"""Markdown tables for notebooks and terminals (plain strings: deterministic, diffable)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from . import targets

GiB = targets.GiB


def markdown(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None,
             formats: Mapping[str, Callable[[Any], str]] | None = None) -> str:
    rows = list(rows)
    columns = list(columns or (rows[0].keys() if rows else []))
    formats = formats or {}
    head = "| " + " | ".join(columns) + " |\n|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(formats.get(c, _fmt)(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join([head, *body])


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def gib(value: float) -> str:
    return f"{value / GiB:,.3f}"


def gpus() -> str:
    """The target catalog: one row per GPU."""
    rows = []
    for g in targets.GPUS.values():
        rows.append({
            "key": g.key, "GPU": g.name, "HBM (GiB)": f"{g.hbm_bytes / GiB:.1f}",
            "HBM TB/s": f"{g.hbm_bandwidth / 1e12:.2f}", "bf16 dense TFLOP/s": f"{g.bf16_dense_flops / 1e12:,.0f}",
            "SMs": g.sm_count, "cc": g.cc, "host link": g.host_link.name,
            "link GB/s each way": f"{g.host_link.per_direction_bytes_per_s / 1e9:,.0f}",
            "default topology": str(targets.topology(targets.DEFAULT_TOPOLOGY[g.key])),
        })
    return markdown(rows)


def host_links() -> str:
    rows = [{"key": k, "link": link.name, "GB/s bidirectional": f"{link.bidirectional_bytes_per_s / 1e9:,.0f}",
             "GB/s each way": f"{link.per_direction_bytes_per_s / 1e9:,.0f}", "note": link.note}
            for k, link in targets.HOST_LINKS.items()]
    return markdown(rows)


def reports(named: Mapping[str, Any]) -> str:
    """Compile reports side by side: ``{label: CompileReport}``, bytes per device in GiB."""
    rows = []
    for label, r in named.items():
        rows.append({
            "": label, "backend": r.backend, "device peak": gib(r.device.peak_bytes),
            "device temp": gib(r.device.temp_bytes), "host temp": gib(r.host.temp_bytes),
            "d2h ops": r.offload.d2h_ops, "h2d ops": r.offload.h2d_ops,
            "GiB to host / step": gib(r.offload.d2h_bytes_per_step),
        })
    return markdown(rows)
