"""Markdown tables for notebooks and terminals (plain strings: deterministic, diffable)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..xla import hlo
from ..hardware import targets

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


def gpus(mem_fraction: float = targets.DEFAULT_MEM_FRACTION) -> str:
    """The target catalog: one row per GPU, with the usable HBM at ``mem_fraction`` and its own host link."""
    rows = []
    for g in targets.GPUS.values():
        rows.append({
            "key": g.key, "GPU": g.name, "HBM marketed": g.hbm_marketing, "HBM (GiB, as CUDA reports it)": f"{g.hbm_bytes / GiB:.1f}",
            f"usable at {mem_fraction:.2f} (GiB)": f"{targets.allocator_limit_bytes(g.hbm_bytes, mem_fraction) / GiB:.1f}",
            "HBM TB/s": f"{g.hbm_bandwidth / 1e12:.2f}", "bf16 dense TFLOP/s": f"{g.bf16_dense_flops / 1e12:,.0f}",
            "SMs": g.sm_count, "cc": g.cc, "host link": g.host_link.name,
            "default topology": str(targets.topology(targets.DEFAULT_TOPOLOGY[g.key], g.gpus_per_host)),
        })
    return markdown(rows)


def host_links() -> str:
    """Each host link: nominal and achievable GB/s per direction, who shares it, and per GPU when all offload."""
    rows = []
    for k, link in targets.HOST_LINKS.items():
        rows.append({
            "key": k, "link": link.name, "nominal GB/s each way": f"{link.nominal_per_direction / 1e9:,.0f}",
            "one GPU alone, out / back": f"{link.achievable_d2h / 1e9:,.0f} / {link.achievable_h2d / 1e9:,.0f}",
            "GPUs per link": link.gpus_per_link,
            "host memory GB/s (GPUs sharing)": f"{link.host_memory_bytes_per_s / 1e9:,.0f} ({link.gpus_per_host_memory})",
            "per GPU, all sharing GPUs busy": f"{link.bandwidth_per_gpu('d2h') / 1e9:,.0f} / "
                                              f"{link.bandwidth_per_gpu('h2d') / 1e9:,.0f}",
            "used by": ", ".join(g.key for g in targets.GPUS.values() if g.host_link.key == k) or "what-if",
        })
    return markdown(rows)


def link_assumptions() -> str:
    """What each host link's figures assume (not public), one line each."""
    return "\n".join(f"- **{link.name}**: {link.assumption}" for link in targets.HOST_LINKS.values() if link.assumption)


def reports(named: Mapping[str, Any]) -> str:
    """Compile reports side by side: ``{label: CompileReport}``, bytes per device in GiB."""
    rows = []
    for label, r in named.items():
        rows.append({
            "": label, "backend": r.backend, "device peak": gib(r.device.peak_bytes),
            "device temp": gib(r.device.temp_bytes), "host temp": gib(r.host.temp_bytes),
            "d2h ops": r.offload.d2h_ops, "h2d ops": r.offload.h2d_ops,
            "GiB to host / step": gib(r.offload.d2h_bytes_per_step),
            "recomputed TFLOP / step": f"{r.flops.recompute / 1e12:.2f}",
            "fits usable HBM": "yes" if r.fits else "no",
        })
    return markdown(rows)


def budget_terms(budget, space: str | None = None) -> str:
    """A budget's terms: what, where, kind, GiB per device and formula."""
    rows = [{"term": t.label, "where": t.space, "kind": t.kind, "GiB / device": gib(t.bytes), "formula": t.formula}
            for t in budget.terms if t.bytes and (space is None or t.space == space)]
    rows.append({"term": "**device total**", "where": "device", "kind": "", "GiB / device": f"**{gib(budget.device_bytes)}**",
                 "formula": f"peak phase: {budget.peak_phase}"})
    if budget.host_bytes:
        rows.append({"term": "**host total**", "where": "host", "kind": "", "GiB / device": f"**{gib(budget.host_bytes)}**",
                     "formula": ""})
    return markdown(rows)


