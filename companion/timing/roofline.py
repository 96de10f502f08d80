"""Time, from counted FLOPs and bytes: a roofline per op, host-link transfers, step estimates.

A kernel takes at least ``max(FLOPs / peak FLOP/s, bytes / HBM bandwidth)``: the roofline. The
compiled step's ops (``hlo.op_costs``: matmul FLOPs inside each fusion, operand and result
bytes, executions per step from the loop trip counts) summed that way give a compute time;
host transfers take ``bytes / link bandwidth per direction``.

*Naive* offload is the pessimistic case notebook 03 measures against: transfers not overlapped
with compute, so their time adds to the step. Pipelined offload (notebook 04) hides them.

Rates: bf16/f16 matmuls at the dense bf16 tensor-core peak; fp8 at the fp8 peak; f32 matmuls at
half the bf16 peak (TF32, JAX's default precision on GPU). Peaks are datasheet numbers: real
kernels reach 60-80 % of them, so these are lower bounds, good for comparisons.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from ..xla import hlo
from ..hardware.targets import Gpu, HostLink, Target, Tpu


def matmul_rate(gpu: Gpu | Tpu, dtype: str) -> float:
    """Peak dense FLOP/s for matmuls whose inputs are ``dtype``. An f32 matmul runs at half the bf16 rate on
    a GPU (TF32 tensor cores); on a TPU at the bf16 rate: at JAX's default precision XLA:TPU multiplies f32
    operands in one bf16 pass on the MXUs (JAX's ``jax.default_matmul_precision``: DEFAULT is bf16 on TPU)."""
    if gpu.platform == "tpu":
        return gpu.bf16_dense_flops
    if dtype.startswith("f8"):
        return gpu.fp8_dense_flops
    if dtype in ("f32", "f64"):
        return gpu.bf16_dense_flops / 2
    return gpu.bf16_dense_flops


def op_seconds(cost: hlo.OpCost, gpu: Gpu) -> float:
    """Roofline time of one execution of a compute op on ``gpu``."""
    flops_time = cost.flops / matmul_rate(gpu, cost.dtype) if cost.flops else 0.0
    return max(flops_time, cost.bytes / gpu.hbm_bandwidth)


def transfer_seconds(nbytes: float, link: HostLink, direction: str, concurrent_gpus: int | None = None) -> float:
    """One-way time over the host link for one GPU, with ``concurrent_gpus`` of the GPUs sharing the
    link and its host memory transferring at once (default: all of them, as in an SPMD step)."""
    return link.transfer_seconds(nbytes, direction, concurrent_gpus)


@dataclasses.dataclass(frozen=True)
class StepTime:
    """A compiled step's time on a target, per device, from its counted ops."""

    compute_seconds: float  # all compute ops, serial, each at its roofline
    recompute_seconds: float  # the share of compute_seconds that remat added
    d2h_seconds: float  # offload writes (forward pass)
    h2d_seconds: float  # offload reads (backward pass)
    d2h_bytes: int
    h2d_bytes: int
    link: str

    @property
    def transfer_seconds(self) -> float:
        return self.d2h_seconds + self.h2d_seconds

    @property
    def naive_seconds(self) -> float:
        """Transfers not overlapped: they add to the compute."""
        return self.compute_seconds + self.transfer_seconds

    @property
    def overlapped_seconds(self) -> float:
        """Perfect overlap: the longest of compute and either direction's transfers (a lower bound)."""
        return max(self.compute_seconds, self.d2h_seconds, self.h2d_seconds)

    @property
    def exposed_transfer_fraction(self) -> float:
        return self.transfer_seconds / self.naive_seconds if self.naive_seconds else 0.0

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "transfer_seconds": self.transfer_seconds,
                "naive_seconds": self.naive_seconds, "overlapped_seconds": self.overlapped_seconds}


