"""Accelerator targets: GPUs and TPUs with their datasheet facts, host links as they are shared,
topologies, usable HBM, and the ``GpuTargetConfigProto`` text XLA:GPU compiles against.

Everything here is plain data from public sources, named in each entry's ``sources``: NVIDIA
datasheets and technical briefs, XLA's spec files (``xla/backends/gpu/target_config/specs`` at
the commit jaxlib 0.10.2 pins, 5a9e73cb), ``nvidia-smi`` transcripts, and published bandwidth
measurements. What is not public is an explicit ``assumption`` on the object that makes it.

* ``Gpu.target_config_text()`` renders the full field set of XLA's own spec files (device info,
  the scalar and matrix unit rate tables XLA's dot cost model reads, ``model_str``, versions,
  NVLink links) from these facts. The matrix-unit clock is derived from the datasheet's dense
  bf16 peak, so XLA's cost model sees the same peak the lab's roofline uses.
* ``HostLink`` is the path host offload streams over: nominal and achievable bandwidth per
  direction, how many GPUs share the link, and the host memory behind it (and how many GPUs
  share that). ``transfer_seconds(nbytes, direction, concurrent_gpus)`` divides both among the
  GPUs transferring at once; by default every GPU that shares them (an SPMD step offloads on
  all GPUs together).
* ``Tpu`` is a TPU chip (``TPUS``: v5e, the chip the lab measures on): datasheet facts from
  Google's Cloud TPU pages, the HBM its runtime lets a program use, and the compile-only topology
  libtpu builds for it (``companion.libtpu``).
* ``Target`` is an accelerator (``Gpu`` or ``Tpu``) in a topology with its link and, on a GPU, the
  share of HBM JAX's allocator takes (``mem_fraction``, ``XLA_PYTHON_CLIENT_MEM_FRACTION``; default
  0.75 as in XLA; a TPU's runtime has no such share: its usable HBM is fixed). Every "fits" verdict
  compares against ``usable_hbm_bytes``, never the whole card.

Units: bytes, bytes per second, FLOP/s. GiB = 2**30 bytes; GB = 1e9 bytes.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re

GB = 10**9
GiB = 2**30
MiB = 2**20


def _choose(kind: str, name, choices) -> ValueError:
    close = difflib.get_close_matches(str(name).lower(), list(choices), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ValueError(f"unknown {kind} {name!r}{hint}; choose one of: {', '.join(choices)}")


# ----------------------------------------------------------------------------- host links

DIRECTIONS = ("d2h", "h2d")


@dataclasses.dataclass(frozen=True)
class HostLink:
    """The path between GPUs and host (CPU) memory that host offload streams over.

    ``achievable_*`` is what one GPU's large pinned copy reaches in that direction when it has the
    link and the host memory to itself (measured where a measurement is public, else assumed).
    ``gpus_per_link`` GPUs share the link; ``gpus_per_host_memory`` GPUs share the host memory
    behind it, whose peak bandwidth (reads and writes together) is ``host_memory_bytes_per_s``.
    """

    key: str
    name: str
    nominal_per_direction: float  # bytes/s, the datasheet figure
    achievable_d2h: float  # bytes/s, one GPU alone
    achievable_h2d: float
    gpus_per_link: int
    host_memory_bytes_per_s: float
    gpus_per_host_memory: int
    host_memory: str  # what the host memory is
    sources: tuple[str, ...] = ()
    assumption: str = ""  # what is not public and assumed here
    carries_nic_traffic: bool = False  # GPUDirect RDMA of multi-node collectives uses the same link
    # An SM-driven transfer: a generated kernel reading or writing pinned host memory through its mapped pointer
    # (zero-copy), what XLA:GPU's offloaded scan residuals become under the lab's #46231 workaround
    # (``hlo.HostTransfer.engine == "kernel"``); bytes/s one GPU reaches alone, each way (None: as the copy engine)
    kernel_d2h: float | None = None
    kernel_h2d: float | None = None
    kernel_sources: tuple[str, ...] = ()

    def __post_init__(self):
        for field in ("nominal_per_direction", "achievable_d2h", "achievable_h2d", "host_memory_bytes_per_s"):
            if not getattr(self, field) > 0:
                raise ValueError(f"host link {self.key}: {field} must be a positive bandwidth, got {getattr(self, field)!r}")
        for field in ("gpus_per_link", "gpus_per_host_memory"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                raise ValueError(f"host link {self.key}: {field} must be a positive integer, got {getattr(self, field)!r}")

    @property
    def bidirectional_bytes_per_s(self) -> float:
        return 2 * self.nominal_per_direction

    @property
    def per_direction_bytes_per_s(self) -> float:
        """Nominal bytes/s each way (the datasheet's bidirectional figure / 2)."""
        return self.nominal_per_direction

    @property
    def sharing_gpus(self) -> int:
        """GPUs that contend for this link or the memory behind it when all of them offload."""
        return max(self.gpus_per_link, self.gpus_per_host_memory)

    def alone(self, direction: str, engine: str = "copy_engine") -> float:
        """Bytes/s one GPU reaches in ``direction`` with the link to itself: its copy engines' (``copy_engine``,
        also XLA:TPU's ``dma``), or a generated kernel's zero-copy accesses (``kernel``)."""
        if engine == "kernel":
            rate = self.kernel_d2h if direction == "d2h" else self.kernel_h2d
            if rate is not None:
                return rate
        return self.achievable_d2h if direction == "d2h" else self.achievable_h2d

    def bandwidth_per_gpu(self, direction: str, concurrent_gpus: int | None = None, engine: str = "copy_engine") -> float:
        """Bytes/s one GPU gets in ``direction`` while ``concurrent_gpus`` GPUs of the sharing group
        move data at once (default: all of them, as in an SPMD training step); ``engine``: see ``alone``."""
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown transfer direction {direction!r}; choose one of: {', '.join(DIRECTIONS)}")
        n = self.sharing_gpus if concurrent_gpus is None else concurrent_gpus
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"concurrent_gpus must be a positive integer, got {concurrent_gpus!r}")
        alone = self.alone(direction, engine)
        link_share = alone / min(n, self.gpus_per_link)
        memory_share = self.host_memory_bytes_per_s / min(n, self.gpus_per_host_memory)
        return min(link_share, memory_share)

    def transfer_seconds(self, nbytes: float, direction: str, concurrent_gpus: int | None = None,
                         engine: str = "copy_engine") -> float:
        """Seconds to move ``nbytes`` one way for one GPU (see ``bandwidth_per_gpu``)."""
        return nbytes / self.bandwidth_per_gpu(direction, concurrent_gpus, engine)

    def describe(self, concurrent_gpus: int | None = None) -> str:
        n = self.sharing_gpus if concurrent_gpus is None else concurrent_gpus
        return (f"{self.name}: {self.nominal_per_direction / GB:.0f} GB/s nominal each way; per GPU with {n} of "
                f"{self.sharing_gpus} sharing GPU(s) busy: {self.bandwidth_per_gpu('d2h', n) / GB:.0f} GB/s out, "
                f"{self.bandwidth_per_gpu('h2d', n) / GB:.0f} GB/s back")

    def to_dict(self) -> dict:
        return {"key": self.key, "name": self.name,
                "nominal_gb_per_s_per_direction": self.nominal_per_direction / GB,
                "achievable_gb_per_s": {"d2h": self.achievable_d2h / GB, "h2d": self.achievable_h2d / GB},
                "gpus_per_link": self.gpus_per_link,
                "host_memory_gb_per_s": self.host_memory_bytes_per_s / GB,
                "gpus_per_host_memory": self.gpus_per_host_memory, "host_memory": self.host_memory,
                "per_gpu_gb_per_s_all_sharing": {d: self.bandwidth_per_gpu(d) / GB for d in DIRECTIONS},
                "per_gpu_gb_per_s_alone": {d: self.bandwidth_per_gpu(d, 1) / GB for d in DIRECTIONS},
                "carries_nic_traffic": self.carries_nic_traffic, "assumption": self.assumption,
                "sources": list(self.sources),
                "kernel_gb_per_s": {"d2h": self.alone("d2h", "kernel") / GB, "h2d": self.alone("h2d", "kernel") / GB},
                "kernel_sources": list(self.kernel_sources)}