def budget_vs_xla(pairs: Mapping[str, tuple]) -> str:
    """``{label: (Budget, CompileReport)}``: analytic against compiled, device and host, per device."""
    rows = []
    for label, (b, r) in pairs.items():
        static = sum(t.bytes for t in b.terms if t.kind == "static" and t.space == "device")
        rows.append({
            "": label, "budget device": gib(b.device_bytes), "XLA device": gib(r.device.peak_bytes),
            "error": f"{(b.device_bytes - r.device.peak_bytes) / r.device.peak_bytes:+.1%}",
            "budget args": gib(static), "XLA args": gib(r.device.argument_bytes),
            "budget host": gib(b.host_bytes), "XLA host": gib(r.host.temp_bytes + r.host.argument_bytes),
        })
    return markdown(rows)


def live_at_peak(report, top: int = 10) -> str:
    """The largest temp buffers alive at the compiled step's peak (needs ``compile(..., dump=True)``)."""
    if report.dump is None:
        raise ValueError("this report has no XLA dump: compile with dump=True")
    module = hlo.parse_module(report.dump.module_text)  # the dump's names, which live ranges use
    instructions = {i.name: i for i in module.instructions()}
    shapes = {name: i.shape for name, i in instructions.items()}

    def op_of(name: str) -> str:
        instr = instructions.get(name)
        if instr is None:
            return ""
        if instr.op_name:
            return instr.op_name
        for callee in instr.called:  # a fusion without metadata: ask what it fuses
            for inner in module.computations.get(callee, hlo.Computation(callee, [])).instructions[::-1]:
                if inner.op_name:
                    return inner.op_name
        return ""

    timeline = report.dump.temp_timeline()
    step = timeline.index(max(timeline))
    rows = []
    for buffer, size, _ in report.dump.live_at(step)[:top]:
        name, _, index = buffer.partition("{")
        op_name = op_of(name)
        shape = shapes.get(name)
        for i in [int(x) for x in index.rstrip("}").split(",") if x]:
            shape = shape.elements[i] if shape is not None else None
        if op_name:
            phase = "backward" if "transpose(" in op_name else "forward"
            recomputed = " (recomputed)" if "rematted_computation" in op_name else ""
            last = op_name.split("/")[-1]
            what = "forward scan output (saved residuals)" if last == "while" else f"{phase}{recomputed}: {last}"
        elif name.startswith(("param", "arg_tuple")):
            what = "backward loop state (gradient accumulators)"
        else:
            what = "layout copy (transposed gradient accumulator)" if "transpose" in name else ""
        rows.append({"MiB": f"{size / 2**20:,.0f}", "shape": f"`{shape}`", "made by": what})
    return markdown(rows)


def rules_of_thumb(rows_in: Mapping[str, tuple]) -> str:
    """``{label: (Budget, [PeerEstimate, ...], CompileReport)}``: every estimate against XLA."""
    rows = []
    for label, (b, peers, r) in rows_in.items():
        truth = r.device.peak_bytes
        row = {"": label, "XLA": gib(truth), "budget": f"{gib(b.device_bytes)} ({(b.device_bytes - truth) / truth:+.0%})"}
        for p in peers:
            name = p.rule.split(" (")[0]
            row[name + " + Korthikanti"] = f"{gib(p.device_bytes)} ({(p.device_bytes - truth) / truth:+.0%})"
        rows.append(row)
    return markdown(rows)


