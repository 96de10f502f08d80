"""Measured on a real chip: the lab's Llama-style training steps and kernel microbenchmarks on one TPU v5e.

    python benchmarks/bench_measured.py --compile-only [--only W ...] [--largest]  # here: XLA:TPU's verdicts (libtpu)
    python benchmarks/bench_measured.py --part kernels --out D  # on the chip: matmuls, HBM copy, host link, memory probe
    python benchmarks/bench_measured.py --part grid|ab --out D [--only W ...] [--subset|--traced] [--process N] [--trace]
    python benchmarks/bench_measured.py --part fresh --out D [--start N]  # on the chip: FRESH (after the band was fixed)
    python benchmarks/bench_measured.py --part long --out D [--start N]   # on the chip: LONG (S 24K-64K, issue 54)
    python benchmarks/bench_measured.py --merge-long PART.json ...        # -> benchmarks/results/measured_long.json
    python benchmarks/bench_measured.py --merge PART.json ...   # -> benchmarks/results/measured.json

The grid (``GRID``): full training steps (embedding, scanned decoder layers, head, AdamW; fp32 master
weights, bf16 activations) of one Llama-style family, ``tpu_llama(layers)`` (D 2048, 16 query and 8
key/value heads of 128, SwiGLU F 8192, vocab 32,000), with the lab's blockwise attention (``jax``; ten steps
with the Pallas TPU flash kernel, ``+pallas``), at S 2K-32K, depths 2-8 and several batches, under full
remat, ``minimal``, Q/K/V, the MLP, the context and the layer input saved on the device or offloaded, every
projection offloaded, and optimizer state offloaded; offloading steps also under MaxText's TPU
``HOST_OFFLOAD_FLAGS``; each ``LARGEST`` policy at its largest batch and one beyond (searched here with
``--compile-only --largest``), and the device twins where only offloading fits. Each step: XLA:TPU's compile
verdict and memory analysis on the chip (a step compiled over usable HBM is recorded, not run: the runtime
waits past its limit), ``warmup`` + N timed calls (``companion.measure.time_step``), the runtime's counters
and the footprint they give (``measure.runtime_footprint``), and for ``TRACED`` steps a profiler trace
reduced per op; ``--part ab`` checks loss and gradients of offloading policies against their device twins.
``--process N`` repeats steps in a separate process: the merge computes each step's run-to-run spread
across processes (and sessions).

The chip is lent for 30 minutes a session in calls of under 10 minutes: parts are sized to fit one call
each, compiles are shared across processes through JAX's persistent cache (``--cache``), and the merge
writes a stamped result (each session's device kind, jax, jaxlib, libtpu, source and commit) that the tests
read without a chip.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

import companion  # noqa: F401

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from companion import compiler, libtpu, measure, measured, results, targets, train  # noqa: E402

TARGET = "tpu-v5e"
COMPILE_ONLY = _common.ROOT / "benchmarks" / "results" / "measured_compile_only.json"
OFFLOAD_FLAGS = "maxtext_host_offload"
QKV, MLP, POLICIES, tpu_llama = measured.QKV, measured.MLP, measured.POLICIES, measured.grid_model


@dataclasses.dataclass(frozen=True)
class Step:
    layers: int
    batch: int
    seq: int
    policy: str  # a key of POLICIES
    optimizer_offload: bool = False
    flash_kernel: str = "jax"  # the model's attention kernel: jax (the lab's blockwise kernel) or fused (Pallas)
    flags: str | None = None  # a libtpu preset (None: libtpu's defaults)
    subset: bool = False  # also repeated in processes 2 and 3 (the run-to-run spread)
    fresh: bool = False  # one of FRESH: measured after the band it tests was fixed

    @property
    def key(self) -> str:
        return (f"L{self.layers}-B{self.batch}-S{self.seq}-{self.policy}" + ("+opt_offload" if self.optimizer_offload
                else "") + (f"+{self.flags}" if self.flags else "") + ("+pallas" if self.flash_kernel == "fused" else ""))


def _grid() -> list[Step]:
    grid = []
    # one shape, every policy
    for policy in POLICIES:
        grid.append(Step(4, 8, 2048, policy, subset=policy in ("full", "minimal", "qkv_offload", "mlp_offload",
                                                                 "minimal_offloaded", "context_offload")))
    grid.append(Step(4, 8, 2048, "full", optimizer_offload=True, subset=True))
    # MaxText's host-offload flags on the offloading steps
    for policy in ("qkv_offload", "mlp_offload", "context_offload", "input_offload", "minimal_offloaded"):
        grid.append(Step(4, 8, 2048, policy, flags=OFFLOAD_FLAGS, subset=policy == "minimal_offloaded"))
    # sequence length: attention's share grows (the crossover of saving / offloading the context)
    for batch, seq, layers in ((4, 4096, 4), (2, 8192, 4), (1, 16384, 4), (1, 32768, 2)):
        for policy in ("full", "context_device", "context_offload", "qkv_offload"):
            grid.append(Step(layers, batch, seq, policy))
    # where a policy does not fit and offloading the same tensors does (and near the HBM limit)
    for batch, device, offload in ((12, "minimal", "minimal_offloaded"), (16, "context_device", "context_offload"),
                                   (14, "mlp_device", "mlp_offload")):
        grid += [Step(4, batch, 2048, device), Step(4, batch, 2048, offload)]
    # depth
    for layers in (2, 8):
        for policy in ("full", "qkv_offload", "minimal_offloaded"):
            grid.append(Step(layers, 8 if layers == 2 else 4, 2048, policy))
    # each policy at its largest batch (L4, S 2048) and one batch beyond: near the limit on both sides
    for (policy, optimizer_offload), batch in LARGEST_FOUND.items():
        grid += [Step(4, batch, 2048, policy, optimizer_offload, subset=policy == "minimal_offloaded"),
                 Step(4, batch + 1, 2048, policy, optimizer_offload)]
    # ... and its device-saving twin at that batch: does not fit where the offloading policy does
    for offload, device in OFFLOAD_TWINS:
        if (offload, False) in LARGEST_FOUND:
            grid.append(Step(4, LARGEST_FOUND[(offload, False)], 2048, device))
    # the Pallas TPU flash attention (models.flash.pallas_attention), its context saved or offloaded by name
    for batch, seq in ((8, 2048), (2, 8192)):
        for policy in ("full", "minimal", "context_device", "context_offload", "qkv_offload"):
            grid.append(Step(4, batch, seq, policy, flash_kernel="fused", subset=(seq, policy) == (2048, "minimal")))
    return list({step.key: step for step in grid}.values())  # once each (minimal at B 12 is named twice)


# (policy, optimizer offload) -> the largest batch XLA:TPU fits at L4, S 2048: searched with libtpu's
# compile-only v5e (``--compile-only --largest``, stored in measured_compile_only.json), run on the chip
LARGEST = (("minimal_offloaded", False), ("full", False), ("minimal", False), ("qkv_offload", False),
           ("mlp_offload", False), ("full", True))
LARGEST_FOUND: dict[tuple[str, bool], int] = {("minimal_offloaded", False): 29, ("full", False): 33, ("minimal", False): 11,
                                               ("qkv_offload", False): 33, ("mlp_offload", False): 28, ("full", True): 37}
OFFLOAD_TWINS = (("minimal_offloaded", "minimal"), ("qkv_offload", "qkv_device"), ("mlp_offload", "mlp_device"),
                 ("context_offload", "context_device"))
# steps whose profiler trace is reduced per op (--trace): one per policy class at L4, B 8, S 2048
TRACED = ("L4-B8-S2048-full", "L4-B8-S2048-minimal", "L4-B8-S2048-qkv_offload", "L4-B8-S2048-mlp_offload",
          "L4-B8-S2048-context_offload", "L4-B8-S2048-minimal_offloaded", "L4-B8-S2048-full+opt_offload",
          "L4-B8-S2048-minimal_offloaded+maxtext_host_offload", "L4-B8-S2048-context_offload+pallas",
          # the long sequences the simulator is fast on, and one with the Pallas kernel beside (fourth session)
          "L4-B2-S8192-full", "L4-B2-S8192-full+pallas", "L4-B1-S16384-full", "L2-B1-S32768-qkv_offload")
# The sixth session's steps (``--part fresh``): shapes the grid never ran — another depth, batch, sequence length
# and the Pallas kernel at S 4096 — each under the policies that fit it, listed here and committed before they
# were measured and after the band they test was fixed (``comparison.Comparison.seen_band``, the lab's
# ``bands.PAIRED_MODEL_ERROR``). The comparison only ever reports them: nothing is priced from them.
FRESH_SHAPES = {  # (layers, batch, seq, flash kernel) -> policies (a "+opt_offload" / "+flags" suffix as in GRID)
    (6, 6, 2048, "jax"): ("full", "minimal", "qkv_offload", "mlp_offload", "context_offload", "minimal_offloaded"),
    (4, 6, 3072, "jax"): ("full", "minimal", "context_device", "context_offload", "qkv_offload", "mlp_offload"),
    (3, 4, 4096, "fused"): ("full", "minimal", "context_offload", "qkv_offload", "minimal_offloaded"),
    (4, 10, 2048, "jax"): ("full", "full+opt_offload", "mlp_device", "mlp_offload+flags", "minimal_offloaded",
                           "input_offload"),
}


def _fresh() -> list[Step]:
    steps = []
    for (layers, batch, seq, kernel), policies in FRESH_SHAPES.items():
        for name in policies:
            policy = name.split("+")[0]
            steps.append(Step(layers, batch, seq, policy, optimizer_offload="+opt_offload" in name,
                              flash_kernel=kernel, flags=OFFLOAD_FLAGS if "+flags" in name else None, fresh=True))
    return steps


# Issue 54's long sequences (``--part long``, the seventh session): the grid's S 32K shape (two layers, one sequence)
# from S 24K to 64K (4K apart at the two boundaries the first call found) under full remat and each way of keeping
# the context or the projections: the longest sequence one v5e trains under each policy (XLA:TPU's verdict on the
# chip: a step compiled over usable HBM is recorded, not run), and offload against remat wherever both train,
# measured in one session. Measured before any change to the simulator's long-S pricing: what a fix is fitted to,
# never its fresh test. Its own result (``results/measured_long.json``, ``--merge-long``): the 91 steps of
# ``measured.json`` are not touched.
LONG_SEQS = (24576, 28672, 32768, 36864, 40960, 49152, 65536)
LONG_POLICIES = ("full", "context_device", "context_offload", "qkv_offload", "input_offload", "minimal_offloaded")
LONG = [Step(2, 1, seq, policy) for seq in LONG_SEQS for policy in LONG_POLICIES]
LONG_NOTES = (
    "seventh session (issue 54): LONG, the S 32K grid shape (L2, B1, the lab's blockwise attention) from S 24K to "
    "64K under six policies, each step's verdict from XLA:TPU on the chip, the steps that fit timed (3 calls after "
    "1 warm-up); S 32K repeats the grid's shape in this session so that offload and remat are paired in one session. "
    "The first call ran S 24K, 32K, 40K, 48K and 64K; S 28K and 36K were added after it, at the two boundaries it "
    "found, and run in a second call with S 24K repeated in a second process (the run-to-run spread)",
)

TRACE_OP_FLOOR_SECONDS = 1e-5  # per step: ops below it are summed into the trace's "other" (their count kept)
GRID = _grid()
FRESH = _fresh()
STEPS = GRID + FRESH  # every step the chip measured, in order


# What the first chip session (2026-12-06, source dd9fc3c59882fee7) recorded differently, said with the result.
FIRST_RUN_COMMIT = "cc9c614ae3313387ed3ff68b48ddb9fc55e4470a"
FIRST_RUN_DEFAULTS = {"flash_kernel": "jax"}
FIRST_RUN_NOTES = (
    "attention: every step ran the lab's blockwise flash kernel (models/flash.py), not the Pallas TPU kernel: the "
    "chip's JAX has no cuDNN, and the lab then chose its 'jax' kernel for every platform (fixed after the session: "
    "ModelConfig.flash_kernel 'fused' puts the Pallas kernel on a TPU); the steps carry flash_kernel 'jax', and a "
    "comparison must compile that program",
    "profiler traces were reduced on the chip with a first reduction that counted loops' own events as work and every "
    "async copy (VMEM prefetches included) as a transfer: left out here (measure.read_trace now reads leaf ops and "
    "S(5) transfers); to be traced again",
    "real footprint: the filler bisection (measure.peak_by_filler) hung on the chip at the first allocation past the "
    "HBM limit (the TPU runtime waits instead of raising); no footprint was measured. memory_stats()'s "
    "peak_bytes_in_use stayed at the arguments' 4.32 GiB for every step: it does not see a program's temporaries",
    "kernels.link: a jitted copy into a new pinned_host output allocates and pins host memory each call, so its "
    "d2h rate (0.65-0.79 GB/s) is the allocation's, not the link's (the second session measured the link inside "
    "one program)",
    "not reached in the session's 30 chip minutes: the grid from S 8192's qkv_offload on (S 16K-32K, depth 2 and 8), "
    "the does-not-fit / offloaded-fits pairs, the largest batch per policy and the A/B checks",
)
# What the second chip session (2026-12-06, source 18ca3521819e2460, on commit f80475e with this file's grid) did.
SECOND_RUN_NOTES = (
    "second session: the grid from S 8192's qkv_offload on (the lab's blockwise kernel, as the first session's steps), "
    "ten steps with the Pallas TPU flash attention ('+pallas'), each LARGEST policy at its largest batch and one "
    "beyond (searched with libtpu's compile-only v5e: measured_compile_only.json 'largest'; full with optimizer "
    "offload, B 37, was searched but not run: no chip time left), the device twins at the offloading policies' "
    "largest batches, traces of the TRACED steps (a second process: their spread crosses the two sessions), a third "
    "process for three steps, three of the four A/B pairs (minimal_offloaded against minimal was cut by the call's "
    "limit)",
    "memory probe: bytes_reserved after a program ran equalled its known temporary to the byte (2, 4 and 8 GiB): the "
    "runtime reserves a loaded program's temporaries; a step's footprint is bytes_in_use + bytes_reserved "
    "(measure.runtime_footprint). No filler bisection: past the limit the runtime waits",
    "kernels.link: the round trip inside one program (device -> pinned-host temporary -> device), its trace split by "
    "direction: d2h and h2d per transfer, the link as an offloading step sees it",
)

# What the sixth chip session (2026-12-06, on commit 82c462d) did.
SIXTH_RUN_NOTES = (
    "sixth session: FRESH, 23 steps at four shapes the grid never ran, listed in commit 82c462d together with the band "
    "they test (bands.PAIRED_MODEL_ERROR, comparison.Comparison.seen_band) before any of them ran; all ran, eight "
    "repeated in a second process. The session's source stamp, fb9e6d31bb57f47c, is 82c462d's companion/ (its "
    "'commit' field names the device copy's git base, 22426ee: the device tool copies the working tree onto it)",
)


# ----------------------------------------------------------------------------- one step


def trainer_of(step: Step):
    return train.trainer(tpu_llama(step.layers).replace(flash_kernel=step.flash_kernel), POLICIES[step.policy],
                         state=train.StateConfig(optimizer_memory_host_offload=step.optimizer_offload))


def compile_step(step: Step, placement) -> compiler.CompileReport:
    """``step``'s training step compiled for ``placement`` (raises ``compiler.DoesNotFit`` where XLA:TPU refuses)."""
    trainer = trainer_of(step)
    abstract = train.abstract_state(trainer, placement, step.batch, step.seq)
    return compiler.compile(trainer.jit_step(), *abstract.arguments(), placement=placement, flags=step.flags,
                            host_arguments=abstract.host_arguments(trainer.state),
                            workload=train.workload(trainer.cfg, 1, step.batch, step.seq))


