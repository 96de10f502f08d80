"""Units, and the host links: PCIe and NVLink-C2C per GPU, each with its measured or datasheet bandwidths and sources
(``HOST_LINKS``)."""

from __future__ import annotations

import dataclasses
import difflib


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


@dataclasses.dataclass(frozen=True)
class Fabric:
    """How an accelerator's systems connect their devices: the scale-up domain (NVLink, or a TPU's ICI) and the
    scale-out network. ``gpu`` is the accelerator's key."""

    gpu: str
    nvlink_domain: int  # GPUs one NVLink (NVSwitch) domain connects
    nvlink_per_direction: float  # bytes/s per GPU, nominal
    nic_per_gpu: float  # bytes/s per GPU per direction, line rate
    sources: tuple[str, ...]
    assumption: str = ""

    def nvlink_bytes_per_s(self, efficiency: float) -> float:
        return self.nvlink_per_direction * efficiency

    def network_bytes_per_s(self, efficiency: float) -> float:
        return self.nic_per_gpu * efficiency


_CX7 = 400e9 / 8  # 400 Gb/s

FABRICS = {
    f.gpu: f
    for f in (
        Fabric("h100", 8, 450 * GB, _CX7, ("NVIDIA DGX H100 datasheet: 8x ConnectX-7 400 Gb/s, NVLink 4 900 GB/s "
                                           "bidirectional per GPU through 4 NVSwitches",)),
        Fabric("h200", 8, 450 * GB, _CX7, ("NVIDIA HGX H200 datasheet: NVLink 900 GB/s per GPU; HGX reference "
                                           "designs: one 400 Gb/s NIC per GPU",)),
        Fabric("b200", 8, 900 * GB, _CX7, ("NVIDIA DGX B200 datasheet: 8x ConnectX-7 400 Gb/s, NVLink 5 1.8 TB/s "
                                           "bidirectional per GPU",)),
        Fabric("gb200", 72, 900 * GB, _CX7, ("NVIDIA GB200 NVL72: one 72-GPU NVLink domain, 1.8 TB/s per GPU; "
                                             "ConnectX-7 400 Gb/s per GPU for scale-out",)),
        Fabric("gh200", 4, 450 * GB, 200e9 / 8,
               ("CSCS Alps / HPE Cray EX254n: 4 GH200 per node connected by NVLink, one 200 Gb/s Slingshot-11 "
                "NIC per GPU",),
               assumption="GH200 systems differ (NVL32 racks, single-superchip nodes); the lab assumes the quad "
                          "node: NVLink inside the node at the GPU's 18 links, 200 Gb/s per GPU across nodes"),
        Fabric("tpu-v5e", 1, 200 * GB, 0.0,
               ("Google Cloud TPU v5e page (docs.cloud.google.com/tpu/docs/v5e): ICI 400 GB/s bidirectional per chip "
                "over 4 ports",),
               assumption="the lab's v5e target is one chip (the lent one): no collective crosses a link, so the domain "
                          "is that chip and there is no scale-out network; ICI per direction is half the datasheet's "
                          "bidirectional figure"),
    )
}


def fabric(key: str) -> Fabric:
    """The fabric of an accelerator (its key, ``h100`` or ``tpu-v5e``)."""
    if key not in FABRICS:
        raise ValueError(f"no fabric for accelerator {key!r}; choose one of: {', '.join(FABRICS)}")
    return FABRICS[key]


def host_link(key: str | HostLink) -> HostLink:
    if isinstance(key, HostLink):
        return key
    if key not in HOST_LINKS:
        raise _choose("host link", key, HOST_LINKS)
    return HOST_LINKS[key]
