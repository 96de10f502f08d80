"""The series' answer for one model, generated from the stored steps of the space it searched.

``benchmarks/bench_central.py`` compiles and simulates DeepSeek-V3 over the published experiment's space
(rows with ``space: true``: systems, fractions, meshes, MoE buffer factors, policies, each policy at its
largest batch). This module reads them back: ``coverage`` lists what was searched, ``table`` ranks one
system's steps against its fastest full-remat step with the paired band (``bands.rank_records``), and
``headline`` states the answer per system and fraction — never more than the rows test.

A row at a finite ``ragged_buffer_factor`` can drop routed rows; its table row prints the share dropped under
the routing assumption (``models.moe.ragged_sizes``: none while routing is balanced; ``BUSIEST`` x its share
on the most-loaded GPU) before it is ranked against rows that drop nothing.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..timing import bands
from .. import models
from ..ground import sharding
from ..hardware import targets

GiB = 2**30
BUSIEST = 2.5  # the most-loaded GPU's share of routed rows, in balanced shares: the drop column's second case
Row = Mapping[str, Any]


def _offloads(r: Row) -> bool:
    return r["host_bytes"] > 0


def _system(r: Row) -> str:
    return f"{r['target']} at {r['mem_fraction']}"


def coverage(rows: Sequence[Row]) -> dict[str, list]:
    """What the space holds: systems, fractions, meshes, buffer factors, policies."""
    def distinct(key):
        return sorted({r[key] for r in rows}, key=str)
    return {"systems": distinct("target"), "fractions": distinct("mem_fraction"), "meshes": distinct("mesh"),
            "ragged_buffer_factors": distinct("ragged_buffer_factor"), "policies": distinct("label")}


def dropped_share(r: Row, imbalance: float) -> float:
    """The routed rows a step's receive buffer drops at ``imbalance`` (the most-loaded GPU's rows over its
    balanced share), as a share of that GPU's rows."""
    from ..models import moe

    cfg = models.config(r["model"]).moe
    devices = targets.target(r["target"]).num_devices
    mesh = sharding.parse_mesh(r["mesh"], devices)
    sizes = moe.ragged_sizes(r["batch"] * r["seq"] // devices, cfg.experts_per_token, cfg.num_experts,
                             mesh.get("expert", 1), r["ragged_buffer_factor"], imbalance)
    return sizes.expected_drops / (sizes.rows * imbalance) if sizes.rows else 0.0


def best(rows: Sequence[Row], offloading: bool | None = None) -> Row | None:
    """The fitting row with the most tokens/s (``offloading``: only rows that do / do not use the host)."""
    fitting = [r for r in rows if r["fits"] and (offloading is None or _offloads(r) == offloading)]
    return max(fitting, key=lambda r: r["tokens_per_second"], default=None)


def table(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One system and fraction: every step, ranked against the fastest fitting full-remat step."""
    base = best([r for r in rows if r["label"] == "full remat"])
    out = []
    for r in sorted(rows, key=lambda r: (r["mesh"], r["label"], r["batch"])):
        over = r["device_peak_bytes"] - r["usable_hbm_bytes"]
        vs = ("-" if r is base or base is None else "not ranked: does not fit" if not r["fits"]
              else bands.rank_records(r, base).short())
        out.append({"policy": r["label"], "mesh": r["mesh"], "factor": r["ragged_buffer_factor"], "B": r["batch"],
                    "dropped: balanced / busiest": f"{dropped_share(r, 1.0):.1%} / {dropped_share(r, BUSIEST):.1%}",
                    "peak GiB": f"{r['device_peak_bytes'] / GiB:.1f}" + ("" if r["fits"] or over <= 0
                                                                          else f" (over {over / GiB:.1f})"),
                    "host GiB": f"{r['host_bytes'] / GiB:.1f}", "step s": f"{r['step_seconds']:.2f}",
                    "tokens/s per GPU": f"{r['tokens_per_second']:,.0f}" if r["fits"] else "-",
                    "vs fastest full remat": vs})
    return out


def headline(rows: Sequence[Row]) -> str:
    """Per system and fraction: the fastest offloading step against the fastest that keeps everything on the
    device, with the paired band — a ranking, or a tie where the band holds 1."""
    lines = []
    for system in sorted({_system(r) for r in rows}):
        here = [r for r in rows if _system(r) == system]
        kept, moved = best(here, offloading=False), best(here, offloading=True)
        if kept is None or moved is None:
            lines.append(f"- **{system}**: nothing to compare (no fitting step {'off' if moved is None else 'on'} "
                         "the host)")
            continue
        ranking = bands.rank_records(moved, kept)
        verdict = ("a tie" if ranking.tie else "offload faster" if ranking.faster == moved["label"]
                   else "no offload faster")
        lines.append(f"- **{system}**: {verdict} — {moved['label']} at B = {moved['batch']} "
                     f"({moved['tokens_per_second']:,.0f} tokens/s per GPU) against {kept['label']} at B = "
                     f"{kept['batch']} ({kept['tokens_per_second']:,.0f}): {ranking.short()}")
    return "\n".join(lines)
