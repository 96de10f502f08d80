"""Compile a jittable function for a GPU or TPU target and report what XLA did with memory.

Five ways to get there, chosen per ``place(...)`` call:

* ``"cuda"``: the CUDA PJRT plugin's compile-only topology, built from the target's
  ``GpuTargetConfigProto``. Needs no GPU: the real GPU compiler (scheduler, host offload
  passes, buffer assignment) runs on the CPU of a laptop or a CI machine.
* ``"gpu"``: the GPUs of this machine, when there are any (the numbers are then also the
  ones the allocator will see at run time).
* ``"libtpu"``: libtpu's compile-only TPU topology (``companion.libtpu``): XLA:TPU on a machine
  without a TPU. Its flags are libtpu's (``libtpu.resolve``), never the GPU set or workaround.
* ``"tpu"``: the TPU chip of this machine (the compile the lab then runs: ``companion.measure``).
* ``"cpu"``: the CPU backend, when the CUDA plugin is missing (macOS, Windows). Reports say
  so: the CPU compiler drops host-offload annotations, so host bytes are always 0 there.

``"auto"`` picks the local accelerators when they match the target, else the compile-only
topology, else (GPU targets) the CPU with a one-line warning.

Where XLA:TPU differs from XLA:GPU in what the lab reads: a program over the chip's HBM is refused
at compile time (``DoesNotFit``, with the bytes it needed) rather than compiled and reported over;
loops carry no ``known_trip_count`` (``hlo`` reads the trip count from the loop's condition); dots
are ``convolution``s inside fusions; host transfers are native ``dynamic-(update-)slice-start``
ops on ``S(5)`` buffers, not fusions; the cost analysis counts a loop body once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import descriptors
from . import fit as fit_rule
from . import dump as xla_dump
from . import flags as xla_flags
from . import hlo, libtpu, lowering, report_cache, stderr
from .targets import Target

BACKENDS = ("auto", "cuda", "gpu", "libtpu", "tpu", "cpu")
COMPILE_ONLY = ("cuda", "libtpu")  # backends that compile for a topology with no device behind it

# ----------------------------------------------------------------------------- backend


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """What this process can compile for."""

    platform: str  # jax.default_backend(): 'gpu' or 'tpu' on such a machine, else 'cpu'
    local_devices: tuple[str, ...]  # device kinds of this machine
    cuda_plugin: bool  # the CUDA PJRT plugin is installed: compile-only GPU targets work
    xla_flags_at_start: str  # XLA_FLAGS when the backend started (XLA reads it only then)
    startup_log: str  # what the backend wrote to stderr while starting
    libtpu: bool = False  # libtpu is installed: compile-only TPU targets work

    @property
    def can_compile_for_gpu_targets(self) -> bool:
        return self.cuda_plugin or self.platform == "gpu"

    def describe(self) -> str:
        if self.platform in ("gpu", "tpu"):
            where = (f"{len(self.local_devices)} local {self.platform.upper()}(s): "
                     f"{', '.join(sorted(set(self.local_devices)))}")
        else:
            where = "no local GPU or TPU (the CPU backend runs arrays)"
        how = ("GPU targets compile through the CUDA plugin's compile-only topology"
               if self.cuda_plugin else "CUDA plugin missing: only the CPU backend (offload not modelled)")
        tpu = ("; TPU targets through libtpu's compile-only topology" if self.libtpu
               else "; libtpu missing: no TPU targets")
        return f"{where}; {how}{tpu}"


@functools.cache  # the backend itself is process-global: it starts once
def backend() -> BackendInfo:
    """Start JAX's backend (once, with its log captured) and describe it.

    ``XLA_FLAGS`` is validated first: XLA aborts the whole process on a flag it does not know,
    so a typo becomes a ``ValueError`` here instead of a dead kernel.
    """
    env_flags = os.environ.get("XLA_FLAGS", "")
    xla_flags.parse(env_flags)  # raises ValueError naming the bad flag and close matches
    libtpu.check_environment(os.environ)  # libtpu reads LIBTPU_INIT_ARGS when the TPU backend starts
    with stderr.capture() as log:
        devices = jax.devices()
    return BackendInfo(
        platform=jax.default_backend(),
        local_devices=tuple(d.device_kind for d in devices),
        cuda_plugin=_cuda_plugin_installed(),
        xla_flags_at_start=env_flags,
        startup_log=log.text,
        libtpu=libtpu.installed(),
    )


def _cuda_plugin_installed() -> bool:
    try:
        return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
    except ModuleNotFoundError:  # no jax_plugins namespace at all (a TPU VM's JAX)
        return False


def warn_if_xla_flags_changed() -> None:
    """``XLA_FLAGS`` is read once, when the backend starts: later edits are silently ignored."""
    info = backend()
    now = os.environ.get("XLA_FLAGS", "")
    if now != info.xla_flags_at_start:
        warnings.warn(
            f"XLA_FLAGS changed after the backend started (was {info.xla_flags_at_start!r}, "
            f"now {now!r}); XLA read it once at start, so the change has no effect. "
            "Pass flags=... to compile() instead: those apply per compile.", stacklevel=3)


# ----------------------------------------------------------------------------- placement


@dataclasses.dataclass(frozen=True)
class Placement:
    """A target, the devices standing in for it, and a named mesh over them."""

    target: Target
    mesh: Mesh
    backend: str  # 'cuda' / 'libtpu' (compile-only topologies), 'gpu' / 'tpu' (local devices) or 'cpu'

    @property
    def num_devices(self) -> int:
        return self.mesh.devices.size

    @property
    def offload_modelled(self) -> bool:
        return self.backend != "cpu"

    def sharding(self, spec: PartitionSpec | tuple | None = None) -> NamedSharding:
        spec = spec if isinstance(spec, PartitionSpec) else PartitionSpec(*(spec or ()))
        return NamedSharding(self.mesh, spec)

    def abstract(self, shape: tuple[int, ...], dtype: Any = jnp.float32,
                 spec: PartitionSpec | tuple | None = None) -> jax.ShapeDtypeStruct:
        """A global-shape argument placeholder sharded over this placement's mesh."""
        return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype), sharding=self.sharding(spec))

    def like(self, tree: Any, spec: PartitionSpec | tuple | None = None) -> Any:
        """Abstract copies of a pytree of arrays (or ShapeDtypeStructs), all laid out by ``spec``
        (default: replicated on every device)."""
        return jax.tree.map(lambda a: self.abstract(a.shape, a.dtype, spec), tree)


