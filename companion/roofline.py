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

from . import hlo
from .targets import Gpu, HostLink, Target


def matmul_rate(gpu: Gpu, dtype: str) -> float:
    """Peak dense FLOP/s for matmuls whose inputs are ``dtype``."""
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
    transfers at the per-GPU bandwidth while ``concurrent_gpus`` sharing GPUs offload, default all)."""
    link = link or target.link
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
    return StepTime(compute, recompute, transfer_seconds(d2h, link, "d2h", concurrent_gpus),
                    transfer_seconds(h2d, link, "h2d", concurrent_gpus), d2h, h2d, link.key)


def loop_body_seconds(report, target: Target) -> dict[str, tuple[int, float]]:
    """For each top-level loop body (a scanned layer's forward or backward): (trip count, roofline
    seconds of one iteration's compute, loops nested in it included by their trip counts)."""
    module = report.module
    loops = {i.attrs["body"].lstrip("%"): (i.trip_count or 1, i.computation)
             for i in module.scheduled() if i.opcode == "while"}
    own: dict[str, float] = {}
    for cost in hlo.op_costs(module):
        if cost.kind == "compute" and cost.computation in loops:
            own[cost.computation] = own.get(cost.computation, 0.0) + op_seconds(cost, target.gpu)

    def seconds(body: str) -> float:
        nested = sum(trips * seconds(b) for b, (trips, parent) in loops.items() if parent == body)
        return own.get(body, 0.0) + nested

    return {body: (trips, seconds(body)) for body, (trips, parent) in loops.items() if parent not in loops}


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
    """``(bandwidth, naive offload seconds, recompute seconds)`` for each per-direction bandwidth."""
    remat = recompute_flops / gpu.bf16_dense_flops
    return [(bw, 2 * offloaded_bytes / bw, remat) for bw in bandwidths]
