"""GPU targets: datasheet facts, host links, topologies, and the XLA target config text.

Everything here is plain data from public sources (NVIDIA datasheets and technical briefs,
XLA's published ``xla/backends/gpu/target_config/specs``, ``nvidia-smi`` transcripts); the
``GpuTargetConfigProto`` text that XLA's compile-only CUDA topology needs is rendered from
these facts by ``Gpu.target_config_text()``, in the field set jaxlib 0.10.2 parses.

Units: bytes, bytes per second, FLOP/s. GiB = 2**30 bytes; GB = 1e9 bytes.
"""

from __future__ import annotations

import dataclasses
import difflib
import re

GB = 10**9
GiB = 2**30
MiB = 2**20


def _choose(kind: str, name: str, choices) -> ValueError:
    close = difflib.get_close_matches(str(name).lower(), list(choices), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ValueError(f"unknown {kind} {name!r}{hint}; choose one of: {', '.join(choices)}")


# ----------------------------------------------------------------------------- host links


@dataclasses.dataclass(frozen=True)
class HostLink:
    """The link between one GPU and host (CPU) memory, which host offload streams over."""

    key: str
    name: str
    bidirectional_bytes_per_s: float
    note: str = ""

    @property
    def per_direction_bytes_per_s(self) -> float:
        return self.bidirectional_bytes_per_s / 2

    def transfer_seconds(self, nbytes: float) -> float:
        """Time to move ``nbytes`` one way (offload writes and prefetch reads can overlap)."""
        return nbytes / self.per_direction_bytes_per_s


HOST_LINKS: dict[str, HostLink] = {
    link.key: link
    for link in (
        HostLink("pcie5_x16", "PCIe Gen5 x16", 128 * GB,
                 "32 GT/s x 16 lanes: 64 GB/s each way (about 55 GB/s measured with pinned memory)"),
        HostLink("nvlink_c2c", "NVLink-C2C (Grace-Blackwell)", 900 * GB,
                 "NVIDIA quotes 900 GB/s bidirectional per GB200 superchip (1 Grace + 2 GPUs); "
                 "no public per-GPU split, modelled here as one GPU's link"),
        HostLink("nvlink_c2c_vera_rubin", "NVLink-C2C (Vera Rubin)", 1800 * GB,
                 "announced 1.8 TB/s bidirectional CPU-GPU link of the Vera Rubin platform; preliminary"),
    )
}


def host_link(key: str) -> HostLink:
    if isinstance(key, HostLink):
        return key
    if key not in HOST_LINKS:
        raise _choose("host link", key, HOST_LINKS)
    return HOST_LINKS[key]


# ----------------------------------------------------------------------------- GPUs


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One GPU model's datasheet facts and what XLA needs to compile for it."""

    key: str
    name: str
    device_kind: str  # what the CUDA driver (and jax's device.device_kind) calls it
    hbm_bytes: int  # CUDA total memory (what XLA and the allocator see)
    hbm_marketing: str
    hbm_bandwidth: float  # bytes/s
    bf16_dense_flops: float  # FLOP/s, tensor cores, no sparsity
    fp8_dense_flops: float
    sm_count: int
    clock_ghz: float  # boost clock XLA's cost model uses
    compute_capability: tuple[int, int]
    l2_bytes: int
    host_link: HostLink
    host_memory_per_gpu_bytes: int  # typical system RAM per GPU in the reference system
    nvlink_bidirectional_bytes_per_s: float
    tdp_watts: int
    system: str  # the reference system the host figures come from
    gpus_per_host: int  # GPUs per host (an HGX board: 8; a GB200 compute tray: 4)
    sources: tuple[str, ...] = ()
    shared_memory_per_sm: int = 233472  # 228 KiB (Hopper and Blackwell)
    shared_memory_per_block_optin: int = 232448  # 227 KiB
    fp32_cores_per_sm: int = 128
    threads_per_sm: int = 2048

    @property
    def cc(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    def matches_device_kind(self, device_kind: str) -> bool:
        return device_kind.strip().lower().startswith(self.device_kind.lower())

    def target_config_text(self, cuda_runtime: tuple[int, int, int] = (12, 8, 0),
                           cudnn: tuple[int, int] = (9, 7)) -> str:
        """``GpuTargetConfigProto`` text for XLA's compile-only CUDA topology."""
        major, minor = self.compute_capability
        minor_line = f"\n    minor: {minor}" if minor else ""
        return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {self.shared_memory_per_sm}
  threads_per_core_limit: {self.threads_per_sm}
  core_count: {self.sm_count}
  fpus_per_core: {self.fp32_cores_per_sm}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {int(self.hbm_bandwidth)}
  l2_cache_size: {self.l2_bytes}
  clock_rate_ghz: {self.clock_ghz}
  device_memory_size: {self.hbm_bytes}
  shared_memory_per_block_optin: {self.shared_memory_per_block_optin}
  cuda_compute_capability {{
    major: {major}{minor_line}
    feature_extension: ACCELERATED_FEATURES
  }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{
  major: {cudnn[0]}
  minor: {cudnn[1]}
}}
runtime_version {{
  major: {cuda_runtime[0]}
  minor: {cuda_runtime[1]}
  patch: {cuda_runtime[2]}
}}
device_description_str: "{self.device_kind}"
"""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["host_link"] = self.host_link.key
        d["host_link_bidirectional_bytes_per_s"] = self.host_link.bidirectional_bytes_per_s
        d["host_link_per_direction_bytes_per_s"] = self.host_link.per_direction_bytes_per_s
        d["compute_capability"] = self.cc
        d["sources"] = list(self.sources)
        return d


_HOPPER_SOURCES = (
    "NVIDIA H100 Tensor Core GPU datasheet / Hopper architecture whitepaper",
    "XLA xla/backends/gpu/target_config/specs/h100_sxm.txtpb",
)

GPUS: dict[str, Gpu] = {
    g.key: g
    for g in (
        Gpu(
            key="h100", name="H100 SXM5 80GB", device_kind="NVIDIA H100 80GB HBM3",
            hbm_bytes=84_942_979_072, hbm_marketing="80 GB HBM3", hbm_bandwidth=3.35e12,
            bf16_dense_flops=989.4e12, fp8_dense_flops=1978.9e12, sm_count=132, clock_ghz=1.98,
            compute_capability=(9, 0), l2_bytes=50 * MiB, host_link=HOST_LINKS["pcie5_x16"],
            host_memory_per_gpu_bytes=256 * GB, nvlink_bidirectional_bytes_per_s=900 * GB, tdp_watts=700,
            system="DGX H100 (8 GPUs, 2 TB system memory)", gpus_per_host=8, sources=_HOPPER_SOURCES,
        ),
        Gpu(
            key="h200", name="H200 SXM 141GB", device_kind="NVIDIA H200",
            # nvidia-smi shows 143771 MiB; the CUDA total sits ~550 MiB below (as on H100/B200/GB200).
            hbm_bytes=(143_771 - 550) * MiB, hbm_marketing="141 GB HBM3e", hbm_bandwidth=4.8e12,
            bf16_dense_flops=989.4e12, fp8_dense_flops=1978.9e12, sm_count=132, clock_ghz=1.98,
            compute_capability=(9, 0), l2_bytes=50 * MiB, host_link=HOST_LINKS["pcie5_x16"],
            host_memory_per_gpu_bytes=256 * GB, nvlink_bidirectional_bytes_per_s=900 * GB, tdp_watts=700,
            system="DGX H200 (8 GPUs, 2 TB system memory)", gpus_per_host=8,
            sources=("NVIDIA H200 Tensor Core GPU datasheet", "nvidia-smi: 143771 MiB total",
                     "XLA xla/backends/gpu/target_config/specs/h200.txtpb"),
        ),
        Gpu(
            key="b200", name="B200 (HGX/DGX B200)", device_kind="NVIDIA B200",
            hbm_bytes=191_514_411_008, hbm_marketing="180 GB HBM3e", hbm_bandwidth=8.0e12,
            bf16_dense_flops=2.25e15, fp8_dense_flops=4.5e15, sm_count=148, clock_ghz=1.965,
            compute_capability=(10, 0), l2_bytes=132_644_864, host_link=HOST_LINKS["pcie5_x16"],
            host_memory_per_gpu_bytes=256 * GB, nvlink_bidirectional_bytes_per_s=1800 * GB, tdp_watts=1000,
            system="DGX B200 (8 GPUs, 2 TB system memory)", gpus_per_host=8,
            sources=("NVIDIA DGX B200 / HGX B200 datasheet (dense = half the sparse figures)",
                     "XLA xla/backends/gpu/target_config/specs/b200.txtpb"),
        ),
        Gpu(
            key="gb200", name="GB200 NVL72 (Blackwell GPU)", device_kind="NVIDIA GB200",
            hbm_bytes=197_897_748_480, hbm_marketing="186 GB HBM3e", hbm_bandwidth=8.0e12,
            bf16_dense_flops=2.5e15, fp8_dense_flops=5.0e15, sm_count=152, clock_ghz=2.062,
            compute_capability=(10, 0), l2_bytes=135_528_448, host_link=HOST_LINKS["nvlink_c2c"],
            host_memory_per_gpu_bytes=240 * GB, nvlink_bidirectional_bytes_per_s=1800 * GB, tdp_watts=1200,
            system="GB200 NVL72 (18 trays x 4 GPUs; one 480 GB LPDDR5X Grace per 2 GPUs)", gpus_per_host=4,
            sources=("NVIDIA GB200 NVL72 datasheet (per GPU = rack / 72)",
                     "XLA xla/backends/gpu/target_config/specs/gb200.txtpb"),
        ),
    )
}


def gpu(key: str) -> Gpu:
    if isinstance(key, Gpu):
        return key
    key = str(key).lower()
    if key not in GPUS:
        raise _choose("GPU", key, GPUS)
    return GPUS[key]


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


# ----------------------------------------------------------------------------- targets


@dataclasses.dataclass(frozen=True)
class Target:
    """A GPU model in a topology, with the host link offload uses (swappable for what-ifs)."""

    gpu: Gpu
    topology: Topology
    link: HostLink

    @property
    def name(self) -> str:
        return f"{self.gpu.key}:{self.topology}"

    @property
    def num_devices(self) -> int:
        return self.topology.num_devices

    def with_link(self, link: str | HostLink) -> "Target":
        return dataclasses.replace(self, link=host_link(link))

    def with_topology(self, spec) -> "Target":
        return dataclasses.replace(self, topology=topology(spec))

    def to_dict(self) -> dict:
        return {"name": self.name, "gpu": self.gpu.key, "topology": self.topology.spec,
                "num_devices": self.num_devices, "host_link": self.link.key}


DEFAULT_TOPOLOGY = {"h100": "1x8", "h200": "1x8", "b200": "1x8", "gb200": "nvl72"}


def target(gpu_key: str | Gpu = "h100", topology_spec: str | int | Topology | None = None,
           link: str | HostLink | None = None) -> Target:
    """``target("h100", "8x8")``, ``target("gb200")`` (an NVL72 rack), ``target("h200:1x8")``."""
    if isinstance(gpu_key, str) and ":" in gpu_key and topology_spec is None:
        gpu_key, topology_spec = gpu_key.split(":", 1)
    g = gpu(gpu_key)
    topo = topology(topology_spec if topology_spec is not None else DEFAULT_TOPOLOGY[g.key], g.gpus_per_host)
    return Target(g, topo, host_link(link) if link is not None else g.host_link)


# ----------------------------------------------------------------------------- pinned host memory

HOST_POOL_ENV = "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"


def pinned_host_pool_bytes(environ=None) -> int:
    """Size of the pinned host memory pool one JAX process uses per GPU for S(5) buffers.

    XLA's PJRT GPU client reads ``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB`` (default 64 GB; 16 GB when
    ``XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE=true``). Offloaded activations beyond it fail at run
    time with "Out of host memory", whatever the machine's RAM.
    """
    import os

    env = os.environ if environ is None else environ
    value = env.get(HOST_POOL_ENV)
    if value:
        try:
            return int(float(value) * GB)
        except ValueError:
            raise ValueError(f"bad {HOST_POOL_ENV}={value!r}: a number of GB") from None
    preallocate = env.get("XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE", "false").lower() in ("1", "true")
    return (16 if preallocate else 64) * GB