def policy_budgets(budgets: Mapping[str, Any]) -> str:
    """``{label: Budget}`` (with a target): device and host GiB per device, the verdict against usable
    HBM, against the host RAM behind the GPU (``fit``), and the recompute each policy adds."""
    rows = []
    for label, b in budgets.items():
        margin, fit = b.margin_bytes, b.fit
        verdict = "" if margin is None else "fits" if margin >= 0 else f"over by {-margin / GiB:.1f}"
        if margin is not None and b.at_scheduler_limit:
            verdict += " (at the scheduler's limit: compile to check)"
        host = ("" if fit is None else "fits" if fit.fits_host
                else f"over by {(fit.host_bytes - fit.host_limit_bytes) / GiB:.1f}")
        rows.append({"policy": label, "device GiB": f"{b.device_bytes / GiB:.1f}",
                     "host GiB": f"{b.host_bytes / GiB:.1f}", "usable HBM": verdict, "host RAM": host,
                     "recompute TFLOP": f"{b.recompute_flops / 1e12:,.0f}"})
    return markdown(rows)


def largest_batches(rows: Iterable[Mapping[str, Any]]) -> str:
    """``plan.LargestBatch`` rows (as dicts, with a ``label``): the budget's largest batch, the
    compiler's, the compiled peaks at it and one step further, and the simulated TFLOP/s there."""
    out = []
    for r in rows:
        devices = math.prod(r["mesh"].values())
        out.append({"policy": r["label"], "budget B": r["budget_batch"], "compiled B": r["batch"],
                    "per GPU": f"{r['batch'] / devices:g}",
                    "peak GiB": f"{r['device_bytes'] / GiB:.1f}" if r["batch"] else "-",
                    "next step GiB": f"{r['next_device_bytes'] / GiB:.1f}",
                    "step s": f"{r['step_seconds']:.2f}" if r["batch"] else "-",
                    "TFLOP/s per GPU": f"{r['tflops_per_gpu']:.0f}" if r["batch"] else "-",
                    "exposed transfers s": f"{r['exposed_transfer_seconds']:.2f}" if r["batch"] else "-",
                    "exposed collectives s": f"{r['exposed_collective_seconds']:.2f}" if r["batch"] else "-",
                    "budget off by": f"{r['budget_off_by_steps']:+d} step(s)"})
    return markdown(out)


def compared_steps(rows: Sequence[Mapping[str, Any]], against: str | None = None) -> str:
    """Stored step rows (``benchmarks/bench_central.py``): whether each fits (device and host), its peak and
    pinned host bytes, the simulated step with its absolute band (or, for a model family no published run
    calibrated, ``bands.uncalibrated``'s note), tokens/s per GPU, and, against the row
    labelled ``against`` (same system, batch and sweep), the tokens/s ratio with the paired band (a tie
    where the ranking flips inside it). A row that does not fit shows what it would take, unranked."""
    from ..timing import bands

    base = next((r for r in rows if r["label"] == against), None) if against else None
    out = []
    for r in rows:
        band, off = r.get("band"), bands.uncalibrated(r.get("model"))
        vs = "-"
        if r is not base and base is not None and "sweep" in r and "sweep" in base:
            vs = bands.rank_records(r, base).short()
        elif not r["fits"]:
            vs = "not ranked: does not fit"
        over = r["device_peak_bytes"] - r["usable_hbm_bytes"]
        fits = "yes" if r["fits"] else f"no: over by {over / GiB:.1f} GiB" if over > 0 else "no: host RAM"
        out.append({"policy": r["label"], "B": r["batch"], "fits": fits,
                    "peak GiB": f"{r['device_peak_bytes'] / GiB:.1f} of {r['usable_hbm_bytes'] / GiB:.1f}",
                    "host GiB": f"{r['host_bytes'] / GiB:.1f}",
                    "step s": (f"({r['step_seconds']:.2f}, would take)" if not band
                               else f"{r['step_seconds']:.2f} ({off})" if off
                               else f"{r['step_seconds']:.2f} ({band['low_seconds']:.2f}-{band['high_seconds']:.2f})"),
                    "tokens/s per GPU": f"{r['tokens_per_second']:,.0f}" if r["fits"] else "-",
                    f"vs {against}" if against else "vs": vs,
                    "recompute TFLOP": f"{r['recompute_flops'] / 1e12:,.0f}",
                    "exposed transfers s": f"{r['exposed_transfer_seconds']:.2f}",
                    "exposed collectives s": f"{r['exposed_collective_seconds']:.2f}"})
    return markdown(out)


