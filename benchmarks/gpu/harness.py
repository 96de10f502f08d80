"""GPU measurement harness: what the lab predicts, measured on NVIDIA GPUs.

    .venv/bin/python benchmarks/gpu/harness.py [--model llama3.1-8b] [--layers 4] [--batch 8] [--seq 4096]
                                               [--repeats 5] [--out benchmarks/results/gpu_<device>.json]

On a machine with NVIDIA GPUs (``pip install -e ".[gpu]"``) it measures, and writes one JSON file
(format ``offload-lab-gpu-harness/1``, read by ``companion.calibration``):

1. pinned host <-> device bandwidth per direction: one GPU alone, then every GPU at once (a shared
   link or host memory shows as less per GPU);
2. the step time of a real-size layer stack (forward + backward of ``--layers`` decoder layers, FSDP
   over every local GPU) for ``full``, ``minimal``, ``qkv_proj_offloaded`` and ``minimal_offloaded``,
   offloading ones with and without pipelined host offload, MaxText's flags (scheduler on): one
   warm-up call, then the median of ``--repeats`` calls, each ended by ``block_until_ready``;
3. the peak bytes in use (``memory_stats()``) against the compiled peak;
4. whether offloaded gradients equal non-offloaded ones (openxla/xla #46231: an offloaded scan
   residual read back with a wrong memcpy descriptor gives silently wrong gradients), without and
   with the lab's workaround;
5. what the workaround costs (``--workaround-ab``, also part of a full run): the offloading steps, naive and
   pipelined, timed with and without ``--xla_disable_hlo_passes=dynamic-slice-annotator`` (without it the
   gradients are wrong on jaxlib 0.10.2, but the time is the copy-engine transfers a fixed XLA runs), each
   traced once (``jax.profiler``, reduced by ``companion.measure.read_trace``): the transfer kernels' own
   time and rate on the link, and the compute kernels' time with them beside (the SMs they take), the
   constants ``companion.workaround`` prices over a range until this file says.

Everything up to the first measurement runs anywhere (the plan, the flag sets, the inputs); without
a GPU it stops there with a one-line message and exit status 1. ``companion.calibration.calibrate``
then compares the simulator with the file on any machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import companion  # noqa: E402,F401  (prepares JAX's CUDA plugin)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

from companion import calibration, compiler, flags, hlo, models, targets, train  # noqa: E402
from companion.sharding import AxisRules  # noqa: E402

POLICIES = ("full", "minimal", "qkv_proj_offloaded", "minimal_offloaded")
PIPELINED = "--xla_gpu_enable_pipelined_host_offloading=true"
TRANSFER_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class Case:
    policy: str
    flags: str  # on top of MaxText's


def plan(policies=POLICIES) -> list[Case]:
    """The configurations to time: every policy, offloading ones also pipelined."""
    cases = []
    for policy in policies:
        cases.append(Case(policy, ""))
        if "offload" in policy:
            cases.append(Case(policy, PIPELINED))
    for case in cases:
        flags.resolve(case.flags or None)  # validated before any GPU work
    return cases


def local_gpus() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (compiles, allocates)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bandwidth(devices, repeats: int) -> dict:
    """Bytes/s per direction: one GPU alone, and per GPU with every GPU transferring at once."""
    host = np.ones(TRANSFER_BYTES // 4, np.float32)

    def one(dev, direction):
        pinned = jax.device_put(host, SingleDeviceSharding(dev, memory_kind="pinned_host"))
        on_device = jax.device_put(host, SingleDeviceSharding(dev, memory_kind="device"))
        if direction == "h2d":
            return lambda: jax.device_put(pinned, SingleDeviceSharding(dev, memory_kind="device")).block_until_ready()
        return lambda: jax.device_put(on_device, SingleDeviceSharding(dev, memory_kind="pinned_host")).block_until_ready()

    out = {}
    for direction in targets.DIRECTIONS:
        alone = TRANSFER_BYTES / _median_seconds(one(devices[0], direction), repeats)
        calls = [one(d, direction) for d in devices]

        def together():
            threads = [threading.Thread(target=c) for c in calls]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        per_gpu = TRANSFER_BYTES / _median_seconds(together, repeats)
        out[direction] = {"one_gpu_bytes_per_s": alone, "all_gpus_per_gpu_bytes_per_s": per_gpu,
                          "gpus": len(devices)}
    return out


def _stack_inputs(cfg, placement, batch: int, seq: int):
    model = models.build(cfg, 0)
    mesh_shape = dict(placement.mesh.shape)
    params = {}
    _, _, stacks = train.layer_stack_loss(cfg, "full")
    for s in stacks:
        state = nnx.state(getattr(model, s))
        specs = train.spec_tree(state, mesh_shape, AxisRules(), "parameter")
        params[s] = jax.tree.map(lambda spec, v: jax.device_put(v.value, placement.sharding(spec)), specs, state)
    x = jax.random.normal(jax.random.key(1), (batch, seq, cfg.d_model), cfg.dtype)
    x = jax.device_put(x, placement.sharding(("fsdp",)))
    return params, x


def step_times(model: str, cfg, placement, batch: int, seq: int, cases: list[Case], repeats: int) -> list[dict]:
    params, x = _stack_inputs(cfg, placement, batch, seq)
    rows = []
    for case in cases:
        loss, _, _ = train.layer_stack_loss(cfg, case.policy)
        flag_set = flags.resolve(case.flags or None)
        with jax.set_mesh(placement.mesh):
            compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, x).compile(
                compiler_options=flag_set.compiler_options())
        stats = compiled.memory_analysis()
        compiled_peak = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes \
            - stats.alias_size_in_bytes
        seconds = _median_seconds(lambda: jax.block_until_ready(compiled(params, x)), repeats)
        peak = placement.mesh.devices.flat[0].memory_stats().get("peak_bytes_in_use")
        rows.append({"model": model, "layers": cfg.num_layers, "batch": batch, "seq": seq,
                     "policy": case.policy, "flags": case.flags, "gpus": placement.num_devices,
                     "step_seconds": seconds, "peak_bytes": peak, "compiled_peak_bytes": int(compiled_peak)})
        print(f"{case.policy:20} {case.flags or '(MaxText flags)':45} {seconds * 1e3:9.2f} ms", flush=True)
    return rows


def gradients_agree(cfg, placement, batch: int, seq: int) -> dict:
    """Max |offloaded - full| of the layer-stack gradients, without and with the lab's workaround."""
    params, x = _stack_inputs(cfg, placement, batch, seq)
    out = {}
    with jax.set_mesh(placement.mesh):
        reference = jax.jit(jax.grad(train.layer_stack_loss(cfg, "full")[0], argnums=(0, 1)))(params, x)
        for workarounds in (False, True):
            loss = train.layer_stack_loss(cfg, "minimal_offloaded")[0]
            options = flags.resolve(None, workarounds=workarounds).compiler_options()
            grads = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, x).compile(compiler_options=options)(params, x)
            diff = max(float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))
                       for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(reference)))
            out["with_workaround" if workarounds else "without_workaround"] = {"max_abs_diff": diff}
    return out


