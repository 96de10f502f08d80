"""Measured on a real chip: the lab's Llama-style training steps and kernel microbenchmarks on one TPU v5e.

    python benchmarks/bench_measured.py --compile-only          # here: every step's XLA:TPU verdict (libtpu)
    python benchmarks/bench_measured.py --part kernels --out D  # on the chip: matmuls, HBM copy, host link
    python benchmarks/bench_measured.py --part grid|largest|ab --out D [--subset] [--process N] [--probe] [--trace]
    python benchmarks/bench_measured.py --merge D1 D2 ...       # -> benchmarks/results/measured.json

The grid (``GRID``): full training steps (embedding, scanned decoder layers, head, AdamW; fp32 master
weights, bf16 activations; the Pallas TPU flash attention with its named ``context``) of one Llama-style
family, ``tpu_llama(layers)`` (D 2048, 16 query and 8 key/value heads of 128, SwiGLU F 8192, vocab
32,000), at S 2K-32K, several depths and batches, under full remat, ``minimal``, Q/K/V, the MLP, the
context and the layer input saved on the device or offloaded, every projection offloaded, and optimizer
state offloaded; offloading steps also under MaxText's TPU ``HOST_OFFLOAD_FLAGS``; each policy at its
largest batch at one shape and one batch beyond. Each step: XLA:TPU's compile verdict and memory analysis
on the chip, ``warmup`` + N timed calls (``companion.measure.time_step``), the runtime's memory counters,
and, on request, its real footprint (``measure.peak_by_filler``), a profiler trace reduced per op, and a
loss/gradient A/B of an offloading policy against its device-saving twin. ``--process N`` tags a
repeat in a separate process: the merge computes each step's run-to-run spread across processes.

The chip is lent for 30 minutes a session in calls of under 10 minutes: the parts are sized to fit one
call each, compiles are shared across processes through JAX's persistent cache (``--cache``), and what
the merge writes is committed as a stamped result (``results.stamp()``, the device kind, jax, jaxlib,
libtpu and the lab's commit), which the tests and notebook 07 read without a chip.
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

from companion import compiler, libtpu, measure, models, results, targets, train  # noqa: E402

TARGET = "tpu-v5e"
OFFLOAD_FLAGS = "maxtext_host_offload"
QKV = ("query_proj", "key_proj", "value_proj")
MLP = ("mlpwi_0", "mlpwi_1", "mlpwo")


def custom(where: str, *names: str) -> dict:
    return dict.fromkeys(names, where)


POLICIES = {
    "full": "full",
    "minimal": "minimal",
    "qkv_device": "save_qkv_proj",
    "qkv_offload": "qkv_proj_offloaded",
    "mlp_device": custom("device", *MLP),
    "mlp_offload": custom("offload", *MLP),
    "context_device": custom("device", "context", *QKV),
    "context_offload": custom("offload", "context", *QKV),
    "input_offload": custom("offload", "decoder_layer_input"),
    "minimal_offloaded": "minimal_offloaded",
}


def tpu_llama(layers: int):
    """The grid's model: Llama 3's layer (GQA, RoPE at theta 500,000, SwiGLU) at 1B-class width."""
    return models.config("llama3-8b").replace(name=f"tpu-llama-{layers}L", num_layers=layers, d_model=2048,
                                              num_heads=16, num_kv_heads=8, head_dim=128, mlp_dim=8192,
                                              vocab_size=32_000)


@dataclasses.dataclass(frozen=True)
class Step:
    layers: int
    batch: int
    seq: int
    policy: str  # a key of POLICIES
    optimizer_offload: bool = False
    flash_kernel: str = "fused"  # the model's attention kernel: fused (Pallas on the TPU) or jax (the lab's own)
    flags: str | None = None  # a libtpu preset (None: libtpu's defaults)
    subset: bool = False  # also repeated in processes 2 and 3 (the run-to-run spread)
    probe: bool = False  # its real footprint bisected with a filler

    @property
    def key(self) -> str:
        return (f"L{self.layers}-B{self.batch}-S{self.seq}-{self.policy}" + ("+opt_offload" if self.optimizer_offload
                else "") + (f"+{self.flags}" if self.flags else ""))


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
    return grid


GRID = _grid()


# What the first chip session (2026-12-06, source dd9fc3c59882fee7) recorded differently, said with the result.
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
    "d2h rate (0.65-0.79 GB/s) is the allocation's, not the link's; the offloading steps' times bound the link "
    "(notebook 07)",
    "not reached in the session's 30 chip minutes: the grid from S 8192's qkv_offload on (S 16K-32K, depth 2 and 8), "
    "the does-not-fit / offloaded-fits pairs, the largest batch per policy and the A/B checks",
)


# ----------------------------------------------------------------------------- one step


def _state(step: Step):
    return train.StateConfig(optimizer_memory_host_offload=step.optimizer_offload)


def trainer_of(step: Step):
    return train.trainer(tpu_llama(step.layers).replace(flash_kernel=step.flash_kernel), POLICIES[step.policy],
                         state=train.StateConfig(optimizer_memory_host_offload=step.optimizer_offload))


def measure_step(step: Step, placement, *, steps: int, warmup: int, probe: bool, trace_dir: str | None) -> dict:
    trace = os.path.join(trace_dir, step.key.replace("+", "_")) if trace_dir else None
    record = measure.train_step(trainer_of(step), placement, step.batch, step.seq, flags=step.flags, steps=steps,
                                warmup=warmup, footprint=probe, trace_dir=trace)
    return {"key": step.key, "step": dataclasses.asdict(step), **record}


def ab_step(step: Step, twin: str) -> dict:
    """Loss and gradients of ``step``'s policy against ``twin``'s, the same parameters and batch."""
    result = measure.ab_policies(tpu_llama(step.layers), POLICIES[step.policy], POLICIES[twin], step.batch, step.seq)
    return {"key": step.key, "twin": twin, **result.to_dict()}


LARGEST = (("minimal_offloaded", False), ("full", False), ("minimal", False), ("qkv_offload", False),
           ("mlp_offload", False), ("full", True))  # (policy, optimizer offload) at L4, S 2048


def _fits(step: Step, placement) -> tuple[bool, int]:
    """XLA:TPU's verdict on ``step`` and its compiled peak (or the bytes it needed)."""
    trainer = trainer_of(step)
    abstract = train.abstract_state(trainer, placement, step.batch, step.seq)
    try:
        report = compiler.compile(trainer.jit_step(), *abstract.arguments(), placement=placement, flags=step.flags,
                                  host_arguments=abstract.host_arguments(trainer.state))
    except compiler.DoesNotFit as err:
        return False, err.needed_bytes
    return True, report.device.peak_bytes


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


