"""The planner explorer (notebook 07): a model, accelerator and GPU count in, the planner's candidates by the
analytic step out."""

from __future__ import annotations

import dataclasses
import html

from ... import models
from ...ground import sharding
from ...hardware import targets

from .common import GiB, SEQUENCES, Snapshot, _on_click_compile


# ----------------------------------------------------------------------------- the planner (notebook 07)

PLAN_MODELS = ("llama3.1-405b", "deepseek-v3-671b", "llama3.1-70b", "llama3.1-8b", "mixtral-8x7b", "tiny-llama",
               "tiny-deepseek")
MOE_CAPACITIES = (("worst case (-1, MaxText's default)", -1.0), ("2x the balanced rows", 2.0),
                  ("1.25x the balanced rows", 1.25))


@dataclasses.dataclass(frozen=True)
class PlanView:
    """The planner's budget stage for one setting: its best candidates, or a one-line message why not."""

    found: object | None  # plan.Search
    message: str
    rows: tuple[dict, ...] = ()


def plan_view(model: str = "deepseek-v3-671b", gpu: str = "gb200", gpus: int = 512, seq: int = 4096,
              mem_fraction: float = 0.85, capacity: float = -1.0, mesh: str = "fsdp=64,expert=8",
              top: int = 5) -> PlanView:
    """``plan.search`` (the budget, no compile: under a second) for these inputs: the best ``top``
    candidates by the analytic step, each with its device and host bytes (never raises on bad input).
    ``capacity``: MaxText's ``ragged_buffer_factor`` for a model with routed experts (ignored, and said
    so, for a dense one)."""
    from ...planning import plan

    try:
        cfg = models.config(model)
        note = ""
        if cfg.moe is not None:
            cfg = cfg.with_moe(ragged_buffer_factor=float(capacity))
        elif capacity != -1:
            note = f" ({model} has no routed experts: the MoE capacity does not apply)"
        target = targets.target(gpu, int(gpus), mem_fraction=mem_fraction)
        found = plan.search(cfg, target, int(seq), (mesh or "").strip() or None)
    except ValueError as err:
        return PlanView(None, f"Cannot plan this: {err}")
    if not found.ranked:
        return PlanView(found, f"nothing fits {target.name} at S = {seq}, fraction {mem_fraction:.2f}: "
                               f"{found.searched} candidates priced{note}")
    rows = tuple({"rank": i + 1, "candidate": c.label(),
                  "mesh": ",".join(f"{k}={v}" for k, v in sharding.active_axes(m).items()),
                  "device GiB": f"{c.device_bytes / GiB:.1f}", "host GiB": f"{c.host_bytes / GiB:.1f}",
                  "analytic tokens/s per GPU": f"{c.estimated_tokens_per_second:,.0f}"}
                 for i, (m, c) in enumerate(found.ranked[:top]))
    best = found.ranked[0][1]
    return PlanView(found, f"{model} on {target.name}, S = {seq}, fraction {mem_fraction:.2f}: {found.searched} "
                           f"candidates priced, {len(found.ranked)} fit; best by the analytic step: {best.label()} "
                           f"({best.device_bytes / GiB:.1f} GiB on the device, {best.host_bytes / GiB:.1f} GiB pinned)"
                           f"{note}. Analytic ranks only: the compile settles it.", rows)


def plan_snapshot(**inputs) -> Snapshot:
    """``plan_explorer``'s default view without a kernel: the message (the table is in the cell above)."""
    return Snapshot(plan_view(**inputs).message, None)


def plan_explorer(model: str = "deepseek-v3-671b", gpu: str = "gb200", gpus: int = 512, seq: int = 4096,
                  mem_fraction: float = 0.85, capacity: float = -1.0, mesh: str = "fsdp=64,expert=8"):
    """Notebook 07's planner: fraction, sequence, MoE capacity and mesh -> the budget's best candidates;
    "compile and simulate" runs ``plan.plan`` on the best one (a compile: seconds for an 8B, ~20 s for the 671B)."""
    import ipywidgets as w
    from IPython.display import Markdown, display

    from ...planning import plan
    from .. import tables

    style = {"description_width": "90px"}
    controls = {
        "model": w.Dropdown(options=PLAN_MODELS, value=model, description="model", style=style),
        "gpu": w.Dropdown(options=tuple(targets.GPUS), value=gpu, description="GPU", style=style),
        "gpus": w.BoundedIntText(value=gpus, min=1, max=8192, description="GPUs", style=style),
        "seq": w.Dropdown(options=SEQUENCES, value=seq, description="seq S", style=style),
        "mem_fraction": w.FloatSlider(value=mem_fraction, min=0.5, max=0.95, step=0.01, continuous_update=False,
                                      description="mem frac", style=style),
        "capacity": w.Dropdown(options=MOE_CAPACITIES, value=capacity, description="MoE capacity", style=style),
        "mesh": w.Text(value=mesh, description="mesh", continuous_update=False, style=style,
                       placeholder="fsdp=64,expert=8 (empty: the planner's meshes)"),
    }
    for control in controls.values():
        control.layout.width = "260px"
    status = w.HTML()
    button = w.Button(description="compile and simulate", icon="check", tooltip="plan.plan on the best candidate")

    def render(**values):
        view = plan_view(**values)
        status.value = f"<b>{html.escape(view.message)}</b>"
        if view.rows:
            display(Markdown(tables.markdown(view.rows)))

    out = w.interactive_output(render, controls)

    def check():
        values = {k: c.value for k, c in controls.items()}
        view = plan_view(**values)
        if view.found is None or not view.found.ranked:
            status.value = f"<b>{html.escape(view.message)}</b>"
            return
        found = view.found
        chosen = plan.plan(found.config, found.target, found.seq, found.ranked[0][0], max_compiles=1)
        status.value += "<br><pre>" + html.escape(chosen.summary().split("\n  tensors")[0]) + "</pre>"

    _on_click_compile(button, status, check)
    grid = w.GridBox(list(controls.values()), layout=w.Layout(grid_template_columns="repeat(3, 270px)"))
    return w.VBox([grid, w.HBox([button]), status, out])
