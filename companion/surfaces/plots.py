"""Matplotlib figures for the notebooks (each returns the Figure; nothing is shown implicitly)."""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib import ticker

from ..memory.budget import Budget

GiB = 2**30
CATEGORY_ORDER = ("parameters", "optimizer", "gradients", "activations", "working", "logits", "batch")
COLORS = {"parameters": "#4C72B0", "optimizer": "#8172B2", "gradients": "#C44E52", "activations": "#55A868",
          "working": "#DD8452", "logits": "#937860", "batch": "#8C8C8C", "host": "#64B5CD"}


def budget_bars(budgets: Mapping[str, Budget], *, hbm_bytes: int | None = None, hbm_label: str | None = None,
                compiled: Mapping[str, float] | None = None, title: str = "", host: bool = True, ax=None):
    """Stacked bars per device by category (+ host offload beside), an HBM line (usable HBM, as
    ``hbm_label`` says) and XLA's numbers."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(max(6, 1.5 * len(budgets) + 3), 4.2))
    labels = list(budgets)
    for i, label in enumerate(labels):
        bottom = 0.0
        cats = budgets[label].by_category("device")
        total = sum(cats.values()) / GiB
        for cat in CATEGORY_ORDER:
            value = cats.get(cat, 0) / GiB
            if value:
                ax.bar(i, value, bottom=bottom, color=COLORS[cat], width=0.6,
                       label=cat if i == next(j for j, lb in enumerate(labels)
                                              if budgets[lb].by_category("device").get(cat)) else None)
                if len(labels) <= 3 and value >= 0.08 * total:  # the segments large enough to read a number in
                    ax.text(i, bottom + value / 2, f"{value:.1f}", ha="center", va="center", fontsize=8, color="white")
                bottom += value
        if host and budgets[label].host_bytes:
            ax.bar(i + 0.35, budgets[label].host_bytes / GiB, color=COLORS["host"], width=0.15,
                   label="host (offloaded)" if not any(budgets[lb].host_bytes for lb in labels[:i]) else None)
        if compiled and label in compiled:
            ax.plot([i - 0.3, i + 0.3], [compiled[label] / GiB] * 2, color="black", lw=2.5,
                    label="XLA (compiled)" if label == next(lb for lb in labels if lb in compiled) else None)
    if hbm_bytes:
        ax.axhline(hbm_bytes / GiB, color="red", ls="--", lw=1.2,
                   label=f"{hbm_label or 'HBM'}: {hbm_bytes / GiB:.0f} GiB")
    ax.set_xticks(range(len(labels)), labels, rotation=15 if len(labels) > 3 else 0, ha="right" if len(labels) > 3 else "center")
    ax.set_ylabel("GiB per device")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def lines(x: Sequence[float], series: Mapping[str, Sequence[float]], *, xlabel: str, ylabel: str,
          hline: float | None = None, hline_label: str = "", title: str = "", logx: bool = False,
          vlines: Mapping[str, float] | None = None):
    """A few labelled lines over one x axis; ``vlines``: labelled x positions (a link's bandwidth, a
    break-even), drawn as vertical markers in the legend. A log x axis keeps plain numbers on its ticks."""
    from matplotlib.ticker import ScalarFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.2) if vlines else (6.5, 3.8))
    for label, ys in series.items():
        ax.plot(x, ys, marker="o", label=label)
    if hline is not None:
        ax.axhline(hline, color="red", ls="--", lw=1.2, label=hline_label)
    for i, (label, at) in enumerate((vlines or {}).items()):
        ax.axvline(at, color=f"C{len(series) + i}", ls=(0, (4, 2)) if i % 2 == 0 else ":", lw=1.4, label=label)
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xticks(list(x))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def pareto(points: Mapping[str, tuple[float, float]], predicted: Mapping[str, tuple[float, float]] | None = None, *,
           xlabel: str, ylabel: str, title: str = "", hline: float | None = None, hline_label: str = ""):
    """Labelled points (x, y), optionally with predictions drawn as hollow markers beside them.
    Points at the same place share one label ("a = b"); labels that would overlap are moved apart."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    merged: dict[tuple[float, float], list[str]] = {}
    for label, (x, y) in points.items():
        merged.setdefault((round(x, 4), round(y, 3)), []).append(label)
    texts = []
    xs = [x for x, _ in merged]
    right = min(xs) + 0.6 * (max(xs) - min(xs))  # labels of the right-hand points go to their left
    for (x, y), labels in merged.items():
        ax.scatter([x], [y], s=36, zorder=3)
        left = len(merged) > 1 and x > right
        texts.append(ax.annotate(" = ".join(labels), (x, y), textcoords="offset points", xytext=(-6 if left else 6, 4),
                                 ha="right" if left else "left", fontsize=7.5,
                                 arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "gray", "shrinkA": 0, "shrinkB": 3}))
    _separate_labels(fig, texts)
    if predicted:
        xs, ys = zip(*predicted.values())
        ax.scatter(xs, ys, s=60, facecolors="none", edgecolors="gray", zorder=2, label="budget prediction")
    if hline is not None:
        ax.axhline(hline, color="red", ls="--", lw=1.0, label=hline_label or None)
    if predicted or (hline is not None and hline_label):
        ax.legend(fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _separate_labels(fig, texts, step: float = 9.0, tries: int = 12) -> None:
    """Move annotations (offset in points) up or down until none overlaps one placed before it."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    def extent(text):  # the label alone, not its leader line, where its current offset puts it
        text.update_positions(renderer)
        return Text.get_window_extent(text, renderer).expanded(1.02, 1.25)

    placed = []
    for text in sorted(texts, key=lambda t: t.xy[1]):
        dx, dy = text.xyann
        for k in range(tries + 1):
            shift = (k + 1) // 2 * step * (1 if k % 2 else -1)
            text.xyann = (dx, dy + shift)
            if not any(extent(text).overlaps(other) for other in placed):  # a little air between labels
                break
        placed.append(extent(text))


LANE_LABELS = {"compute": "compute stream", "d2h": "D2H copies", "h2d": "H2D copies", "nvlink": "NVLink collectives",
               "network": "network collectives", "async": "async compute"}
EVENT_COLORS = {"compute": "#4C72B0", "d2h": "#55A868", "h2d": "#8172B2", "collective": "#DD8452", "async": "#8C8C8C",
                "wait-transfer": "#C44E52", "wait-collective": "#E6A0A0", "wait-async": "#CCCCCC", "loop": "#B0C4DE",
                "transfer": "#C44E52"}
EVENT_LABELS = {"compute": "compute", "d2h": "device -> host", "h2d": "host -> device", "collective": "collective",
                "async": "async compute", "wait-transfer": "waiting for a transfer (exposed)",
                "wait-collective": "waiting for a collective (exposed)", "wait-async": "waiting for async compute",
                "loop": "loop iterations"}


def timeline(events, *, title: str = "", ax=None, unit: float = 1e-3, unit_label: str = "ms"):
    """A Gantt chart of ``schedule.Event``s: one lane per stream, exposed waits in red on the
    compute lane. Times are shifted so the first event starts at 0."""
    events = list(events)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(9, 2.8))
    lanes = [lane for lane in LANE_LABELS if any(e.lane == lane for e in events)]
    t0 = min((e.start for e in events), default=0.0)
    seen = set()
    for row, lane in enumerate(reversed(lanes)):
        for e in events:
            if e.lane != lane or e.end <= e.start:
                continue
            label = EVENT_LABELS.get(e.kind, e.kind) if e.kind not in seen else None
            seen.add(e.kind)
            ax.barh(row, (e.end - e.start) / unit, left=(e.start - t0) / unit, height=0.6,
                    color=EVENT_COLORS.get(e.kind, "#999999"), edgecolor="white", linewidth=0.3, label=label)
    ax.set_yticks(range(len(lanes)), [LANE_LABELS[lane] for lane in reversed(lanes)])
    ax.set_xlabel(f"time ({unit_label})")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def throughput_vs_link(panels: Mapping[str, dict], *, ylabel: str = "TFLOP/s per GPU (simulated)"):
    """One panel per GPU: TFLOP/s against host-link GB/s (log) for the offloading policies, the
    remat policies as horizontal lines, the GPU's real links marked, the break-even annotated.

    ``panels[title] = {"bandwidths": [GB/s], "curves": {label: [TFLOP/s]}, "levels": {label: TFLOP/s},
    "links": {label: GB/s}, "break_even": GB/s or None}``."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.4 * len(panels), 4.6), squeeze=False)
    for ax, (title, p) in zip(axes[0], panels.items()):
        for label, ys in p["curves"].items():
            ax.plot(p["bandwidths"], ys, marker="o", ms=3, label=label)
        for (label, level), style in zip(p["levels"].items(), ("--", ":", "-.")):
            ax.axhline(level, color="black", ls=style, lw=1.1, label=label)
        for label, bw in p.get("links", {}).items():
            ax.axvline(bw, color="gray", lw=0.8, alpha=0.6)
            ax.annotate(label, (bw, 0.03), xycoords=ax.get_xaxis_transform(), rotation=90, fontsize=7,
                        xytext=(2, 0), textcoords="offset points", va="bottom", color="dimgray")
        if p.get("break_even"):
            ax.axvline(p["break_even"], color="red", lw=1.2, label=f"break-even {p['break_even']:.0f} GB/s")
        ax.set_xscale("log")
        ax.set_xlabel("host link GB/s per GPU, each way")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    fig.tight_layout()
    return fig


def flag_bars(rows, *, title: str = ""):
    """Per flag set (``experiments.rows``): the simulated step split into compute and exposed time,
    and the device peak, side by side."""
    labels = [r["flag set"] for r in rows][::-1]
    rows = rows[::-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.42 * len(rows) + 1.4), sharey=True)
    exposed_t = [r["exposed transfers ms"] for r in rows]
    exposed_c = [r["exposed collectives ms"] for r in rows]
    compute = [r["step ms"] - t - c for r, t, c in zip(rows, exposed_t, exposed_c)]
    y = range(len(rows))
    left.barh(y, compute, color=EVENT_COLORS["compute"], label="compute")
    left.barh(y, exposed_t, left=compute, color=EVENT_COLORS["wait-transfer"], label="exposed transfers")
    left.barh(y, exposed_c, left=[a + b for a, b in zip(compute, exposed_t)], color=EVENT_COLORS["collective"],
              label="exposed collectives")
    left.set_yticks(list(y), labels)
    left.set_xlabel("simulated step (ms)")
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3)
    right.barh(y, [r["device peak GiB"] for r in rows], color=COLORS["activations"])
    right.set_xlabel("device peak (GiB)")
    return _side_by_side(fig, (left, right), title)


