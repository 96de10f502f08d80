"""Notebook widgets over pure functions: each ``*_view`` function is what a widget shows, tested
without a frontend; the widget only collects inputs, calls it, and draws.

``budget_explorer()``: model, batch, sequence, policy, target, GPUs and mesh -> the per-device
budget as a stacked bar against the target's HBM, fits / does not fit with the margin; a
"check with XLA" button compiles the same step and overlays the compiler's number.
"""

from __future__ import annotations

import dataclasses
import html

from . import budget as budget_lib
from . import fit, models, policies, sharding, targets

GiB = 2**30
SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384, 32768)
MODELS = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "deepseek-v3-671b", "tiny-llama", "tiny-deepseek")


@dataclasses.dataclass(frozen=True)
class BudgetView:
    """What the explorer shows for one set of inputs: a budget, or a one-line message why not."""

    budget: budget_lib.Budget | None
    target: targets.Target | None
    message: str

    @property
    def ok(self) -> bool:
        return self.budget is not None


def _usable(target: targets.Target) -> str:
    return (f"{target.usable_hbm_bytes / GiB:.0f} GiB usable ({target.mem_fraction:.2f} of "
            f"{target.hbm_bytes / GiB:.0f} GiB HBM)")


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
    from . import plots

    return plots.budget_bars({label: view.budget}, hbm_bytes=view.target.usable_hbm_bytes,
                             hbm_label=f"usable HBM ({view.target.mem_fraction:.2f} x {view.target.hbm_bytes / GiB:.1f} GiB)",
                             compiled={label: compiled_bytes} if compiled_bytes else None, title=title)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What a widget shows for its default inputs, drawn without a kernel: the static fallback
    under each widget cell (GitHub and nbviewer show no live widget)."""

    message: str
    figure: object | None  # matplotlib Figure

    def _repr_markdown_(self) -> str:
        return f"**Without a live kernel, the widget's default view:** {self.message}"


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

    from . import compiler, train

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


def _on_click_compile(button, status, run) -> None:
    """Run ``run()`` (a compile) on click: button disabled meanwhile, errors appended to ``status``."""

    def clicked(_):
        button.disabled, label = True, button.description
        button.description = "compiling..."
        try:
            run()
        except Exception as err:  # noqa: BLE001 (a compile can fail many ways: every one is shown, none is lost)
            first = str(err).splitlines()[0] if str(err) else ""
            status.value += f"<br>XLA check failed: {type(err).__name__}: {html.escape(first)}"
        finally:
            button.disabled, button.description = False, label

    button.on_click(clicked)


# ----------------------------------------------------------------------------- per-tensor policies

LAYER_NAMES = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "context", "out_proj",
               "mlpwi_0", "mlpwi_1", "mlpwo")


@dataclasses.dataclass(frozen=True)
class PolicyView:
    """A per-tensor policy's budget and a matmul-only time estimate (naive offload: not overlapped)."""

    budget: budget_lib.Budget | None
    target: targets.Target | None
    link: targets.HostLink | None
    message: str

    @property
    def ok(self) -> bool:
        return self.budget is not None

    @property
    def compute_seconds(self) -> float:
        b = self.budget
        return (b.step_flops + b.recompute_flops) / self.target.gpu.bf16_dense_flops

    @property
    def recompute_seconds(self) -> float:
        return self.budget.recompute_flops / self.target.gpu.bf16_dense_flops

    @property
    def transfer_seconds(self) -> float:
        """Every offloaded residual written once (forward) and read once (backward), at the per-GPU
        bandwidth while every GPU sharing the link offloads."""
        host = self.budget.host_bytes
        return self.link.transfer_seconds(host, "d2h") + self.link.transfer_seconds(host, "h2d")

    @property
    def naive_step_seconds(self) -> float:
        return self.compute_seconds + self.transfer_seconds


def link_choices(gpu: str) -> list[tuple[str, str]]:
    """(label, key) of the host links to price a GPU's transfers on: its own first, then only the
    links a GPU with the same compute has (an H100's FLOP/s with GH200's C2C, a GH200's with PCIe),
    each marked what-if, and Vera Rubin's C2C as the next generation's what-if for Blackwell. Never
    a link priced against another GPU generation's FLOP/s."""
    g = targets.gpu(gpu)
    own = g.host_link
    peers = {other.host_link.key for other in targets.GPUS.values()
             if other.architecture == g.architecture and other.bf16_dense_flops == g.bf16_dense_flops}
    if g.architecture == targets.BLACKWELL:
        peers.add("nvlink_c2c_vera_rubin")
    return [(f"{own.name} (this GPU's)", own.key)] + [
        (f"{link.name} (what-if)", key) for key, link in targets.HOST_LINKS.items() if key in peers - {own.key}]


