"""Collectives on a GPU system: which devices a collective spans, which link carries it, its time.

A collective of the scheduled HLO (``all-gather``, ``reduce-scatter``, ``all-reduce``,
``all-to-all``, ``ragged-all-to-all``, ``collective-permute``) runs over a *group* of devices
(its ``replica_groups``). Inside one NVLink domain (the 8 GPUs of an HGX board, the 72 of a
GB200 NVL72 rack) the group moves its bytes over NVLink; a group that spans domains is limited by
the scale-out network, one NIC per GPU ("rail-optimised", as NVIDIA's DGX/HGX reference
designs wire it), and the NICs of the group's members in one domain carry its cross-domain
traffic in parallel.

Per-GPU bytes on the wire follow the bandwidth-optimal (ring) algorithms NCCL uses for large
messages, with ``n`` devices in the group and ``B`` the full (unsharded) buffer: all-gather and
reduce-scatter ``(n-1)/n x B``, all-reduce ``2 (n-1)/n x B``, all-to-all ``(n-1)/n x B``,
collective-permute ``B``. Time = a fixed latency + wire bytes / the group's bandwidth.

Facts and assumptions (``Fabric.sources``/``assumption``):

* NVLink per GPU: H100/H200 900 GB/s bidirectional (NVLink 4, 18 links), B200/GB200 1.8 TB/s
  (NVLink 5) — the same datasheet figures as ``targets.Gpu.nvlink_bidirectional_bytes_per_s``.
  NCCL reaches about 80 % of the per-direction figure for large all-gathers / reduce-scatters on
  an 8-GPU NVSwitch board (nccl-tests bus bandwidth around 360 GB/s of 450 on DGX H100, as
  NVIDIA's and cloud vendors' published runs show): ``nvlink_efficiency`` 0.8, an assumption
  for the other GPUs.
* Scale-out: DGX/HGX H100, H200 and B200 have one 400 Gb/s ConnectX-7 per GPU (DGX H100 and
  DGX B200 datasheets); GB200 NVL72 racks one 400 Gb/s ConnectX-7 per GPU (GB200 NVL72
  reference architecture); GH200 systems vary — the lab assumes the quad-GH200 node of HPE Cray
  EX254n (Alps: 4 GPUs fully connected by NVLink, one 200 Gb/s Slingshot-11 NIC per GPU).
  ``network_efficiency`` 0.9 of line rate (an assumption; RDMA writes reach 90-97 %).
* ``latency_seconds`` 10 µs per collective (an assumption of the order of NCCL's small-message
  latency on NVLink; it matters only for many small collectives).
* Not modelled: NVLink SHARP / in-network reduction, contention between collectives of
  different axes on the same NVLink, collectives slowing concurrent compute (SM sharing).
"""

from __future__ import annotations

import dataclasses
import math
import re

from . import hlo
from .targets import GB, Target

DEVICE_BYTES_FACTOR = {  # wire bytes per GPU / full buffer bytes, times (n - 1) / n except permute
    "all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 1.0, "ragged-all-to-all": 1.0,
    "collective-broadcast": 1.0, "collective-permute": None,
}


@dataclasses.dataclass(frozen=True)
class Fabric:
    """How a GPU model's systems connect their GPUs: the NVLink domain and the scale-out NICs."""

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
    )
}


def fabric(gpu_key: str) -> Fabric:
    if gpu_key not in FABRICS:
        raise ValueError(f"no fabric for GPU {gpu_key!r}; choose one of: {', '.join(FABRICS)}")
    return FABRICS[gpu_key]


# ----------------------------------------------------------------------------- groups