def step_time(report, target: Target, link: HostLink | None = None, concurrent_gpus: int | None = None) -> StepTime:
    """Estimate a ``CompileReport``'s step on ``target`` (its host link unless ``link`` is given;
    transfers at the per-GPU bandwidth while ``concurrent_gpus`` sharing GPUs offload, default all the target has
    on a host (``Target.transferring_together``); each at
    its engine's: a copy engine's, or a kernel's for the #46231 workaround's transfers, ``HostTransfer.engine``)."""
    link = link or target.link
    if concurrent_gpus is None:
        concurrent_gpus = target.transferring_together(link)
    costs = hlo.op_costs(report.module)
    compute = recompute = 0.0
    for cost in costs:
        if cost.kind != "compute":
            continue
        seconds = op_seconds(cost, target.gpu) * cost.executions
        compute += seconds
        if cost.phase == "recompute":
            recompute += seconds
    d2h, h2d = report.offload.d2h_bytes_per_step, report.offload.h2d_bytes_per_step
    moved = {d: sum(t.bytes_per_step / link.bandwidth_per_gpu(d, concurrent_gpus, t.engine)  # each at its engine's rate
                    for t in report.offload.transfers if t.direction == d) for d in ("d2h", "h2d")}
    return StepTime(compute, recompute, moved["d2h"], moved["h2d"], d2h, h2d, link.key)


def loop_body_seconds(report, target: Target) -> dict[str, tuple[int, float]]:
    """For each top-level loop body: (trip count, roofline seconds of one iteration's compute, loops
    nested in it included by their trip counts).

    One iteration is one layer only when XLA keeps the scan as it is (``flags="none"``). With
    while-loop double buffering (on in MaxText's flags, the default) a body runs two layers, the
    trip count halves, and a layer may be peeled into the parent computation: use
    ``layer_seconds`` for one layer's time.
    """
    module = report.module
    loops = {lp.body: (lp.trips or 1, lp.computation) for lp in hlo.loops(module)}
    own: dict[str, float] = {}
    for cost in hlo.op_costs(module):
        if cost.kind == "compute" and cost.computation in loops:
            own[cost.computation] = own.get(cost.computation, 0.0) + op_seconds(cost, target.gpu)

    def seconds(body: str) -> float:
        nested = sum(trips * seconds(b) for b, (trips, parent) in loops.items() if parent == body)
        return own.get(body, 0.0) + nested

    return {body: (trips, seconds(body)) for body, (trips, parent) in loops.items() if parent not in loops}


SCAN_BODY = "/while/body/"  # in JAX's op_name metadata: the op was traced inside a scan's (or while's) body
LAYER_PHASES = ("forward", "backward", "recompute")


@dataclasses.dataclass(frozen=True)
class LayerTime:
    """One scanned layer's roofline compute time on a target, per device (an average over the layers)."""

    forward_seconds: float
    backward_seconds: float  # the gradient ops, without the recompute
    recompute_seconds: float  # the forward ops remat reruns in the backward pass
    num_layers: int

    @property
    def backward_with_recompute_seconds(self) -> float:
        """What the backward pass spends on one layer: its gradients and the recompute they need."""
        return self.backward_seconds + self.recompute_seconds

    @property
    def total_seconds(self) -> float:
        return self.forward_seconds + self.backward_with_recompute_seconds

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "backward_with_recompute_seconds": self.backward_with_recompute_seconds,
                "total_seconds": self.total_seconds}


def layer_seconds(report, target: Target, num_layers: int) -> LayerTime:
    """One layer's forward, backward and recompute roofline seconds, from every op of the scanned layers.

    Sums ``op_seconds x executions`` over the compute ops (``hlo.op_costs``; collectives and host
    transfers excluded, as in ``step_time``) whose ``op_name`` places them in a scan body
    (``/while/body/``) and whose phase (``hlo.phase_of``) is forward, backward or recompute,
    wherever XLA put them, then divides by ``num_layers``. This counts a layer once whatever XLA
    did to the loop: with while-loop double buffering (MaxText's flags) the body holds two layers,
    the trip count halves and a layer may be peeled into the parent computation, so one loop body
    is no longer one layer (``loop_body_seconds``); here the peeled copy, the body's two copies and
    the trip counts all count, by executions.

    An op XLA rewrote without metadata of its own (under MaxText's flags, the fusions writing the
    weight gradients into their stacked buffers, say) is known by the last op it fuses that has
    some. Left out: ops with no JAX metadata at all, which XLA creates itself (the concatenations
    and slices around combined gradient all-reduces, layout copies, buffer initialisation): they
    belong to no layer's phase. ``num_layers`` is every scanned layer of the compiled stack (all stacks together, e.g.
    DeepSeek's dense and MoE layers). Meant for ``train.compile_layer_stack`` and for train steps
    without gradient accumulation: a microbatch loop is a scan too, whose body holds the embedding,
    head and loss, which would then count as layer ops.
    """
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
    module = report.module
    op_names = {i.name: _op_name(module, i) for i in module.scheduled()}
    totals = dict.fromkeys(LAYER_PHASES, 0.0)
    for cost in hlo.op_costs(module):
        op_name = op_names.get(cost.name, "")
        phase = hlo.phase_of(op_name)
        if cost.kind == "compute" and phase in totals and SCAN_BODY in op_name:
            totals[phase] += op_seconds(cost, target.gpu) * cost.executions
    if not totals["forward"]:
        raise ValueError("no forward op of a scanned layer in this compile: layer_seconds needs a scanned layer "
                         "stack differentiated by JAX (train.compile_layer_stack or train.compile_step)")
    return LayerTime(totals["forward"] / num_layers, totals["backward"] / num_layers,
                     totals["recompute"] / num_layers, num_layers)


