"""What each op of a compiled step costs: the lanes, the cost model and its price tables (one entry per price family
or link kind, each with its source), the program of ops."""

from __future__ import annotations

import dataclasses

from .. import collectives as coll
from ...xla import hlo
from ...hardware import targets
from ..roofline import matmul_rate
from ...hardware.targets import HostLink, Target


LANES = ("compute", "d2h", "h2d", "nvlink", "network", "async")
_ASYNC_CAPPED = ("d2h", "h2d", "async")  # XLA's kGpuAsyncStreamComputes: host transfers and async computes
_FREE = ("parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all", "add-dependency",
         "opt-barrier", "partition-id", "replica-id", "iota")


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Achievable rates and fixed costs of the simulation (all overridable).

    Defaults, and where they come from — each from kernel measurements and the literature, frozen on
    2026-12-05 before the simulator was first held against published step times
    (``benchmarks/bench_calibration.py``; none is fitted to those runs):

    * ``matmul_efficiency``: None takes the accelerator's (``MATMUL_EFFICIENCY``: a GPU generation's, a TPU
      chip's; with their sources).
    * ``attention_efficiency`` 0.5 for fused attention kernels (cuDNN's ``__cudnn$fmha``), of the dense
      peak, counting a causal kernel's FLOPs as half a full one's (as ``hlo`` does): cuDNN's causal
      head-dim-128 kernels at S = 4096 on H100 run the forward at 518 and the backward at 499 TFLOP/s
      (0.52, 0.50 of 989; FlashAttention-3, arXiv 2407.08608, its figures' cuDNN series); Blackwell the
      same share, an assumption (FlashAttention-4, arXiv 2603.05451: up to 71 % of B200's peak at its best
      shape, 1.3x cuDNN 9.13).
    * ``grouped_efficiency`` / ``grouped_wgrad_efficiency``: a grouped GEMM's share of the dense
      bf16 peak (the MoE stand-in's passes, ``hlo.grouped_gemm``); None takes the GPU generation's
      (``GROUPED_GEMM_EFFICIENCY``, with its sources).
    * ``hbm_efficiency``: None takes the accelerator's share of its datasheet HBM bandwidth for
      memory-bound kernels (``HBM_EFFICIENCY``).
    * ``kernel_gap_seconds``: None takes the accelerator's gap between kernels on the compute stream
      (``KERNEL_GAP_SECONDS``).
    * ``collectives``: see ``companion.collectives``.
    * ``async_compute_limit``: None takes the compile's flag (XLA's default 2).
    * ``concurrent_gpus``: GPUs of the host link's sharing group that transfer at once; None is all
      of them the target has on a host (an SPMD step offloads on every GPU together;
      ``Target.transferring_together``).
    * ``transfer_kernel_sm_share``: the share of a compute kernel's throughput a concurrent transfer kernel
      takes (``engine == "kernel"``); None takes the link's (``TRANSFER_KERNEL_SM_SHARE``). An assumption:
      XLA launches the kernel over every element with no block cap, on a default-priority stream, so it can
      fill the GPU; a link needs only a few SMs to saturate (bands: 0.05-1).
    """

    matmul_efficiency: float | None = None
    attention_efficiency: float = 0.5
    grouped_efficiency: float | None = None
    grouped_wgrad_efficiency: float | None = None
    hbm_efficiency: float | None = None
    kernel_gap_seconds: float | None = None
    collectives: coll.CollectiveModel = coll.CollectiveModel()
    async_compute_limit: int | None = None
    concurrent_gpus: int | None = None
    transfer_kernel_sm_share: float | None = None

    def __post_init__(self):
        for field in ("matmul_efficiency", "attention_efficiency", "hbm_efficiency", "grouped_efficiency",
                      "grouped_wgrad_efficiency"):
            value = getattr(self, field)
            if value is None and field != "attention_efficiency":
                continue
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{field} must be in (0, 1], got {value!r}")
        if self.kernel_gap_seconds is not None and (not isinstance(self.kernel_gap_seconds, (int, float))
                                                    or self.kernel_gap_seconds < 0):
            raise ValueError(f"kernel_gap_seconds must be >= 0, got {self.kernel_gap_seconds!r}")
        share = self.transfer_kernel_sm_share
        if share is not None and (not isinstance(share, (int, float)) or not 0 <= share <= 1):
            raise ValueError(f"transfer_kernel_sm_share must be in [0, 1], got {share!r}")
        if self.async_compute_limit is not None and (not isinstance(self.async_compute_limit, int)
                                                     or self.async_compute_limit < 1):
            raise ValueError(f"async_compute_limit must be a positive integer or None, got {self.async_compute_limit!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def matmul(self, accelerator: targets.Accelerator) -> float:
        """A dense matmul's share of the peak (``matmul_efficiency``, else the accelerator's)."""
        return self.matmul_efficiency or MATMUL_EFFICIENCY[accelerator.price_family]

    def hbm(self, accelerator: targets.Accelerator) -> float:
        """A memory-bound kernel's share of the datasheet HBM bandwidth."""
        return self.hbm_efficiency or HBM_EFFICIENCY[accelerator.price_family]

    def gap(self, accelerator: targets.Accelerator) -> float:
        """Seconds between two kernels on the compute stream."""
        return self.kernel_gap_seconds if self.kernel_gap_seconds is not None else (
            KERNEL_GAP_SECONDS[accelerator.price_family])

    def kernel_sm_share(self, link: HostLink) -> float:
        """The share of the SMs a transfer kernel on ``link`` takes from compute beside it."""
        if self.transfer_kernel_sm_share is not None:
            return self.transfer_kernel_sm_share
        return TRANSFER_KERNEL_SM_SHARE["c2c" if link.key.startswith("nvlink_c2c") else "pcie"]

    def grouped(self, gpu: targets.Gpu, kind: str) -> float:
        """The grouped GEMM's efficiency for a pass (fprop, dgrad or wgrad) on ``gpu``."""
        fprop, wgrad = GROUPED_GEMM_EFFICIENCY[gpu.architecture.name]
        if kind == "wgrad":
            return self.grouped_wgrad_efficiency or wgrad
        return self.grouped_efficiency or fprop


# cuBLAS's bf16 GEMMs' share of the dense peak on the layer-sized shapes of a training step, per generation:
# the best shape of a sweep reaches 80.3 % on H100 SXM ("maximum achievable matmul FLOPS", stas00/ml-engineering,
# torch 2.7 + CUDA 12.6; H200 the same), 77.6 % on B200 and 72.9 % on GB200; cuBLAS 8192^3 on B200 1,610 TFLOP/s
# (72 %, pyptx.dev); XLA's own matmul table prices the 8B layer's 481 GFLOP GEMM at 79 % on H100
# (benchmarks/bench_target_config.py). Typical shapes sit a few points below the best: 0.75 and 0.70.
# TPU v5e: the lab's matmul microbenchmarks on the lent chip (benchmarks/results/measured.json, kernels.matmul;
# bench_measured.py), each a jitted call of one bf16 matmul: time = 0.55 ms (the call's dispatch) + FLOPs / (197
# TFLOP/s x e) fits 2048^3 and 8192^3 with e = 0.92, and 16384x2048x{2048,8192} within 8 % (the steps' matmuls are
# of these sizes). From kernels only, never from the measured steps (bench_tpu_simulation.py holds the steps against it).
MATMUL_EFFICIENCY = {"hopper": 0.75, "blackwell": 0.70, "tpu-v5e": 0.92}

# A memory-bound kernel's share of the datasheet HBM bandwidth. GPUs: streaming copies reach 85-90 %. TPU v5e:
# the lab's scale-and-add of 1 GiB on the chip (kernels.hbm_copy: 2 GiB read and written in 3.93 ms, less the
# call's 0.55 ms dispatch) runs at 635 GB/s, 0.78 of 819.
HBM_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.85, "tpu-v5e": 0.78}