def measure_step(step: Step, placement, *, steps: int, warmup: int, trace_dir: str | None) -> dict:
    trace = os.path.join(trace_dir, step.key.replace("+", "_")) if trace_dir else None
    record = measure.train_step(trainer_of(step), placement, step.batch, step.seq, flags=step.flags, steps=steps,
                                warmup=warmup, trace_dir=trace)
    if record.get("trace_file"):  # every op's seconds per step, named as in the HLO: the per-op comparison's input
        traced = measure.read_trace(record["trace_file"])
        per_step = {name: seconds / max(1, traced.steps) for name, seconds in traced.op_seconds.items()}
        kept = {name: s for name, s in per_step.items() if s >= TRACE_OP_FLOOR_SECONDS}
        record["trace_ops"] = {"seconds_per_step": kept, "other_seconds": sum(per_step.values()) - sum(kept.values()),
                               "other_ops": len(per_step) - len(kept)}
    return {"key": step.key, "step": dataclasses.asdict(step), **record}


def ab_step(step: Step, twin: str) -> dict:
    """Loss and gradients of ``step``'s policy against ``twin``'s, the same parameters and batch."""
    result = measure.ab_policies(tpu_llama(step.layers), POLICIES[step.policy], POLICIES[twin], step.batch, step.seq)
    return {"key": step.key, "twin": twin, **result.to_dict()}