def place(target: Target, mesh_axes: Mapping[str, int] | None = None, *, backend_kind: str = "auto",
          target_config: str | None = None) -> Placement:
    """Devices for ``target`` and a mesh named by ``mesh_axes`` (default: one axis 'fsdp').

    The product of the mesh axis sizes must equal the target's number of GPUs. ``target_config``
    replaces the rendered ``GpuTargetConfigProto`` text of a compile-only topology (experiments:
    what a field changes).
    """
    if backend_kind not in BACKENDS:
        raise ValueError(f"unknown backend {backend_kind!r}; choose one of {', '.join(BACKENDS)}")
    n = target.num_devices
    axes = dict(mesh_axes or {"fsdp": n})
    for name, size in axes.items():
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"mesh axis {name!r} has size {size!r}; sizes must be positive integers")
    if _prod(axes.values()) != n:
        raise ValueError(f"mesh {_fmt_axes(axes)} has {_prod(axes.values())} devices but target "
                         f"{target.name} has {n}; make the axis sizes multiply to {n}")
    info = backend()
    if target.is_tpu:
        kind = _tpu_backend(target, info, backend_kind)
        return Placement(target, _tpu_mesh(target, axes, kind), kind)
    if backend_kind in ("libtpu", "tpu"):
        raise ValueError(f"backend {backend_kind!r} compiles for TPU targets; {target.name} is a GPU")
    kind = backend_kind
    if kind == "auto":
        if info.platform == "gpu" and _local_gpus_match(target):
            kind = "gpu"
        elif info.cuda_plugin:
            kind = "cuda"
        else:
            warnings.warn("the CUDA PJRT plugin (jax-cuda12-plugin) is not installed on this platform: "
                          "compiling on the CPU backend instead; reports are marked 'cpu' and show no "
                          "host offload (the CPU compiler drops it)", stacklevel=2)
            kind = "cpu"
    if kind == "cuda":
        if not info.cuda_plugin:
            raise ValueError("backend 'cuda' needs the CUDA PJRT plugin: pip install "
                             "'jax-cuda12-plugin==0.10.2' 'jax-cuda12-pjrt==0.10.2' (Linux only)")
        devices = list(_topology(target_config or target.target_config_text(), target.topology.spec).devices)
    elif kind == "gpu":
        devices = jax.devices("gpu") if info.platform == "gpu" else []
        if len(devices) < n:
            raise ValueError(f"backend 'gpu' needs {n} local GPUs for {target.name}, this machine has {len(devices)}")
        devices = devices[:n]
    else:
        devices = jax.devices("cpu")
        if len(devices) < n:
            raise ValueError(
                f"the CPU backend has {len(devices)} device(s) but {target.name} needs {n}; pick a "
                f"1-GPU target, or start Python with XLA_FLAGS=--xla_force_host_platform_device_count={n}")
        devices = devices[:n]
    mesh = Mesh(np.asarray(devices, dtype=object).reshape(tuple(axes.values())), tuple(axes))
    return Placement(target, mesh, kind)


