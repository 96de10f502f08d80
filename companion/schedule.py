"""Step time from the compiled schedule: a replay of XLA's instruction order on a GPU's streams.

``simulate(report)`` walks the scheduled HLO of a ``CompileReport`` in the order XLA chose (the
entry computation, every ``while`` body by its trip count, ``call``s inline) and keeps one clock
per resource:

* ``compute`` — the GPU's compute stream: every kernel, one after another, each at its roofline
  (``CostModel``: counted matmul FLOPs at a share of the dense peak, HBM bytes at a share of the
  HBM bandwidth, plus a per-kernel gap);
* ``d2h`` and ``h2d`` — the copy engines: a host transfer takes bytes / the host link's achievable
  bandwidth in its direction per GPU, with every GPU sharing the link (and the host memory
  behind it) transferring at once (``targets.HostLink.bandwidth_per_gpu``);
* ``nvlink`` and ``network`` — collectives (``companion.collectives``): a group inside one NVLink
  domain on NVLink, one that spans domains on the scale-out NICs; each lane runs one collective
  at a time (concurrent collectives share the same wires);
* ``async`` — other async work (device-to-device ``copy-start``, async fusions).

Each kernel is priced as the kernel it stands for, by class (``hlo.OP_CLASSES``): cuBLAS matmuls and
XLA's fusions at their rooflines; cuDNN's fused attention at the attention efficiency; a MoE grouped
GEMM pass (the stand-in custom call of ``models.grouped_gemm``) as one grouped kernel: the rows its
routing assumption puts on the most-loaded device, each expert's share rounded up to whole tiles
(``Architecture.grouped_gemm_tile_rows``), FLOPs at a grouped GEMM's efficiency
(``GROUPED_GEMM_EFFICIENCY``), HBM bytes = the rows' activations once and each expert's weights once
(``hlo.GroupedGemm``); the MoE's ragged all-to-alls by the rows they carry, not their padded buffers
(``collectives.buffer_bytes``).

An async ``*-start`` issues its work when the compute stream reaches it; the work begins when its
lane is free and fewer than ``async_compute_limit`` host transfers and async computes are running
(XLA's ``--xla_gpu_experimental_parallel_async_compute_limit``, default 2: the scheduler keeps at
most that many in flight, ``GpuAsyncTracker`` at jaxlib 0.10.2's XLA); its ``*-done`` makes the
compute stream wait until the work has finished. That wait is *exposed* time: the step is
``compute + exposed transfers + exposed collectives + other waits``.

Loops: a body's iterations are independent once nothing started outside it is still running
(every async op a body starts, it also waits for), so one such iteration is simulated and its
time and stream busy times are multiplied by the remaining trips; the iterations before it (a
transfer or collective of the parent still running) are simulated one by one. A 126-layer stack
costs one or two iterations' work, not 126.

Effects of one stream on another, each with its source or stated assumption:

* NCCL's SMs: compute that runs beside an async collective loses the SMs NCCL holds
  (``CollectiveModel.nccl_sms`` of the GPU's ``sm_count``): its time is stretched by
  SMs / (SMs - nccl_sms) over the overlap.
* PCIe shared with the NIC (``HostLink.carries_nic_traffic``: DGX/HGX put each GPU and its NIC under
  one PCIe switch, so GPUDirect RDMA and the GPU's host copies cross the same x16 link, DGX H100/B200
  user guides): while a host transfer and a scale-out collective overlap each gets half the link, and
  the one that needs more than half is slowed.
* Transfers a kernel makes (``hlo.HostTransfer.engine == "kernel"``: a ``kLoop`` fusion reading or writing
  pinned host memory through its mapped pointer, what XLA:GPU's offloaded scan residuals become under the
  lab's #46231 workaround, ``--xla_disable_hlo_passes=dynamic-slice-annotator``; the mechanism, at XLA
  5a9e73cb, in ``docs/research/46231-workaround-transfers.md``): priced at the link's SM-driven rate
  (``HostLink.kernel_d2h/h2d``), and while one runs it holds a share of the SMs
  (``CostModel.transfer_kernel_sm_share``): compute beside it loses that share of its throughput over the
  overlap, the lost work done after (``s = 1``: the two serialize). A copy-engine transfer holds no SMs.

Exposed transfer time is split into the link's *floor* and the schedule's *excess* (``_Replay.scoped``):
per loop iteration (and for the entry computation's own ops), per direction, the floor is the transfer
time beyond that scope's compute — no schedule can hide it —, capped at what was exposed; the excess is
the rest, what a better placement could hide.

What is not modelled: a copy or a collective taking HBM bandwidth from concurrent kernels, host-side
launch latency beyond the per-kernel gap, conditionals (the slowest branch is taken), send/recv.
XLA's own estimate of the same schedule (its ``.schedule.txt`` dump, ``compare_with_xla``) prices
every host transfer at a constant — 5000 µs with the estimators GPU compiles use at jaxlib 0.10.2 —
whatever its bytes, here bytes / bandwidth; its dump totals the entry computation with each loop at
~0 µs, so its whole-step estimate is the entry plus every body times its trips (``xla_step_us``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Any

from . import collectives as coll
from . import hlo, targets
from .roofline import matmul_rate
from .targets import HostLink, Target

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


# ----------------------------------------------------------------------------- the result


@dataclasses.dataclass(frozen=True)
class Event:
    """One interval on one lane, for a Gantt chart. ``kind``: compute, d2h, h2d, collective, async,
    wait-transfer / wait-collective / wait-async (the compute stream stalled on a ``*-done``),
    loop (iterations simulated as a block)."""

    name: str
    lane: str
    start: float
    end: float
    kind: str
    computation: str
    iteration: int = 0

    @property
    def seconds(self) -> float:
        return self.end - self.start


SCHEMA = 2  # of ``StepSimulation.to_dict`` (simulate --json): 2 gave FLOPs one meaning each and the op-class tables


@dataclasses.dataclass(frozen=True)
class StepSimulation:
    """One training step replayed on one GPU of ``target`` (per device; seconds).

    FLOPs, one meaning each: ``model_flops`` is MaxText's count of the model's work (``companion.flops``,
    from the compile's ``Workload``; None for a function compiled without one), the numerator of
    TFLOP/s and MFU, the same for every policy at a batch; ``hardware_flops`` is what the compiled
    program executes (recompute, padding, dispatch einsums, a grouped GEMM's tiles, ``ragged_dot``'s
    dense expansion), ``recompute_flops`` the part of it remat added. ``flops_by_kind`` and
    ``time_by_kind`` split the executed FLOPs and the busy seconds by op class (``hlo.OP_CLASSES``;
    collectives by lane, ``collective:nvlink``/``collective:network``; host transfers by direction,
    ``transfer:d2h``/``transfer:h2d``): streams overlap, so the seconds do not add up to the step.
    """

    target: str
    link: str
    step_seconds: float
    compute_seconds: float  # the compute stream busy
    exposed_transfer_seconds: float  # compute stream waiting for host transfers
    exposed_collective_seconds: float  # ... for collectives (and synchronous collectives)
    exposed_other_seconds: float  # ... for other async work
    exposed_transfer_by_direction: dict[str, float]  # the exposed transfer seconds of writes (d2h) and reads (h2d)
    busy_seconds: dict[str, float]  # per lane
    model_flops: float | None  # MaxText's count, per device (None without a workload)
    hardware_flops: float  # what the compiled program executes, per device
    recompute_flops: float
    peak_flops: float  # the GPU's dense bf16 peak, FLOP/s
    peak_device_bytes: int
    host_bytes: int
    loop_iteration_seconds: dict[str, float]  # per loop body: one steady-state iteration
    tokens: float | None = None  # per device per step (None without a workload)
    flops_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    time_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    # the part of the exposed transfer seconds the link's bandwidth forces (``_Replay.scoped``: per loop
    # iteration and the entry, per direction, the transfer time beyond that scope's compute); the rest is
    # the schedule's excess
    exposed_transfer_floor: dict[str, float] = dataclasses.field(default_factory=dict)
    events: tuple[Event, ...] = dataclasses.field(repr=False, default=())
    cost_model: CostModel = CostModel()
    async_compute_limit: int = 2
    # compute seconds added by the SMs transfer kernels held (engine "kernel": the #46231 workaround's transfers)
    transfer_kernel_sm_seconds: float = 0.0

    @property
    def exposed_seconds(self) -> float:
        return self.exposed_transfer_seconds + self.exposed_collective_seconds + self.exposed_other_seconds

    @property
    def exposed_transfer_excess(self) -> dict[str, float]:
        """Exposed transfer seconds per direction beyond the link's floor: what a better schedule could hide."""
        return {d: max(0.0, v - self.exposed_transfer_floor.get(d, 0.0))
                for d, v in self.exposed_transfer_by_direction.items()}

    @property
    def exposed_transfer_split(self) -> dict[str, dict[str, float]]:
        """Per direction: the exposed seconds, the link's floor and the schedule's excess (floor + excess = exposed)."""
        return {d: {"exposed_seconds": v, "floor_seconds": self.exposed_transfer_floor.get(d, 0.0),
                    "excess_seconds": self.exposed_transfer_excess[d]}
                for d, v in self.exposed_transfer_by_direction.items()}

    @property
    def tflops_per_gpu(self) -> float | None:
        """Model FLOP/s per GPU (MaxText's count over the simulated step), in TFLOP/s."""
        if self.model_flops is None or not self.step_seconds:
            return None
        return self.model_flops / self.step_seconds / 1e12

    @property
    def mfu(self) -> float | None:
        if self.model_flops is None or not self.step_seconds:
            return None
        return self.model_flops / self.step_seconds / self.peak_flops

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens per second per GPU: how practitioners compare runs at a fixed global batch."""
        if self.tokens is None or not self.step_seconds:
            return None
        return self.tokens / self.step_seconds

    def to_dict(self, events: bool = False) -> dict[str, Any]:
        out = {"schema": SCHEMA, "target": self.target, "link": self.link, "step_seconds": self.step_seconds,
               "compute_seconds": self.compute_seconds, "exposed_transfer_seconds": self.exposed_transfer_seconds,
               "exposed_collective_seconds": self.exposed_collective_seconds,
               "exposed_other_seconds": self.exposed_other_seconds,
               "exposed_transfer_by_direction": dict(self.exposed_transfer_by_direction),
               "exposed_transfer_split": self.exposed_transfer_split,
               "busy_seconds": dict(self.busy_seconds), "tokens_per_device": self.tokens,
               "tokens_per_second_per_gpu": self.tokens_per_second,
               "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "model_flops": self.model_flops,
               "hardware_flops": self.hardware_flops, "recompute_flops": self.recompute_flops,
               "flops_by_kind": dict(self.flops_by_kind), "time_by_kind": dict(self.time_by_kind),
               "peak_device_bytes": self.peak_device_bytes,
               "host_bytes": self.host_bytes, "loop_iteration_seconds": dict(self.loop_iteration_seconds),
               "async_compute_limit": self.async_compute_limit, "cost_model": self.cost_model.to_dict(),
               "transfer_kernel_sm_seconds": self.transfer_kernel_sm_seconds}
        if events:
            out["events"] = [dataclasses.asdict(e) for e in self.events]
        return out

    def summary(self) -> str:
        ms = 1e3
        rate = (f"{self.tokens_per_second:,.0f} tokens/s and {self.tflops_per_gpu:.0f} TFLOP/s per GPU (model FLOPs), "
                f"MFU {self.mfu:.1%}" if self.model_flops is not None and self.tokens is not None
                else f"{self.hardware_flops / self.step_seconds / 1e12:.0f} TFLOP/s executed per GPU (no model "
                     "FLOP count: compile with a Workload)" if self.step_seconds else "")
        return (f"{self.target} over {self.link}: step {self.step_seconds * ms:.1f} ms = compute "
                f"{self.compute_seconds * ms:.1f} + exposed transfers {self.exposed_transfer_seconds * ms:.1f} + "
                f"exposed collectives {self.exposed_collective_seconds * ms:.1f}"
                + (f" + other waits {self.exposed_other_seconds * ms:.1f}" if self.exposed_other_seconds else "")
                + f" ms; {rate}")

    def lane_events(self, computation: str | None = None, iteration: int = 0) -> list[Event]:
        """Events of one computation's recorded iteration (all of them when ``computation`` is None)."""
        return [e for e in self.events if computation is None or (e.computation == computation
                                                                  and e.iteration == iteration)]


# ----------------------------------------------------------------------------- the replay


_WAIT_KIND = {"transfer": "wait-transfer", "collective": "wait-collective", "async": "wait-async"}


class _Tally:
    """What a replay counts: each lane's busy seconds, the compute stream's waits by kind, and the scopes of
    the exposed-transfer split (the entry and each loop iteration: their own busy and exposed seconds)."""

    def __init__(self):
        self.busy = dict.fromkeys(LANES, 0.0)
        # waits by kind; "sm_lost": the compute seconds added beside transfer kernels (tallied with the waits, so a
        # loop's steady iterations multiply it too)
        self.exposed = {"transfer": 0.0, "collective": 0.0, "async": 0.0, "d2h": 0.0, "h2d": 0.0,
                        "floor:d2h": 0.0, "floor:h2d": 0.0, "sm_lost": 0.0}
        self.scopes: list[dict[str, float]] = []

    def expose(self, category: str, lane: str, seconds: float):
        """The compute stream waited ``seconds`` for work of ``category`` (transfers also by direction)."""
        self.exposed[category] += seconds
        if category == "transfer":
            self.exposed[lane] += seconds
            if self.scopes:
                self.scopes[-1]["exposed:" + lane] += seconds

    def add_busy(self, lane: str, seconds: float):
        self.busy[lane] += seconds
        if self.scopes and lane in self.scopes[-1]:
            self.scopes[-1][lane] += seconds

    def open_scope(self):
        self.scopes.append(dict.fromkeys(("compute", "d2h", "h2d", "exposed:d2h", "exposed:h2d"), 0.0))

    def close_scope(self):
        """Per direction, the closed scope's floor: what the link needs beyond the scope's own compute,
        ``max(0, transfer busy - compute busy)`` (no schedule hides that), capped at what was exposed."""
        scope = self.scopes.pop()
        for d in targets.DIRECTIONS:
            self.exposed["floor:" + d] += min(scope["exposed:" + d], max(0.0, scope[d] - scope["compute"]))

    def totals(self) -> tuple[dict, dict]:
        return dict(self.busy), dict(self.exposed)

    def since(self, totals: tuple[dict, dict]) -> tuple[dict, dict]:
        """What was added since ``totals`` (a loop iteration's busy and exposed seconds)."""
        busy0, exposed0 = totals
        return {k: self.busy[k] - busy0[k] for k in busy0}, {k: self.exposed[k] - exposed0[k] for k in exposed0}

    def repeat(self, busy: dict, exposed: dict, n: int):
        """Add ``n`` more of an iteration's seconds (a loop's steady state)."""
        for k, v in busy.items():
            self.busy[k] += n * v
        for k, v in exposed.items():
            self.exposed[k] += n * v

    def copy(self) -> "_Tally":
        other = _Tally()
        other.busy, other.exposed, other.scopes = dict(self.busy), dict(self.exposed), [dict(s) for s in self.scopes]
        return other


class _Lanes:
    """The async lanes' clocks: when each lane is next free, the ends of the transfers and async computes
    XLA's in-flight cap counts, and the work started but not yet waited for (start name -> (begin, end,
    category, lane, engine)). Host transfers are priced here, at their engine's rate on the link."""

    def __init__(self, bandwidth: dict[str, float], kernel_bandwidth: dict[str, float] | None, limit: int,
                 shared_pcie: tuple[float, float] | None):
        self.bandwidth = bandwidth  # host link bytes/s per GPU, per direction (copy engines)
        self.kernel_bandwidth = kernel_bandwidth or bandwidth  # ... for transfers a kernel makes (engine "kernel")
        self.limit = limit
        self.shared_pcie = shared_pcie  # (PCIe bytes/s each way, NIC bytes/s) where transfers and the NIC share it
        self.free = dict.fromkeys(LANES, 0.0)
        self.capped_ends: list[float] = []  # sorted
        self.pending: dict[str, tuple[float, float, str, str, str]] = {}

    def rate(self, lane: str, engine: str) -> float:
        """A host transfer's bytes/s on ``lane`` by what moves it."""
        return (self.kernel_bandwidth if engine == "kernel" else self.bandwidth)[lane]

    def seconds(self, op: Op) -> float:
        return op.bytes / self.rate(op.lane, op.engine) if op.category == "transfer" else op.seconds

    def quiet(self, now: float) -> bool:
        """Nothing runs or is pending past ``now``."""
        return all(v <= now for v in self.free.values()) and not any(p[1] > now for p in self.pending.values())

    def start(self, op: Op, now: float) -> tuple[float, float, float]:
        """Start ``op`` on its lane once the compute clock is at ``now``: (begin, end, busy seconds). It waits
        for its lane and, on a capped lane, for a slot under XLA's in-flight cap."""
        seconds = self.seconds(op)
        begin = max(now, self.free[op.lane])
        if op.lane in _ASYNC_CAPPED:
            running = self.capped_ends[bisect.bisect_right(self.capped_ends, begin):]
            if len(running) >= self.limit:
                begin = max(begin, running[len(running) - self.limit])
        end = begin + seconds
        if self.shared_pcie is not None:
            end = self._share_pcie(op, begin, end)
            seconds = end - begin
        self.free[op.lane] = end
        if op.lane in _ASYNC_CAPPED:  # ends at or before the compute clock can no longer hold anything up
            self.capped_ends = [e for e in self.capped_ends if e > now]
            bisect.insort(self.capped_ends, end)
        self.pending[op.name] = (begin, end, op.category, op.lane, op.engine)
        return begin, end, seconds

    def beside(self, begin: float, seconds: float, which) -> float:
        """How much of [begin, begin + seconds) pending work ``which(category, engine)`` runs in (an async
        collective holding NCCL's SMs, a transfer kernel holding its share of them)."""
        spans = sorted((max(b, begin), min(e, begin + seconds)) for b, e, category, _, engine in self.pending.values()
                       if which(category, engine) and b < begin + seconds and e > begin)
        covered, reach = 0.0, begin
        for b, e in spans:
            if e > reach:
                covered += e - max(b, reach)
                reach = e
        return covered

    def _share_pcie(self, op: Op, begin: float, end: float) -> float:
        """Where a GPU's host transfers and its NIC's traffic cross one PCIe link (DGX/HGX: the GPU and its
        NIC under one switch), each gets half of it while both run: the new op's end, later by its slowdown
        over the overlap, and the overlapped ops' ends pushed out by theirs."""
        pcie, nic = self.shared_pcie
        if op.category == "transfer":
            others = [k for k, v in self.pending.items() if v[2] == "collective" and v[3] == "network"]
            mine, theirs = self.rate(op.lane, op.engine), nic
        elif op.lane == "network":
            others = [k for k, v in self.pending.items() if v[2] == "transfer"]
            mine, theirs = nic, None
        else:
            return end
        extra = 0.0
        for name in others:
            b, e, category, lane, engine = self.pending[name]
            overlap = min(end, e) - max(begin, b)
            if overlap <= 0:
                continue
            rate_theirs = theirs if theirs is not None else self.rate(lane, engine)
            extra = max(extra, overlap * max(0.0, mine / (pcie / 2) - 1))
            pushed = e + overlap * max(0.0, rate_theirs / (pcie / 2) - 1)
            self.pending[name] = (b, pushed, category, lane, engine)
            self.free[lane] = max(self.free[lane], pushed)
        return end + extra

    def copy(self) -> "_Lanes":
        other = _Lanes(self.bandwidth, self.kernel_bandwidth, self.limit, self.shared_pcie)
        other.free, other.capped_ends, other.pending = dict(self.free), list(self.capped_ends), dict(self.pending)
        return other


def _collective(category: str, engine: str) -> bool:
    return category == "collective"


def _transfer_kernel(category: str, engine: str) -> bool:
    return category == "transfer" and engine == "kernel"


class _Replay:
    """The program run on the compute stream's clock ``t``: compute ops advance it, an async start hands its op
    to the lanes (``_Lanes``), a done waits for it; loops run until one iteration is steady, then repeat it;
    of a conditional's branches the slowest counts. ``tally`` counts the seconds (``_Tally``)."""

    def __init__(self, program: dict[str, list[Op]], bandwidth: dict[str, float], limit: int, max_events: int,
                 sm_slowdown: float = 1.0, shared_pcie: tuple[float, float] | None = None,
                 kernel_bandwidth: dict[str, float] | None = None, kernel_sm_share: float = 0.0):
        self.program = program
        self.lanes = _Lanes(bandwidth, kernel_bandwidth, limit, shared_pcie)
        self.tally = _Tally()
        self.kernel_sm_share = kernel_sm_share  # of a compute kernel's throughput, while a transfer kernel runs
        self.sm_slowdown = sm_slowdown  # a compute kernel's time x this while a collective holds NCCL's SMs
        self.max_events = max_events
        self.t = 0.0
        self.events: list[Event] = []
        self.iteration_seconds: dict[str, float] = {}
        self._steady: dict[str, tuple[float, dict, dict]] = {}

    def record(self, event: Event, on: bool):
        if on and len(self.events) < self.max_events:
            self.events.append(event)

    def run(self, computation: str, record: bool, iteration: int = 0):
        for op in self.program.get(computation, ()):
            action = op.action
            if action == "compute":
                self._compute(op, computation, record, iteration)
            elif action == "start":
                self._start(op, computation, record, iteration)
            elif action == "done":
                self._done(op, computation, record, iteration)
            elif action == "while":
                self._loop(op, computation, record)
            elif action == "call":
                for callee in op.called:
                    self.run(callee, record, iteration)
            elif action == "conditional":
                self._conditional(op, record, iteration)

    def _compute(self, op: Op, computation: str, record: bool, iteration: int):
        """A kernel on the compute stream, slowed by what holds its SMs; a synchronous collective or transfer
        is waited out there."""
        begin = self.t
        seconds = self.lanes.seconds(op)
        if op.category == "compute" and self.sm_slowdown > 1:
            seconds += self.lanes.beside(begin, seconds, _collective) * (self.sm_slowdown - 1)
        if op.category == "compute" and self.kernel_sm_share:
            lost = self.lanes.beside(begin, seconds, _transfer_kernel) * self.kernel_sm_share
            seconds += lost
            self.tally.exposed["sm_lost"] += lost
        self.t += seconds
        if op.category in ("collective", "transfer"):  # synchronous: the compute stream waits it out
            self.tally.expose(op.category, op.lane, seconds)
            self.tally.add_busy(op.lane, seconds)
            kind = _WAIT_KIND[op.category]
        else:
            self.tally.add_busy("compute", seconds)
            kind = op.category
        if seconds:
            self.record(Event(op.name, "compute", begin, self.t, kind, computation, iteration), record)

    def _start(self, op: Op, computation: str, record: bool, iteration: int):
        begin, end, seconds = self.lanes.start(op, self.t)
        self.tally.add_busy(op.lane, seconds)
        kind = op.lane if op.category == "transfer" else op.category
        self.record(Event(op.name, op.lane, begin, end, kind, computation, iteration), record)

    def _done(self, op: Op, computation: str, record: bool, iteration: int):
        started = self.lanes.pending.pop(op.start, None)
        if started is None:
            return
        _, end, category, lane, _ = started
        if end > self.t:
            self.tally.expose(category, lane, end - self.t)
            self.record(Event(op.name, "compute", self.t, end, _WAIT_KIND[category], computation, iteration), record)
            self.t = end

    def scoped(self, computation: str, record: bool, iteration: int = 0):
        """Run ``computation`` as one scope of the exposed-transfer split (``_Tally.close_scope``): the link's
        floor per direction; the rest of the exposed time is the schedule's excess."""
        self.tally.open_scope()
        self.run(computation, record, iteration)
        self.tally.close_scope()

    def _loop(self, op: Op, computation: str, record: bool):
        """Run the body until an iteration starts and ends with the lanes quiet; the remaining trips repeat it."""
        body = op.called[0]
        trips, i = op.trips, 0
        while i < trips:
            steady = self._steady.get(body)
            if steady is not None and self.lanes.quiet(self.t):
                seconds, busy, exposed = steady
                n = trips - i
                begin = self.t
                self.t += n * seconds
                self.tally.repeat(busy, exposed, n)
                self.record(Event(f"{body} x {n}", "compute", begin, self.t, "loop", body, i), record and i > 0)
                return
            was_quiet = self.lanes.quiet(self.t)
            t0, totals = self.t, self.tally.totals()
            self.scoped(body, record and i == 0, i)
            if was_quiet and self.lanes.quiet(self.t):
                seconds = self.t - t0
                self._steady[body] = (seconds, *self.tally.since(totals))
                self.iteration_seconds.setdefault(body, seconds)
            i += 1

    def _conditional(self, op: Op, record: bool, iteration: int):
        """Every branch from the same clocks; the slowest one's clocks go on."""
        start, best = (self.t, self.lanes.copy(), self.tally.copy()), None
        for branch in op.called:
            self.t, self.lanes, self.tally = start[0], start[1].copy(), start[2].copy()
            self.run(branch, False, iteration)
            if best is None or self.t > best[0]:
                best = (self.t, self.lanes.copy(), self.tally.copy())
        if best is not None:
            self.t, self.lanes, self.tally = best[0], best[1].copy(), best[2].copy()


@dataclasses.dataclass
class Simulator:
    """A compiled step prepared for replays: its program priced on ``target`` (compute and
    collectives), host transfers priced per replay on the link ``run`` is given."""

    module: hlo.HloModule
    target: Target
    cost_model: CostModel
    program: dict[str, list[Op]]
    limit: int
    peak_device_bytes: int = 0
    host_bytes: int = 0
    workload: Any = None  # the compile's ``compiler.Workload`` (model FLOPs, tokens), when it has one

    def run(self, link: HostLink | str | None = None, *, max_events: int = 20000) -> StepSimulation:
        """One step on ``link`` (default: the target's own host link)."""
        target = self.target.with_link(link) if link is not None else self.target
        bandwidth = self.bandwidth(target.link)
        model = self.cost_model
        sms = getattr(target.gpu, "sm_count", 0)  # a TPU runs no NCCL kernels on its cores
        sm_slowdown = sms / (sms - model.collectives.nccl_sms) if 0 < model.collectives.nccl_sms < sms else 1.0
        shared = None
        if target.link.carries_nic_traffic:
            nic = (model.collectives.nic_per_gpu or coll.fabric(target.gpu.key).nic_per_gpu)
            shared = (min(target.link.achievable_d2h, target.link.achievable_h2d),
                      nic * model.collectives.network_efficiency)
        replay = _Replay(self.program, bandwidth, self.limit, max_events, sm_slowdown, shared,
                         self.bandwidth(target.link, "kernel"), model.kernel_sm_share(target.link))
        replay.scoped(self.module.entry, True)
        flops, busy, exposed = self.flops, replay.tally.busy, replay.tally.exposed
        by_kind = {**self.compute_by_class[1], **{f"collective:{lane}": busy[lane] for lane in ("nvlink", "network")},
                   **{f"transfer:{d}": busy[d] for d in targets.DIRECTIONS}}
        work = self.workload
        return StepSimulation(
            target=target.name, link=target.link.key, step_seconds=replay.t, compute_seconds=busy["compute"],
            exposed_transfer_seconds=exposed["transfer"],
            exposed_collective_seconds=exposed["collective"], exposed_other_seconds=exposed["async"],
            exposed_transfer_by_direction={d: exposed[d] for d in targets.DIRECTIONS},
            exposed_transfer_floor={d: exposed["floor:" + d] for d in targets.DIRECTIONS},
            busy_seconds=dict(busy), model_flops=work.model_flops if work else None,
            hardware_flops=flops.total, recompute_flops=flops.recompute, peak_flops=target.gpu.bf16_dense_flops,
            peak_device_bytes=self.peak_device_bytes, host_bytes=self.host_bytes,
            loop_iteration_seconds=dict(replay.iteration_seconds), tokens=work.tokens if work else None,
            flops_by_kind=self.compute_by_class[0], time_by_kind=by_kind, events=tuple(replay.events),
            cost_model=self.cost_model, async_compute_limit=self.limit,
            transfer_kernel_sm_seconds=exposed["sm_lost"])

    def bandwidth(self, link: HostLink, engine: str = "copy_engine") -> dict[str, float]:
        """Bytes/s per GPU each way over ``link`` for transfers ``engine`` moves (``HostTransfer.engine``), with
        ``concurrent_gpus(link)`` sharing it."""
        return {d: link.bandwidth_per_gpu(d, self.concurrent_gpus(link), engine) for d in targets.DIRECTIONS}

    def transfer_seconds(self, op: Op, link: HostLink) -> float:
        """One host transfer ``op``'s time on ``link`` at its engine's rate (the lab's pricing, not XLA's)."""
        return op.bytes / link.bandwidth_per_gpu(op.lane, self.concurrent_gpus(link), op.engine)

    def concurrent_gpus(self, link: HostLink | None = None) -> int:
        """GPUs sharing ``link`` (default the target's) that transfer at once: the cost model's, else the target's
        (a bad count is left for ``HostLink.bandwidth_per_gpu`` to refuse)."""
        n = self.cost_model.concurrent_gpus
        return self.target.transferring_together(link) if n is None else n

    @functools.cached_property
    def flops(self) -> hlo.FlopSummary:
        return hlo.flop_summary(self.module, self.target.gpu.grouped_gemm_tile_rows)

    @functools.cached_property
    def compute_by_class(self) -> tuple[dict[str, float], dict[str, float]]:
        """(FLOPs, seconds) of every kernel by op class, times its executions: what each class puts
        on the compute stream (and the async stream's device copies) per step."""
        counts = self.module.execution_counts
        flops, seconds = dict.fromkeys(hlo.OP_CLASSES, 0.0), dict.fromkeys(hlo.OP_CLASSES, 0.0)
        for comp, ops in self.program.items():
            for op in ops:
                if op.category in ("compute", "async") and op.op_class:
                    flops[op.op_class] += op.flops * counts.get(comp, 0)
                    seconds[op.op_class] += op.seconds * counts.get(comp, 0)
        return flops, seconds

    def op_seconds(self) -> float:
        """Every compute op's time times its executions: the step with nothing overlapped or waited for."""
        counts = self.module.execution_counts
        return sum(op.seconds * counts.get(comp, 0) for comp, ops in self.program.items()
                   for op in ops if op.action == "compute" and op.category == "compute")


def async_limit(target: Target, flags: dict) -> int:
    """How many async ops may be in flight beside compute: on a GPU XLA's
    ``xla_gpu_experimental_parallel_async_compute_limit`` (default 2; the compile's flags). On a TPU none: XLA:TPU's
    own limits (e.g. ``xla_tpu_host_transfer_overlap_limit``) act when it schedules, so the replay runs every
    async copy the schedule starts (an assumption: the DMA engines' runtime concurrency was not measured)."""
    if target.is_tpu:
        return 1 << 30
    return int(flags.get("xla_gpu_experimental_parallel_async_compute_limit", 2))


def prepare(compiled, target: Target | str | None = None, *, cost_model: CostModel = CostModel()) -> Simulator:
    """Price a compiled step's schedule on ``target``. ``compiled`` is a ``CompileReport`` (the
    target defaults to its own, the in-flight cap to its flags) or scheduled HLO (an
    ``hlo.HloModule`` or its text; then ``target`` is required and the cap is XLA's default 2
    unless ``cost_model`` sets it)."""
    if isinstance(compiled, (str, hlo.HloModule)):
        if target is None:
            raise ValueError("simulating HLO text needs a target, e.g. target='h100:1x8'")
        module = hlo.parse_module(compiled) if isinstance(compiled, str) else compiled
        flags, peak, host, workload = {}, 0, 0, None
    else:
        module, flags, workload = compiled.module, compiled.flags, compiled.workload
        peak = compiled.device.peak_bytes
        host = compiled.host.total_bytes
        if target is None:
            target = targets.target(compiled.target, mem_fraction=compiled.mem_fraction)
    if isinstance(target, str):
        target = targets.target(target)
    limit = cost_model.async_compute_limit or async_limit(target, flags)
    return Simulator(module, target, cost_model, build_program(module, target, cost_model), limit, peak, host, workload)


def simulate(compiled, target: Target | str | None = None, *, link: HostLink | str | None = None,
             cost_model: CostModel = CostModel(), max_events: int = 20000) -> StepSimulation:
    """Replay a compiled step's schedule (a ``CompileReport``, or scheduled HLO with a ``target``)
    on ``target`` (default: the compile's own; ``link`` swaps the host link for a what-if) and
    time one training step per GPU."""
    return prepare(compiled, target, cost_model=cost_model).run(link, max_events=max_events)


# ----------------------------------------------------------------------------- what-ifs


def link_at(bytes_per_s: float) -> HostLink:
    """A what-if host link giving each GPU ``bytes_per_s`` each way, shared with nobody."""
    if not isinstance(bytes_per_s, (int, float)) or not bytes_per_s > 0:
        raise ValueError(f"link bandwidth must be a positive number of bytes/s, got {bytes_per_s!r}")
    return HostLink(f"what_if_{bytes_per_s / targets.GB:g}GBps", f"what-if link, {bytes_per_s / targets.GB:g} GB/s "
                    "per GPU each way", nominal_per_direction=bytes_per_s, achievable_d2h=bytes_per_s,
                    achievable_h2d=bytes_per_s, gpus_per_link=1, host_memory_bytes_per_s=bytes_per_s,
                    gpus_per_host_memory=1, host_memory="not a limit (what-if)",
                    assumption="a what-if: this bandwidth per GPU each way, nothing shared")


def break_even_bandwidth(offload: Simulator, reference_seconds: float, *, low: float = 1e9,
                         high: float = 1e13, tolerance: float = 0.01) -> float | None:
    """The per-GPU link bandwidth (bytes/s each way) at which ``offload``'s simulated step equals
    ``reference_seconds`` (e.g. the remat step's): offload is faster above it. None if it is
    still slower at ``high``; ``low`` if it is already faster there."""
    def step(bw: float) -> float:
        return offload.run(link_at(bw), max_events=0).step_seconds

    if step(high) > reference_seconds:
        return None
    if step(low) <= reference_seconds:
        return low
    while high / low > 1 + tolerance:
        mid = (low * high) ** 0.5
        low, high = (low, mid) if step(mid) <= reference_seconds else (mid, high)
    return high


# ----------------------------------------------------------------------------- XLA's own estimate


@dataclasses.dataclass(frozen=True)
class XlaComparison:
    """One scheduled computation: XLA's estimate of one run beside the simulation's."""

    computation: str
    role: str  # the step (entry + bodies x trips) | the entry computation alone | a loop body (one iteration)
    xla_us: float  # the latency-hiding scheduler's total for one run
    simulated_us: float | None
    host_transfers: int  # async host transfers the computation runs
    xla_transfer_us: float | None  # what XLA's estimator charged one of them (median)
    simulated_transfer_us: float | None  # bytes / link bandwidth (median)

    def row(self) -> dict[str, Any]:
        """A table row, milliseconds ("-" where a side has no figure)."""
        def ms(us, digits=1):
            return "-" if us is None else f"{us / 1e3:.{digits}f}"

        return {"computation": self.computation, "role": self.role, "XLA ms": ms(self.xla_us),
                "simulated ms": ms(self.simulated_us), "host transfers": self.host_transfers,
                "XLA ms per transfer": ms(self.xla_transfer_us, 2),
                "simulated ms per transfer": ms(self.simulated_transfer_us, 2)}


def xla_step_us(simulator: Simulator, lhs, computation: str | None = None) -> float:
    """XLA's own estimate of a whole step: a computation's scheduled total plus, for each ``while`` in it,
    its body's estimate times the loop's trips (recursively). The latency-hiding scheduler's total of the
    entry alone prices each ``while`` at ~0 µs, leaving the loops out."""
    name = computation or simulator.module.entry
    comp = lhs.computations.get(name)
    total = comp.total_us if comp is not None else 0.0
    for op in simulator.program.get(name, ()):
        if op.action == "while" and op.called:
            total += op.trips * xla_step_us(simulator, lhs, op.called[0])
        elif op.action == "call":
            total += sum(xla_step_us(simulator, lhs, callee) for callee in op.called)
    return total


def compare_with_xla(simulator: Simulator, result: StepSimulation, lhs) -> list[XlaComparison]:
    """Rows of XLA's own schedule estimate (``dump.LhsSchedule``, from a compile with ``dump=True``)
    beside the simulation ``result`` of the same compile: the whole step (the entry plus every loop body
    times its trips, ``xla_step_us``), the entry computation alone (what XLA's dump totals: its loops count
    ~0 there) and each loop body for one iteration."""
    link = targets.host_link(result.link) if result.link in targets.HOST_LINKS else None
    entry = simulator.module.entry
    transfers = {}
    for name, comp in lhs.computations.items():
        ops = {op.name: op for op in simulator.program.get(name, ())}
        windows = {n: w for n, w in comp.async_windows().items() if n in ops and ops[n].category == "transfer"}
        ours_t = sorted(simulator.transfer_seconds(ops[n], link) for n in windows) if link else []
        transfers[name] = (len(windows), sorted(windows.values()), ours_t)

    def row(name, role, xla_us, ours, counted):
        n, xla_t, ours_t = counted
        return XlaComparison(name, role, xla_us, ours * 1e6 if ours is not None else None, n,
                             xla_t[len(xla_t) // 2] if xla_t else None,
                             ours_t[len(ours_t) // 2] * 1e6 if ours_t else None)

    every = (sum(t[0] for t in transfers.values()), sorted(w for t in transfers.values() for w in t[1]),
             sorted(w for t in transfers.values() for w in t[2]))
    rows = [row(entry, "step (entry + loop bodies x trips)", xla_step_us(simulator, lhs), result.step_seconds, every)]
    for name, comp in lhs.computations.items():
        if name == entry:
            rows.append(row(name, "entry computation (its loops count ~0)", comp.total_us, None, transfers[name]))
        else:
            rows.append(row(name, "loop body (one iteration)", comp.total_us, result.loop_iteration_seconds.get(name),
                            transfers[name]))
    return rows


@dataclasses.dataclass(frozen=True)
class TransferCover:
    """One async host transfer and the compute XLA scheduled between its start and its done."""

    name: str
    computation: str
    direction: str  # d2h | h2d
    bytes: float
    transfer_seconds: float  # bytes / the link's per-GPU bandwidth
    kernels_between: int
    compute_between_seconds: float  # the simulation's time of those kernels (nested loops not counted)

    @property
    def hidden(self) -> bool:
        return self.compute_between_seconds >= self.transfer_seconds


def transfer_cover(simulator: Simulator, link: HostLink | str | None = None) -> list[TransferCover]:
    """Every async host transfer of the schedule with the compute placed under it: the question the
    scheduler answered with its own costs."""
    on = targets.host_link(link) if link is not None else simulator.target.link
    out = []
    for computation, ops in simulator.program.items():
        index = {op.name: k for k, op in enumerate(ops)}
        for k, op in enumerate(ops):
            if op.action != "done" or op.start not in index:
                continue
            start = ops[index[op.start]]
            if start.category != "transfer":
                continue
            between = [o for o in ops[index[op.start] + 1:k] if o.action == "compute" and o.category == "compute"
                       and o.seconds > 0]
            out.append(TransferCover(start.name, computation, start.lane, start.bytes, simulator.transfer_seconds(start, on),
                                     len(between), sum(o.seconds for o in between)))
    return out


def summarize_cover(covers: list[TransferCover]) -> dict[str, dict[str, float]]:
    """Per direction: transfers, median MiB, median transfer ms, median compute placed under one (ms),
    and how many have at least their own time of compute under them."""
    import statistics

    out = {}
    for direction in targets.DIRECTIONS:
        these = [c for c in covers if c.direction == direction]
        if not these:
            continue
        out[direction] = {
            "transfers": len(these),
            "median MiB": statistics.median(c.bytes for c in these) / 2**20,
            "median transfer ms": statistics.median(c.transfer_seconds for c in these) * 1e3,
            "median kernels under it": statistics.median(c.kernels_between for c in these),
            "median compute under it ms": statistics.median(c.compute_between_seconds for c in these) * 1e3,
            "covered": sum(c.hidden for c in these),
        }
    return out


# ----------------------------------------------------------------------------- the picture before the replay

def offload_schematic(layers: int, forward_s: float, backward_s: float, d2h_s: float, h2d_s: float, *,
                      overlapped: bool) -> list[Event]:
    """A layer-by-layer sketch of a step that offloads each layer's activations, for a Gantt chart:
    not a replay of a compiled schedule (``simulate`` is), but the two ends of what one can be.

    ``overlapped=False`` (naive): each layer's write follows its forward compute and each read
    precedes its backward compute, the compute stream waiting for both. ``overlapped=True``: a
    write starts as soon as its layer's forward is done and a read one layer ahead of the layer
    that needs it, each on its own copy engine (one per direction, one transfer at a time), and
    the compute stream waits only for data that is not there yet. Times in seconds per layer.
    """
    events: list[Event] = []
    t = 0.0
    d2h_free = 0.0
    written = [0.0] * layers
    for i in range(layers):  # forward
        events.append(Event(f"forward {i}", "compute", t, t + forward_s, "compute", "forward"))
        t += forward_s
        start = max(t, d2h_free)
        events.append(Event(f"write {i}", "d2h", start, start + d2h_s, "d2h", "forward"))
        d2h_free = written[i] = start + d2h_s
        if not overlapped:
            events.append(Event(f"wait write {i}", "compute", t, d2h_free, "wait-transfer", "forward"))
            t = d2h_free
    h2d_free = 0.0
    order = list(reversed(range(layers)))
    arrived: dict[int, float] = {}

    def read(k: int, not_before: float) -> None:
        nonlocal h2d_free
        start = max(not_before, h2d_free, written[k])
        events.append(Event(f"read {k}", "h2d", start, start + h2d_s, "h2d", "backward"))
        h2d_free = arrived[k] = start + h2d_s

    for n, i in enumerate(order):  # backward, last layer first
        if i not in arrived:
            read(i, t)
        if overlapped and n + 1 < layers:
            read(order[n + 1], t)  # prefetch the next layer's activations while this one computes
        if arrived[i] > t:
            events.append(Event(f"wait read {i}", "compute", t, arrived[i], "wait-transfer", "backward"))
            t = arrived[i]
        events.append(Event(f"backward {i}", "compute", t, t + backward_s, "compute", "backward"))
        t += backward_s
    return events