@dataclasses.dataclass(frozen=True)
class Group:
    """One replica group of a collective: its devices (global ids)."""

    devices: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.devices)

    def domains(self, domain_size: int) -> int:
        """NVLink domains the group spans (device ids are row-major over hosts)."""
        return len({d // domain_size for d in self.devices})


_MESH = re.compile(r"mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_IOTA = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def first_group(instr: hlo.Instruction, num_devices: int) -> Group:
    """The group holding device 0 (all groups of an SPMD collective have the same shape)."""
    if instr.opcode.startswith("collective-permute"):
        pairs = re.findall(r"\{(\d+),(\d+)\}", instr.attrs.get("source_target_pairs", ""))
        ids = sorted({int(x) for p in pairs for x in p})
        return Group(tuple(ids) if ids else (0,))
    text = instr.attrs.get("replica_groups", "")
    m = _MESH.search(text)
    if m:
        axes = [(a.split("=")[0].strip().strip("'"), int(a.split("=")[1])) for a in m.group(1).split(",") if "=" in a]
        chosen = {a.strip().strip("'") for a in m.group(2).split(",") if a.strip()}
        sizes = [n for _, n in axes]
        strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
        ids = [0]
        for (name, n), stride in zip(axes, strides):
            if name in chosen:
                ids = [base + k * stride for base in ids for k in range(n)]
        return Group(tuple(sorted(ids)))
    m = _IOTA.search(text)
    if m:
        shape = [int(x) for x in m.group(1).split(",")]
        dims = [int(x) for x in m.group(2).split(",")]
        perm = [int(x) for x in m.group(3).split(",")] if m.group(3) else list(range(len(dims)))
        total = math.prod(dims)
        ids = _iota_transposed(dims, perm, total)
        return Group(tuple(ids[: shape[-1]]))
    groups = re.findall(r"\{([\d,]+)\}", text)
    if groups:
        return Group(tuple(int(x) for x in groups[0].split(",")))
    return Group(tuple(range(num_devices)))  # {} or absent: every device


def _iota_transposed(dims: list[int], perm: list[int], total: int) -> list[int]:
    """Row-major ids of iota(dims) transposed by perm, flattened."""
    new_dims = [dims[p] for p in perm]
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    out = []
    for flat in range(total):
        idx, rest = [], flat
        for n in reversed(new_dims):
            idx.append(rest % n)
            rest //= n
        idx.reverse()
        out.append(sum(idx[k] * strides[perm[k]] for k in range(len(perm))))
    return out


# ----------------------------------------------------------------------------- costs


@dataclasses.dataclass(frozen=True)
class CollectiveCost:
    """One execution of one collective on one GPU."""

    name: str
    kind: str  # all-gather, ...
    group_size: int
    domains: int  # NVLink domains the group spans
    buffer_bytes: int  # the full (unsharded) buffer
    wire_bytes: float  # what each GPU sends
    lane: str  # nvlink | network
    bytes_per_s: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class CollectiveModel:
    """Parameters of collective times (defaults: see the module docstring)."""

    nvlink_efficiency: float = 0.8
    network_efficiency: float = 0.9
    latency_seconds: float = 10e-6

    def __post_init__(self):
        for field in ("nvlink_efficiency", "network_efficiency"):
            value = getattr(self, field)
            if not 0 < value <= 1:
                raise ValueError(f"{field} must be in (0, 1], got {value!r}")
        if not self.latency_seconds >= 0:
            raise ValueError(f"latency_seconds must be >= 0, got {self.latency_seconds!r}")


def _device_bytes(shapes) -> int:
    return sum(a.bytes for s in shapes for a in hlo.flatten_shape(s) if not a.on_host)


_ROUTED_ROWS = re.compile(r"moe_all_to_all\[rows=(\d+)\]")


def buffer_bytes(module: hlo.HloModule, instr: hlo.Instruction, kind: str) -> int:
    """The full buffer a collective works on: the larger of its operands and its result. A ragged
    all-to-all moves the rows it sends, not its padded buffer: the MoE's (``models.moe``, named
    ``moe_all_to_all[rows=N]``, forward and backward) the rows routed under the step's routing
    assumption; any other its input."""
    target = hlo.wrapped_root(module, instr) if instr.opcode == "async-start" else instr
    if target is None:
        return 0
    operands = module.operand_shapes(target)
    if kind == "ragged-all-to-all":  # input, output, offsets and sizes
        routed = _ROUTED_ROWS.search(target.op_name) or _ROUTED_ROWS.search(instr.op_name)
        sent = hlo.flatten_shape(operands[0])[0] if operands else None
        if routed and sent is not None and sent.dims:
            return int(routed.group(1)) * sent.bytes // sent.dims[0]
        return _device_bytes(operands[:1])
    result = target.shape
    if target.opcode.endswith("-start") and isinstance(result, hlo.TupleShape) and len(result.elements) >= 2:
        result = result.elements[-1] if kind == "collective-permute" else result.elements[1]
    return max(_device_bytes(operands), _device_bytes([result]))


def cost(module: hlo.HloModule, instr: hlo.Instruction, target: Target,
         model: CollectiveModel = CollectiveModel()) -> CollectiveCost | None:
    """Time of one execution of a collective instruction on ``target``; None if it is not one."""
    kind = hlo.collective_opcode(module, instr)
    if not kind:
        return None
    inner = hlo.wrapped_root(module, instr) if instr.opcode == "async-start" else instr
    group = first_group(inner, target.num_devices)
    fab = fabric(target.gpu.key)
    n = group.size
    domains = group.domains(fab.nvlink_domain)
    full = buffer_bytes(module, instr, kind)
    factor = DEVICE_BYTES_FACTOR.get(kind)
    wire = float(full) if factor is None else (factor * full * (n - 1) / n if n > 1 else 0.0)
    nvlink = fab.nvlink_bytes_per_s(model.nvlink_efficiency)
    if domains > 1:  # the group's members in one domain send its cross-domain traffic in parallel, one NIC each
        per_domain = max(1, n // domains)
        bandwidth, lane = min(nvlink, per_domain * fab.network_bytes_per_s(model.network_efficiency)), "network"
    else:
        bandwidth, lane = nvlink, "nvlink"
    seconds = (model.latency_seconds + wire / bandwidth) if n > 1 else 0.0
    return CollectiveCost(instr.name, kind, n, domains, full, wire, lane, bandwidth, seconds)