def _tpu_backend(target: Target, info: BackendInfo, backend_kind: str) -> str:
    """``tpu`` (this machine's chip) or ``libtpu`` (the compile-only topology) for a TPU target."""
    local = info.platform == "tpu" and all(target.accelerator.matches_device_kind(d) for d in info.local_devices)
    if backend_kind == "auto":
        return "tpu" if local else "libtpu"
    if backend_kind == "tpu" and not local:
        raise ValueError(f"backend 'tpu' runs on this machine's {target.accelerator.device_kind}; it has "
                         f"{', '.join(sorted(set(info.local_devices))) or 'none'} (backend 'libtpu' compiles without one)")
    if backend_kind not in ("tpu", "libtpu"):
        raise ValueError(f"{target.name} is a TPU: backend 'libtpu' (compile-only) or 'tpu' (this machine's chip), "
                         f"not {backend_kind!r}")
    return backend_kind


def _tpu_mesh(target: Target, axes: Mapping[str, int], kind: str) -> Mesh:
    devices = jax.devices("tpu")[: target.num_devices] if kind == "tpu" else list(libtpu.topology(target.accelerator).devices)
    return Mesh(np.asarray(devices, dtype=object).reshape(tuple(axes.values())), tuple(axes))


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _fmt_axes(axes: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in axes.items())


def _local_gpus_match(target: Target) -> bool:
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    return len(gpus) >= target.num_devices and all(target.gpu.matches_device_kind(d.device_kind) for d in gpus)


@functools.cache
def _topology(target_config: str, spec: str):
    from jax.experimental import topologies

    with stderr.capture():
        return topologies.get_topology_desc(platform="cuda", target_config=target_config, topology=spec)


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