def _side_by_side(fig, axes, title: str):
    """Two bar panels sharing their rows: a light grid along the bars, one title."""
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def memory_timeline(dumps: Mapping[str, "object"], *, title: str = "", ax=None):
    """Temp bytes in use over the schedule, one line per compile (``{label: XlaDump}``, from
    ``compiler.compile(..., dump=True)``): device solid, pinned host (``S(5)``) dashed in the same
    colour. The x axis is the position in XLA's schedule (0 = first instruction, 1 = last), so
    steps of different lengths line up; loops count once, as they appear in the schedule."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(12, 4))
    series = {label: (d.temp_timeline(0), d.temp_timeline(5)) for label, d in dumps.items()}
    top = max(max(dev + host, default=0) for dev, host in series.values())
    unit, unit_label, digits = (GiB, "GiB", 1) if top >= GiB else (2**20, "MiB", 0)
    for i, (label, (dev, host)) in enumerate(series.items()):
        color = f"C{i}"
        steps = max(len(dev) - 1, 1)
        ax.plot([k / steps for k in range(len(dev))], [v / unit for v in dev], color=color, lw=1.6,
                label=f"{label}: device (peak {max(dev, default=0) / unit:.{digits}f} {unit_label})")
        if any(host):
            ax.plot([k / steps for k in range(len(host))], [v / unit for v in host], color=color, lw=1.4, ls="--",
                    label=f"{label}: pinned host (peak {max(host) / unit:.{digits}f} {unit_label})")
    ax.set_xlabel("position in XLA's schedule (each loop body once: a forward layer, then a backward layer)")
    ax.set_ylabel(f"temp in use ({unit_label} per device)")
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def timelines(panels: Mapping[str, Sequence], *, unit: float = 1e-3, unit_label: str = "ms"):
    """Gantt charts stacked on one time axis, one per ``{title: events}`` (``timeline`` each)."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.9 * len(panels) + 0.6), sharex=True)
    for ax, (title, events) in zip(axes if len(panels) > 1 else [axes], panels.items()):
        timeline(events, title=title, ax=ax, unit=unit, unit_label=unit_label)
    fig.tight_layout()
    return fig