_GRACE_C2C_MEASURED = "GH200 480GB host<->device over NVLink-C2C: 380 GB/s H2D, 296 GB/s D2H (OpenCL benchmark transcript)"
# SM-driven (zero-copy) transfers, the nominal of each range in docs/research/46231-workaround-transfers.md (the
# ranges are bands.KERNEL_LINK_SWEEP): no measurement of XLA's own untuned kLoop transfer kernel exists on any link
_KERNEL_PCIE5 = ("nvbandwidth #24 (H100, PCIe Gen5): SM copies 52.8 GB/s device->host, 35.2 host->device; nvbandwidth "
                 "#42 (A100, Gen4): SM host->device falls to 16.5-18 of 25 GB/s on 10-20 GiB buffers; nominal = the "
                 "middle of 40-53 / 20-35 GB/s, an assumption for XLA's untuned kernel")
_KERNEL_C2C = ("nvbandwidth #23 (GH200): SM host->device 342 GB/s against the copy engine's 346; no device->host or GB200 "
               "SM figure: GH200 nominal 222 / 300 (the middle of 150-295 / 250-345 GB/s), GB200/GB300 170 / 185 (the "
               "middle of 150-195 / 160-210: SM ~ copy engine, as on GH200), an assumption")

HOST_LINKS: dict[str, HostLink] = {
    link.key: link
    for link in (
        HostLink(
            "pcie5_x16", "PCIe Gen5 x16 (HGX)", nominal_per_direction=64 * GB,
            achievable_d2h=55.2 * GB, achievable_h2d=55.4 * GB, gpus_per_link=1,
            host_memory_bytes_per_s=281.6 * GB, gpus_per_host_memory=4,
            host_memory="one Xeon socket's DDR5 (8 channels, 2 DIMMs each: DDR5-4400) behind 4 GPUs",
            sources=("PCIe 5.0: 32 GT/s x 16 lanes = 64 GB/s each way (63 after 128b/130b encoding)",
                     "nvbandwidth v0.10 CE copies on 8x H100 80GB HBM3, all GPUs at once: 55.4 GB/s H2D, 55.2 GB/s D2H",
                     "DGX H100/B200 user guides: 2 sockets, 4 GPUs and 4 ConnectX-7 400 Gb/s NICs per socket"),
            assumption="host DRAM at DDR5-4400 (2 DIMMs per channel, as a 32-DIMM DGX is populated): 281.6 GB/s "
                       "per socket; not limiting at 55 GB/s per GPU x 4",
            carries_nic_traffic=True, kernel_d2h=47 * GB, kernel_h2d=28 * GB, kernel_sources=_KERNEL_PCIE5),
        HostLink(
            "nvlink_c2c_gh200", "NVLink-C2C (GH200)", nominal_per_direction=450 * GB,
            achievable_d2h=296 * GB, achievable_h2d=380 * GB, gpus_per_link=1,
            host_memory_bytes_per_s=512 * GB, gpus_per_host_memory=1,
            host_memory="one Grace's LPDDR5X (480 GB) behind one H100",
            sources=("NVIDIA GH200 datasheet: NVLink-C2C 900 GB/s bidirectional; LPDDR5X up to 512 GB/s",
                     _GRACE_C2C_MEASURED),
            kernel_d2h=222 * GB, kernel_h2d=300 * GB, kernel_sources=_KERNEL_C2C),
        HostLink(
            "nvlink_c2c_gb200", "NVLink-C2C (GB200, shared)", nominal_per_direction=450 * GB,
            achievable_d2h=296 * GB, achievable_h2d=380 * GB, gpus_per_link=2,
            host_memory_bytes_per_s=512 * GB, gpus_per_host_memory=2,
            host_memory="one Grace's LPDDR5X (480 GB) behind two B200",
            sources=("NVIDIA GB200 NVL72 datasheet: one Grace + two B200 per superchip over NVLink-C2C 900 GB/s; "
                     "17 TB / 18.4 TB/s LPDDR5X per 36 Grace = 480 GB / 512 GB/s each",),
            assumption="how the superchip's 900 GB/s C2C and Grace's 512 GB/s divide between its two GPUs is not "
                       "public: modelled as one 450 GB/s-per-direction link both GPUs share (each gets half when "
                       "both transfer; concurrent_gpus=1 is the what-if of one GPU alone); one GPU alone is "
                       "assumed to reach what a GH200 measures (380 / 296 GB/s)",
            kernel_d2h=170 * GB, kernel_h2d=185 * GB, kernel_sources=_KERNEL_C2C),
        HostLink(
            "nvlink_c2c_gb300_measured", "NVLink-C2C (GB300, as measured)", nominal_per_direction=450 * GB,
            achievable_d2h=193.5 * GB, achievable_h2d=211.5 * GB, gpus_per_link=1,
            host_memory_bytes_per_s=512 * GB, gpus_per_host_memory=2,
            host_memory="one Grace's LPDDR5X behind two Blackwell Ultra GPUs",
            sources=("NVIDIA/Megatron-LM issue #6491 (2026-08-15): nvbandwidth on 4 x GB300, copy engines: "
                     "CPU->GPU 211.5 GB/s, GPU->CPU 193.5 GB/s per GPU alone, ~170-183 GB/s with all four at once",),
            assumption="a GB300 measurement used as a labelled what-if for GB200 (the lab has no GB300 target): "
                       "each GPU keeps its measured rate when its neighbour transfers (the four-at-once figures "
                       "drop ~10 %, not by half); Grace's 512 GB/s shared by the two GPUs as on GB200",
            kernel_d2h=170 * GB, kernel_h2d=185 * GB, kernel_sources=_KERNEL_C2C),
        HostLink(
            "nvlink_c2c_vera_rubin", "NVLink-C2C (Vera Rubin, shared)", nominal_per_direction=900 * GB,
            achievable_d2h=2 * 296 * GB, achievable_h2d=2 * 380 * GB, gpus_per_link=2,
            host_memory_bytes_per_s=1200 * GB, gpus_per_host_memory=2,
            host_memory="one Vera's LPDDR5X (SOCAMM, up to 1.5 TB) behind two Rubin GPUs",
            sources=("NVIDIA Vera Rubin announcements (secondary sources): NVLink-C2C 1.8 TB/s bidirectional, "
                     "Vera LPDDR5X up to 1.5 TB at 1.2 TB/s, one Vera per two Rubin GPUs",),
            assumption="preliminary figures; shared between the two GPUs like GB200's; achievable = GH200's measured "
                       "efficiency at twice the link. A what-if link: no Rubin GPU target exists in this XLA",
            kernel_d2h=2 * 170 * GB, kernel_h2d=2 * 185 * GB, kernel_sources=_KERNEL_C2C),
        HostLink(
            "pcie_tpu_v5e", "PCIe (TPU v5e host)", nominal_per_direction=16 * GB,
            achievable_d2h=14.75 * GB, achievable_h2d=14.18 * GB, gpus_per_link=1,
            host_memory_bytes_per_s=100 * GB, gpus_per_host_memory=8,
            host_memory="the TPU VM's DRAM: 512 GiB per 8-chip host (48 GB on the 1-chip ct5lp-hightpu-1t)",
            sources=("Google Cloud TPU v5e page (docs.cloud.google.com/tpu/docs/v5e): 8 chips and 512 GiB DRAM per host; "
                     "VM types ct5lp-hightpu-1t/4t/8t",
                     "jax-ml scaling book, 'How to think about TPUs': PCIe ~1.5e10 bytes/s per chip each way",
                     "measured on the lent v5e (libtpu 0.0.42.1, 2026-12-06; benchmarks/results/measured.json, "
                     "kernels.link): a program's round trip device -> pinned-host temporary -> device, traced: "
                     "14.75 GB/s d2h and 14.18 GB/s h2d per transfer (64 MiB-1 GiB, within 0.1 %)",),
            assumption="Google states no host-link rate for v5e: the rates are the lab's measurement on one chip of a "
                       "1-chip VM (the scaling book's ~15 GB/s agrees); the host DRAM rate behind 8 chips (100 GB/s) "
                       "is assumed: it would hold eight chips offloading at once to 12.5 GB/s each; one chip alone "
                       "(the lab's one-chip targets, ``Target.transferring_together``) gets the link's measured rate"),
    )
}