def compile(fn: Callable, *args, placement: Placement,
            flags: str | Mapping[str, Any] | xla_flags.FlagSet | None = None, workarounds: bool = True,
            dump: bool | str | Path = False, static_argnums=(), donate_argnums=(),
            host_arguments: Sequence[bool] | None = None, workload: Workload | None = None,
            executable: bool = False) -> CompileReport:
    """Lower and compile ``fn`` for ``placement`` with abstract ``args``; return the report.

    ``args`` are pytrees of ``jax.ShapeDtypeStruct`` (see ``Placement.abstract``). ``flags`` are
    XLA flags for this compile only, validated first (see ``flags.resolve``): by default MaxText's
    GPU flags (``maxtext_gpu``); ``"none"`` for XLA's defaults; flags alone go on top of the
    default. ``workarounds`` adds the lab's fixes for the installed jaxlib (named in the report).
    ``dump=True`` also reads XLA's buffer assignment, live ranges and the scheduler's estimated
    schedule into ``report.dump`` (from a temporary folder, removed afterwards); a path keeps them.
    ``host_arguments``: one flag per leaf of ``args`` (``jax.tree.leaves``), True for arrays that
    live in pinned host memory between steps (MaxText's optimizer and parameter offload).
    ``workload``: the model FLOPs and tokens the step computes, for throughput (``Workload``).
    Where ``$OFFLOAD_LAB_REPORT_CACHE`` names a folder (the test targets), a step compiled before with
    the same program, flags and target is that compile's report (``companion.report_cache``).
    ``executable=True`` (a placement on local devices: ``companion.measure``) returns ``(report, compiled)``,
    the executable the report describes; the report cache is then left alone.
    """
    if executable and placement.backend in COMPILE_ONLY:
        raise ValueError(f"backend {placement.backend!r} compiles for a topology with no device: nothing to run")
    warn_if_xla_flags_changed()
    tpu = placement.target.is_tpu
    flag_set = libtpu.resolve(flags) if tpu else xla_flags.resolve(flags, workarounds=workarounds)
    options = flag_set.compiler_options()
    if hasattr(fn, "lower") and (static_argnums or donate_argnums):
        raise ValueError("fn is already jitted: give static_argnums/donate_argnums to jax.jit, not to compile()")
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn, static_argnums=static_argnums, donate_argnums=donate_argnums)
    options = {**options, **deviceless_options(placement, options)}
    cache = kernel_cache_file(placement)
    if cache:
        options = {**options, "xla_gpu_kernel_cache_file": cache}
    dump_dir = (tempfile.mkdtemp(prefix="xla_dump_") if dump is True else str(dump)) if dump else None
    if dump_dir:
        options = {**options, "xla_dump_to": dump_dir, "xla_dump_hlo_as_text": True,
                   "xla_dump_latency_hiding_schedule": True}
    elif "xla_dump_to" in xla_flags.parse(backend().xla_flags_at_start):
        options = {**options, "xla_dump_to": ""}  # a run's own dump folder is not the lab's (flags.LAB_OWNED)
    try:
        with stderr.capture() as log:
            start = time.perf_counter()
            platform = "tpu" if tpu else "cpu" if placement.backend == "cpu" else "cuda"
            with lowering.lowering_for(platform), jax.set_mesh(placement.mesh), _compute_capability(placement):
                lowered = jitted.lower(*args)
            if host_arguments is not None:
                _mark_host_arguments(lowered, host_arguments, len(jax.tree.leaves(args)))
            _refuse_aborting_combinations(flag_set, lowered)
            entry = None if dump_dir or executable else _report_key(lowered, options, placement)
            stored = report_cache.load(entry) if entry else None
            if stored is not None:
                return dataclasses.replace(stored, workload=workload)
            try:
                compiled = lowered.compile(compiler_options=options)
            except Exception as err:  # XLA reports bad flag values as JaxRuntimeError
                if tpu:
                    raise _tpu_refusal(err, placement, flag_set, time.perf_counter() - start) from None
                if cache is None:
                    raise ValueError(f"XLA refused the compile for {placement.target.name}: "
                                     f"{str(err).splitlines()[0]}") from None
                compiled = _compile_without_cache(lowered, options, placement)
            seconds = time.perf_counter() - start
        report = _report(compiled, placement, seconds, flag_set, log.text, dump_dir, workload)
        if entry:
            report_cache.store(entry, report)
        return (report, compiled) if executable else report
    finally:
        if dump is True:
            shutil.rmtree(dump_dir, ignore_errors=True)


class DoesNotFit(ValueError):
    """XLA:TPU refused a program over the chip's HBM at compile time (``RESOURCE_EXHAUSTED``): a verdict,
    with the bytes it needed and had (``libtpu.out_of_memory``), not a crash."""

    def __init__(self, message: str, target: str, needed_bytes: int, available_bytes: int, flag_set,
                 compile_seconds: float):
        super().__init__(message)
        self.target, self.needed_bytes, self.available_bytes = target, needed_bytes, available_bytes
        self.flag_set, self.compile_seconds = flag_set, compile_seconds

    @property
    def over_bytes(self) -> int:
        return self.needed_bytes - self.available_bytes

    def to_dict(self) -> dict:
        return {"target": self.target, "fits": False, "needed_bytes": self.needed_bytes,
                "available_bytes": self.available_bytes, "message": str(self), "compile_seconds": self.compile_seconds}


def _tpu_refusal(err: Exception, placement: Placement, flag_set, seconds: float) -> ValueError:
    """XLA:TPU's refusal in one line: ``DoesNotFit`` for a program over HBM, else a ValueError."""
    text = str(err)
    line = next((part.strip() for part in text.splitlines() if "RESOURCE_EXHAUSTED" in part), text.splitlines()[0])
    sizes = libtpu.out_of_memory(text)
    if sizes is None:
        return ValueError(f"XLA:TPU refused the compile for {placement.target.name}: {line}")
    gib = 2**30
    return DoesNotFit(f"does NOT fit {placement.target.name}: XLA:TPU needs {sizes[0] / gib:.2f} GiB of "
                      f"{sizes[1] / gib:.2f} GiB HBM and refused the compile ({line})",
                      placement.target.name, sizes[0], sizes[1], flag_set, seconds)


# jax.custom_partitioning (cuDNN attention's partitioner) names its Python callback by address: another
# address each lowering, the same program
_CALLBACK_ADDRESS = re.compile(r'(@CustomSPMDPartitioning\([^)]*\) \{api_version = \d+ : i32, backend_config = )"\d+"')


# what XLA logs during the compile (kept in the report: ``compiler_log``) follows these
_LOG_SETTINGS = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE")