def pipelining_verdicts(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per naive offload row that carries ``conditions`` (``companion.pipelining``, stored by
    ``bench_central``): the four conditions, what they expect, and what the pipelined twin (the same
    case with "pipelined" for "naive" in its label) simulated against it, with the paired band."""
    from ..timing import bands

    def case(r):
        return (r["model"], r["target"], r["batch"], r["seq"], r["mem_fraction"])

    out = []
    for r in rows:
        if "conditions" not in r:
            continue
        twin = next((p for p in rows if case(p) == case(r) and p["label"] == r["label"].replace("naive", "pipelined")),
                    None)
        simulated = "-"
        if twin is not None and "sweep" in twin:
            simulated = bands.rank_records(twin, r).short()
        elif twin is not None:
            simulated = "pipelined does not fit"
        conditions = {k: v for k, v in r["conditions"].items() if k != "expect_gain"}
        out.append({"case": f"{r['model']} on {r['target']}, B={r['batch']}, S={r['seq']}, fraction {r['mem_fraction']:g}: "
                            f"{r['label'].rsplit(',', 1)[0]}",
                    **conditions, "pipelined vs naive (simulated, paired band)": simulated})
    return markdown(out)


def workaround_costs(rows: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[str, str]]) -> str:
    """The #46231 workaround's price on stored step rows (``steps.record``'s ``workaround``): for each (a, b) pair of
    labels of one system and batch, a's tokens/s over b's with the transfers priced as copy engines (the lab's
    old pricing: what the bytes cost once the fix ships), at the nominal kernel pricing, and over the kernel
    range's corners, and what follows (``workaround.compare``: "unknown on this link" where it flips)."""
    from ..timing import workaround

    def pricing(r) -> "workaround.Pricing":
        if "workaround" in r:
            return workaround.Pricing.from_dict(r["workaround"])
        # a step without transfers costs the same under every pricing
        names = [workaround.COPY_ENGINE, workaround.NOMINAL, *workaround.corner_names(r["target"])]
        return workaround.Pricing(r["label"], "", 0, 0, dict.fromkeys(names, r["step_seconds"]),
                                  r["tokens_per_second"] * r["step_seconds"])

    out = []
    for a_label, b_label in pairs:
        a = next(r for r in rows if r["label"] == a_label)
        b = next(r for r in rows if r["label"] == b_label and r["batch"] == a["batch"] and r["target"] == a["target"])
        pa, pb = pricing(a), pricing(b)
        pb = pb if pb.link else dataclasses.replace(pb, link=pa.link)
        pa = pa if pa.link else dataclasses.replace(pa, link=pb.link)
        c = workaround.compare(pa, pb)
        low, high = c.corner_range
        out.append({"system": a["target"], "B": a["batch"], "a vs b": f"{a_label} vs {b_label}",
                    "a's transfer kernels": pa.kernel_transfers,
                    "a's step: copy engine / kernel (range), s": (
                        f"{pa.seconds[workaround.COPY_ENGINE]:.3f} / {pa.seconds[workaround.NOMINAL]:.3f} "
                        f"({min(pa.corners.values()):.3f}-{max(pa.corners.values()):.3f})"),
                    "a/b tokens/s, copy engine": f"{c.ratios[workaround.COPY_ENGINE]:.3f}x",
                    "a/b, kernel nominal": f"{c.ratios[workaround.NOMINAL]:.3f}x",
                    "a/b, kernel range": f"{low:.3f}-{high:.3f}x",
                    "verdict": c.verdict if c.verdict in (workaround.UNKNOWN, workaround.TIE) else f"{c.verdict} faster"})
    return markdown(out)