def host_link(key: str | HostLink) -> HostLink:
    if isinstance(key, HostLink):
        return key
    if key not in HOST_LINKS:
        raise _choose("host link", key, HOST_LINKS)
    return HOST_LINKS[key]


# ----------------------------------------------------------------------------- GPU architectures

# Rate tables of XLA's GpuDeviceInfoProto: PrimitiveType number -> (units per SM, ops per clock per
# unit). Taken from XLA's spec files at 5a9e73cb (h100_sxm/h200 for Hopper, b200/gb200 for
# Blackwell); XLA's dot cost model reads the matrix table (flops = clock x ops x 2 x SMs x units).
# Keys: 2 s8, 4 s32, 6 u8, 8 u32, 10 f16, 11 f32, 12 f64, 16 bf16, 19 f8e5m2, 20 f8e4m3fn,
# 23-25 and 28-29 the other fp8 types, 32 f4e2m1fn, 33 f8e8m0fnu, 35-36 as in XLA's files.
_FP8_KEYS = (2, 6, 19, 20, 23, 24, 25, 28, 29, 33, 35, 36)


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    scalar_units: dict[int, tuple[int, int]]  # dtype key -> (units per SM, ops per clock), at the SM clock
    matrix_units: dict[int, tuple[int, int]]  # dtype key -> (tensor cores per SM, ops per clock), tensor clock
    fp64_matrix_key: int = 12  # the one matrix rate XLA's files give at the SM clock
    # Rows per tile of a grouped GEMM (each expert's rows rounded up to whole tiles): the M of the CTA
    # tile of CUTLASS's grouped-GEMM examples, 128 on Hopper (57_hopper_grouped_gemm) and 256 on
    # Blackwell (75_blackwell_grouped_gemm, 2-SM MMA); an assumption for other kernels.
    grouped_gemm_tile_rows: int = 128

    def bf16_ops_per_sm_per_clock(self) -> int:
        units, ops = self.matrix_units[16]
        return units * ops