# Seconds between kernels on the compute stream. GPUs: 2 µs, launch and tail (MaxText's GPU flags turn
# CUDA-graph command buffers off), an assumption. TPU: 0 — one compiled program's instruction stream, no
# launches between its ops. Measured on the chip after the comparison's prices were frozen (bench_measured.py
# --part overhead: chains of 1-1024 dependent ops in one program): a 256^2 matmul with a tanh costs 0.28 us per
# op and a 1 MiB elementwise op 0.44 us, work included — less than this table prices either op by its bytes (their
# data stays on the chip), so the chains bound a fixed per-op cost from above without isolating one. At that bound
# the S 16K-32K steps' 145,000-290,000 ops (the blockwise flash kernel) would cost 11-12 % of their step, the
# size of their error; the cause stays open and the gap at 0, an assumption.
KERNEL_GAP_SECONDS = {"hopper": 2e-6, "blackwell": 2e-6, "tpu-v5e": 0.0}

# A bf16 grouped GEMM's achievable share of the dense peak, (fprop and dgrad, wgrad), per generation.
# Hopper: NVIDIA/TransformerEngine PR #2045 (2025-08) measured TE's grouped GEMM on H100 at 554-651 TFLOP/s
# for 8-16 experts of 2-4k rows (0.56-0.66 of 989): 0.60; wgrad 0.55, an assumption (lower, as on Blackwell).
# Blackwell: no published bf16 fprop figure but marin's (which the tests keep as the held-out check): the
# dense bf16 GEMM's best shape reaches 77.6 % on B200 (stas00/ml-engineering, "maximum achievable matmul
# FLOPS"), times Hopper's grouped/dense ratio (0.61 / 0.80): 0.59; wgrad 0.55, between cuDNN's 0.45-0.50 and
# QuACK's 0.60-0.70 varlen-K kernels on GB200 (marin-community/marin PR #8814). Fine-grained experts (~100
# rows each) run far lower (0.13-0.16 on H100, tgale96/grouped_gemm PR #37): not modelled.
GROUPED_GEMM_EFFICIENCY = {"hopper": (0.60, 0.55), "blackwell": (0.59, 0.55)}