def _fits(step: Step, placement) -> tuple[bool, int]:
    """XLA:TPU's verdict on ``step`` and its compiled peak (or the bytes it needed)."""
    try:
        report = compile_step(step, placement)
    except compiler.DoesNotFit as err:
        return False, err.needed_bytes
    return report.fits, report.device.peak_bytes  # XLA:TPU may compile a peak over usable HBM: not a fit


def largest_batch(policy: str, optimizer_offload: bool, placement, start: int = 8) -> tuple[int, list[dict]]:
    """The largest batch XLA:TPU compiles ``policy`` at (L4, S 2048): a guess from the compile at ``start``
    (the peak's part above the arguments grows with the batch), then one batch at a time to the boundary."""
    limit = placement.target.usable_hbm_bytes
    tried = []

    def verdict(batch: int) -> bool:
        fits, peak = _fits(Step(4, batch, 2048, policy, optimizer_offload), placement)
        tried.append({"batch": batch, "fits": fits, "bytes": peak})
        return fits

    trainer = trainer_of(Step(4, start, 2048, policy, optimizer_offload))
    abstract = train.abstract_state(trainer, placement, start, 2048)
    static = sum(x.size * x.dtype.itemsize for x, host in zip(jax.tree.leaves(abstract.arguments()),
                 abstract.host_arguments(trainer.state) or [False] * len(jax.tree.leaves(abstract.arguments())))
                 if not host)
    verdict(start)
    per_sequence = max(1, (tried[-1]["bytes"] - static) / start)
    batch = max(1, int((limit - static) / per_sequence))
    if verdict(batch):
        while verdict(batch + 1):
            batch += 1
    else:
        while batch > 1 and not verdict(batch - 1):
            batch -= 1
        batch -= 1
    return batch, tried