def _op_name(module: hlo.HloModule, instr: hlo.Instruction) -> str:
    """An op's JAX ``op_name``; for a fusion XLA made without one, that of the last fused op with one."""
    if instr.op_name or instr.opcode in ("while", "call", "conditional"):
        return instr.op_name
    for callee in instr.called:
        comp = module.computations.get(callee)
        for inner in reversed(comp.instructions if comp is not None else []):
            if inner.op_name:
                return inner.op_name
    return ""


# ----------------------------------------------------------------------------- remat vs offload


def break_even_bandwidth(offloaded_bytes: float, recompute_flops: float, gpu: Gpu) -> float:
    """Per-direction link bandwidth (bytes/s) above which naive offload beats recompute.

    Offloading a tensor costs its write in the forward pass and its read in the backward pass,
    ``2 x bytes / bandwidth`` when not overlapped; recomputing it costs ``flops / peak``.
    """
    if recompute_flops <= 0:
        return float("inf")
    return 2 * offloaded_bytes * gpu.bf16_dense_flops / recompute_flops


def offload_vs_remat(offloaded_bytes: float, recompute_flops: float, gpu: Gpu,
                     bandwidths: Iterable[float]) -> list[tuple[float, float, float]]:
    """``(bandwidth, naive offload seconds, recompute seconds)`` for each per-direction bandwidth: a
    sweep at one GPU's FLOP/s (a real link's point on it only for a GPU that has that link and
    that peak: ``offload_vs_recompute`` prices a target with its own link)."""
    remat = recompute_flops / gpu.bf16_dense_flops
    return [(bw, 2 * offloaded_bytes / bw, remat) for bw in bandwidths]


@dataclasses.dataclass(frozen=True)
class OffloadPrice:
    """Naive offload of one tensor against recomputing it, on one GPU over the host link of its target."""

    gpu: str
    link: str
    what_if: bool  # the link is not the one this GPU really has
    concurrent_gpus: int  # GPUs of the link's sharing group transferring at once
    offload_seconds: float  # its write (d2h) + its read back (h2d), per GPU, not overlapped
    recompute_seconds: float  # its FLOPs at the GPU's dense bf16 peak
    link_bytes_per_s: float  # the one per-direction bandwidth giving the same round trip (harmonic mean of d2h, h2d)
    break_even_bytes_per_s: float  # ``break_even_bandwidth`` at this GPU's peak

    @property
    def offload_wins(self) -> bool:
        return self.offload_seconds < self.recompute_seconds


def offload_vs_recompute(offloaded_bytes: float, recompute_flops: float, target: Target,
                         concurrent_gpus: int | None = None) -> OffloadPrice:
    """Price offloading a tensor against recomputing it on ``target``: its GPU's FLOP/s with its
    own host link (``target.link``; a swapped link is marked ``what_if``), at the achievable
    per-GPU bandwidth of each direction while ``concurrent_gpus`` of the GPUs sharing the link
    and its host memory transfer at once (default: all the target has on a host, as in an SPMD step)."""
    link = target.link
    n = target.transferring_together() if concurrent_gpus is None else concurrent_gpus
    d2h = link.bandwidth_per_gpu("d2h", n)
    h2d = link.bandwidth_per_gpu("h2d", n)
    return OffloadPrice(
        gpu=target.gpu.key, link=link.key, what_if=target.link_is_what_if, concurrent_gpus=n,
        offload_seconds=offloaded_bytes / d2h + offloaded_bytes / h2d,
        recompute_seconds=recompute_flops / target.gpu.bf16_dense_flops,
        link_bytes_per_s=2 / (1 / d2h + 1 / h2d),
        break_even_bytes_per_s=break_even_bandwidth(offloaded_bytes, recompute_flops, target.gpu))