def residual_bars(kept: Mapping[str, Sequence[str]], sizes: Mapping[str, int], *, title: str = ""):
    """What each policy keeps per layer: one horizontal bar per policy, one segment per named tensor
    (``sizes``: bytes per layer and device), the same colour for a name in every bar."""
    names = list(dict.fromkeys(n for ns in kept.values() for n in ns))
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(kept) + 1.6))
    for row, (policy, ns) in enumerate(reversed(list(kept.items()))):
        left = 0.0
        for n in ns:
            width = sizes[n] / 2**20
            ax.barh(row, width, left=left, color=colors[n], edgecolor="white", linewidth=0.5)
            left += width
        ax.text(left + 4, row, f"{left:.0f}", va="center", fontsize=8)
    ax.set_yticks(range(len(kept)), list(reversed(list(kept))), fontsize=8)
    ax.set_xlabel("MiB kept per layer and device (the backward pass's residuals)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[n]) for n in names]
    ax.legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def largest_batch_bars(rows: Sequence[Mapping], *, title: str = ""):
    """Per policy: the largest batch that fits (sequences per GPU) and the simulated TFLOP/s per GPU
    there, side by side; a policy that fits no batch shows an empty row marked "does not fit"."""
    rows = list(rows)[::-1]
    labels = [r["policy"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.36 * len(rows) + 1.4), sharey=True)
    y = range(len(rows))
    left.barh(y, [r["per GPU"] for r in rows], color=COLORS["activations"])
    right.barh(y, [r["TFLOP/s per GPU"] for r in rows], color=EVENT_COLORS["compute"])
    for i, r in enumerate(rows):
        if not r["per GPU"]:
            left.text(0, i, " does not fit", va="center", fontsize=8, color="#C44E52")
        else:
            right.text(r["TFLOP/s per GPU"], i, f" {r['TFLOP/s per GPU']:.0f}", va="center", fontsize=8)
    left.set_yticks(list(y), labels)
    left.set_xlabel("largest batch that compiles within usable HBM (sequences per GPU)")
    right.set_xlabel("simulated TFLOP/s per GPU at that batch")
    return _side_by_side(fig, (left, right), title)


def step_bars(sims: Mapping[str, object], *, title: str = ""):
    """Simulated steps (``schedule.StepSimulation``) as compute + exposed transfers + exposed
    collectives, with each one's TFLOP/s per GPU at the end of its bar."""
    labels = list(sims)[::-1]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(labels) + 1.5))
    for i, label in enumerate(labels):
        s = sims[label]
        parts = [(s.step_seconds - s.exposed_seconds, "compute", "compute"),
                 (s.exposed_transfer_seconds, "wait-transfer", "exposed host transfers"),
                 (s.exposed_collective_seconds + s.exposed_other_seconds, "collective", "exposed collectives")]
        left = 0.0
        for value, color, name in parts:
            ax.barh(i, value, left=left, color=EVENT_COLORS[color], label=name if i == 0 else None)
            left += value
        if s.tflops_per_gpu is not None:  # model FLOPs: only for a step compiled with its workload
            ax.text(left, i, f"  {s.tflops_per_gpu:.0f} TFLOP/s", va="center", fontsize=9)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("simulated step (s)")
    ax.set_xlim(0, 1.25 * max(s.step_seconds for s in sims.values()))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3)
    ax.set_title(title)
    fig.tight_layout()
    return fig