# ----------------------------------------------------------------------------- kernels


def _time(fn, *args, steps=10, warmup=2) -> float:
    return measure.time_step(fn, args, steps=steps, warmup=warmup)[0].median


def kernels() -> dict:
    """Matmuls by shape, an HBM copy, and the host link each way, alone and both at once, as programs see them."""
    device = jax.local_devices()[0]
    out = {"matmul": [], "hbm_copy": None, "link": {}}
    key = jax.random.key(0)
    for m, k, n in ((8192, 8192, 8192), (16384, 2048, 8192), (16384, 8192, 2048), (16384, 2048, 2048),
                    (16384, 2048, 1024), (8192, 2048, 2048), (4096, 2048, 2048), (2048, 2048, 2048),
                    (16384, 2048, 32000)):
        a = jax.random.normal(key, (m, k), jnp.bfloat16)
        b = jax.random.normal(key, (k, n), jnp.bfloat16)
        seconds = _time(jax.jit(lambda x, y: x @ y), a, b)
        out["matmul"].append({"m": m, "k": k, "n": n, "seconds": seconds, "flops_per_s": 2 * m * k * n / seconds})
        del a, b
    x = jnp.ones((256, 1024, 1024), jnp.float32)  # 1 GiB
    seconds = _time(jax.jit(lambda v: v * 1.5 + 1.0), x)
    out["hbm_copy"] = {"bytes": 2 * x.nbytes, "seconds": seconds, "bytes_per_s": 2 * x.nbytes / seconds}
    sharding = jax.sharding.SingleDeviceSharding(device)
    host, dev = sharding.with_memory_kind("pinned_host"), sharding.with_memory_kind("device")
    for mib in (64, 256, 1024):
        y = jnp.ones((mib, 2**20 // 2), jnp.bfloat16)
        on_host = jax.device_put(y, host)
        # the round trip inside one program, as an offloading step moves its residuals: out to a host
        # temporary (S(5)) and back; its trace splits the time by direction (measure.read_trace)
        trip = jax.jit(lambda v: jax.device_put(jax.device_put(v, jax.memory.Space.Host), jax.memory.Space.Device) + 1)
        round_trip = _time(trip, y)
        h2d = _time(jax.jit(lambda v: v, out_shardings=dev), on_host)
        row = {"bytes": y.nbytes, "round_trip_seconds": round_trip, "h2d_seconds": h2d,
               "h2d_bytes_per_s": y.nbytes / h2d, "round_trip_bytes_per_s": 2 * y.nbytes / round_trip}
        try:
            traced = measure.read_trace(measure.trace_call(trip, (y,), tempfile.mkdtemp(), calls=3))
            row["trace"] = {k: v for k, v in traced.to_dict(top=8).items() if k != "plane"}
        except Exception as err:  # noqa: BLE001 - the timing stands without the trace
            row["trace_error"] = f"{type(err).__name__}: {str(err)[:300]}"
        out["link"][str(mib)] = row
        del y, on_host
    # a transfer beside compute: does the link run while the MXUs do (the overlap offload relies on)?
    a = jax.random.normal(key, (8192, 8192), jnp.bfloat16)
    y = jnp.ones((1024, 2**20 // 2), jnp.bfloat16)
    chain = jax.jit(lambda p: jax.lax.fori_loop(0, 8, lambda i, c: (c @ p) * 0.01, p))
    alone = _time(chain, a)
    trip = jax.jit(lambda v: jax.device_put(jax.device_put(v, jax.memory.Space.Host), jax.memory.Space.Device) + 1)
    beside = _time(jax.jit(lambda p, v: (jax.lax.fori_loop(0, 8, lambda i, c: (c @ p) * 0.01, p), trip(v))), a, y)
    out["overlap"] = {"compute_seconds": alone, "compute_and_round_trip_seconds": beside, "bytes": y.nbytes,
                      "round_trip_alone_seconds": out["link"]["1024"]["round_trip_seconds"]}
    return out


def op_overhead() -> dict:
    """What one op costs beyond its work on the chip: chains of K dependent small ops in one program (no launch
    between them), timed for several K — the slope is the seconds per op, the intercept the call's own cost.
    Two kinds: a 256 x 256 bf16 matmul with a tanh (one fusion each, 33.6 MFLOP: ~0.2 us of MXU work), and an
    elementwise op on 1 MiB (1 MiB read and written: ~2.6 us at the measured 635 GB/s) kept apart by an
    optimization barrier so that XLA cannot fuse the chain into one kernel."""
    key = jax.random.key(1)
    w = jax.random.normal(key, (256, 256), jnp.bfloat16) * 0.05
    x = jax.random.normal(key, (256, 256), jnp.bfloat16)
    v = jnp.ones((512, 1024), jnp.bfloat16)  # 1 MiB

    def matmuls(k):
        def f(a, b):
            for _ in range(k):
                a = jnp.tanh(a @ b)
            return a
        return jax.jit(f)

    def elementwise(k):
        def f(a):
            for _ in range(k):
                a = jax.lax.optimization_barrier(a * 1.0001 + 0.5)
            return a
        return jax.jit(f)

    out = {}
    for name, make, args in (("matmul_256", matmuls, (x, w)), ("elementwise_1mib", elementwise, (v,))):
        rows = [{"ops": k, "seconds": _time(make(k), *args, steps=20, warmup=3)} for k in (1, 64, 256, 1024)]
        n = len(rows)
        mean_k = sum(r["ops"] for r in rows) / n
        mean_s = sum(r["seconds"] for r in rows) / n
        slope = (sum((r["ops"] - mean_k) * (r["seconds"] - mean_s) for r in rows)
                 / sum((r["ops"] - mean_k) ** 2 for r in rows))
        out[name] = {"chains": rows, "seconds_per_op": slope, "intercept_seconds": mean_s - slope * mean_k}
    return out


# The matmul shapes of the steps, chained in one program (kernel microbenchmarks: no step involved). The blockwise
# attention's pair at S >= 8K: scores Q K^T then scores x V, 16 heads of 512 x 512 blocks at head dim 128 (the
# shapes its per-op traces showed running thousands of times a step); a large projection for comparison.
LOOP_MATMULS = {"flash_block_pair": ((16, 512, 128), (16, 128, 512), (16, 512, 128), (1, 16, 64, 256)),
                "projection_16384x2048x8192": ((16384, 2048), (2048, 8192), None, (1, 4, 16))}


def loop_matmuls() -> dict:
    """Seconds per link of a chain of dependent matmuls in one program (the slope over chain lengths: no call's
    dispatch in it), and the FLOP/s it gives: the MXUs' rate on the steps' shapes, which a single jitted matmul
    (``kernels``) cannot show for small shapes (its dispatch dominates). Each matmul's output passes a tanh, fused
    into it or not as XLA decides: the rate is a link's, its elementwise work included."""
    key = jax.random.key(2)
    out = {}
    for name, (x_shape, w_shape, v_shape, lengths) in LOOP_MATMULS.items():
        x = jax.random.normal(key, x_shape, jnp.bfloat16)
        w = jax.random.normal(key, w_shape, jnp.bfloat16) * 0.05
        v = jax.random.normal(key, v_shape, jnp.bfloat16) * 0.05 if v_shape else None
        if v is None:  # one matmul per link: [M, K] x [K, N], its first K columns fed on
            flops = 2 * x_shape[0] * x_shape[1] * w_shape[1]

            def chain(k):
                def f(a, b):
                    for _ in range(k):
                        a = jnp.tanh(a @ b)[:, :x_shape[1]]
                    return a
                return jax.jit(f)
            args = (x, w)
        else:  # two per link: scores = q k^T, then scores x v, fed on as the next q
            flops = 2 * 2 * x_shape[0] * x_shape[1] * x_shape[2] * w_shape[2]

            def chain(k):
                def f(a, b, c):
                    for _ in range(k):
                        # the tanh keeps XLA from reassociating the chain (b x c is loop-invariant)
                        a = jnp.tanh(jnp.einsum("hqk,hkv->hqv", jnp.tanh(jnp.einsum("hqd,hdk->hqk", a, b)), c))
                    return a
                return jax.jit(f)
            args = (x, w, v)
        rows = [{"links": k, "seconds": _time(chain(k), *args, steps=20, warmup=3)} for k in lengths]
        n = len(rows)
        mean_k, mean_s = sum(r["links"] for r in rows) / n, sum(r["seconds"] for r in rows) / n
        slope = (sum((r["links"] - mean_k) * (r["seconds"] - mean_s) for r in rows)
                 / sum((r["links"] - mean_k) ** 2 for r in rows))
        out[name] = {"chains": rows, "flops_per_link": flops, "seconds_per_link": slope,
                     "flops_per_s": flops / slope, "intercept_seconds": mean_s - slope * mean_k}
        print(name, out[name], flush=True)
    return out


def memory_probe() -> dict:
    """Which memory statistic sees a program's temporaries: programs with a known temporary (an optimization
    barrier keeps a 2, 4 or 8 GiB intermediate alive) and the runtime's counters after each. No filler: past
    the HBM limit the TPU runtime waits instead of raising (the first session's bisection hung)."""
    device = jax.local_devices()[0]
    x = jnp.ones((512, 1024, 1024), jnp.float32)  # 2 GiB argument
    rows = []
    for copies in (1, 2, 4):

        @jax.jit
        def known(v, copies=copies):
            t = jax.lax.optimization_barrier(jnp.concatenate([v] * copies) * 2.0)  # copies x 2 GiB
            return jnp.sum(t)

        compiled = known.lower(x).compile()
        stats = compiled.memory_analysis()
        jax.block_until_ready(compiled(x))
        rows.append({"known_temp_bytes": copies * x.nbytes, "argument_bytes": int(stats.argument_size_in_bytes),
                     "temp_bytes": int(stats.temp_size_in_bytes), "output_bytes": int(stats.output_size_in_bytes),
                     "stats_after": measure.memory_stats(device)})
        del compiled
        gc.collect()
    return {"argument_resident_bytes": x.nbytes, "programs": rows}


# ----------------------------------------------------------------------------- parts


def _environment() -> dict:
    import jaxlib

    devices = jax.devices()
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=_common.ROOT).stdout.strip()
    except OSError:
        commit = ""
    return {"device_kind": devices[0].device_kind, "platform": devices[0].platform, "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "libtpu": libtpu.version(), "stamp": results.stamp(), "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def _path(args) -> Path:
    folder = Path(args.out or tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{args.part}-{args.process}{'-subset' if args.subset else ''}-{args.start}.json"


def save(args, out: dict) -> None:
    """Written after every step: a call the device tool stops at its limit still brings back what it measured."""
    _path(args).write_text(json.dumps(out, indent=1, default=str) + "\n")


def run_part(args) -> dict:
    if args.cache:
        jax.config.update("jax_compilation_cache_dir", args.cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    measure.require_accelerator()
    out = {"part": args.part, "process": args.process, "environment": _environment()}
    if args.part in ("kernels", "overhead", "shapes"):
        parts = {"overhead": (("op_overhead", op_overhead),), "shapes": (("loop_matmuls", loop_matmuls),),
                 "kernels": (("kernels", kernels), ("memory_probe", memory_probe))}[args.part]
        for name, fn in parts:
            try:
                out[name] = fn()
            except Exception as err:  # noqa: BLE001 - keep what the other part measured
                out[f"{name}_error"] = f"{type(err).__name__}: {str(err)[:500]}"
            print(json.dumps(out.get(name, out.get(f"{name}_error")), default=str)[:3000], flush=True)
            save(args, out)
        return out
    if args.part == "ab":
        out["ab"] = []
        for a, b in AB_PAIRS[args.start:args.start + args.count]:
            try:
                out["ab"].append(ab_step(Step(4, 4, 2048, a), b))
            except Exception as err:  # noqa: BLE001 - recorded, the other pairs still run
                out["ab"].append({"key": a, "twin": b, "error": f"{type(err).__name__}: {str(err)[:300]}"})
            print(json.dumps(out["ab"][-1]), flush=True)
            save(args, out)
        return out
    placement = compiler.place(targets.target(TARGET))
    trace_root = os.path.join(args.out, "traces") if args.trace else None
    grid = {"fresh": FRESH, "long": LONG}.get(args.part) or ([s for s in GRID if s.subset] if args.subset else GRID)
    if args.only:
        grid = [s for s in grid if any(word in s.key for word in args.only)]
    if args.traced:
        grid = [s for s in grid if s.key in TRACED]
    grid = grid[args.start:]
    steps_out = out["steps"] = []
    for step in grid:
        started = time.perf_counter()
        try:
            record = measure_step(step, placement, steps=args.steps, warmup=args.warmup,
                                  trace_dir=trace_root if step.key in TRACED else None)
        except Exception as err:  # noqa: BLE001 - one step's failure is recorded; the rest of the grid runs
            record = {"key": step.key, "step": dataclasses.asdict(step),
                      "verdict": {"status": "error", "stage": "", "message": f"{type(err).__name__}: {str(err)[:500]}"}}
        record["wall_seconds"] = time.perf_counter() - started
        steps_out.append(record)
        timing = record.get("timing", {})
        print(f"{step.key:55} {record['verdict']['status']:13} {timing.get('median', float('nan')) * 1e3:9.2f} ms "
              f"({record['wall_seconds']:.0f} s)", flush=True)
        save(args, out)
        gc.collect()
    return out


AB_PAIRS = (("qkv_offload", "qkv_device"), ("mlp_offload", "mlp_device"), ("context_offload", "context_device"),
            ("minimal_offloaded", "minimal"))


def longest(parts: list[dict]) -> dict[str, dict]:
    """policy -> the longest LONG sequence it trained on the chip, and the shortest XLA:TPU refused or compiled over
    usable HBM (None where every one ran, or none did)."""
    ran = {r["key"]: r["verdict"]["status"] == "runs" for part in parts for r in part.get("steps", [])}
    table = {}
    for policy in LONG_POLICIES:
        seqs = [(s.seq, ran[s.key]) for s in LONG if s.policy == policy and s.key in ran]
        table[policy] = {"longest_trained": max((q for q, ok in seqs if ok), default=None),
                         "shortest_not": min((q for q, ok in seqs if not ok), default=None)}
    return table


def compile_only(only: list[str] | None, largest: bool) -> dict:
    """Every grid and fresh step compiled here with libtpu's compile-only v5e (no chip): the verdicts the chip is
    held to; with ``largest``, each ``LARGEST`` policy's largest batch searched (the grid's boundary steps)."""
    placement = compiler.place(targets.target(TARGET))
    rows = []
    searched = []
    if largest:
        for policy, optimizer_offload in LARGEST:
            batch, tried = largest_batch(policy, optimizer_offload, placement)
            searched.append({"policy": policy, "optimizer_offload": optimizer_offload, "batch": batch, "tried": tried})
            print(f"largest {policy}{'+opt_offload' if optimizer_offload else ''}: B={batch} "
                  f"({', '.join('%d:%.2f' % (t['batch'], t['bytes'] / 2**30) for t in tried)})", flush=True)
    for step in STEPS:
        if only is not None and not any(word in step.key for word in only):
            continue
        try:
            report = compile_step(step, placement)
            rows.append({"key": step.key, "compiled": True, **measure.compile_record(report), "fits": report.fits})
        except compiler.DoesNotFit as err:
            rows.append({"key": step.key, "compiled": False, **err.to_dict()})
        row = rows[-1]
        print(f"{step.key:55} {'fits' if row['fits'] else 'over the limit' if row['compiled'] else 'refused':14} "
              f"{row.get('peak_bytes', row.get('needed_bytes', 0)) / 2**30:6.2f} GiB", flush=True)
    return {"target": TARGET, "libtpu": libtpu.version(), "steps": rows, "largest": searched}


def main() -> None:
    from companion import freshness

    freshness.refuse_off_lock(results.producer())  # the chip's results: on the chip lock only
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("kernels", "overhead", "shapes", "grid", "fresh", "long", "ab"))
    parser.add_argument("--out", default=None, help="folder for this part's JSON (and traces)")
    parser.add_argument("--process", type=int, default=1)
    parser.add_argument("--start", type=int, default=0, help="skip the first N steps of the selection (resume)")
    parser.add_argument("--count", type=int, default=len(AB_PAIRS), help="ab: this many pairs")
    parser.add_argument("--subset", action="store_true", help="only the steps repeated for the spread")
    parser.add_argument("--only", nargs="*", default=None, help="only steps whose key contains one of these words")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--trace", action="store_true", help="trace the steps in TRACED")
    parser.add_argument("--traced", action="store_true", help="only the steps in TRACED")
    parser.add_argument("--cache", default=None, help="JAX's persistent compilation cache folder")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--largest", action="store_true", help="compile-only: search each LARGEST policy's batch")
    parser.add_argument("--merge", nargs="*", default=None)
    parser.add_argument("--merge-long", nargs="*", default=None, help="the long parts -> results/measured_long.json")
    args = parser.parse_args()
    if args.part in ("fresh", "long") and (args.subset or args.traced):
        parser.error(f"--part {args.part} runs {args.part.upper()} (use --only or --start to choose among it): --subset and --traced select "
                     "from GRID")
    if args.compile_only:  # rows compiled now replace the stored ones of the same step; the rest are kept
        stored = json.loads(COMPILE_ONLY.read_text()) if COMPILE_ONLY.exists() else {"steps": [], "largest": []}
        fresh = compile_only(args.only, args.largest)
        rows = {row["key"]: row for row in stored["steps"] + fresh["steps"]}
        order = [s.key for s in STEPS]
        fresh["steps"] = sorted(rows.values(), key=lambda r: order.index(r["key"]) if r["key"] in order else len(order))
        fresh["largest"] = fresh["largest"] or stored.get("largest", [])
        _common.write("measured_compile_only", {"stamp": results.stamp(), **fresh},
                      extends=args.only is not None or not args.largest)
        return
    if args.merge_long is not None:  # LONG's steps are grid-form steps: merged as such, into their own result
        from companion import measured

        parts = [{**json.loads(Path(p).read_text()), "part": "grid"} for p in args.merge_long]
        _common.write("measured_long", {**measured.merge(parts, notes=LONG_NOTES), "longest": longest(parts)})
        return
    if args.merge is not None:
        from companion import measured

        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        for part in parts:  # the first session's trace reductions are the faulty first ones (FIRST_RUN_NOTES)
            if part["environment"]["commit"] == FIRST_RUN_COMMIT:
                for record in part.get("steps", []):
                    record.pop("trace", None)
        merged = measured.merge(parts, FIRST_RUN_DEFAULTS, FIRST_RUN_NOTES + SECOND_RUN_NOTES + SIXTH_RUN_NOTES)
        shapes = max((p for p in parts if p.get("part") == "shapes"), key=lambda p: p["environment"]["date"], default={})
        if shapes.get("loop_matmuls"):  # the newest shapes part's (fourth session): read as raw JSON by notebook 08
            merged["loop_matmuls"] = {**shapes["loop_matmuls"], "environment": shapes["environment"]}
        _common.write("measured", merged)
        return
    out = run_part(args)
    save(args, out)
    print(f"wrote {_path(args)}")


if __name__ == "__main__":
    main()
