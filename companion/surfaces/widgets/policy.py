"""The per-tensor policy explorer (notebooks 02-03): each checkpoint name remat, device or offload, the budget and
link time it gives."""

from __future__ import annotations

import dataclasses

from ...memory import budget as budget_lib
from ...hardware import fit
from ... import models
from ...ground import policies, sharding
from ...hardware import targets

from .common import GiB, SEQUENCES, Snapshot, _on_click_compile, _usable
from .budget import budget_figure


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

    from ...compiling import compiler, train

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