HOPPER = Architecture(
    "hopper",
    scalar_units={4: (64, 1), 8: (64, 1), 10: (128, 2), 11: (128, 1), 12: (64, 1), 16: (128, 2)},
    matrix_units={**{k: (4, 1024) for k in _FP8_KEYS}, 10: (4, 512), 11: (4, 256), 12: (4, 32), 16: (4, 512)},
)
BLACKWELL = Architecture(
    "blackwell",
    scalar_units={4: (64, 1), 8: (64, 1), 10: (128, 1), 11: (128, 1), 12: (64, 1), 16: (128, 1)},
    matrix_units={**{k: (4, 2048) for k in _FP8_KEYS}, 10: (4, 1024), 11: (4, 512), 12: (4, 16), 16: (4, 1024),
                  32: (4, 4096)},
    grouped_gemm_tile_rows=256,
)


# ----------------------------------------------------------------------------- GPUs


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One GPU model's datasheet facts and what XLA needs to compile for it."""

    key: str
    name: str
    device_kind: str  # what the CUDA driver (and jax's device.device_kind) calls it
    hbm_bytes: int  # CUDA total memory (cuDeviceTotalMem: what XLA and the allocator see)
    hbm_marketing: str
    hbm_bandwidth: float  # bytes/s
    bf16_dense_flops: float  # FLOP/s, tensor cores, no sparsity
    fp8_dense_flops: float
    sm_count: int
    clock_ghz: float  # boost clock XLA's cost model uses
    memory_clock_ghz: float  # HBM clock as CUDA reports it (only for model_str)
    compute_capability: tuple[int, int]
    l2_bytes: int
    architecture: Architecture
    host_link: HostLink
    host_memory_per_gpu_bytes: int  # system RAM per GPU in the reference system
    nvlink_bidirectional_bytes_per_s: float
    nvlink_links: int
    tdp_watts: int
    system: str  # the reference system the host figures come from
    gpus_per_host: int  # GPUs per host (an HGX board: 8; a GB200 compute tray: 4)
    sources: tuple[str, ...] = ()
    assumption: str = ""
    shared_memory_per_sm: int = 233472  # 228 KiB (Hopper and Blackwell)
    shared_memory_per_block_optin: int = 232448  # 227 KiB
    fp32_cores_per_sm: int = 128
    threads_per_sm: int = 2048

    @property
    def cc(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def platform(self) -> str:
        return "gpu"

    @property
    def grouped_gemm_tile_rows(self) -> int:
        return self.architecture.grouped_gemm_tile_rows

    @property
    def tensor_clock_ghz(self) -> float:
        """The matrix-unit clock at which XLA's rate table gives the datasheet's dense bf16 peak."""
        return self.bf16_dense_flops / (2 * self.sm_count * self.architecture.bf16_ops_per_sm_per_clock() * 1e9)

    @property
    def price_family(self) -> str:
        """The key of this accelerator's rows in the simulator's price tables (``schedule.PRICES``)."""
        return self.architecture.name

    @property
    def grouped_gemm_tile_rows(self) -> int:
        return self.architecture.grouped_gemm_tile_rows

    def matches_device_kind(self, device_kind: str) -> bool:
        return device_kind.strip().lower().startswith(self.device_kind.lower())

    def target_config_text(self, device_memory_size: int | None = None, cuda_runtime: tuple[int, int, int] = (12, 8, 0),
                           cudnn: tuple[int, int] = (9, 7)) -> str:
        """``GpuTargetConfigProto`` text for XLA's compile-only CUDA topology: the field set of
        XLA's own spec files, rendered from this GPU's facts.

        ``device_memory_size`` (default: the CUDA total) is what XLA's compile-only memory limit is
        based on (80 % of it); ``Target.target_config_text`` sets it so that the limit equals the
        one JAX's allocator gives on a real GPU.
        """
        major, minor = self.compute_capability
        minor_line = f"\n    minor: {minor}" if minor else ""
        memory = self.hbm_bytes if device_memory_size is None else int(device_memory_size)
        clock, tensor_clock = self.clock_ghz, self.tensor_clock_ghz

        def rates(table: dict, matrix: bool) -> str:
            out = []
            for key, (units, ops) in sorted(table.items()):
                at = clock if (not matrix or key == self.architecture.fp64_matrix_key) else tensor_clock
                out.append(f"    rate_infos {{\n      key: {key}\n      value {{\n        clock_rate_ghz: {at:.7g}\n"
                           f"        units_per_core: {units}\n        ops_per_clock: {ops}\n      }}\n    }}")
            return "\n".join(out)

        cc_text = f"{major}.{minor}a"
        model = (f"sm_{cc_text} with {self.hbm_bytes}B RAM, {self.sm_count} cores, {round(clock * 1e6)}KHz clock, "
                 f"{round(self.memory_clock_ghz * 1e6)}KHz mem clock, {self.l2_bytes}B L2$")
        runtime = ".".join(map(str, cuda_runtime))
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
  clock_rate_ghz: {clock}
  device_memory_size: {memory}
  shared_memory_per_block_optin: {self.shared_memory_per_block_optin}
  cuda_compute_capability {{
    major: {major}{minor_line}
    feature_extension: ACCELERATED_FEATURES
  }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
  scalar_unit_description {{
{rates(self.architecture.scalar_units, matrix=False)}
  }}
  matrix_unit_description {{
{rates(self.architecture.matrix_units, matrix=True)}
  }}
  thread_dim_limit_x: 1024
  thread_dim_limit_y: 1024
  thread_dim_limit_z: 64
  device_vendor: "NVIDIA Corporation"
  platform_version: "Compute Capability {cc_text}"
  model_str: "{model}"
  device_address_bits: 64
  pcie_bandwidth: {int(self.host_link.nominal_per_direction)}
  ecc_enabled: true
  name: "{self.device_kind}"
  runtime_version: "{runtime}"
  compile_time_toolkit_version: "{runtime}"
  dnn_version: "{cudnn[0]}.{cudnn[1]}.0"
  device_interconnect_info {{
    active_links: {self.nvlink_links}
  }}
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
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("host_link", "architecture", "sources")}
        d.update(architecture=self.architecture.name, host_link=self.host_link.key,
                 host_link_bidirectional_bytes_per_s=self.host_link.bidirectional_bytes_per_s,
                 host_link_per_direction_bytes_per_s=self.host_link.per_direction_bytes_per_s,
                 compute_capability=self.cc, tensor_clock_ghz=round(self.tensor_clock_ghz, 4),
                 sources=list(self.sources))
        return d


_HOPPER_SOURCES = (
    "NVIDIA H100 Tensor Core GPU datasheet / Hopper architecture whitepaper",
    "XLA xla/backends/gpu/target_config/specs/h100_sxm.txtpb (5a9e73cb)",
)

GPUS: dict[str, Gpu] = {
    g.key: g
    for g in (
        Gpu(
            key="h100", name="H100 SXM5 80GB", device_kind="NVIDIA H100 80GB HBM3",
            hbm_bytes=84_942_979_072, hbm_marketing="80 GB HBM3", hbm_bandwidth=3.35e12,
            bf16_dense_flops=989.4e12, fp8_dense_flops=1978.9e12, sm_count=132, clock_ghz=1.98,
            memory_clock_ghz=2.619, compute_capability=(9, 0), l2_bytes=50 * MiB, architecture=HOPPER,
            host_link=HOST_LINKS["pcie5_x16"], host_memory_per_gpu_bytes=256 * GB,
            nvlink_bidirectional_bytes_per_s=900 * GB, nvlink_links=18, tdp_watts=700,
            system="DGX H100 (8 GPUs, 2 TB system memory)", gpus_per_host=8, sources=_HOPPER_SOURCES,
        ),
        Gpu(
            key="h200", name="H200 SXM 141GB", device_kind="NVIDIA H200",
            hbm_bytes=(143_771 - 550) * MiB, hbm_marketing="141 GB HBM3e", hbm_bandwidth=4.8e12,
            bf16_dense_flops=989.4e12, fp8_dense_flops=1978.9e12, sm_count=132, clock_ghz=1.98,
            memory_clock_ghz=3.75, compute_capability=(9, 0), l2_bytes=50 * MiB, architecture=HOPPER,
            host_link=HOST_LINKS["pcie5_x16"], host_memory_per_gpu_bytes=256 * GB,
            nvlink_bidirectional_bytes_per_s=900 * GB, nvlink_links=18, tdp_watts=700,
            system="DGX H200 (8 GPUs, 2 TB system memory)", gpus_per_host=8,
            sources=("NVIDIA H200 Tensor Core GPU datasheet", "nvidia-smi: 143771 MiB total",
                     "XLA xla/backends/gpu/target_config/specs/h200.txtpb (5a9e73cb)"),
            assumption="CUDA total = nvidia-smi's 143771 MiB minus 550 MiB, the gap measured on H100 (551 MiB; "
                       "717 MiB on B200): within 0.2 % (XLA's own spec file gives a synthetic 141 GiB)",
        ),
        Gpu(
            key="gh200", name="GH200 Grace Hopper (96 GB HBM3)", device_kind="NVIDIA GH200 480GB",
            hbm_bytes=(97_871 - 551) * MiB, hbm_marketing="96 GB HBM3", hbm_bandwidth=4.0e12,
            bf16_dense_flops=989.4e12, fp8_dense_flops=1978.9e12, sm_count=132, clock_ghz=1.98,
            memory_clock_ghz=2.62, compute_capability=(9, 0), l2_bytes=60 * MiB, architecture=HOPPER,
            host_link=HOST_LINKS["nvlink_c2c_gh200"], host_memory_per_gpu_bytes=480 * GB,
            nvlink_bidirectional_bytes_per_s=900 * GB, nvlink_links=18, tdp_watts=1000,
            system="quad GH200 node (4 superchips, each one Grace with 480 GB LPDDR5X and one H100)",
            gpus_per_host=4,
            sources=("NVIDIA GH200 Grace Hopper Superchip datasheet: 96 GB HBM3 at 4 TB/s, 990 TFLOP/s dense "
                     "BF16, 480 GB LPDDR5X, NVLink-C2C 900 GB/s",
                     "nvidia-smi (driver 570.124): 'NVIDIA GH200 480GB', 97871 MiB; CUDA: 132 SMs, 1.98 GHz, L2 60 MB"),
            assumption="CUDA total = nvidia-smi's 97871 MiB minus the 551 MiB gap measured on H100 (no public "
                       "cuDeviceTotalMem transcript); XLA has no GH200 spec file, so the Hopper rate tables apply",
        ),
        Gpu(
            key="b200", name="B200 (HGX/DGX B200)", device_kind="NVIDIA B200",
            hbm_bytes=191_514_411_008, hbm_marketing="180 GB HBM3e", hbm_bandwidth=8.0e12,
            bf16_dense_flops=2.25e15, fp8_dense_flops=4.5e15, sm_count=148, clock_ghz=1.965,
            memory_clock_ghz=3.996, compute_capability=(10, 0), l2_bytes=132_644_864, architecture=BLACKWELL,
            host_link=HOST_LINKS["pcie5_x16"], host_memory_per_gpu_bytes=256 * GB,
            nvlink_bidirectional_bytes_per_s=1800 * GB, nvlink_links=18, tdp_watts=1000,
            system="DGX B200 (8 GPUs, 2 TB system memory)", gpus_per_host=8,
            sources=("NVIDIA DGX B200 / HGX B200 datasheet (dense = half the sparse figures)",
                     "XLA xla/backends/gpu/target_config/specs/b200.txtpb (5a9e73cb)"),
        ),
        Gpu(
            key="gb200", name="GB200 NVL72 (Blackwell GPU)", device_kind="NVIDIA GB200",
            hbm_bytes=197_897_748_480, hbm_marketing="186 GB HBM3e", hbm_bandwidth=8.0e12,
            bf16_dense_flops=2.5e15, fp8_dense_flops=5.0e15, sm_count=152, clock_ghz=2.062,
            memory_clock_ghz=3.996, compute_capability=(10, 0), l2_bytes=135_528_448, architecture=BLACKWELL,
            host_link=HOST_LINKS["nvlink_c2c_gb200"], host_memory_per_gpu_bytes=240 * GB,
            nvlink_bidirectional_bytes_per_s=1800 * GB, nvlink_links=18, tdp_watts=1200,
            system="GB200 NVL72 (18 trays x 4 GPUs; one 480 GB LPDDR5X Grace per 2 GPUs)", gpus_per_host=4,
            sources=("NVIDIA GB200 NVL72 datasheet (per GPU = rack / 72)",
                     "XLA xla/backends/gpu/target_config/specs/gb200.txtpb (5a9e73cb)"),
        ),
    )
}


def _by_key(kind: str, key, table: dict, cls: type):
    """``key`` itself where it is a ``cls``, else ``table``'s entry for it (any case); one line naming the choices."""
    if isinstance(key, cls):
        return key
    key = str(key).lower()
    if key not in table:
        raise _choose(kind, key, table)
    return table[key]


def gpu(key: str | Gpu) -> Gpu:
    return _by_key("GPU", key, GPUS, Gpu)


# ----------------------------------------------------------------------------- TPUs


@dataclasses.dataclass(frozen=True)
class Tpu:
    """One TPU chip's datasheet facts, and what libtpu's compile-only topology needs to compile for it.

    ``usable_hbm_bytes`` is what the TPU runtime lets one program use (XLA:TPU refuses a program whose
    buffers exceed it at compile time, with ``RESOURCE_EXHAUSTED``); there is no allocator fraction to
    set, unlike a GPU's ``XLA_PYTHON_CLIENT_MEM_FRACTION``.
    """

    key: str
    name: str
    device_kind: str  # what jax's device.device_kind says
    hbm_bytes: int
    usable_hbm_bytes: int
    hbm_marketing: str
    hbm_bandwidth: float  # bytes/s
    bf16_dense_flops: float  # FLOP/s, the MXUs
    int8_dense_ops: float
    mxus: int  # matrix units per chip (128 x 128 systolic arrays)
    vmem_bytes: int  # the vector memory next to the cores
    ici_bidirectional_bytes_per_s: float  # per chip, all ports
    ici_ports: int
    host_link: HostLink
    host_memory_per_gpu_bytes: int  # host DRAM per chip (named as the GPUs' field: the fits rule reads both)
    gpus_per_host: int  # chips per host
    topology_name: str  # libtpu's name of one chip, e.g. "v5e:1x1"
    chip_config_name: str = "default"
    sources: tuple[str, ...] = ()
    assumption: str = ""
    platform: str = "tpu"
    grouped_gemm_tile_rows: int = 128  # rows per tile of a grouped GEMM's expert (MXU width; unused on dense models)

    @property
    def price_family(self) -> str:
        """The key of this chip's rows in the simulator's price tables (``schedule.PRICES``)."""
        return self.key

    def matches_device_kind(self, device_kind: str) -> bool:
        return device_kind.strip().lower().startswith(self.device_kind.lower())

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("host_link", "sources")}
        d.update(host_link=self.host_link.key, sources=list(self.sources))
        return d


