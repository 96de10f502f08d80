"""A compile target: accelerators in a topology, the HBM XLA may use (the memory fraction), the pinned host pool."""

from __future__ import annotations

import dataclasses
import math
import re

from .links import Fabric, GiB, HostLink, MiB, fabric, host_link
from .chips import Accelerator, Gpu, Tpu, accelerator


# ----------------------------------------------------------------------------- topologies

@dataclasses.dataclass(frozen=True)
class Topology:
    """Slices x hosts x GPUs per host (the shape of XLA's compile-only GPU topology)."""

    hosts: int
    gpus_per_host: int
    slices: int = 1

    def __post_init__(self):
        for field in ("hosts", "gpus_per_host", "slices"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"topology {field} must be a positive integer, got {value!r}")

    @property
    def num_devices(self) -> int:
        return self.slices * self.hosts * self.gpus_per_host

    @property
    def spec(self) -> str:
        return f"{self.slices}x{self.hosts}x{self.gpus_per_host}"

    def __str__(self) -> str:
        short = f"{self.hosts}x{self.gpus_per_host}"
        return short if self.slices == 1 else self.spec


NAMED_TOPOLOGIES = {
    "1": Topology(1, 1),
    "hgx": Topology(1, 8),
    "nvl72": Topology(18, 4),
}