def workaround_ab(cfg, placement, batch: int, seq: int, repeats: int, trace_dir: str) -> list[dict]:
    """The offloading steps timed and traced with and without the #46231 workaround (see the module docstring)."""
    from companion import measure

    params, x = _stack_inputs(cfg, placement, batch, seq)
    rows = []
    for policy in ("minimal_offloaded", "qkv_proj_offloaded"):
        for extra in ("", PIPELINED):
            for workarounds in (True, False):
                loss = train.layer_stack_loss(cfg, policy)[0]
                flag_set = flags.resolve(extra or None, workarounds=workarounds)
                with jax.set_mesh(placement.mesh):
                    lowered = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, x)
                    compiled = lowered.compile(compiler_options=flag_set.compiler_options())
                engines = {t.engine for t in hlo.offload_summary(hlo.parse_module(compiled.as_text())).transfers}
                seconds = _median_seconds(lambda: jax.block_until_ready(compiled(params, x)), repeats)
                folder = f"{trace_dir}/{policy}{'-pipelined' if extra else ''}-{'workaround' if workarounds else 'memcpy'}"
                trace = measure.read_trace(measure.trace_call(compiled, (params, x), folder)).to_dict()
                rows.append({"policy": policy, "pipelined": bool(extra), "workaround": workarounds,
                             "transfer_engines": sorted(engines), "step_seconds": seconds, "trace": trace})
                print(f"{policy:20} {'pipelined' if extra else 'naive':9} {'workaround' if workarounds else 'memcpy':10} "
                      f"{seconds * 1e3:9.2f} ms  engines {sorted(engines)}", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3.1-8b")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=None, help="global batch (default: one sequence per GPU)")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None)
    p.add_argument("--workaround-ab", action="store_true", help="only measure what the #46231 workaround costs")
    p.add_argument("--trace-dir", default="/tmp/offload-lab-traces", help="where the profiler traces go")
    args = p.parse_args(argv)
    try:
        cfg = models.config(args.model, num_layers=args.layers)
        cases = plan()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"plan: {args.model} x {args.layers} layers, S={args.seq}: "
          + ", ".join(f"{c.policy}{' (pipelined)' if c.flags else ''}" for c in cases), flush=True)
    gpus = local_gpus()
    if not gpus:
        print("error: no NVIDIA GPU visible to JAX (jax.devices('gpu') is empty): run this harness on a GPU machine "
              "with `pip install -e \".[gpu]\"`", file=sys.stderr)
        return 1
    kind = gpus[0].device_kind
    gpu = calibration.gpu_key(kind)
    target = targets.target(gpu, len(gpus))
    placement = compiler.place(target, backend_kind="gpu")
    batch = args.batch or len(gpus)
    result = {"format": calibration.FORMAT, "device_kind": kind, "gpu": gpu, "gpus": len(gpus),
              "jax": jax.__version__, "date": time.strftime("%Y-%m-%d")}
    if not args.workaround_ab:
        result.update(bandwidth=bandwidth(gpus, args.repeats),
                      steps=step_times(args.model, cfg, placement, batch, args.seq, cases, args.repeats),
                      gradients=gradients_agree(cfg, placement, batch, args.seq))
    result["workaround"] = workaround_ab(cfg, placement, batch, args.seq, args.repeats, args.trace_dir)
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"gpu_{gpu}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
