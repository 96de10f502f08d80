"""Compiling a step for a target: the report cache, JAX's kernel cache, deviceless autotuning off, the refusals of
known XLA aborts, the report read back."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import jax

from ...hardware import flags as xla_flags
from ...hardware import libtpu
from ...ground import lowering
from .. import report_cache
from ...ground import stderr

from .placement import COMPILE_ONLY, Placement, backend, warn_if_xla_flags_changed
from .report import CompileReport, Workload, _report


def compile(fn: Callable, *args, placement: Placement,
            flags: str | Mapping[str, Any] | xla_flags.FlagSet | None = None, workarounds: bool = True,
            dump: bool | str | Path = False, static_argnums=(), donate_argnums=(),
            host_arguments: Sequence[bool] | None = None, workload: Workload | None = None,
            executable: bool = False) -> CompileReport:
    """Lower and compile ``fn`` for ``placement`` with abstract ``args``; return the report.

    ``args`` are pytrees of ``jax.ShapeDtypeStruct`` (see ``Placement.abstract``). ``flags`` are
    XLA flags for this compile only, validated first (see ``flags.resolve``): by default MaxText's
    GPU flags (``maxtext_gpu``); ``"none"`` for XLA's defaults; flags alone go on top of the
    default. ``workarounds`` adds the lab's fixes for the installed jaxlib (named in the report).
    ``dump=True`` also reads XLA's buffer assignment, live ranges and the scheduler's estimated
    schedule into ``report.dump`` (from a temporary folder, removed afterwards); a path keeps them.
    ``host_arguments``: one flag per leaf of ``args`` (``jax.tree.leaves``), True for arrays that
    live in pinned host memory between steps (MaxText's optimizer and parameter offload).
    ``workload``: the model FLOPs and tokens the step computes, for throughput (``Workload``).
    Where ``$OFFLOAD_LAB_REPORT_CACHE`` names a folder (the test targets), a step compiled before with
    the same program, flags and target is that compile's report (``companion.report_cache``).
    ``executable=True`` (a placement on local devices: ``companion.measure``) returns ``(report, compiled)``,
    the executable the report describes; the report cache is then left alone.
    """
    if executable and placement.backend in COMPILE_ONLY:
        raise ValueError(f"backend {placement.backend!r} compiles for a topology with no device: nothing to run")
    warn_if_xla_flags_changed()
    tpu = placement.target.is_tpu
    flag_set = libtpu.resolve(flags) if tpu else xla_flags.resolve(flags, workarounds=workarounds)
    options = flag_set.compiler_options()
    if hasattr(fn, "lower") and (static_argnums or donate_argnums):
        raise ValueError("fn is already jitted: give static_argnums/donate_argnums to jax.jit, not to compile()")
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn, static_argnums=static_argnums, donate_argnums=donate_argnums)
    options = {**options, **deviceless_options(placement, options)}
    cache = kernel_cache_file(placement)
    if cache:
        options = {**options, "xla_gpu_kernel_cache_file": cache}
    dump_dir = (tempfile.mkdtemp(prefix="xla_dump_") if dump is True else str(dump)) if dump else None
    if dump_dir:
        options = {**options, "xla_dump_to": dump_dir, "xla_dump_hlo_as_text": True,
                   "xla_dump_latency_hiding_schedule": True}
    elif "xla_dump_to" in xla_flags.parse(backend().xla_flags_at_start):
        options = {**options, "xla_dump_to": ""}  # a run's own dump folder is not the lab's (flags.LAB_OWNED)
    try:
        with stderr.capture() as log:
            start = time.perf_counter()
            platform = "tpu" if tpu else "cpu" if placement.backend == "cpu" else "cuda"
            with lowering.lowering_for(platform), jax.set_mesh(placement.mesh), _compute_capability(placement):
                lowered = jitted.lower(*args)
            if host_arguments is not None:
                _mark_host_arguments(lowered, host_arguments, len(jax.tree.leaves(args)))
            _refuse_aborting_combinations(flag_set, lowered)
            entry = None if dump_dir or executable else _report_key(lowered, options, placement)
            stored = report_cache.load(entry) if entry else None
            if stored is not None:
                return dataclasses.replace(stored, workload=workload)
            try:
                compiled = lowered.compile(compiler_options=options)
            except Exception as err:  # XLA reports bad flag values as JaxRuntimeError
                if tpu:
                    raise _tpu_refusal(err, placement, flag_set, time.perf_counter() - start) from None
                if cache is None:
                    raise ValueError(f"XLA refused the compile for {placement.target.name}: "
                                     f"{str(err).splitlines()[0]}") from None
                compiled = _compile_without_cache(lowered, options, placement)
            seconds = time.perf_counter() - start
        report = _report(compiled, placement, seconds, flag_set, log.text, dump_dir, workload)
        if entry:
            report_cache.store(entry, report)
        return (report, compiled) if executable else report
    finally:
        if dump is True:
            shutil.rmtree(dump_dir, ignore_errors=True)


class DoesNotFit(ValueError):
    """XLA:TPU refused a program over the chip's HBM at compile time (``RESOURCE_EXHAUSTED``): a verdict,
    with the bytes it needed and had (``libtpu.out_of_memory``), not a crash."""

    def __init__(self, message: str, target: str, needed_bytes: int, available_bytes: int, flag_set,
                 compile_seconds: float):
        super().__init__(message)
        self.target, self.needed_bytes, self.available_bytes = target, needed_bytes, available_bytes
        self.flag_set, self.compile_seconds = flag_set, compile_seconds

    @property
    def over_bytes(self) -> int:
        return self.needed_bytes - self.available_bytes

    def to_dict(self) -> dict:
        return {"target": self.target, "fits": False, "needed_bytes": self.needed_bytes,
                "available_bytes": self.available_bytes, "message": str(self), "compile_seconds": self.compile_seconds}


def _tpu_refusal(err: Exception, placement: Placement, flag_set, seconds: float) -> ValueError:
    """XLA:TPU's refusal in one line: ``DoesNotFit`` for a program over HBM, else a ValueError."""
    text = str(err)
    line = next((part.strip() for part in text.splitlines() if "RESOURCE_EXHAUSTED" in part), text.splitlines()[0])
    sizes = libtpu.out_of_memory(text)
    if sizes is None:
        return ValueError(f"XLA:TPU refused the compile for {placement.target.name}: {line}")
    gib = 2**30
    return DoesNotFit(f"does NOT fit {placement.target.name}: XLA:TPU needs {sizes[0] / gib:.2f} GiB of "
                      f"{sizes[1] / gib:.2f} GiB HBM and refused the compile ({line})",
                      placement.target.name, sizes[0], sizes[1], flag_set, seconds)


# jax.custom_partitioning (cuDNN attention's partitioner) names its Python callback by address: another
# address each lowering, the same program
_CALLBACK_ADDRESS = re.compile(r'(@CustomSPMDPartitioning\([^)]*\) \{api_version = \d+ : i32, backend_config = )"\d+"')


# what XLA logs during the compile (kept in the report: ``compiler_log``) follows these
_LOG_SETTINGS = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE")


def _report_key(lowered, options: Mapping[str, Any], placement: Placement) -> str | None:
    """The compile's entry in the report cache (``companion.report_cache``), or None where it is off."""
    if report_cache.folder() is None:
        return None
    mesh = placement.mesh
    program = _CALLBACK_ADDRESS.sub(r'\1"callback"', lowered.as_text())
    return report_cache.key(program, repr(sorted(_without_kernel_cache(options).items())), repr(placement.target),
                            placement.backend, repr(dict(mesh.shape)), repr(mesh.devices.tolist()),
                            backend().xla_flags_at_start, repr([os.environ.get(v) for v in _LOG_SETTINGS]))


KERNEL_CACHE_ENV = "OFFLOAD_LAB_KERNEL_CACHE"


def _without_kernel_cache(options: Mapping[str, Any]) -> dict[str, Any]:
    """The compile options less the kernel cache file (which decides code generation's time, not the program)."""
    return {k: v for k, v in options.items() if k != "xla_gpu_kernel_cache_file"}


def _compile_without_cache(lowered, options: dict, placement: Placement):
    """The compile again with the kernel cache off: a failure that persists is XLA's, reported in one line."""
    try:
        return lowered.compile(compiler_options=_without_kernel_cache(options))
    except Exception as err:
        raise ValueError(f"XLA refused the compile for {placement.target.name}: {str(err).splitlines()[0]}") from None


# GPU autotuning with no GPU to time the candidates (docs/research/xla-0.12-deviceless-autotuning.md). At jaxlib
# 0.12.0.1 a deviceless compile still runs the autotuner's ``config-assigner`` pass, which compiles each distinct
# fusion in full, one after another, to write back its default config: 40.7 of DeepSeek-V3's 47.5 s compile on 2
# cores (tests/compiled.py's 64-GPU step). At level 0 the scheduled HLO is the same but for those empty configs
# (Llama 3.1 8B on 8 H100: 374 fusions); peak, temp and host bytes, kernels and the simulated step are equal to
# the byte and the second (8B, and 405B and DeepSeek-V3 offloaded; tests/test_compiler.py checks a tiny step),
# in a quarter of the time. On a real GPU autotuning times candidates on the device; deviceless it cannot.
DEVICELESS_GPU_OPTIONS = {"xla_gpu_autotune_level": 0}


def deviceless_options(placement: Placement, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options a compile for a GPU topology with no GPU behind it adds (``DEVICELESS_GPU_OPTIONS``), less
    any the caller's flags or ``XLA_FLAGS`` set: a local GPU's compile autotunes as XLA would."""
    if placement.backend != "cuda":
        return {}
    chosen = set(options) | set(xla_flags.parse(backend().xla_flags_at_start))
    return {k: v for k, v in DEVICELESS_GPU_OPTIONS.items() if k not in chosen}


def kernel_cache_file(placement: Placement) -> str | None:
    """XLA's persistent kernel cache for this compile (``--xla_gpu_kernel_cache_file``), or None.

    Most of a GPU compile is code generation (LLVM and ptxas for each of the step's fused kernels:
    ~19 of ~25 s for DeepSeek-V3's step on 2 cores, ``benchmarks/bench_compile.py``), and the
    memory and schedule the lab reads do not depend on it: buffer assignment and the schedule are
    decided before any kernel is emitted. XLA keeps each kernel's binary in this file by its
    fingerprint and reuses it in later compiles, in any process; the same model under another
    policy, batch or flag set reuses most kernels (notebook 05's sixteen-layer stack under ten flag
    sets: 5.3 s cold, then 1.6-3.5 s, with the same peaks as separate caches give). One file per
    jaxlib and GPU, shared by every flag set, in ``$OFFLOAD_LAB_KERNEL_CACHE`` (default
    ``~/.cache/offload-lab/xla-kernels``; ``off`` turns it off). A compile that fails with the cache
    (XLA refuses a file another process is writing, or a kernel name it already holds) is retried
    without it (``compile``). Compile seconds are then those of a warm cache; the compile benchmark
    reports cold ones too.
    """
    folder = os.environ.get(KERNEL_CACHE_ENV, "")
    if placement.backend not in ("cuda", "gpu") or folder.lower() == "off":
        return None
    folder = folder or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                    "offload-lab", "xla-kernels")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return os.path.join(folder, f"jaxlib-{jax.__version__}-{placement.target.gpu.key}.bin")


@contextlib.contextmanager
def _compute_capability(placement: Placement):
    """While a step for a compile-only target is lowered, JAX's cuDNN attention asks that target's
    compute capability: jax 0.10.2 asks the *local* GPU (``fused_attention_stablehlo.
    check_compute_capability``), so without one it would refuse head dims only Hopper and later
    take (MLA's 192/128), though the compile is for such a GPU."""
    if placement.backend != "cuda":
        yield
        return
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    target = placement.target.gpu.compute_capability
    asks = (cudnn.check_compute_capability, cudnn.is_cuda_compute_capability_equal)

    def parse(capability: str) -> tuple[int, ...]:
        return tuple(int(x) for x in capability.split("."))

    cudnn.check_compute_capability = lambda capability: tuple(target) >= parse(capability)
    cudnn.is_cuda_compute_capability_equal = lambda capability: tuple(target) == parse(capability)
    try:
        yield
    finally:
        cudnn.check_compute_capability, cudnn.is_cuda_compute_capability_equal = asks


ANALYTICAL_ESTIMATOR = "xla_gpu_enable_analytical_latency_estimator"


# Where the analytical latency estimator aborts XLA, per jaxlib flag table: on a step that offloads (0.10.2) or on
# every step (0.12.0.1: ``shape.h:847 Check failed: buffer != nullptr`` in ``AnalyticalLatencyEstimator::NodeCost``
# -> ``LoopFusion::launch_dimensions``, found compiling tiny-llama ``full`` for H100 compile-only).
ANALYTICAL_ESTIMATOR_ABORTS = {"0.10.2": "offloading", "0.12.0.1": "every"}


def _refuse_aborting_combinations(flag_set: xla_flags.FlagSet, lowered) -> None:
    """Refuse what would abort the process inside XLA (a CHECK failure kills a notebook's kernel).

    The analytical latency estimator (``ANALYTICAL_ESTIMATOR_ABORTS``): at jaxlib 0.10.2 a step that moves data to
    or from host memory fails ``Check failed: buffer != nullptr`` in ``xla::Shape::dimensions`` from
    ``GpuPerformanceModel::EstimateRunTimeForInstruction`` (the launch dimensions of an async host transfer's
    fusion), found compiling Llama layers with ``minimal_offloaded`` for H100; at 0.12.0.1 every step does."""
    if not flag_set.flags.get(ANALYTICAL_ESTIMATOR):
        return
    jaxlib = xla_flags.INSTALLED_JAXLIB
    scope = ANALYTICAL_ESTIMATOR_ABORTS.get(xla_flags.KNOWN_JAXLIB, "every")
    if scope == "every":
        raise ValueError(f"--{ANALYTICAL_ESTIMATOR}=true aborts XLA (jaxlib {jaxlib}) on every step (a CHECK "
                         "failure in its cost of loop fusions): leave it off; the speed-of-light estimator "
                         "(--xla_gpu_enable_analytical_sol_latency_estimator, on by default) is XLA's model here")
    if "annotate_device_placement" in lowered.as_text():
        raise ValueError(f"--{ANALYTICAL_ESTIMATOR}=true aborts XLA (jaxlib {jaxlib}) on a step that "
                         "offloads to host memory (a CHECK failure in its GPU performance model): leave the analytical "
                         "estimator off for offloading steps, or compile a policy that does not offload")


def _mark_host_arguments(lowered, host: Sequence[bool], count: int) -> None:
    """Put the flagged arguments in pinned host memory: write ``mhlo.memory_kind = "pinned_host"``
    on them in the lowered module, what JAX writes for a ``pinned_host`` sharding on a GPU. (The
    compile-only topology's devices report no memory kinds, so a ``NamedSharding`` there drops
    ``memory_kind``: the attribute is the only way to say it.)"""
    from jax._src.lib.mlir import ir

    if len(host) != count:
        raise ValueError(f"host_arguments has {len(host)} flags for {count} argument leaves")
    jax_lowering = lowered._lowering  # jax.stages.Lowered keeps the module it compiles here
    kept = sorted(jax_lowering.compile_args.get("kept_var_idx") or range(count))
    module = jax_lowering.stablehlo()
    with module.context:
        main = next(op for op in module.body.operations
                    if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        attrs = list(main.attributes["arg_attrs"])
        for position, leaf in enumerate(kept):
            if host[leaf]:
                entries = {a.name: a.attr for a in ir.DictAttr(attrs[position])}
                entries["mhlo.memory_kind"] = ir.StringAttr.get("pinned_host")
                attrs[position] = ir.DictAttr.get(entries)
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