def policy_view(spec: dict, model: str = "llama3.1-8b", batch: int = 8, seq: int = 4096, gpu: str = "h100",
                gpus: int = 8, mesh: str = "", link: str | None = None,
                mem_fraction: float = targets.DEFAULT_MEM_FRACTION) -> PolicyView:
    """Budget and time of a ``custom`` policy ``{name: remat|device|offload}`` (never raises).

    Transfers are priced on the GPU's own host link unless ``link`` names another, which the message
    then calls a what-if."""
    try:
        cfg = models.config(model)
        target = targets.target(gpu, int(gpus), link=link, mem_fraction=mem_fraction)
        emitted = models.checkpoint_names(cfg)
        spec = {k: v for k, v in spec.items() if k in emitted}
        policy = policies.resolve(spec, emitted=emitted)
        result = budget_lib.estimate(cfg, int(batch), int(seq), policy, sharding.parse_mesh(mesh or None, target.num_devices),
                                     target=target)
    except ValueError as err:
        return PolicyView(None, None, None, f"Cannot budget this: {err}")
    view = PolicyView(result, target, target.link, "")
    fit = "fits" if result.fits else "does NOT fit"
    what_if = f" (what-if: a {target.gpu.key} has {target.gpu.host_link.name})" if target.link_is_what_if else ""
    if result.host_bytes:
        transfers = (f"transfers {view.transfer_seconds * 1e3:.1f} ms over {target.link.name}{what_if}; naive step >= "
                     f"{view.naive_step_seconds * 1e3:.1f} ms (matmuls at peak + transfers, nothing overlapped)")
    else:
        transfers = f"nothing offloaded; step >= {view.compute_seconds * 1e3:.1f} ms (matmuls at peak)"
    message = (f"device {result.device_bytes / GiB:.1f} GiB ({fit} in {_usable(target)}), host "
               f"{result.host_bytes / GiB:.1f} GiB; recompute {result.recompute_flops / 1e12:.1f} TFLOP "
               f"({view.recompute_seconds * 1e3:.1f} ms at peak); {transfers}")
    return dataclasses.replace(view, message=message)


def policy_snapshot(model: str = "llama3.1-8b", batch: int = 8, seq: int = 4096, gpu: str = "h100",
                    gpus: int = 8) -> Snapshot:
    """``policy_explorer``'s default view (every tensor kept on the device), as a message and a figure."""
    view = policy_view(default_policy_spec(), model, batch, seq, gpu, gpus)
    fig = budget_figure(view, "custom", f"{model} B={batch} S={seq} on {view.target.name}") if view.ok else None
    return Snapshot(view.message, fig)


def default_policy_spec() -> dict[str, str]:
    """The policy explorer's starting point: every named tensor on the device, but ``mlpwo``, which
    is never a residual (its toggle is disabled at ``remat``)."""
    return {n: "remat" if n == "mlpwo" else "device" for n in LAYER_NAMES}