TPUS: dict[str, Tpu] = {
    t.key: t
    for t in (
        Tpu(
            key="tpu-v5e", name="TPU v5e (v5 lite)", device_kind="TPU v5 lite",
            hbm_bytes=16 * GiB, usable_hbm_bytes=16_909_336_064,
            hbm_marketing="16 GB HBM2", hbm_bandwidth=819e9, bf16_dense_flops=197e12, int8_dense_ops=393e12,
            mxus=4, vmem_bytes=128 * MiB, ici_bidirectional_bytes_per_s=400 * GB, ici_ports=4,
            host_link=HOST_LINKS["pcie_tpu_v5e"], host_memory_per_gpu_bytes=64 * GiB, gpus_per_host=8,
            topology_name="v5e:1x1",
            sources=("Google Cloud TPU v5e page (docs.cloud.google.com/tpu/docs/v5e): one TensorCore of four MXUs per "
                     "chip, 197 TFLOP/s bf16, 393 TOP/s int8, 16 GB HBM2 at 819 GB/s, ICI 400 GB/s bidirectional over "
                     "4 ports, 8 chips and 512 GiB DRAM per host",
                     "the runtime's limit, read on the lent chip (libtpu 0.0.42.1, 2026-12-06): "
                     "memory_stats()['bytes_limit'] = 16,909,336,064 bytes; XLA:TPU's compile-time refusal, compile-only "
                     "and on the chip, says 'available HBM (15.75G)'",
                     "jax-ml scaling book: 128 MiB of VMEM on v5e"),
            assumption="host DRAM per chip = 512 GiB / 8 chips (the 8-chip host); the lent chip's VM had 40 GiB"),
    )
}


def tpu(key: str | Tpu) -> Tpu:
    return _by_key("TPU", key, TPUS, Tpu)


Accelerator = Gpu | Tpu
ACCELERATORS = (*GPUS, *TPUS)


def accelerator(key: str | Gpu | Tpu) -> Accelerator:
    """A GPU (``GPUS``) or a TPU (``TPUS``) by its key."""
    if isinstance(key, (Gpu, Tpu)):
        return key
    name = str(key).lower()
    if name in TPUS:
        return TPUS[name]
    if name in GPUS:
        return GPUS[name]
    raise _choose("accelerator", key, ACCELERATORS)


def for_device_kind(device_kind: str, keys=ACCELERATORS) -> Accelerator | None:
    """The accelerator among ``keys`` that JAX's ``device_kind`` names (``NVIDIA H100 80GB HBM3`` -> h100), or None."""
    return next((a for a in map(accelerator, keys) if a.matches_device_kind(device_kind)), None)


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