def _report_key(lowered, options: Mapping[str, Any], placement: Placement) -> str | None:
    """The compile's entry in the report cache (``companion.report_cache``), or None where it is off."""
    if report_cache.folder() is None:
        return None
    mesh = placement.mesh
    program = _CALLBACK_ADDRESS.sub(r'\1"callback"', lowered.as_text())
    return report_cache.key(program, repr(sorted(_without_kernel_cache(options).items())), repr(placement.target),
                            placement.backend, repr(dict(mesh.shape)), repr(mesh.devices.tolist()),
                            backend().xla_flags_at_start, repr([os.environ.get(v) for v in _LOG_SETTINGS]))


KERNEL_CACHE_ENV = "OFFLOAD_LAB_KERNEL_CACHE"


def _without_kernel_cache(options: Mapping[str, Any]) -> dict[str, Any]:
    """The compile options less the kernel cache file (which decides code generation's time, not the program)."""
    return {k: v for k, v in options.items() if k != "xla_gpu_kernel_cache_file"}


def _compile_without_cache(lowered, options: dict, placement: Placement):
    """The compile again with the kernel cache off: a failure that persists is XLA's, reported in one line."""
    try:
        return lowered.compile(compiler_options=_without_kernel_cache(options))
    except Exception as err:
        raise ValueError(f"XLA refused the compile for {placement.target.name}: {str(err).splitlines()[0]}") from None


# GPU autotuning with no GPU to time the candidates (docs/research/xla-0.12-deviceless-autotuning.md). At jaxlib
# 0.12.0.1 a deviceless compile still runs the autotuner's ``config-assigner`` pass, which compiles each distinct
# fusion in full, one after another, to write back its default config: 40.7 of DeepSeek-V3's 47.5 s compile on 2
# cores (tests/compiled.py's 64-GPU step). At level 0 the scheduled HLO is the same but for those empty configs
# (Llama 3.1 8B on 8 H100: 374 fusions); peak, temp and host bytes, kernels and the simulated step are equal to
# the byte and the second (8B, and 405B and DeepSeek-V3 offloaded; tests/test_compiler.py checks a tiny step),
# in a quarter of the time. On a real GPU autotuning times candidates on the device; deviceless it cannot.
DEVICELESS_GPU_OPTIONS = {"xla_gpu_autotune_level": 0}


