"""Where a step compiles: the backend JAX started (a local GPU, the CUDA plugin's compile-only topology, libtpu, CPU)
and a target placed on its devices."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import warnings
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ...hardware import flags as xla_flags
from ...hardware import libtpu
from ...ground import stderr
from ...hardware.targets import Target


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