def policy_explorer(offload: bool = True, model: str = "llama3.1-8b", batch: int = 8, seq: int = 4096,
                    gpu: str = "h100", gpus: int = 8):
    """Per-tensor toggles (remat / device / offload) for one layer's named tensors -> budget and time;
    "check with XLA" compiles the layer stack with that custom policy."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from . import compiler, train

    choices = ("remat", "device", "offload") if offload else ("remat", "device")
    toggle_style = {"description_width": "140px", "button_width": "70px"}
    toggles = {n: w.ToggleButtons(options=choices, value="device", description=n, style=toggle_style)
               for n in LAYER_NAMES}
    # the scan carry is always a residual (kept, or offloaded); mlpwo never is (notebook 02): no remat choice
    # for the one, no choice at all for the other, each saying why
    carry = toggles["decoder_layer_input"]
    carry.options = ("device", "offload") if offload else ("device",)
    carry.tooltips = ["the scan carry: always a residual"] * len(carry.options)
    toggles["mlpwo"].value, toggles["mlpwo"].disabled = "remat", True
    toggles["mlpwo"].tooltips = ["never a residual: its output only feeds the residual add"] * len(choices)
    style = {"description_width": "60px"}
    setup = {
        "model": w.Dropdown(options=("llama3.1-8b", "llama3.1-70b", "llama3.1-405b"), value=model, description="model", style=style),
        "batch": w.BoundedIntText(value=batch, min=1, max=1 << 16, description="batch", style=style),
        "seq": w.Dropdown(options=SEQUENCES, value=seq, description="seq", style=style),
        "gpu": w.Dropdown(options=tuple(targets.GPUS), value=gpu, description="GPU", style=style),
        "gpus": w.BoundedIntText(value=gpus, min=0, max=4096, description="GPUs", style=style),
        "mesh": w.Text(value="", description="mesh", continuous_update=False, style=style,
                       placeholder="fsdp=-1 or fsdp=8,tensor=8"),
        "link": w.Dropdown(options=link_choices(gpu), value=targets.gpu(gpu).host_link.key,
                           description="link", style=style, disabled=not offload),
    }

    def gpu_changed(change):  # a new GPU brings its own link; the others stay what-ifs
        setup["link"].options = link_choices(change["new"])
        setup["link"].value = targets.gpu(change["new"]).host_link.key

    setup["gpu"].observe(gpu_changed, names="value")
    status = w.HTML()
    button = w.Button(description="check with XLA", icon="check")

    def spec_of(values):
        return {n: values[n] for n in LAYER_NAMES}

    def render(**values):
        view = policy_view(spec_of(values), **{k: values[k] for k in setup})
        status.value = f"<b>{view.message}</b>"
        if view.ok:
            fig = budget_figure(view, "custom", f"{values['model']} B={values['batch']} S={values['seq']} on {view.target.name}")
            display(fig)
            plt.close(fig)

    out = w.interactive_output(render, {**toggles, **setup})

    def check():  # the full train step, as the budget above: like with like
        values = {**{n: t.value for n, t in toggles.items()}, **{k: c.value for k, c in setup.items()}}
        view = policy_view(spec_of(values), **{k: values[k] for k in setup})
        if not view.ok:
            status.value = f"<b>{view.message}</b>"
            return
        placement = compiler.place(view.target, sharding.active_axes(view.budget.mesh))
        emitted = models.checkpoint_names(values["model"])
        spec = {n: v for n, v in spec_of(values).items() if n in emitted}
        report = train.compile_step(train.trainer(values["model"], spec), placement, values["batch"], values["seq"])
        error = (view.budget.device_bytes - report.device.peak_bytes) / report.device.peak_bytes
        status.value += (f"<br>XLA, full step: device {report.device.peak_bytes / GiB:.2f} GiB (budget {error:+.1%}), "
                         f"host {(report.host.temp_bytes + report.host.argument_bytes) / GiB:.2f} GiB, "
                         f"{report.flops.recompute / 1e12:.2f} TFLOP recomputed, "
                         f"{report.offload.d2h_ops + report.offload.h2d_ops} host transfers; compiled in "
                         f"{report.compile_seconds:.1f} s")

    _on_click_compile(button, status, check)
    left = w.VBox(list(toggles.values()))
    right = w.VBox(list(setup.values()) + [button])
    return w.VBox([w.HBox([left, right]), status, out])


# ----------------------------------------------------------------------------- step time (notebook 04)

STEP_POLICIES = ("full", "minimal", "minimal_offloaded")


@dataclasses.dataclass(frozen=True)
class StepTimeView:
    """One compiled step replayed on one link: the simulation, the loop body to draw, a message."""

    result: object | None  # schedule.StepSimulation
    body: str | None  # the first loop body with host transfers (else the first loop), for the timeline
    message: str

    @property
    def ok(self) -> bool:
        return self.result is not None


def step_time_key(policy: str, pipelined: bool, batch: int) -> tuple[str, bool, int]:
    """The cache key of a compiled step: pipelining only matters when the policy offloads."""
    return policy, bool(pipelined) and policies.resolve(policy).offloads, int(batch)


def step_time_view(simulators, policy: str, pipelined: bool, batch: int, link: str) -> StepTimeView:
    """What the step-time explorer shows for these inputs, from ``simulators`` (a mapping of
    ``step_time_key`` -> ``schedule.Simulator``: compiles made beforehand). Never raises."""
    from . import hlo

    try:
        key = step_time_key(policy, pipelined, batch)
        link_obj = targets.host_link(link)
    except ValueError as err:
        return StepTimeView(None, None, f"Cannot simulate this: {err}")
    sim = simulators.get(key)
    if sim is None:
        return StepTimeView(None, None, f"{policy}{' pipelined' if key[1] else ''} at batch {batch} is not compiled "
                                        "yet: press 'compile'")
    result = sim.run(link_obj)
    loops = hlo.loops(sim.module)
    with_transfers = [lp.body for lp in loops if any(e.lane in ("d2h", "h2d") for e in result.lane_events(lp.body))]
    body = (with_transfers or [lp.body for lp in loops] or [None])[0]
    what_if = f" (what-if: a {sim.target.gpu.key} has {sim.target.gpu.host_link.name})" \
        if link_obj.key != sim.target.gpu.host_link.key else ""
    verdict = fit.check(result.peak_device_bytes, result.host_bytes, sim.target)
    fits = "fits" if verdict.fits_device else "does NOT fit"
    message = (f"{result.summary()}{what_if}; device {result.peak_device_bytes / GiB:.1f} GiB ({fits} in "
               f"{_usable(sim.target)}), host {result.host_bytes / GiB:.1f} GiB"
               + ("" if verdict.fits_host else f" (does NOT fit host RAM: over {verdict.host_limit_bytes / GiB:.0f} GiB "
                                               "per GPU)"))
    return StepTimeView(result, body, message)


def step_time_explorer(simulators, compile_step, *, batches=(1, 2, 4, 8, 16), batch: int = 8,
                       gpu: str = "h100"):
    """Policy, pipelining, batch and link -> the simulated step and one loop iteration's timeline.
    ``simulators``: compiled steps (``step_time_key`` -> ``schedule.Simulator``), added to when the
    "compile" button runs ``compile_step(policy, pipelined, batch)`` for a missing one."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from . import plots

    style = {"description_width": "70px"}
    controls = {
        "policy": w.Dropdown(options=STEP_POLICIES, value="minimal_offloaded", description="policy", style=style),
        "pipelined": w.Checkbox(value=True, description="pipelined offload"),
        "batch": w.Dropdown(options=batches, value=batch, description="batch B", style=style),
        "link": w.Dropdown(options=[(f"{lk.name} ({'its own' if key == targets.gpu(gpu).host_link.key else 'what-if'})",
                                     key) for key, lk in targets.HOST_LINKS.items()],
                           value=targets.gpu(gpu).host_link.key, description="link", style=style),
    }
    status = w.HTML()
    button = w.Button(description="compile", icon="cogs", tooltip="compile this policy and batch for the target")

    def render(**values):
        view = step_time_view(simulators, **values)
        status.value = f"<b>{view.message}</b>"
        if view.ok and view.body:
            fig = plots.timeline(view.result.lane_events(view.body),
                                 title=f"one iteration of {view.body} ({values['policy']}, B={values['batch']})")
            display(fig)
            plt.close(fig)

    out = w.interactive_output(render, controls)

    def compile_missing():
        values = {k: c.value for k, c in controls.items()}
        key = step_time_key(values["policy"], values["pipelined"], values["batch"])
        if key not in simulators:
            simulators[key] = compile_step(*key)
        with out:
            out.clear_output(wait=True)
            render(**values)

    _on_click_compile(button, status, compile_missing)
    return w.VBox([w.HBox(list(controls.values())[:2]), w.HBox(list(controls.values())[2:] + [button]), status, out])


