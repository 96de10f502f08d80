"""What a compile reports: device and host memory, the workload, and ``CompileReport`` (the scheduled program, its
buffers, XLA's cost analysis)."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ...xla import descriptors
from ...hardware import fit as fit_rule
from ...xla import dump as xla_dump
from ...hardware import flags as xla_flags
from ...xla import hlo

from .placement import Placement, _fmt_axes


# ----------------------------------------------------------------------------- report

@dataclasses.dataclass(frozen=True)
class DeviceMemory:
    """HBM bytes per device as XLA's buffer assignment sees them.

    ``peak_bytes`` is the device footprint: arguments + outputs + temp - aliased (donated
    outputs reuse their arguments' buffers). ``xla_peak_bytes`` is XLA's own
    ``peak_memory_in_bytes``, which in jaxlib 0.10.2 is arguments + the *largest temp allocation
    of any memory space*: with more host temp than device temp it counts the host buffer.
    """

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    xla_peak_bytes: int
    generated_code_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """Pinned host bytes per device (memory space S(5))."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """Pinned host bytes the step holds: arguments + outputs + temp - aliased."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes


@dataclasses.dataclass(frozen=True)
class Workload:
    """What a compiled step computes for its model, whatever the policy, kernels or flags: MaxText's
    model FLOPs (``companion.flops``) and the tokens, per device and step — the numerators of
    TFLOP/s, MFU and tokens/s."""

    model_flops: float
    tokens: float
    description: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class CompileReport:
    """What one compile of one function for one target gave, per device.

    "Fits" compares the device peak with the *usable* HBM: JAX's allocator limit, ``mem_fraction``
    of the card (``XLA_PYTHON_CLIENT_MEM_FRACTION``, default 0.75), not the whole card.
    ``offload.checks`` holds the memcpy-descriptor check of the sliced host transfers
    (``companion.descriptors``; openxla/xla #46231).
    """

    target: str
    gpu: str
    backend: str
    num_devices: int
    mesh: dict[str, int]
    hbm_bytes: int
    mem_fraction: float
    usable_hbm_bytes: int
    device: DeviceMemory
    host: HostMemory
    offload: hlo.OffloadSummary
    collectives: hlo.CollectiveSummary
    flops: hlo.FlopSummary
    compile_seconds: float
    flag_set: xla_flags.FlagSet
    hlo_text: str = dataclasses.field(repr=False)
    compiler_log: str = dataclasses.field(default="", repr=False)
    dump: xla_dump.XlaDump | None = dataclasses.field(default=None, repr=False)
    workload: Workload | None = None  # set by the lab's step compiles (train.compile_step / compile_layer_stack)
    host_limit_bytes: int | None = None  # pinned host bytes a GPU may hold (``fit.host_limit_bytes``)
    # XLA's own cost analysis of the program (``compiled.cost_analysis()``: flops, bytes accessed, and on a TPU
    # optimal_seconds); each counts a while body once, whatever its trips (checked on XLA:TPU: a 4096^3 matmul
    # in a loop of 1, 2, 4 or 8 trips gives the same flops)
    xla_cost: dict | None = None

    @property
    def fit(self):
        """The fits rule (``companion.fit``): the compiled device peak against usable HBM, the pinned host
        bytes against the host RAM behind the GPU."""
        limit = self.host_limit_bytes if self.host_limit_bytes is not None else self.host.total_bytes
        return fit_rule.Fit(self.device.peak_bytes, self.usable_hbm_bytes, self.host.total_bytes, limit)

    @property
    def flags(self) -> dict[str, Any]:
        """Every XLA flag this compile ran with (the preset, overrides and workarounds)."""
        return dict(self.flag_set.flags)

    @property
    def offload_modelled(self) -> bool:
        return self.backend != "cpu"

    @property
    def margin_bytes(self) -> int:
        """Usable HBM left after the peak (negative: by how much the step does not fit)."""
        return self.usable_hbm_bytes - self.device.peak_bytes

    @property
    def fits(self) -> bool:
        return self.fit.fits

    @property
    def scheduler_limit_bytes(self) -> int:
        """The memory limit XLA's latency-hiding scheduler plans for (``GetSchedulerMemoryLimit``):
        (allocator limit - the step's device arguments and outputs, aliased ones once) x slop / 100.
        A compile-only run gets the same base as a GPU run (see ``Target.target_config_text``)."""
        slop = self.flag_set.flags.get("xla_gpu_memory_limit_slop_factor", 95)
        io = self.device.argument_bytes + self.device.output_bytes - self.device.alias_bytes
        return max(0, (self.usable_hbm_bytes - io) * int(slop) // 100)

    @property
    def logged_scheduler_limit_bytes(self) -> int | None:
        """The limit as the scheduler logged it ("Current limit: N"), when XLA's INFO log is on
        (``TF_CPP_MIN_LOG_LEVEL=0``); None otherwise."""
        found = re.findall(r"Current limit: (\d+)", self.compiler_log)
        return int(found[-1]) if found else None

    @property
    def xla_rematerialized(self) -> int:
        """Instructions XLA's own rematerialization pass cloned to fit the memory limit (it names each
        clone ``*.remat``): a "saving" policy that fits only because XLA recomputed shows here (and in
        its log), not in the policy. MaxText's GPU flags disable the pass; XLA:TPU runs it."""
        return sum(1 for instr in self.module.instructions() if ".remat" in instr.name)

    @property
    def compiler_warnings(self) -> list[str]:
        """XLA's warning and error log lines from this compile (e.g. rematerialization giving up)."""
        return [line for line in self.compiler_log.splitlines() if line[:1] in ("W", "E") and "] " in line]

    @functools.cached_property
    def module(self) -> hlo.HloModule:
        """The scheduled HLO, parsed (once: the compile that made this report already did)."""
        return hlo.parse_module(self.hlo_text)

    def hlo_lines(self, *words: str, width: int = 160, limit: int = 10) -> list[str]:
        """Scheduled-HLO lines containing every one of ``words``, cut to ``width`` characters."""
        hits = [line.strip() for line in self.hlo_text.splitlines() if all(w in line for w in words)]
        return [h if len(h) <= width else h[: width - 3] + "..." for h in hits[:limit]]

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "gpu": self.gpu,
            "backend": self.backend,
            "offload_modelled": self.offload_modelled,
            "num_devices": self.num_devices,
            "mesh": dict(self.mesh),
            "hbm_bytes": self.hbm_bytes,
            "mem_fraction": self.mem_fraction,
            "usable_hbm_bytes": self.usable_hbm_bytes,
            "fits": self.fits,
            "margin_bytes": self.margin_bytes,
            "scheduler_limit_bytes": self.scheduler_limit_bytes,
            "device": {**dataclasses.asdict(self.device), "peak_bytes": self.device.peak_bytes},
            "host": dataclasses.asdict(self.host),
            "offload": {**self.offload.to_dict(), "checks": self.offload.checks.to_dict()},
            "collectives": self.collectives.to_dict(),
            "flops": self.flops.total,
            "flops_by_phase": dict(self.flops.by_phase),
            "compile_seconds": round(self.compile_seconds, 3),
            "flags": {k: xla_flags.format_value(v) for k, v in self.flags.items()},
            "flag_set": self.flag_set.to_dict(),
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def summary(self) -> str:
        """A few lines for a terminal or a notebook cell."""
        gib = 2 ** 30
        d, h, o = self.device, self.host, self.offload
        lines = [
            f"{self.target} ({self.gpu}, {self.num_devices} devices, mesh {_fmt_axes(self.mesh)}, backend {self.backend})",
            f"  device  peak {d.peak_bytes / gib:8.3f} GiB (arguments {d.argument_bytes / gib:.3f}, outputs "
            f"{d.output_bytes / gib:.3f}, temp {d.temp_bytes / gib:.3f}, aliased {d.alias_bytes / gib:.3f})",
            f"  host    temp {h.temp_bytes / gib:8.3f} GiB, args {h.argument_bytes / gib:.3f}, out {h.output_bytes / gib:.3f}",
            f"  offload {o.d2h_ops} device->host and {o.h2d_ops} host->device ops ({o.async_pairs} async), "
            f"{o.d2h_bytes_per_step / gib:.3f} GiB out / {o.h2d_bytes_per_step / gib:.3f} GiB back per step",
            f"  compute {self.flops.total / 1e12:.2f} TFLOP of matmuls per step"
            + (f" ({self.flops.recompute / 1e12:.2f} recomputed)" if self.flops.recompute else ""),
            f"  HBM     {self.usable_hbm_bytes / gib:.1f} GiB usable ({self.mem_fraction:.2f} of "
            f"{self.hbm_bytes / gib:.1f} GiB): " + (
                f"fits with {self.margin_bytes / gib:.2f} GiB to spare" if self.margin_bytes >= 0
                else f"does NOT fit, over by {-self.margin_bytes / gib:.2f} GiB")
            + ("" if self.fit.fits_host else f"; {self.fit.reason().split('; ')[-1].removeprefix('does not fit: ')}"),
            f"  flags   {self.flag_set.describe()}",
        ]
        checks = self.offload.checks
        if self.offload.transfers:
            lines.append(f"  engines {self.offload.engines()}")
            lines += [f"  why     {hlo.ENGINE_NAMES[e]}: {hlo.ENGINE_SOURCES[e]}"
                      for e in sorted({t.engine for t in self.offload.transfers})]
        if checks.verdict != "none":
            lines.append(f"  offload memcpy descriptors: {checks.verdict}" + (
                f" ({checks.warning()})" if checks.warning() else "")
                + (f"; {self.offload.kernel_transfers} transfer(s) run as SM kernels, not copy engines"
                   if self.offload.kernel_transfers else ""))
        if not self.offload_modelled:
            lines.append("  note    CPU backend: host offload is not modelled (host bytes are always 0 here)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _cost_analysis(compiled) -> dict | None:
    """XLA's scalar cost figures (per-operand breakdowns left out), or None where the backend gives none."""
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return None
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis
    return {k: float(v) for k, v in (analysis or {}).items() if "{" not in k} or None


def _report(compiled, placement: Placement, seconds: float, flag_set: xla_flags.FlagSet, log: str,
            dump_dir: str | None, workload: Workload | None) -> CompileReport:
    stats = compiled.memory_analysis()
    text = compiled.as_text()
    module = hlo.parse_module(text)
    device = DeviceMemory(
        argument_bytes=int(stats.argument_size_in_bytes),
        output_bytes=int(stats.output_size_in_bytes),
        temp_bytes=int(stats.temp_size_in_bytes),
        alias_bytes=int(stats.alias_size_in_bytes),
        xla_peak_bytes=int(getattr(stats, "peak_memory_in_bytes", 0)),
        generated_code_bytes=int(stats.generated_code_size_in_bytes),
    )
    host = HostMemory(
        argument_bytes=int(stats.host_argument_size_in_bytes),
        output_bytes=int(stats.host_output_size_in_bytes),
        temp_bytes=int(stats.host_temp_size_in_bytes),
        alias_bytes=int(stats.host_alias_size_in_bytes),
    )
    target = placement.target
    report = CompileReport(
        target=target.name,
        gpu=target.gpu.name,
        backend=placement.backend,
        num_devices=placement.num_devices,
        mesh=dict(placement.mesh.shape),
        hbm_bytes=target.gpu.hbm_bytes,
        mem_fraction=target.mem_fraction,
        usable_hbm_bytes=target.usable_hbm_bytes,
        device=device,
        host=host,
        offload=dataclasses.replace(hlo.offload_summary(module), checks=(
            descriptors.DescriptorChecks(()) if target.is_tpu else descriptors.check(module))),  # #46231: XLA:GPU's
        collectives=hlo.collective_summary(module),
        flops=hlo.flop_summary(module, target.accelerator.grouped_gemm_tile_rows),
        compile_seconds=seconds,
        flag_set=flag_set,
        hlo_text=text,
        compiler_log=log,
        dump=xla_dump.read(Path(dump_dir)) if dump_dir else None,
        workload=workload,
        host_limit_bytes=fit_rule.host_limit_bytes(target),
        xla_cost=_cost_analysis(compiled),
    )
    report.__dict__["module"] = module  # the cached property's value: parsing a 671B module takes a second
    return report