# The share of the SMs a transfer kernel (``engine == "kernel"``) takes from compute beside it, per link kind: a
# Little's-law estimate of the SMs a link needs in flight (a few on PCIe, ~10-25 on NVLink-C2C) on a grid that can
# fill the GPU (docs/research/46231-workaround-transfers.md); the range, 0.05-1, is in bands.SWEEP. Assumptions.
TRANSFER_KERNEL_SM_SHARE = {"pcie": 0.25, "c2c": 0.35}


# ----------------------------------------------------------------------------- the program

@dataclasses.dataclass(frozen=True)
class Op:
    """One scheduled instruction, as the simulation needs it."""

    name: str
    opcode: str
    action: str  # compute | start | done | while | call | conditional | free
    lane: str = "compute"
    seconds: float = 0.0
    start: str = ""  # for a done: its start
    called: tuple[str, ...] = ()
    trips: int = 1
    category: str = ""  # compute | transfer | collective | async
    bytes: float = 0.0
    flops: float = 0.0
    op_class: str = ""  # a compute op's class (hlo.OP_CLASSES)
    engine: str = ""  # a host transfer's (hlo.HostTransfer.engine): copy_engine | kernel | dma


def _compute_seconds(cost: hlo.OpCost, gpu: targets.Gpu, model: CostModel) -> float:
    """A kernel's roofline on ``gpu``: its FLOPs at its class's efficiency (a grouped-GEMM pass at the
    grouped kernel's, cuDNN attention at the attention kernel's, other matmuls at cuBLAS's), its HBM
    bytes at the achievable bandwidth, plus the kernel gap."""
    if not cost.flops and not cost.bytes:
        return 0.0
    if cost.grouped_kind:
        efficiency = model.grouped(gpu, cost.grouped_kind)
    elif cost.op_class == "attention":
        efficiency = model.attention_efficiency
    else:
        efficiency = model.matmul(gpu)
    flops_time = cost.flops / (matmul_rate(gpu, cost.dtype) * efficiency) if cost.flops else 0.0
    return max(flops_time, cost.bytes / (gpu.hbm_bandwidth * model.hbm(gpu))) + model.gap(gpu)


def build_program(module: hlo.HloModule, target: Target, model: CostModel) -> dict[str, list[Op]]:
    """Each scheduled computation as a list of ``Op``s with their costs on ``target`` (a host
    transfer carries its bytes: its seconds depend on the link the replay is given)."""
    transfers = {t.name: t for t in hlo.offload_summary(module).transfers}
    costs = {c.name: c for c in hlo.op_costs(module, set(transfers), target.gpu.grouped_gemm_tile_rows,
                                             target.platform)}
    scheduled = module.scheduled_computations
    return {name: [_op(module, instr, target, model, costs, transfers) for instr in comp.instructions]
            for name, comp in module.computations.items() if name in scheduled}  # module order: deterministic


def _op(module, instr, target, model, costs, transfers) -> Op:
    opcode = instr.opcode
    if opcode in _FREE or opcode.endswith("-update"):
        return Op(instr.name, opcode, "free")
    if opcode == "while":
        return Op(instr.name, opcode, "while", called=(instr.attrs.get("body", "").lstrip("%"),),
                  trips=instr.trip_count if instr.trip_count is not None else 1)
    if opcode == "call":
        return Op(instr.name, opcode, "call", called=tuple(instr.called))
    if opcode == "conditional":
        return Op(instr.name, opcode, "conditional", called=tuple(instr.called))
    if opcode.endswith("-done"):
        return Op(instr.name, opcode, "done", start=instr.operands[0] if instr.operands else "")
    is_start = opcode.endswith("-start")
    if instr.name in transfers:
        t = transfers[instr.name]
        return Op(instr.name, opcode, "start" if is_start else "compute", t.direction,
                  category="transfer", bytes=t.bytes_per_execution, engine=t.engine)
    c = coll.cost(module, instr, target, model.collectives)
    if c is not None:
        return Op(instr.name, opcode, "start" if is_start else "compute", c.lane,
                  c.seconds, category="collective", bytes=c.wire_bytes)
    cost = costs.get(instr.name)
    if cost is None:
        return Op(instr.name, opcode, "free")
    seconds = _compute_seconds(cost, target.gpu, model)
    if is_start:  # a device copy or an async computation on its own stream
        return Op(instr.name, opcode, "start", "async", seconds, category="async", bytes=cost.bytes, flops=cost.flops,
                  op_class=cost.op_class)
    return Op(instr.name, opcode, "compute", "compute", seconds, category="compute", bytes=cost.bytes,
              flops=cost.flops, op_class=cost.op_class)