KIND_COLORS = {"matmul": "#4C72B0", "grouped_matmul": "#64B5CD", "attention": "#8172B2", "other_compute": "#8C8C8C",
               "copy": "#CCB974", "collective:nvlink": "#DD8452", "collective:network": "#C44E52",
               "transfer:d2h": "#55A868", "transfer:h2d": "#2E7D32"}


def time_by_kind_bars(rows: Mapping[str, Mapping[str, float]], *, title: str = "", unit: float = 1.0,
                      unit_label: str = "s"):
    """Busy seconds per op class of simulated steps (``StepSimulation.time_by_kind``, one bar per step):
    where a step's time goes. Streams overlap, so a bar is longer than the step it describes."""
    labels = list(rows)[::-1]
    kinds = [k for k in KIND_COLORS if any(rows[label].get(k) for label in labels)]
    kinds += sorted({k for label in labels for k in rows[label] if k not in KIND_COLORS and rows[label][k]})
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(labels) + 1.6))
    for i, label in enumerate(labels):
        left = 0.0
        for kind in kinds:
            value = rows[label].get(kind, 0.0) / unit
            ax.barh(i, value, left=left, color=KIND_COLORS.get(kind, "#937860"), label=kind if i == 0 else None)
            left += value
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel(f"busy time per op class ({unit_label}; streams overlap)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def measured_vs_simulated(steps, *, title: str = ""):
    """Simulated against measured step time (``comparison.StepError``s), log-log, the held-out half filled, the
    training half hollow and the fresh steps (measured after the band was fixed) as triangles, with the
    diagonal and +-15 % beside it."""
    from ..measuring.comparison import FRESH, HELD_OUT, TRAINING

    fig, ax = plt.subplots(figsize=(6.2, 5.0))
    for group, style in ((TRAINING, {"facecolors": "none", "edgecolors": "#4C72B0", "label": "training half"}),
                         (HELD_OUT, {"color": "#C44E52", "label": "held-out half"}),
                         (FRESH, {"color": "#55A868", "marker": "^", "label": "fresh steps"})):
        mine = [s for s in steps if s.group == group]
        if not mine:
            continue
        ax.scatter([s.measured_seconds * 1e3 for s in mine], [s.simulated_seconds * 1e3 for s in mine], s=30, zorder=3,
                   **style)
    low = min(min(s.measured_seconds, s.simulated_seconds) for s in steps) * 1e3 * 0.8
    high = max(max(s.measured_seconds, s.simulated_seconds) for s in steps) * 1e3 * 1.2
    ax.plot([low, high], [low, high], color="gray", lw=1)
    for k in (0.85, 1.15):
        ax.plot([low, high], [low * k, high * k], color="gray", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ticks = [t for t in (10, 20, 50, 100, 200, 300, 500, 1000, 2000, 3000, 5000, 10000) if low <= t <= high]
    for axis in (ax.xaxis, ax.yaxis):  # plain milliseconds, not 3 x 10^2 crowding its neighbours
        if len(ticks) >= 2:
            axis.set_major_locator(ticker.FixedLocator(ticks))
        axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        axis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("measured step on the TPU v5e (ms)")
    ax.set_ylabel("simulated step (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def throughput_points(panels: Mapping[str, Sequence[Mapping]]) -> dict[str, dict[str, list[tuple]]]:
    """What ``throughput_vs_batch`` draws: panel -> line (a policy, and its mesh where the label does not name it)
    -> [(B per GPU, tokens/s per GPU, band low, band high)] through the batches that fit. The band is each step's
    paired band against the panel's fastest fitting full-remat step (``bands.rank_records``: the ratio's band times
    that step's tokens/s); without a full-remat step, a point's band is the point."""
    import math

    from ..timing import bands

    def line(r):
        mesh = r.get("mesh_name")
        return f"{r['label']} ({mesh})" if mesh and mesh not in r["label"] else r["label"]

    def per_gpu(r):
        return r["batch"] / math.prod(int(n) for n in r["target"].split(":")[1].split("x"))

    drawn = {}
    for name, rows in panels.items():
        fitting = [r for r in rows if r["fits"]]
        base = max((r for r in fitting if r["label"] == "full remat"), key=lambda r: r["tokens_per_second"], default=None)
        lines = drawn[name] = {}
        for r in sorted(fitting, key=lambda r: (line(r), r["batch"])):
            low, high = bands.rank_records(r, base).to_dict()["band"] if base is not None else (1.0, 1.0)
            scale = base["tokens_per_second"] if base is not None else r["tokens_per_second"]
            lines.setdefault(line(r), []).append((per_gpu(r), r["tokens_per_second"], low * scale, high * scale))
    return drawn


def throughput_vs_batch(panels: Mapping[str, Sequence[Mapping]], *, title: str = ""):
    """Simulated tokens/s per GPU against the batch per GPU (B / N), one panel per system and fraction
    (``panels``: the panel's title -> stored step rows, ``benchmarks/bench_central.py``), one line per policy
    and mesh through the batches that fit, each step's paired band against the panel's fastest full-remat step
    shaded (``throughput_points``); where the shading covers the full-remat star, the lab calls the two a tie.
    The drawn numbers are on the figure as ``fig.drawn``."""
    drawn = throughput_points(panels)
    keys = sorted({key for lines in drawn.values() for key in lines})
    colors = {k: plt.get_cmap("tab10")(i % 10) for i, k in enumerate(keys)}
    cols = min(len(panels), 2)
    nrows = -(-len(panels) // cols)
    fig, grid = plt.subplots(nrows, cols, figsize=(4.6 * cols + 3.4, 3.4 * nrows), sharey=True, squeeze=False)
    panes = list(grid.flat)
    fig.drawn = drawn
    named = set()  # each line and the star named once in the legend
    for ax, (name, lines) in zip(panes, drawn.items()):
        for key in keys:
            if key not in lines:
                continue
            x, y, lo, hi = zip(*lines[key])
            ax.plot(x, y, marker="o", ms=4, color=colors[key], label=None if key in named else key)
            named.add(key)
            ax.fill_between(x, lo, hi, color=colors[key], alpha=0.18, lw=0)
            ax.vlines(x, lo, hi, color=colors[key], alpha=0.5, lw=1)
        remat = [point for key, points in lines.items() if key.split(" (")[0] == "full remat" for point in points]
        if remat:  # the step every band of the panel is paired against
            x, y, _, _ = max(remat, key=lambda p: p[1])
            ax.plot([x], [y], marker="*", ms=13, color="black", ls="none",
                    label=None if "_base" in named else "fastest full remat")
            named.add("_base")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("sequences per GPU (B / N)")
        ax.grid(alpha=0.3)
    for ax in panes[len(panels):]:
        ax.set_visible(False)
    for row in grid:
        row[0].set_ylabel("tokens/s per GPU (simulated)")
    handles, labels = [], []
    for ax in panes:
        h, lb = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lb
    fig.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
