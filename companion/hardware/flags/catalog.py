"""XLA's flags the lab knows: each with its kind, default, topic and source (``CATALOG``), those absent from every
supported jaxlib, renames."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


KINDS = ("bool", "int", "float", "string", "enum", "enum_list", "string_list")
# JAX's optimization level (``jax_optimization_level``, env ``JAX_OPTIMIZATION_LEVEL``) is no XLA flag but a
# build option; a flag set may carry it as ``--jax_optimization_level=O1``. JAX passes it to XLA as
# ``ExecutableBuildOptions.optimization_level``, the value of ``jax._src.config.EffortLevel`` (jax 0.10.2).
JAX_OPTIMIZATION_LEVEL = "jax_optimization_level"
OPTIMIZATION_LEVELS = ("O0", "O1", "O2", "O3")
EFFORT_LEVELS = {"O0": 9, "O1": 19, "O2": 29, "O3": 39}
TOPICS = ("scheduler", "offload", "memory", "collectives", "loops", "command buffers", "passes", "gemm", "debug")


@dataclasses.dataclass(frozen=True)
class Flag:
    name: str
    kind: str
    default: Any
    meaning: str
    topic: str
    choices: tuple[str, ...] = ()

    def as_flag(self, value: Any = None) -> str:
        value = self.default if value is None else value
        return f"--{self.name}={format_value(value)}"


_COMMAND_BUFFER_TYPES = ("FUSION", "CUBLAS", "CUDNN", "COLLECTIVES", "CONDITIONAL", "WHILE", "CUSTOM_CALL",
                         "CUBLASLT", "DYNAMIC_SLICE_FUSION", "CONVOLUTION")
_COLLECTIVE_TYPES = ("NOOP", "ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "COLLECTIVEBROADCAST", "ALLTOALL",
                     "COLLECTIVEPERMUTE", "RAGGEDALLTOALL", "ALLCOLLECTIVES")
_UNROLL = ("WHILE_LOOP_UNROLLING_NO_UNROLL", "WHILE_LOOP_UNROLLING_DOUBLE_BUFFER", "WHILE_LOOP_UNROLLING_FULL_UNROLL",
           "WHILE_LOOP_UNROLLING_AUTO_UNROLL", "WHILE_LOOP_UNROLLING_MANUAL_UNROLL")
# jaxlib 0.12's collective pipeliners are DebugOptions.CollectivePipeliningMode enums (xla.proto): XLA_FLAGS takes
# on/off/default/explicit in any case; per-compile compiler_options only the proto's names,
# COLLECTIVE_PIPELINING_MODE_<MODE> (to_compiler_options spells them so).
_PIPELINING_MODES = ("DEFAULT", "OFF", "ON", "EXPLICIT")
_COMBINE_DEFAULT = 30 * 1024 * 1024 + 7  # kDefault*CombineThreshold in xla/service/collective_utils.h

_LHS_ON = ("It also runs without this flag at optimization level O1+ (jax_optimization_level, or an exec-time "
           "effort >= 0.2), with a PGLE profile, or when the speed-of-light estimator's support check passes "
           "(Hopper or Blackwell, supported collectives only, xla_gpu_enable_analytical_sol_latency_estimator on) "
           "- IsLHSEnabled, gpu_hlo_schedule.cc; so it is on by default on both. Set false: at jaxlib 0.10.2 it "
           "stayed on there; at 0.12 it is off (notebook 05's stack schedules and replays differently).")
_O1_PIPELINERS = "At O1+ all three collective pipeliners run whatever their flags say."

CATALOG: dict[str, Flag] = {
    f.name: f
    for f in (
        # --- scheduling
        Flag("xla_gpu_enable_latency_hiding_scheduler", "bool", False,
             "Schedule with the latency-hiding scheduler, which overlaps async collectives and host transfers "
             "with compute. " + _LHS_ON, "scheduler"),
        Flag("xla_gpu_memory_limit_slop_factor", "int", 95,
             "Percent of the memory limit the scheduler plans for: (base - the step's device arguments and "
             "outputs) x factor / 100, base = JAX's allocator limit (mem fraction x HBM) on a GPU, 80% of "
             "device_memory_size in a compile-only run. Also XLA's own remat pass's target.", "memory"),
        Flag("xla_gpu_experimental_parallel_async_compute_limit", "int", 2,
             "How many async computations (host transfers included) the latency-hiding scheduler keeps in "
             "flight at once; raising it lets more offload copies overlap compute.", "scheduler"),
        Flag("xla_gpu_experimental_parallel_collective_overlap_limit", "int", 1,
             "How many collectives the latency-hiding scheduler may keep in flight at once.", "scheduler"),
        Flag("xla_gpu_enable_analytical_latency_estimator", "bool", False,
             "Cost ops with the analytical estimator (GPU performance model); a host transfer costs a "
             "5 us launch, whatever its bytes.", "scheduler"),
        Flag("xla_gpu_enable_analytical_sol_latency_estimator", "bool", True,
             "Cost ops with the speed-of-light estimator (matmul and fusion models, collectives by bytes): on "
             "Hopper; on Blackwell at jaxlib 0.10.2 it fails to build and every kernel costs a constant 1000 "
             "(T-shirt sizes, notebook 05), though its support check still turns the scheduler on. A host "
             "transfer costs a fixed 5000 us either way, whatever its bytes.",
             "scheduler"),
        Flag("xla_gpu_analytical_latency_estimator_options", "string", "",
             "Options of the analytical/SOL estimators' network model (nccl_op_launch_us, nic_speed_gbps, "
             "chunk_prep_us, rtt_us, gpus_per_node, chunk_size_bytes).", "scheduler"),
        Flag("xla_gpu_pgle_profile_file_or_directory_path", "string", "",
             "Profile-guided latency estimation: per-instruction costs (a ProfiledInstructionsProto) the "
             "scheduler uses instead of estimates; its presence also turns the scheduler on.", "scheduler"),
        Flag("xla_gpu_pgle_accuracy_checker", "enum", "PGLE_STRICTNESS_LEVEL_OFF",
             "Report instructions the PGLE profile lacks: OFF, WARN or ERROR.", "scheduler",
             ("PGLE_STRICTNESS_LEVEL_OFF", "PGLE_STRICTNESS_LEVEL_WARN", "PGLE_STRICTNESS_LEVEL_ERROR")),
        Flag("xla_gpu_experimental_collective_perf_table_path", "string", "",
             "Measured collective timings the SOL estimator reads instead of its model.", "scheduler"),
        Flag("xla_gpu_experimental_matmul_perf_table_path", "string", "",
             "Measured matmul timings the SOL estimator reads instead of its model.", "scheduler"),
        # --- host offload
        Flag("xla_gpu_enable_pipelined_host_offloading", "bool", False,
             "Pipeline host-offload transfers across loop iterations: the device-to-host write moves to the "
             "next iteration and the host-to-device read is prefetched one iteration early (one more layer of "
             "each offloaded tensor on the device). Flag-only in jaxlib 0.10.2; from 0.12 O1 turns it on too "
             "(openxla/xla #45393).",
             "offload"),
        Flag("xla_gpu_enable_host_memory_offloading", "bool", False,
             "Let XLA's rematerialization pass offload buffers to host memory by itself when over the memory "
             "limit (JAX offload policies work without it; no effect with that pass disabled).", "offload"),
        # --- loops
        Flag("xla_gpu_enable_while_loop_double_buffering", "bool", False,
             "Unroll while loops by two so one iteration's transfers and collectives overlap the other's "
             "compute (two layers' buffers live). Only xla_gpu_enable_while_loop_unrolling=FULL_UNROLL "
             "overrides it; with AUTO_UNROLL or MANUAL this flag decides.", "loops"),
        Flag("xla_gpu_enable_while_loop_unrolling", "enum", "WHILE_LOOP_UNROLLING_AUTO_UNROLL",
             "How to unroll while loops: none, double buffer, full, auto (by 2 when the loop has a collective, "
             "at optimization level O1+ only), or manual.", "loops", _UNROLL),
        # --- collectives
        Flag("xla_gpu_pipeline_all_gather", "enum", "DEFAULT",
             "Pipeline all-gathers out of scanned loops: prefetch the next layer's FSDP weights. " + _O1_PIPELINERS,
             "collectives", _PIPELINING_MODES),
        Flag("xla_gpu_pipeline_reduce_scatter", "enum", "DEFAULT",
             "Pipeline reduce-scatters out of scanned loops: finish a layer's gradient reduction during the next "
             "layer. " + _O1_PIPELINERS, "collectives", _PIPELINING_MODES),
        Flag("xla_gpu_pipeline_all_reduce", "enum", "DEFAULT",
             "Pipeline all-reduces out of scanned loops. " + _O1_PIPELINERS, "collectives", _PIPELINING_MODES),
        Flag("xla_gpu_enable_pipelined_p2p", "bool", False,
             "Pipeline send/recv (collective-permute) out of loops, for pipeline parallelism.", "collectives"),
        Flag("xla_gpu_all_gather_combine_threshold_bytes", "int", _COMBINE_DEFAULT,
             "Combine all-gathers up to this many bytes into one (FSDP: at least one layer's weights).",
             "collectives"),
        Flag("xla_gpu_reduce_scatter_combine_threshold_bytes", "int", _COMBINE_DEFAULT,
             "Combine reduce-scatters up to this many bytes into one.", "collectives"),
        Flag("xla_gpu_all_reduce_combine_threshold_bytes", "int", _COMBINE_DEFAULT,
             "Combine all-reduces up to this many bytes into one.", "collectives"),
        Flag("xla_gpu_collective_permute_combine_threshold_bytes", "int", _COMBINE_DEFAULT,
             "Combine collective-permutes up to this many bytes into one.", "collectives"),
        Flag("xla_gpu_enable_all_gather_combine_by_dim", "bool", False,
             "Combine all-gathers only when they gather along the same dimension.", "collectives"),
        Flag("xla_gpu_enable_reduce_scatter_combine_by_dim", "bool", False,
             "Combine reduce-scatters only when they scatter along the same dimension.", "collectives"),
        Flag("xla_gpu_enable_highest_priority_async_stream", "bool", True,
             "Run async collectives on the highest-priority CUDA stream.", "collectives"),
        Flag("xla_gpu_disable_async_collectives", "enum_list", (),
             "Collective types to run synchronously (empty: all async).", "collectives", _COLLECTIVE_TYPES),
        Flag("xla_gpu_multi_streamed_windowed_einsum", "bool", True,
             "Run windowed einsums (collective matmuls) on several compute streams.", "collectives"),
        Flag("xla_gpu_threshold_for_windowed_einsum_mib", "int", 100000,
             "Rewrite an einsum into a windowed collective matmul when its sharded operand exceeds this "
             "many MiB (0: always).", "collectives"),
        # --- command buffers
        Flag("xla_gpu_enable_command_buffer", "enum_list",
             ("FUSION", "CUBLAS", "CUBLASLT", "CUSTOM_CALL", "CUDNN", "DYNAMIC_SLICE_FUSION", "CONDITIONAL"),
             "Op types captured into CUDA graphs (command buffers); empty turns them off.",
             "command buffers", _COMMAND_BUFFER_TYPES),
        Flag("xla_gpu_graph_min_graph_size", "int", 5,
             "Capture a region into a CUDA graph only when it has at least this many ops.", "command buffers"),
        # --- passes, gemm
        Flag("xla_disable_hlo_passes", "string_list", (),
             "HLO passes to skip, by exact name ('rematerialization': MaxText's GPU runs skip XLA's own remat, "
             "so the JAX policy alone decides memory; 'dynamic-slice-annotator': the lab's fix for offloaded "
             "scan residuals read with wrong memcpy offsets in jaxlib 0.10.2, openxla/xla #46231 - it turns "
             "those host transfers from copy-engine memcpys into generated kernels that move the bytes from the "
             "SMs, zero-copy: same memory, still async, priced with its range by companion.workaround).", "passes"),
        Flag("xla_gpu_enable_dynamic_slice_fusion", "bool", False,
             "Fuse dynamic-slice/update-slice address computation into library calls.", "passes"),
        Flag("xla_gpu_copy_insertion_use_region_analysis", "bool", False,
             "Finer-grained interference analysis in copy insertion (fewer copies in loops).", "passes"),
        Flag("xla_gpu_enable_triton_gemm", "bool", True, "Let Triton-generated kernels do matmuls.", "gemm"),
        Flag("xla_gpu_enable_cublaslt", "bool", True, "Use cuBLASLt for matmuls where possible.", "gemm"),
        Flag("xla_gpu_autotune_level", "int", 4,
             "Matmul/convolution autotuning: 0 off, 1 on, 2-4 also initialise/reinitialise/check buffers.", "gemm"),
        # --- debug
        Flag("xla_dump_to", "string", "", "Write HLO, buffer assignment and live ranges to this folder.", "debug"),
        Flag("xla_dump_hlo_as_text", "bool", False, "Dump HLO as text before and after optimisation.", "debug"),
        Flag("xla_dump_hlo_pass_re", "string", "",
             "Also dump the module before and after every pass whose name matches this regex.", "debug"),
        Flag("xla_dump_latency_hiding_schedule", "bool", False,
             "Write the latency-hiding scheduler's estimated schedule (<module>.schedule.txt: per instruction "
             "start and end, per computation its statistics) into the dump folder.", "debug"),
        Flag("xla_gpu_experimental_dynamic_slice_fusion_verify_offsets", "bool", False,
             "On a GPU, compare each annotated dynamic-slice offset with the real one and fail on a mismatch "
             "(debugging only; adds a device-to-host sync).", "debug"),
    )
}

# Flags a reader meets in recipes and docs that no supported jaxlib's XLA has: XLA aborts the
# process on them. Name -> why, and what to use instead (renamed flags are RENAMES, below).
ABSENT: dict[str, str] = {
    "xla_gpu_lhs_enable_gpu_async_tracker": "listed in JAX-Toolbox's GPU_performance.md but gone from XLA; "
                                            "the GPU async tracker is always used",
    "xla_latency_hiding_scheduler_rerun": "a TPU (libtpu) flag; XLA:GPU never reruns the scheduler",
    "xla_gpu_offloading_memory_limit_gb": "not an XLA flag; the pinned host pool is XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB "
                                          "(an environment variable, GiB)",
    "xla_gpu_graph_level": "removed; turn CUDA graphs off with --xla_gpu_enable_command_buffer=",
    "xla_gpu_enable_triton_softmax_fusion": "removed from XLA",
    "xla_gpu_enable_async_collectives": "removed; collectives are async unless --xla_gpu_disable_async_collectives "
                                        "names them",
    "xla_gpu_enable_async_all_gather": "removed; see --xla_gpu_disable_async_collectives",
    "xla_gpu_enable_async_all_reduce": "removed; see --xla_gpu_disable_async_collectives",
    "xla_gpu_enable_async_reduce_scatter": "removed; see --xla_gpu_disable_async_collectives",
    "xla_gpu_enable_address_computation_fusion": "removed; see --xla_gpu_enable_dynamic_slice_fusion",
}


# Flags the lab's compiles set for themselves, which a run's XLA_FLAGS does not replace
LAB_OWNED = {"xla_dump_to": "the lab's compiles dump to a folder of their own when they read XLA's dumps "
                            "(compile(dump=True)) and nowhere otherwise; your run keeps its own (started with it in "
                            "XLA_FLAGS, this process may still dump JAX's small helper computations there)"}


@dataclasses.dataclass(frozen=True)
class Rename:
    """A flag XLA renamed: ``old`` (a bool) is gone from the compile options of jaxlib ``since`` and later, which
    take ``new`` (a CollectivePipeliningMode) instead. XLA's own mapping of the deprecated booleans, kept as
    aliases in ``XLA_FLAGS`` (xla/debug_options_flags.cc) and used by MaxText's migration (834e861b,
    2026-08-06): true -> on, false -> default."""

    old: str
    new: str
    since: str

    def to_new(self, value: Any) -> str:
        return "ON" if str(value).strip().lower() in ("true", "1") else "DEFAULT"

    def to_old(self, value: Any) -> bool:
        mode = str(value).strip().upper().removeprefix("COLLECTIVE_PIPELINING_MODE_")
        if mode == "EXPLICIT":
            raise ValueError(f"--{self.new}=explicit has no spelling before jaxlib {self.since} "
                             f"(--{self.old} is a bool): choose on, off or default")
        return mode == "ON"


RENAMES: tuple[Rename, ...] = tuple(
    Rename(f"xla_gpu_enable_pipelined_{op}", f"xla_gpu_pipeline_{op}", "0.12.0.1")
    for op in ("all_gather", "reduce_scatter", "all_reduce"))
# the compile options take a proto enum's full value name where XLA_FLAGS takes the short one (on, default, ...)
_PROTO_ENUM_PREFIX = {rename.new: "COLLECTIVE_PIPELINING_MODE_" for rename in RENAMES}


def pipelines(flags: Mapping[str, Any], op: str) -> bool:
    """Whether ``flags`` turn collective pipelining of ``op`` (all_gather, reduce_scatter, all_reduce) on, in
    either spelling."""
    return (str(flags.get(f"xla_gpu_pipeline_{op}", "")).upper().endswith("ON")
            or flags.get(f"xla_gpu_enable_pipelined_{op}") is True)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)
