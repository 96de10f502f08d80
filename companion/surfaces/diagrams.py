"""The series' three drawn concepts, each from the lab's own numbers (issue 53: where a learner would rather look
than read): the HBM stack of one training step, naive against pipelined transfers on a timeline, and the
break-even between the host link and recomputing.

Each function returns a Matplotlib Figure; the numbers it draws come from a pure function beside it
(``offload_schedule``, ``break_even_curve``) or from a ``Budget``, so they are tested without drawing.
``scripts/diagrams.py`` writes them for the series' running example into ``docs/figures/``.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib import ticker

from ..hardware.targets import Gpu
from ..memory.budget import Budget
from ..timing import roofline
from .plots import CATEGORY_ORDER, COLORS, GiB

# ----------------------------------------------------------------------------- the HBM stack


def hbm_stack(budget: Budget, *, title: str = ""):
    """One step's device memory at its peak as a stack of what it holds, largest parts named beside it, the usable
    HBM line above, and what was offloaded to the host in a column of its own."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    by_category = budget.by_category("device")
    top = 1.08 * max(budget.device_bytes, budget.usable_hbm_bytes or 0, budget.host_bytes) / GiB
    bottom, label_y = 0.0, -1.0
    for cat in CATEGORY_ORDER:
        value = by_category.get(cat, 0) / GiB
        if value < 0.01 * top:  # too thin to draw or to name (the token batch)
            bottom += value
            continue
        ax.bar(0, value, bottom=bottom, color=COLORS[cat], width=0.55, edgecolor="white")
        names = [t.label for t in sorted(budget.terms, key=lambda t: -t.bytes)
                 if t.space == "device" and t.category == cat and t.bytes]  # the largest first
        label_y = max(bottom + value / 2, label_y + 0.075 * top)  # labels of thin parts pushed apart
        ax.annotate(f"{cat}: {value:.1f} GiB" + (f" ({names[0]}{', ...' if len(names) > 1 else ''})" if names else ""),
                    xy=(0.28, bottom + value / 2), xytext=(0.45, label_y), va="center", fontsize=8,
                    arrowprops={"arrowstyle": "-", "color": "#777777", "lw": 0.6})
        bottom += value
    ax.set_ylim(0, top)
    if budget.host_bytes:
        ax.bar(1.6, budget.host_bytes / GiB, color=COLORS["host"], width=0.35)
        ax.text(1.6, budget.host_bytes / GiB, f"host\n{budget.host_bytes / GiB:.1f} GiB", ha="center", va="bottom",
                fontsize=8)
    if budget.usable_hbm_bytes:
        ax.axhline(budget.usable_hbm_bytes / GiB, color="red", ls="--", lw=1.2)
        ax.text(-0.3, budget.usable_hbm_bytes / GiB, f"usable HBM {budget.usable_hbm_bytes / GiB:.1f} GiB",
                color="red", va="bottom", fontsize=8)
    ax.set_xlim(-0.5, 2.0)
    ax.set_xticks([0] + ([1.6] if budget.host_bytes else []), [f"device, at the {budget.peak_phase}"]
                  + (["offloaded"] if budget.host_bytes else []))
    ax.set_ylabel("GiB per device")
    ax.set_title(title or f"{budget.model}, B={budget.batch}, S={budget.seq}, {budget.policy}: "
                 f"{budget.device_bytes / GiB:.1f} GiB at the peak")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- naive against pipelined


@dataclasses.dataclass(frozen=True)
class Segment:
    lane: str  # "compute" | "link"
    layer: int
    start: float
    end: float


def offload_schedule(compute_seconds: float, transfer_seconds: float, layers: int,
                     pipelined: bool) -> tuple[list[Segment], float]:
    """The forward pass of ``layers`` identical layers, each writing one tensor to the host: naive, each transfer
    waits for its layer and the next layer waits for the transfer; pipelined, the transfer runs on the link while
    the next layer computes (one transfer at a time). Returns the segments and the time the pass ends."""
    segments, compute_free, link_free = [], 0.0, 0.0
    for i in range(layers):
        start = compute_free
        segments.append(Segment("compute", i, start, start + compute_seconds))
        send = max(start + compute_seconds, link_free)
        segments.append(Segment("link", i, send, send + transfer_seconds))
        link_free = send + transfer_seconds
        compute_free = start + compute_seconds if pipelined else link_free
    return segments, max(compute_free, link_free)


