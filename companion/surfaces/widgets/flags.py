"""The XLA flag explorer (notebook 05): scheduler flags toggled, the compiled run with exactly those flags shown."""

from __future__ import annotations

import dataclasses

from .common import _on_click_compile


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
    from ...hardware import flags as xla_flags

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

    from ...xla import hlo
    from .. import plots

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
