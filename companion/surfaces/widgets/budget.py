"""The budget explorer (notebook 01): model, batch, sequence, policy and target in, the HBM stack of one step out;
the compile behind a button."""

from __future__ import annotations

import dataclasses

from ...memory import budget as budget_lib
from ... import models
from ...ground import policies, sharding
from ...hardware import targets

from .common import GiB, MODELS, SEQUENCES, Snapshot, _on_click_compile, _usable


@dataclasses.dataclass(frozen=True)
class BudgetView:
    """What the explorer shows for one set of inputs: a budget, or a one-line message why not."""

    budget: budget_lib.Budget | None
    target: targets.Target | None
    message: str

    @property
    def ok(self) -> bool:
        return self.budget is not None


def budget_view(model: str, batch: int, seq: int, policy: str, gpu: str, gpus: int, mesh: str,
                attention: str = "flash", mem_fraction: float = targets.DEFAULT_MEM_FRACTION) -> BudgetView:
    """The explorer's content for these inputs (never raises on bad input: the message says why)."""
    try:
        if gpus is None or int(gpus) < 1:
            raise ValueError(f"number of GPUs must be positive, got {gpus}")
        cfg = models.config(model, attention=attention)
        target = targets.target(gpu, int(gpus), mem_fraction=mem_fraction)
        mesh_shape = sharding.parse_mesh(mesh or None, target.num_devices)
        result = budget_lib.estimate(cfg, int(batch), int(seq), policies.resolve(policy), mesh_shape, target=target)
    except ValueError as err:
        return BudgetView(None, None, f"Cannot budget this: {err}")
    return BudgetView(result, target, budget_message(result, target))


def budget_message(result: budget_lib.Budget, target: targets.Target) -> str:
    """The explorer's one line: bytes per device, the verdict against usable HBM, the host bytes."""
    margin = result.margin_bytes / GiB
    verdict = (f"fits: {margin:.1f} GiB of {_usable(target)} to spare" if result.fit.fits_device
               else f"does NOT fit: over {_usable(target)} by {-margin:.1f} GiB")
    if not result.fit.fits_host:
        verdict += (f"; does NOT fit host RAM: {result.host_bytes / GiB:.0f} GiB pinned per GPU over its "
                    f"{result.host_limit_bytes / GiB:.0f} GiB limit")
    if result.at_scheduler_limit:
        verdict += " (at XLA's scheduler limit, where its heap's packing decides: check with XLA)"
    host = f"; {result.host_bytes / GiB:.1f} GiB offloaded to the host" if result.host_bytes else ""
    return f"{target.name}, {result.device_bytes / GiB:.1f} GiB per device: {verdict}{host}"


def budget_figure(view, label: str, title: str, compiled_bytes: float | None = None):
    """The explorer's bar (the budget by category, usable HBM, XLA's peak once checked)."""
    from .. import plots

    return plots.budget_bars({label: view.budget}, hbm_bytes=view.target.usable_hbm_bytes,
                             hbm_label=f"usable HBM ({view.target.mem_fraction:.2f} x {view.target.hbm_bytes / GiB:.1f} GiB)",
                             compiled={label: compiled_bytes} if compiled_bytes else None, title=title)


def budget_snapshot(model: str = "llama3.1-8b", batch: int = 8, seq: int = 4096, policy: str = "full",
                    gpu: str = "h100", gpus: int = 8, mesh: str = "fsdp=-1") -> Snapshot:
    """``budget_explorer``'s default view, as a message and a figure."""
    view = budget_view(model, batch, seq, policy, gpu, gpus, mesh)
    fig = budget_figure(view, policy, f"{model}  B={batch}  S={seq}  on {view.target.name}") if view.ok else None
    return Snapshot(view.message, fig)


def budget_explorer(model: str = "llama3.1-8b", batch: int = 8, seq: int = 4096, policy: str = "full",
                    gpu: str = "h100", gpus: int = 8, mesh: str = "fsdp=-1"):
    """The interactive explorer of notebook 01 (needs ipywidgets and a notebook frontend)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from ...compiling import compiler, train

    style = {"description_width": "70px"}
    controls = {
        "model": w.Dropdown(options=MODELS, value=model, description="model", style=style),
        "batch": w.BoundedIntText(value=batch, min=1, max=1 << 16, description="batch B", style=style),
        "seq": w.Dropdown(options=SEQUENCES, value=seq, description="seq S", style=style),
        "policy": w.Dropdown(options=tuple(policies.PRESETS), value=policy, description="policy", style=style),
        "gpu": w.Dropdown(options=tuple(targets.GPUS), value=gpu, description="GPU", style=style),
        "gpus": w.BoundedIntText(value=gpus, min=0, max=4096, description="GPUs", style=style),
        "mesh": w.Text(value=mesh, description="mesh", continuous_update=False, style=style,
                       placeholder="fsdp=-1 or fsdp=8,tensor=8"),
        "attention": w.Dropdown(options=models.configs.ATTENTION_IMPLS, value="flash", description="attention",
                                style=style),
        "mem_fraction": w.FloatSlider(value=targets.DEFAULT_MEM_FRACTION, min=0.5, max=1.0, step=0.01,
                                      continuous_update=False, description="mem frac", style=style,
                                      tooltip="XLA_PYTHON_CLIENT_MEM_FRACTION: the share of HBM JAX's allocator takes"),
    }
    for control in controls.values():  # narrower than the grid's 230 px columns: no label runs under its neighbour
        control.layout.width = "220px"
    compiled: dict[tuple, float] = {}
    status = w.HTML()
    button = w.Button(description="check with XLA", icon="check", tooltip="compile this step for the target")

    def key(values):
        return tuple(values[k] for k in controls)

    def render(**values):
        view = budget_view(**values)
        status.value = f"<b>{view.message}</b>"
        if not view.ok:
            return
        fig = budget_figure(view, values["policy"], f"{values['model']}  B={values['batch']}  S={values['seq']}  "
                            f"on {view.target.name}", compiled.get(key(values)))
        display(fig)
        plt.close(fig)

    out = w.interactive_output(render, controls)

    def redraw():
        with out:
            out.clear_output(wait=True)
            render(**{k: c.value for k, c in controls.items()})

    def check():
        values = {k: c.value for k, c in controls.items()}
        view = budget_view(**values)
        if not view.ok:
            status.value = f"<b>{view.message}</b>"
            return
        mesh_shape = sharding.active_axes(view.budget.mesh)
        cfg = models.config(values["model"], attention=values["attention"])
        report = train.compile_step(train.trainer(cfg, values["policy"]), compiler.place(view.target, mesh_shape),
                                    values["batch"], values["seq"])
        compiled[key(values)] = report.device.peak_bytes
        redraw()
        error = (view.budget.device_bytes - report.device.peak_bytes) / report.device.peak_bytes
        status.value += (f"<br>XLA: {report.device.peak_bytes / GiB:.2f} GiB per device "
                         f"(budget {error:+.1%}), host {report.host.temp_bytes / GiB:.2f} GiB, compiled in "
                         f"{report.compile_seconds:.1f} s")

    _on_click_compile(button, status, check)
    grid = w.GridBox(list(controls.values()), layout=w.Layout(grid_template_columns="repeat(4, 230px)"))
    return w.VBox([grid, w.HBox([button]), status, out])
