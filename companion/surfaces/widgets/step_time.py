"""The step-time explorer (notebook 04): stored compiles replayed for a policy, pipelining, batch and link."""

from __future__ import annotations

import dataclasses

from ...hardware import fit
from ...ground import policies
from ...hardware import targets

from .common import GiB, _on_click_compile, _usable


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
    from ...xla import hlo

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

    from .. import plots

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