def topology(spec: str | int | Topology, gpus_per_host: int = 8) -> Topology:
    """``"8x8"`` (hosts x GPUs per host), ``"1x8x8"`` (slices x hosts x GPUs), ``"nvl72"``, or a
    GPU count (``64``: whole hosts of ``gpus_per_host``)."""
    if isinstance(spec, Topology):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 1:
            raise ValueError(f"number of GPUs must be positive, got {spec}")
        if spec <= gpus_per_host:
            return Topology(1, spec)
        if spec % gpus_per_host:
            raise ValueError(f"{spec} GPUs is not whole {gpus_per_host}-GPU hosts; write the topology as HOSTSxGPUS")
        return Topology(spec // gpus_per_host, gpus_per_host)
    text = str(spec).strip().lower()
    if text in NAMED_TOPOLOGIES:
        return NAMED_TOPOLOGIES[text]
    parts = re.fullmatch(r"(\d+)x(\d+)(?:x(\d+))?", text)
    if not parts:
        raise ValueError(f"bad topology {spec!r}; write HOSTSxGPUS ('8x8'), SLICESxHOSTSxGPUS ('1x8x8'), "
                         f"a GPU count, or one of: {', '.join(NAMED_TOPOLOGIES)}")
    a, b, c = parts.groups()
    return Topology(int(a), int(b)) if c is None else Topology(int(b), int(c), slices=int(a))


# ----------------------------------------------------------------------------- usable HBM

DEFAULT_MEM_FRACTION = 0.75
MEM_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
_ALLOCATOR_ROUNDING = 2 * MiB
# XLA's compile-only memory limit is based on 80 % of device_memory_size (GetSchedulerMemoryLimit,
# gpu_hlo_schedule.cc, when the module config carries no device_memory_size).
_COMPILE_ONLY_BASE = 0.8


def check_mem_fraction(fraction) -> float:
    try:
        value = float(fraction)
    except (TypeError, ValueError):
        value = math.nan
    if not 0 < value <= 1:
        raise ValueError(f"memory fraction {fraction!r} is outside (0, 1]: it is the share of HBM JAX's allocator "
                         f"takes ({MEM_FRACTION_ENV}; JAX's default 0.75, MaxText GPU recipes 0.85-0.98)")
    return value


def allocator_limit_bytes(hbm_bytes: int, mem_fraction: float = DEFAULT_MEM_FRACTION) -> int:
    """The BFC allocator's ``bytes_limit`` on a real GPU: total memory x fraction, rounded up to 2 MiB
    (``CreateBFCAllocator``, xla/pjrt/gpu/gpu_helpers.cc at 5a9e73cb). Everything a step allocates
    must fit in it; CUDA's context, cuBLAS/cuDNN workspaces and NCCL buffers live in the rest."""
    raw = int(hbm_bytes * check_mem_fraction(mem_fraction))
    return -(-raw // _ALLOCATOR_ROUNDING) * _ALLOCATOR_ROUNDING


# ----------------------------------------------------------------------------- targets

@dataclasses.dataclass(frozen=True)
class Target:
    """An accelerator (GPU or TPU) in a topology, with the host link offload uses (swappable for
    what-ifs) and, on a GPU, the share of HBM JAX's allocator may use (a TPU's is fixed: 1.0)."""

    accelerator: Accelerator
    topology: Topology
    link: HostLink
    mem_fraction: float = DEFAULT_MEM_FRACTION

    def __post_init__(self):
        fraction = check_mem_fraction(self.mem_fraction)
        if self.is_tpu and fraction != 1.0:
            raise ValueError(f"memory fraction {self.mem_fraction!r} on {self.accelerator.key}: a TPU's runtime gives "
                             f"a program a fixed {self.accelerator.usable_hbm_bytes / GiB:.2f} GiB (no allocator share "
                             f"to set, unlike {MEM_FRACTION_ENV} on a GPU); leave the fraction out")
        if self.is_tpu and self.topology.num_devices != 1:
            raise ValueError(f"{self.accelerator.key} targets are one chip ({self.accelerator.topology_name}), the chip "
                             f"the lab measures on; got topology {self.topology}")
        object.__setattr__(self, "mem_fraction", fraction)

    @property
    def gpu(self) -> Accelerator:
        """The accelerator (the name from when every target was a GPU; ``accelerator`` says the same)."""
        return self.accelerator

    @property
    def fabric(self) -> Fabric:
        """How the accelerator's systems connect their devices (``FABRICS``): what a collective's price reads."""
        return fabric(self.accelerator.key)

    @property
    def platform(self) -> str:
        """``gpu`` or ``tpu``."""
        return self.accelerator.platform

    @property
    def is_tpu(self) -> bool:
        return self.accelerator.platform == "tpu"

    @property
    def name(self) -> str:
        return f"{self.accelerator.key}:{self.topology}"

    @property
    def num_devices(self) -> int:
        return self.topology.num_devices

    def transferring_together(self, link: HostLink | None = None) -> int:
        """Devices that move data over the host link (``link``, default this target's) or the host memory behind
        it at once in an SPMD step: the link's sharing group, or fewer where the target has fewer devices on a
        host. A one-chip TPU target is one chip alone on its host (the lent ct5lp-hightpu-1t VM): it gets the
        link's own rate, not an eighth of an 8-chip host's memory."""
        return min((link or self.link).sharing_gpus, self.topology.gpus_per_host)

    @property
    def hbm_bytes(self) -> int:
        return self.gpu.hbm_bytes

    @property
    def usable_hbm_bytes(self) -> int:
        """What one step may allocate per device: JAX's allocator limit (``mem_fraction`` x HBM) on a GPU,
        the runtime's fixed limit on a TPU."""
        if self.is_tpu:
            return self.accelerator.usable_hbm_bytes
        return allocator_limit_bytes(self.gpu.hbm_bytes, self.mem_fraction)

    @property
    def link_is_what_if(self) -> bool:
        """True when the link is not the one this GPU really has."""
        return self.link.key != self.gpu.host_link.key

    def with_link(self, link: str | HostLink) -> "Target":
        return dataclasses.replace(self, link=host_link(link))

    def with_topology(self, spec) -> "Target":
        return dataclasses.replace(self, topology=topology(spec, self.gpu.gpus_per_host))

    def with_mem_fraction(self, fraction: float) -> "Target":
        return dataclasses.replace(self, mem_fraction=fraction)

    def target_config_text(self) -> str:
        """The GPU's config with ``device_memory_size`` set so that XLA's compile-only memory limit,
        80 % of it, equals the allocator limit XLA is given on a real GPU (jaxlib's py_client.cc
        passes the allocator's ``bytes_limit`` as the module's ``device_memory_size``)."""
        memory = -(-self.usable_hbm_bytes * 5 // 4)  # ceil(limit / 0.8): 80 % of it floors back to the limit
        return self.gpu.target_config_text(device_memory_size=memory)

    def to_dict(self) -> dict:
        return {"name": self.name, "gpu": self.gpu.key, "platform": self.platform, "topology": self.topology.spec,
                "num_devices": self.num_devices, "host_link": self.link.key, "link_is_what_if": self.link_is_what_if,
                "hbm_bytes": self.hbm_bytes, "mem_fraction": self.mem_fraction, "usable_hbm_bytes": self.usable_hbm_bytes}


DEFAULT_TOPOLOGY = {"h100": "1x8", "h200": "1x8", "gh200": "1x4", "b200": "1x8", "gb200": "nvl72", "tpu-v5e": "1"}


def target(gpu_key: str | Gpu | Tpu = "h100", topology_spec: str | int | Topology | None = None,
           link: str | HostLink | None = None, mem_fraction: float | None = None) -> Target:
    """``target("h100", "8x8")``, ``target("gb200")`` (an NVL72 rack), ``target("h200:1x8")``,
    ``target("tpu-v5e")`` (one chip). ``mem_fraction``: a GPU's allocator share (default 0.75); a TPU
    takes none."""
    if isinstance(gpu_key, str) and ":" in gpu_key and topology_spec is None:
        gpu_key, topology_spec = gpu_key.split(":", 1)
    chip = accelerator(gpu_key)
    topo = topology(topology_spec if topology_spec is not None else DEFAULT_TOPOLOGY[chip.key], chip.gpus_per_host)
    if mem_fraction is None:
        mem_fraction = 1.0 if chip.platform == "tpu" else DEFAULT_MEM_FRACTION
    return Target(chip, topo, host_link(link) if link is not None else chip.host_link, mem_fraction)


# ----------------------------------------------------------------------------- pinned host memory

HOST_POOL_ENV = "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"
DEFAULT_HOST_POOL_GIB = 64  # XLA's pinned pool per GPU without the variable (gpu_helpers.cc at 5a9e73cb)


def pinned_host_pool_bytes(environ=None) -> int:
    """Size of the pinned host memory pool XLA gives each GPU for ``S(5)`` buffers.

    XLA's PJRT GPU client reads ``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB`` as an integer number of
    **GiB** (``value * (1 << 30)``; default 64, or 16 with ``XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE=
    true``) and makes one such pool per device (``GetGpuHostAllocator``, xla/pjrt/gpu/gpu_helpers.cc
    and se_gpu_pjrt_client.cc at 5a9e73cb). Offloaded activations beyond it fail at run time with
    "Out of host memory", whatever the machine's RAM.
    """
    import os

    env = os.environ if environ is None else environ
    value = env.get(HOST_POOL_ENV)
    if value:
        if not re.fullmatch(r"\s*\d+\s*", str(value)):
            raise ValueError(f"bad {HOST_POOL_ENV}={value!r}: XLA reads a whole number of GiB")
        return int(value) * GiB
    preallocate = env.get("XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE", "false").lower() in ("1", "true")
    return (16 if preallocate else DEFAULT_HOST_POOL_GIB) * GiB


def host_pool_gib(host_bytes: int, spare: float = 0.0, limit_bytes: int | None = None) -> int:
    """The ``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB`` that holds ``host_bytes`` per GPU with ``spare`` to
    spare (whole GiB, as XLA reads it), never below XLA's default pool, never above ``limit_bytes``."""
    need = math.ceil((1 + spare) * host_bytes / GiB)
    if limit_bytes is not None:
        need = min(need, limit_bytes // GiB)
    return max(DEFAULT_HOST_POOL_GIB, need)
