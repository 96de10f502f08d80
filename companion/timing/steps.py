"""A compiled step as one comparable record: what ``tables.compared_steps`` ranks, what
``benchmarks/bench_central.py`` stores and notebooks 04, 06 and 07 read.

``record(report, label)`` keeps whether the step fits (device and pinned host, ``companion.fit``), its
peak and host bytes, the simulated step (priced even where it does not fit: what it would take), its
exposed time and recompute, where its time goes by op class, and — where it fits — its sweep over the
simulator's constants (``bands.sweep``), so two records of one system are ranked with the paired band.
For a naive offload step (transfers, no pipelining flag) it also keeps the conditions under which
pipelining would pay (``companion.pipelining``), given the model's ``layers``; for a step with host
transfers, its time under each pricing of the #46231 workaround's transfer kernels (``companion.workaround``).
"""

from __future__ import annotations

from typing import Any

from . import bands, pipelining, schedule, workaround
from ..hardware import flags as xla_flags


def record(report, label: str, *, layers: int | None = None, **meta: Any) -> dict[str, Any]:
    """``report``: a full-step ``CompileReport`` (with its workload); ``meta``: what identifies the case
    (model, target, mesh, seq, batch, policy, ...), stored as given."""
    simulator = schedule.prepare(report)
    sim = simulator.run()
    out = {"label": label, **meta, "mem_fraction": report.mem_fraction, "compile_seconds": round(report.compile_seconds, 1),
           "device_peak_bytes": report.device.peak_bytes, "usable_hbm_bytes": report.usable_hbm_bytes,
           "host_bytes": report.host.total_bytes, "host_limit_bytes": report.host_limit_bytes, "fits": report.fits,
           "fit": report.fit.reason(), "step_seconds": sim.step_seconds, "tokens_per_second": sim.tokens_per_second,
           "tflops_per_gpu": sim.tflops_per_gpu, "exposed_transfer_seconds": sim.exposed_transfer_seconds,
           "exposed_collective_seconds": sim.exposed_collective_seconds, "recompute_flops": sim.recompute_flops,
           "time_by_kind": dict(sim.time_by_kind)}
    if report.offload.transfers:  # under each pricing of the #46231 workaround's transfer kernels
        out["workaround"] = workaround.price(report, label).to_dict()
    if report.fits:
        sweep = bands.sweep(report, nominal=simulator)
        out.update(sweep=sweep.error_band_paired(), band=sweep.error_band_abs())
        pipelined = report.flag_set.flags.get(xla_flags.PIPELINED_HOST_OFFLOADING, False)
        if report.offload.transfers and not pipelined and layers:
            found = pipelining.conditions(report, simulator, sim, layers)
            out["conditions"] = {**found.row(), "expect_gain": found.expect_gain}
    return out