# ----------------------------------------------------------------------------- flags (notebook 05)

FLAG_TOGGLES = {
    "pipelined_offload": "--xla_gpu_enable_pipelined_host_offloading=true",
    "async_limit_4": "--xla_gpu_experimental_parallel_async_compute_limit=4",
    "no_double_buffering": "--xla_gpu_enable_while_loop_double_buffering=false",
    "no_pipelined_collectives": "--xla_gpu_pipeline_all_gather=off "
                                "--xla_gpu_pipeline_reduce_scatter=off "
                                "--xla_gpu_pipeline_all_reduce=off",
    "scheduler_off": "--xla_gpu_enable_latency_hiding_scheduler=false "
                     "--xla_gpu_enable_analytical_sol_latency_estimator=false",
}


@dataclasses.dataclass(frozen=True)
class FlagView:
    """One combination of the explorer's toggles: its flags, and its compiled run if there is one."""

    spec: str  # the flags on top of MaxText's, as an XLA_FLAGS string
    run: object | None  # experiments.FlagRun
    message: str

    @property
    def ok(self) -> bool:
        return self.run is not None


def flag_spec(**toggles: bool) -> str:
    """The flags the chosen toggles add to MaxText's (``FLAG_TOGGLES``); unknown toggles are an error."""
    unknown = set(toggles) - set(FLAG_TOGGLES)
    if unknown:
        raise ValueError(f"unknown flag toggle(s) {', '.join(sorted(unknown))}; choose from: {', '.join(FLAG_TOGGLES)}")
    return " ".join(FLAG_TOGGLES[name] for name, on in toggles.items() if on)