def run_largest(args, placement, trace_root, rows: list, save) -> None:
    for policy, optimizer_offload in LARGEST[args.start:args.start + args.count]:
        started = time.perf_counter()
        batch, tried = largest_batch(policy, optimizer_offload, placement)
        step = Step(4, batch, 2048, policy, optimizer_offload, probe=True)
        record = measure_step(step, placement, steps=args.steps, warmup=args.warmup, probe=args.probe,
                              trace_dir=trace_root)
        beyond = Step(4, batch + 1, 2048, policy, optimizer_offload)
        over = next(t for t in tried if t["batch"] == batch + 1)
        rows.append({**record, "largest_batch": {"policy": policy, "optimizer_offload": optimizer_offload,
                                                 "batch": batch, "tried": tried}})
        rows.append({"key": beyond.key, "step": dataclasses.asdict(beyond), "compile": {"needed_bytes": over["bytes"]},
                     "verdict": measure.Verdict("does_not_fit", "compile", "XLA:TPU refused (largest-batch search)",
                                                over["bytes"]).to_dict()})
        print(f"largest {policy}{'+opt' if optimizer_offload else ''}: B={batch} "
              f"({len(tried)} compiles, {time.perf_counter() - started:.0f} s) {record['verdict']['status']} "
              f"{record.get('timing', {}).get('median', float('nan')) * 1e3:.1f} ms", flush=True)
        save()


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
        d2h = _time(jax.jit(lambda v: v, out_shardings=host), y)
        h2d = _time(jax.jit(lambda v: v, out_shardings=dev), on_host)
        both = _time(jax.jit(lambda v, w: (v, w), out_shardings=(host, dev)), y, on_host)
        out["link"][str(mib)] = {"bytes": y.nbytes, "d2h_seconds": d2h, "h2d_seconds": h2d, "both_seconds": both,
                                 "d2h_bytes_per_s": y.nbytes / d2h, "h2d_bytes_per_s": y.nbytes / h2d,
                                 "both_bytes_per_s": 2 * y.nbytes / both}
        del y, on_host
    # a transfer beside compute: does the link run while the MXUs do (the overlap offload relies on)?
    a = jax.random.normal(key, (8192, 8192), jnp.bfloat16)
    y = jnp.ones((1024, 2**20 // 2), jnp.bfloat16)
    chain = jax.jit(lambda p: jax.lax.fori_loop(0, 8, lambda i, c: (c @ p) * 0.01, p))
    alone = _time(chain, a)
    beside = _time(jax.jit(lambda p, v: (jax.lax.fori_loop(0, 8, lambda i, c: (c @ p) * 0.01, p), v),
                           out_shardings=(dev, host)), a, y)
    out["overlap"] = {"compute_seconds": alone, "compute_and_d2h_seconds": beside, "d2h_bytes": y.nbytes,
                      "d2h_alone_seconds": out["link"]["1024"]["d2h_seconds"]}
    return out


def memory_probe() -> dict:
    """Which memory statistic sees a program's temporaries: one program with a known temporary (an
    optimization barrier keeps a 4 GiB intermediate alive), its runtime counters, and its footprint by filler."""
    device = jax.local_devices()[0]
    x = jnp.ones((512, 1024, 1024), jnp.float32)  # 2 GiB argument

    @jax.jit
    def known(v):
        t = jax.lax.optimization_barrier(jnp.concatenate([v, v]) * 2.0)  # 4 GiB temporary
        return jnp.sum(t)

    compiled = known.lower(x).compile()
    stats = compiled.memory_analysis()
    before = measure.memory_stats(device)
    jax.block_until_ready(compiled(x))
    after = measure.memory_stats(device)
    limit = after.get("bytes_limit", 0)
    peak = measure.peak_by_filler(lambda: compiled(x), limit, resolution=32 * 2**20)
    return {"argument_bytes": int(stats.argument_size_in_bytes), "temp_bytes": int(stats.temp_size_in_bytes),
            "output_bytes": int(stats.output_size_in_bytes), "stats_before": before, "stats_after": after,
            "filler_peak": peak.to_dict(), "argument_resident_bytes": x.nbytes}


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
    if args.part == "kernels":
        for name, fn in (("kernels", kernels), ("memory_probe", memory_probe)):
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
    if args.part == "largest":
        out["steps"] = []
        run_largest(args, placement, trace_root, out["steps"], lambda: save(args, out))
        return out
    grid = [s for s in GRID if s.subset] if args.subset else GRID
    if args.only:
        grid = [s for s in grid if any(word in s.key for word in args.only)]
    grid = grid[args.start:]
    steps_out = out["steps"] = []
    for step in grid:
        started = time.perf_counter()
        try:
            record = measure_step(step, placement, steps=args.steps, warmup=args.warmup,
                                  probe=args.probe and step.probe, trace_dir=trace_root)
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


def compile_only(flash_kernel: str, only: list[str] | None) -> dict:
    """Every grid step compiled here with libtpu's compile-only v5e (no chip): the verdicts the chip is held to."""
    placement = compiler.place(targets.target(TARGET))
    rows = []
    for step in GRID:
        if only and not any(word in step.key for word in only):
            continue
        step = dataclasses.replace(step, flash_kernel=flash_kernel)
        trainer = trainer_of(step)
        abstract = train.abstract_state(trainer, placement, step.batch, step.seq)
        try:
            report = compiler.compile(trainer.jit_step(), *abstract.arguments(), placement=placement, flags=step.flags,
                                      host_arguments=abstract.host_arguments(trainer.state),
                                      workload=train.workload(trainer.cfg, 1, step.batch, step.seq))
            rows.append({"key": step.key, "fits": True, **measure.compile_record(report)})
        except compiler.DoesNotFit as err:
            rows.append({"key": step.key, "fits": False, **err.to_dict()})
        row = rows[-1]
        print(f"{step.key:55} {'fits' if row['fits'] else 'DOES NOT FIT':13} "
              f"{row.get('peak_bytes', row.get('needed_bytes', 0)) / 2**30:6.2f} GiB", flush=True)
    return {"target": TARGET, "libtpu": libtpu.version(), "flash_kernel": flash_kernel, "steps": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("kernels", "grid", "largest", "ab"))
    parser.add_argument("--out", default=None, help="folder for this part's JSON (and traces)")
    parser.add_argument("--process", type=int, default=1)
    parser.add_argument("--start", type=int, default=0, help="skip the first N steps of the selection (resume)")
    parser.add_argument("--count", type=int, default=len(LARGEST), help="largest: this many policies")
    parser.add_argument("--subset", action="store_true", help="only the steps repeated for the spread")
    parser.add_argument("--only", nargs="*", default=None, help="only steps whose key contains one of these words")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--cache", default=None, help="JAX's persistent compilation cache folder")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--flash-kernel", default="fused", choices=("fused", "jax"), help="compile-only: the attention")
    parser.add_argument("--merge", nargs="*", default=None)
    parser.add_argument("--first-run", action="store_true", help="the parts of the first chip session (2026-12-06)")
    args = parser.parse_args()
    if args.compile_only:
        _common.write("measured_compile_only", {"stamp": results.stamp(), **compile_only(args.flash_kernel, args.only)})
        return
    if args.merge is not None:
        from companion import measured

        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        if args.first_run:  # its trace reductions are the faulty first ones (FIRST_RUN_NOTES)
            for part in parts:
                for record in part.get("steps", []):
                    record.pop("trace", None)
        _common.write("measured", measured.merge(parts, FIRST_RUN_DEFAULTS if args.first_run else None,
                                                 FIRST_RUN_NOTES if args.first_run else ()))
        return
    out = run_part(args)
    save(args, out)
    print(f"wrote {_path(args)}")


if __name__ == "__main__":
    main()
