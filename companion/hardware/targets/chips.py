"""The accelerators: GPU architectures and GPUs (``GPUS``), TPUs (``TPUS``), each with its datasheet figures and
sources."""

from __future__ import annotations

import dataclasses

from .links import GB, GiB, HOST_LINKS, HostLink, MiB, _choose


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