def flag_view(runs, **toggles: bool) -> FlagView:
    """The explorer's content: the run among ``runs`` (``experiments.FlagRun``s) compiled with exactly
    these flags, or a message saying it is not compiled yet. Never raises."""
    from . import flags as xla_flags

    try:
        spec = flag_spec(**toggles)
        wanted = xla_flags.resolve(spec or None).flags
    except ValueError as err:
        return FlagView("", None, f"Cannot use these flags: {err}")
    run = next((r for r in runs if r.flag_set.flags == wanted), None)
    if run is None:
        return FlagView(spec, None, f"not compiled yet ({spec or 'MaxText flags'}): press 'compile'")
    row = run.row(runs[0])
    versus = "" if run is runs[0] else f"; tokens/s vs {runs[0].label}: {row['vs baseline']}"
    return FlagView(spec, run, f"{run.label}: step {row['step ms']} ms (exposed transfers {row['exposed transfers ms']} "
                               f"ms, collectives {row['exposed collectives ms']} ms), device peak "
                               f"{row['device peak GiB']} GiB, host transfers (covered) {row['host transfers (covered)']}"
                               + versus)


def flag_explorer(runs: list, compile_run):
    """Checkboxes of ``FLAG_TOGGLES`` -> the cached run with those flags and one loop iteration's
    timeline; the "compile" button runs ``compile_run(label, spec)`` (returning an
    ``experiments.FlagRun``) for a combination not compiled yet and adds it to ``runs``."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from . import hlo, plots

    boxes = {name: w.Checkbox(value=False, description=name.replace("_", " ")) for name in FLAG_TOGGLES}
    status = w.HTML()
    button = w.Button(description="compile", icon="cogs")

    def render(**toggles):
        view = flag_view(runs, **toggles)
        status.value = f"<b>{view.message}</b>"
        if view.ok:
            body = next((lp.body for lp in hlo.loops(view.run.simulator.module)), None)
            events = view.run.simulation.lane_events(body) if body else view.run.simulation.lane_events()
            fig = plots.timeline(events, title=f"{view.run.label}: one iteration of {body}")
            display(fig)
            plt.close(fig)

    out = w.interactive_output(render, boxes)

    def compile_missing():
        toggles = {k: b.value for k, b in boxes.items()}
        view = flag_view(runs, **toggles)
        if not view.ok and view.spec is not None:
            label = " + ".join(k.replace("_", " ") for k, on in toggles.items() if on) or "MaxText's flags"
            runs.append(compile_run(label, view.spec))
        with out:
            out.clear_output(wait=True)
            render(**toggles)

    _on_click_compile(button, status, compile_missing)
    return w.VBox([w.HBox(list(boxes.values())[:3]), w.HBox(list(boxes.values())[3:] + [button]), status, out])


# ----------------------------------------------------------------------------- the planner (notebook 06)

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
    from . import plan

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
    """Notebook 06's planner: fraction, sequence, MoE capacity and mesh -> the budget's best candidates;
    "compile and simulate" runs ``plan.plan`` on the best one (a compile: seconds for an 8B, ~20 s for the 671B)."""
    import ipywidgets as w
    from IPython.display import Markdown, display

    from . import plan, tables

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