def offload_timelines(compute_seconds: float, transfer_seconds: float, layers: int = 4, *, title: str = ""):
    """Naive against pipelined offload on one timeline each (milliseconds): where the link is slower than a layer's
    compute, pipelining hides only as much as the compute lasts."""
    fig, axes = plt.subplots(2, 1, figsize=(9, 3.6), sharex=True)
    for ax, pipelined in zip(axes, (False, True)):
        segments, end = offload_schedule(compute_seconds, transfer_seconds, layers, pipelined)
        for s in segments:
            row = 1 if s.lane == "compute" else 0
            ax.barh(row, (s.end - s.start) * 1e3, left=s.start * 1e3, height=0.6, edgecolor="white",
                    color="#4C72B0" if s.lane == "compute" else "#64B5CD")
            ax.text((s.start + s.end) / 2 * 1e3, row, f"L{s.layer}", ha="center", va="center", fontsize=7,
                    color="white")
        ax.axvline(end * 1e3, color="black", lw=1)
        ax.set_yticks([0, 1], ["link (to host)", "compute"])
        ax.set_title(f"{'pipelined' if pipelined else 'naive'}: {end * 1e3:.1f} ms", fontsize=9, loc="left")
    axes[-1].set_xlabel("time (ms)")
    fig.suptitle(title or f"{layers} layers, {compute_seconds * 1e3:.2f} ms of compute and "
                 f"{transfer_seconds * 1e3:.2f} ms of transfer each", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- the break-even


def break_even_curve(offloaded_bytes: float, recompute_flops: float, gpu: Gpu,
                     bandwidths: Sequence[float]) -> tuple[list[float], float, float]:
    """Naive offload's seconds at each per-direction bandwidth (out and back), recomputing's seconds, and the
    bandwidth where they meet (``roofline.break_even_bandwidth``: both at the GPU's dense bf16 peak)."""
    offload = [seconds for _, seconds, _ in roofline.offload_vs_remat(offloaded_bytes, recompute_flops, gpu, bandwidths)]
    return offload, recompute_flops / gpu.bf16_dense_flops, roofline.break_even_bandwidth(offloaded_bytes,
                                                                                           recompute_flops, gpu)


def break_even(offloaded_bytes: float, recompute_flops: float, gpu: Gpu, links: Mapping[str, float], *,
               name: str = "the tensor", title: str = ""):
    """Offloading a tensor against recomputing it, over the host link's per-direction bandwidth (log): the
    offload line falls as the link gets faster, recomputing is flat, and real links are marked."""
    lo, hi = 5e9, 2e12
    bandwidths = [lo * (hi / lo) ** (i / 99) for i in range(100)]
    offload, recompute, meet = break_even_curve(offloaded_bytes, recompute_flops, gpu, bandwidths)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.plot([b / 1e9 for b in bandwidths], [s * 1e3 for s in offload], color="#64B5CD", lw=2,
            label=f"offload {name}: 2 x {offloaded_bytes / 2**20:.0f} MiB / link")
    ax.axhline(recompute * 1e3, color="#4C72B0", lw=2, label=f"recompute it: {recompute_flops / 1e9:.0f} GFLOP "
               f"at {gpu.bf16_dense_flops / 1e12:.0f} TFLOP/s")
    if lo < meet < hi:
        ax.axvline(meet / 1e9, color="black", ls=":", lw=1)
        ax.text(meet / 1e9, ax.get_ylim()[1] * 0.5, f" break-even\n {meet / 1e9:.0f} GB/s", fontsize=8)
    for label, bandwidth in links.items():
        ax.axvline(bandwidth / 1e9, color="#8C8C8C", lw=0.8)
        ax.text(bandwidth / 1e9, ax.get_ylim()[1] * 0.9, f" {label}", fontsize=7, rotation=90, va="top")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.ScalarFormatter())
    ax.set_xlabel("host link, GB/s per direction")
    ax.set_ylabel("ms per layer")
    ax.set_title(title or f"Offload or recompute {name} on {gpu.key}")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig
