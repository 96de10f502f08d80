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
* The slowest group sets the time: an SPMD collective runs in all its groups at once, and the groups
  need not be alike (a group straddling two NVL72 racks unevenly; a lone member in a rack, whose one
  NIC carries the group's cross-rack traffic). ``cost`` prices every distinct group shape. Devices fill
  NVLink domains in order; on 72-GPU NVL72 racks a job of whole 64-GPU segments is assumed placed 64 to a
  rack (``SEGMENT_GPUS``, Slurm ``--segment=16``), or as ``CollectiveModel.domain_gpus`` says.
* SMs: a running NCCL collective holds ``nccl_sms`` SMs that concurrent compute cannot use
  (``NCCL_SMS``, with its sources); ``schedule`` stretches the compute it overlaps accordingly.
* Not modelled: NVLink SHARP / in-network reduction, contention between collectives of
  different axes on the same NVLink, HBM bandwidth a collective takes from concurrent kernels.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

from ..xla import hlo
from ..hardware.targets import GB, Fabric, Target

DEVICE_BYTES_FACTOR = {  # wire bytes per GPU / full buffer bytes, times (n - 1) / n except permute
    "all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 1.0, "ragged-all-to-all": 1.0,
    "collective-broadcast": 1.0, "collective-permute": None,
}


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

    def fewest_in_a_domain(self, domain_size: int) -> int:
        """Members in the domain where the group has the fewest: their NICs carry that domain's share of
        the group's cross-domain traffic (a lone member sends and receives it through its one NIC)."""
        counts: dict[int, int] = {}
        for d in self.devices:
            counts[d // domain_size] = counts.get(d // domain_size, 0) + 1
        return min(counts.values())


_MESH = re.compile(r"mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_IOTA = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def all_groups(instr: hlo.Instruction, num_devices: int) -> list[Group]:
    """Every replica group of a collective (``replica_groups`` in any form XLA prints; a
    collective-permute's source/target pairs, each a group of two)."""
    if instr.opcode.startswith("collective-permute"):
        pairs = re.findall(r"\{(\d+),(\d+)\}", instr.attrs.get("source_target_pairs", ""))
        return [Group(tuple(sorted({int(a), int(b)}))) for a, b in pairs] or [Group((0,))]
    text = instr.attrs.get("replica_groups", "")
    m = _MESH.search(text)
    if m:
        axes = [(a.split("=")[0].strip().strip("'"), int(a.split("=")[1])) for a in m.group(1).split(",") if "=" in a]
        chosen = {a.strip().strip("'") for a in m.group(2).split(",") if a.strip()}
        sizes = [n for _, n in axes]
        strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
        inner, outer = [0], [0]  # offsets along the chosen axes (one group), and the groups' first devices
        for (name, n), stride in zip(axes, strides):
            if name in chosen:
                inner = [base + k * stride for base in inner for k in range(n)]
            else:
                outer = [base + k * stride for base in outer for k in range(n)]
        return [Group(tuple(sorted(o + i for i in inner))) for o in sorted(outer)]
    m = _IOTA.search(text)
    if m:
        shape = [int(x) for x in m.group(1).split(",")]
        dims = [int(x) for x in m.group(2).split(",")]
        perm = [int(x) for x in m.group(3).split(",")] if m.group(3) else list(range(len(dims)))
        ids = _iota_transposed(dims, perm, math.prod(dims))
        size = shape[-1]
        return [Group(tuple(ids[k:k + size])) for k in range(0, len(ids), size)]
    groups = re.findall(r"\{([\d,]+)\}", text)
    if groups:
        return [Group(tuple(int(x) for x in g.split(","))) for g in groups]
    return [Group(tuple(range(num_devices)))]  # {} or absent: every device


def first_group(instr: hlo.Instruction, num_devices: int) -> Group:
    """The group holding device 0 (the first one listed)."""
    return all_groups(instr, num_devices)[0]


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
    fewest_in_a_domain: int = 0  # of the slowest group: its members on the thinner side of a domain boundary


# The SMs a running NCCL collective takes from compute: NCCL's maintainer, NVIDIA/nccl #689: "If you are on DGX
# with 8 NICs ... it would use 16 SMs" and "NCCL CTAs won't share an SM with compute kernels". The same 16 is
# assumed for NVLink collectives (NCCL's channel count on an NVSwitch board; NVLSTree with registered buffers
# needs 6, a GTC 2024 slide cited in NVIDIA/nccl #1656). Measured effect of overlap: an average 18.9 % compute
# slowdown (arXiv 2507.03114, 4 x A100/H100/MI2x0), of the order 16 of 132 SMs gives (14 %) plus HBM contention.
NCCL_SMS = 16


@dataclasses.dataclass(frozen=True)
class CollectiveModel:
    """Parameters of collective times (defaults: see the module docstring). ``nic_per_gpu`` replaces the
    fabric's NIC line rate per GPU (bytes/s each way) for a system wired otherwise (a cloud VM's NICs);
    ``nccl_sms``: the SMs a running NCCL collective holds, which concurrent compute kernels cannot use;
    ``domain_gpus``: the job's GPUs per NVLink domain where the launcher places fewer than the domain holds
    (on GB200 NVL72, Slurm's ``--segment=16`` puts 16 trays, 64 GPUs, in each 72-GPU rack so that
    power-of-two groups stay inside one; None: the devices fill whole domains in order)."""

    nvlink_efficiency: float = 0.8
    network_efficiency: float = 0.9
    latency_seconds: float = 10e-6
    nic_per_gpu: float | None = None
    nccl_sms: int = NCCL_SMS
    domain_gpus: int | None = None

    def __post_init__(self):
        for field in ("nvlink_efficiency", "network_efficiency"):
            value = getattr(self, field)
            if not 0 < value <= 1:
                raise ValueError(f"{field} must be in (0, 1], got {value!r}")
        if not self.latency_seconds >= 0:
            raise ValueError(f"latency_seconds must be >= 0, got {self.latency_seconds!r}")
        if self.nic_per_gpu is not None and not self.nic_per_gpu > 0:
            raise ValueError(f"nic_per_gpu must be a positive bandwidth in bytes/s, got {self.nic_per_gpu!r}")
        if self.domain_gpus is not None and (not isinstance(self.domain_gpus, int) or self.domain_gpus < 1):
            raise ValueError(f"domain_gpus must be a positive whole number of GPUs, got {self.domain_gpus!r}")
        if not isinstance(self.nccl_sms, int) or self.nccl_sms < 0:
            raise ValueError(f"nccl_sms must be a whole number of SMs >= 0, got {self.nccl_sms!r}")



def _device_bytes(shapes) -> int:
    return sum(a.bytes for s in shapes for a in hlo.flatten_shape(s) if not a.on_host)


_ROUTED_ROWS = re.compile(r"moe_all_to_all\[rows=(\d+)\]")


def buffer_bytes(module: hlo.HloModule, instr: hlo.Instruction, kind: str) -> int:
    """The full buffer a collective works on: the larger of its operands and its result. A ragged
    all-to-all moves the rows it sends, not its padded buffer: the MoE's (``models.moe``, named
    ``moe_all_to_all[rows=N]``, forward and backward) the rows routed under the step's routing
    assumption; where the compiled op lost that name (jaxlib 0.10.2's async ragged all-to-alls keep
    only their ``scheduling_name``) or for any other, the smaller of its send and receive buffers —
    the routed rows under balanced routing, where the combine sends back what the dispatch delivered."""
    target = hlo.wrapped_root(module, instr) if instr.opcode == "async-start" else instr
    if target is None:
        return 0
    operands = module.operand_shapes(target)
    if kind == "ragged-all-to-all":  # input, output, offsets and sizes
        routed = _ROUTED_ROWS.search(target.op_name) or _ROUTED_ROWS.search(instr.op_name)
        sent = hlo.flatten_shape(operands[0])[0] if operands else None
        if routed and sent is not None and sent.dims:
            return int(routed.group(1)) * sent.bytes // sent.dims[0]
        return min(_device_bytes(operands[:1]), _device_bytes(operands[1:2]) or _device_bytes(operands[:1]))
    result = target.shape
    if target.opcode.endswith("-start") and isinstance(result, hlo.TupleShape) and len(result.elements) >= 2:
        result = result.elements[-1] if kind == "collective-permute" else result.elements[1]
    return max(_device_bytes(operands), _device_bytes([result]))


def cost(module: hlo.HloModule, instr: hlo.Instruction, target: Target,
         model: CollectiveModel = CollectiveModel()) -> CollectiveCost | None:
    """Time of one execution of a collective instruction on ``target``; None if it is not one. An SPMD
    collective runs in every group at once and the step waits for the slowest: each distinct group
    shape is priced and the slowest taken (a group straddling two NVLink domains unevenly is limited
    by the NICs of its members on the thinner side; a lone member, by its own NIC)."""
    kind = hlo.collective_opcode(module, instr)
    if not kind:
        return None
    inner = hlo.wrapped_root(module, instr) if instr.opcode == "async-start" else instr
    fab = target.fabric
    full = buffer_bytes(module, instr, kind)
    factor = DEVICE_BYTES_FACTOR.get(kind)
    slowest = None
    for shape in _group_shapes(inner.attrs.get("replica_groups", ""), inner.attrs.get("source_target_pairs", ""),
                               inner.opcode, target.num_devices, _domain(fab, model, target.num_devices)):
        n, domains, fewest = shape
        wire = float(full) if factor is None else (factor * full * (n - 1) / n if n > 1 else 0.0)
        bandwidth, lane = _group_bandwidth(domains, fewest, fab, model)
        seconds = (model.latency_seconds + wire / bandwidth) if n > 1 else 0.0
        c = CollectiveCost(instr.name, kind, n, domains, full, wire, lane, bandwidth, seconds, fewest)
        if slowest is None or c.seconds > slowest.seconds:
            slowest = c
    return slowest


SEGMENT_GPUS = 64  # GPUs a launcher puts in each 72-GPU NVL72 rack (Slurm --segment=16: 16 of 18 trays)


def _domain(fab: Fabric, model: CollectiveModel, num_devices: int) -> int:
    """GPUs of the job per NVLink domain: ``model.domain_gpus`` where given; on a 72-GPU domain, for a job
    of whole 64-GPU segments larger than one rack, ``SEGMENT_GPUS`` — an assumption, the launcher layout
    NVIDIA's GB200 recipes use (Slurm's ``--segment`` keeps power-of-two groups inside one rack; packed 72
    to a rack, a 512-GPU job's FSDP groups would leave one member alone in its eighth rack); else whole
    domains in device order."""
    if model.domain_gpus:
        return min(model.domain_gpus, fab.nvlink_domain)
    if fab.nvlink_domain == 72 and num_devices > 72 and num_devices % SEGMENT_GPUS == 0:
        return SEGMENT_GPUS
    return fab.nvlink_domain


def _group_bandwidth(domains: int, fewest: int, fab: Fabric, model: CollectiveModel) -> tuple[float, str]:
    """(bytes/s per GPU, lane) of a group spanning ``domains`` NVLink domains: inside one, NVLink; across,
    the thinner side's members send the cross-domain traffic in parallel, one NIC each."""
    nvlink = fab.nvlink_bytes_per_s(model.nvlink_efficiency)
    if domains <= 1:
        return nvlink, "nvlink"
    return min(nvlink, fewest * (model.nic_per_gpu or fab.nic_per_gpu) * model.network_efficiency), "network"


def axis_bandwidth(mesh: dict[str, int], axes, target: Target, model: CollectiveModel = CollectiveModel()) -> float:
    """Bytes/s per GPU of a collective over ``axes`` of ``mesh`` (its axes in device order, row-major, as
    the lab's compiles lay devices out) on ``target``: its slowest group, priced as ``cost`` prices a
    compiled collective — for estimates made before any compile (the planner's search)."""
    fab = target.fabric
    text = ("mesh[" + ",".join(f"'{a}'={n}" for a, n in mesh.items()) + "] {"
            + ",".join(f"'{a}'" for a in axes if a in mesh) + "}")
    return min(_group_bandwidth(domains, fewest, fab, model)[0]
               for _, domains, fewest in _group_shapes(text, "", "all-gather", target.num_devices,
                                                       _domain(fab, model, target.num_devices)))


@functools.lru_cache(maxsize=4096)
def _group_shapes(replica_groups: str, pairs: str, opcode: str, num_devices: int,
                  domain_size: int) -> tuple[tuple[int, int, int], ...]:
    """The distinct (size, NVLink domains spanned, fewest members in one domain) of a collective's groups."""
    instr = hlo.Instruction("c", opcode, None, [], {"replica_groups": replica_groups, "source_target_pairs": pairs}, "")
    return tuple(sorted({(g.size, g.domains(domain_size), g.fewest_in_a_domain(domain_size))
                         for g in all_groups(instr, num_devices)}))