def deviceless_options(placement: Placement, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options a compile for a GPU topology with no GPU behind it adds (``DEVICELESS_GPU_OPTIONS``), less
    any the caller's flags or ``XLA_FLAGS`` set: a local GPU's compile autotunes as XLA would."""
    if placement.backend != "cuda":
        return {}
    chosen = set(options) | set(xla_flags.parse(backend().xla_flags_at_start))
    return {k: v for k, v in DEVICELESS_GPU_OPTIONS.items() if k not in chosen}


def kernel_cache_file(placement: Placement) -> str | None:
    """XLA's persistent kernel cache for this compile (``--xla_gpu_kernel_cache_file``), or None.

    Most of a GPU compile is code generation (LLVM and ptxas for each of the step's fused kernels:
    ~19 of ~25 s for DeepSeek-V3's step on 2 cores, ``benchmarks/bench_compile.py``), and the
    memory and schedule the lab reads do not depend on it: buffer assignment and the schedule are
    decided before any kernel is emitted. XLA keeps each kernel's binary in this file by its
    fingerprint and reuses it in later compiles, in any process; the same model under another
    policy, batch or flag set reuses most kernels (notebook 05's sixteen-layer stack under ten flag
    sets: 5.3 s cold, then 1.6-3.5 s, with the same peaks as separate caches give). One file per
    jaxlib and GPU, shared by every flag set, in ``$OFFLOAD_LAB_KERNEL_CACHE`` (default
    ``~/.cache/offload-lab/xla-kernels``; ``off`` turns it off). A compile that fails with the cache
    (XLA refuses a file another process is writing, or a kernel name it already holds) is retried
    without it (``compile``). Compile seconds are then those of a warm cache; the compile benchmark
    reports cold ones too.
    """
    folder = os.environ.get(KERNEL_CACHE_ENV, "")
    if placement.backend not in ("cuda", "gpu") or folder.lower() == "off":
        return None
    folder = folder or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                    "offload-lab", "xla-kernels")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return os.path.join(folder, f"jaxlib-{jax.__version__}-{placement.target.gpu.key}.bin")


@contextlib.contextmanager
def _compute_capability(placement: Placement):
    """While a step for a compile-only target is lowered, JAX's cuDNN attention asks that target's
    compute capability: jax 0.10.2 asks the *local* GPU (``fused_attention_stablehlo.
    check_compute_capability``), so without one it would refuse head dims only Hopper and later
    take (MLA's 192/128), though the compile is for such a GPU."""
    if placement.backend != "cuda":
        yield
        return
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    target = placement.target.gpu.compute_capability
    asks = (cudnn.check_compute_capability, cudnn.is_cuda_compute_capability_equal)

    def parse(capability: str) -> tuple[int, ...]:
        return tuple(int(x) for x in capability.split("."))

    cudnn.check_compute_capability = lambda capability: tuple(target) >= parse(capability)
    cudnn.is_cuda_compute_capability_equal = lambda capability: tuple(target) == parse(capability)
    try:
        yield
    finally:
        cudnn.check_compute_capability, cudnn.is_cuda_compute_capability_equal = asks


ANALYTICAL_ESTIMATOR = "xla_gpu_enable_analytical_latency_estimator"


# Where the analytical latency estimator aborts XLA, per jaxlib flag table: on a step that offloads (0.10.2) or on
# every step (0.12.0.1: ``shape.h:847 Check failed: buffer != nullptr`` in ``AnalyticalLatencyEstimator::NodeCost``
# -> ``LoopFusion::launch_dimensions``, found compiling tiny-llama ``full`` for H100 compile-only).
ANALYTICAL_ESTIMATOR_ABORTS = {"0.10.2": "offloading", "0.12.0.1": "every"}


def _refuse_aborting_combinations(flag_set: xla_flags.FlagSet, lowered) -> None:
    """Refuse what would abort the process inside XLA (a CHECK failure kills a notebook's kernel).

    The analytical latency estimator (``ANALYTICAL_ESTIMATOR_ABORTS``): at jaxlib 0.10.2 a step that moves data to
    or from host memory fails ``Check failed: buffer != nullptr`` in ``xla::Shape::dimensions`` from
    ``GpuPerformanceModel::EstimateRunTimeForInstruction`` (the launch dimensions of an async host transfer's
    fusion), found compiling Llama layers with ``minimal_offloaded`` for H100; at 0.12.0.1 every step does."""
    if not flag_set.flags.get(ANALYTICAL_ESTIMATOR):
        return
    jaxlib = xla_flags.INSTALLED_JAXLIB
    scope = ANALYTICAL_ESTIMATOR_ABORTS.get(xla_flags.KNOWN_JAXLIB, "every")
    if scope == "every":
        raise ValueError(f"--{ANALYTICAL_ESTIMATOR}=true aborts XLA (jaxlib {jaxlib}) on every step (a CHECK "
                         "failure in its cost of loop fusions): leave it off; the speed-of-light estimator "
                         "(--xla_gpu_enable_analytical_sol_latency_estimator, on by default) is XLA's model here")
    if "annotate_device_placement" in lowered.as_text():
        raise ValueError(f"--{ANALYTICAL_ESTIMATOR}=true aborts XLA (jaxlib {jaxlib}) on a step that "
                         "offloads to host memory (a CHECK failure in its GPU performance model): leave the analytical "
                         "estimator off for offloading steps, or compile a policy that does not offload")


def _mark_host_arguments(lowered, host: Sequence[bool], count: int) -> None:
    """Put the flagged arguments in pinned host memory: write ``mhlo.memory_kind = "pinned_host"``
    on them in the lowered module, what JAX writes for a ``pinned_host`` sharding on a GPU. (The
    compile-only topology's devices report no memory kinds, so a ``NamedSharding`` there drops
    ``memory_kind``: the attribute is the only way to say it.)"""
    from jax._src.lib.mlir import ir

    if len(host) != count:
        raise ValueError(f"host_arguments has {len(host)} flags for {count} argument leaves")
    jax_lowering = lowered._lowering  # jax.stages.Lowered keeps the module it compiles here
    kept = sorted(jax_lowering.compile_args.get("kept_var_idx") or range(count))
    module = jax_lowering.stablehlo()
    with module.context:
        main = next(op for op in module.body.operations
                    if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        attrs = list(main.attributes["arg_attrs"])
        for position, leaf in enumerate(kept):
            if host[leaf]:
                entries = {a.name: a.attr for a in ir.DictAttr(attrs[position])}
                entries["mhlo.memory_kind"] = ir.StringAttr.get("pinned_host")
                attrs[position] = ir.DictAttr.get(entries)
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


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
