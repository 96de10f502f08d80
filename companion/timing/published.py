"""Published training runs the step-time simulator is held against (no GPU needed: their measured
numbers, the lab's closest configuration, and what differs).

Each ``PublishedRun`` is one measurement read in its source (checked there; the derivations are
written beside it): a step time, or tokens per second per GPU, for a configuration the lab can compile.
``compare(run)`` compiles the lab's closest step for the run's system, replays it (``schedule``) at the
simulator's frozen constants and over their measured spread (``bands.sweep``), and reports simulated
against measured. Step time, never TFLOP/s: MaxText's FLOP counter changed in 2024-05 (attention
counted non-causal, +5.6 % on the Llama 2 7B step) and 2025-07 (causal again), and Megatron's differs.

Kinds: ``absolute`` (the lab's configuration is the run's, up to the differences listed: these set
the absolute error), ``order`` (another framework's parallelism — an order-of-magnitude check, outside
the error), ``relative`` (a published speedup of one configuration over another).

Networks: MaxText's A3 results ran on Google Cloud VMs whose NICs are not DGX's: A3 High has 4 x 200 Gb/s
GPUDirect-TCPX NICs per 8 GPUs (12.5 GB/s per GPU), A3 Mega 8 x 200 Gb/s TCPXO (25 GB/s per GPU), A3 Ultra one
400 Gb/s CX-7 RoCE NIC per GPU (as DGX); stas00/ml-engineering ``network/README.md`` (its inter-node table and
note 29) and Google's cluster-toolkit v1.44.1. The lab prices those runs with that NIC rate per GPU
(``CollectiveModel.nic_per_gpu``) and DGX's network efficiency, an assumption for TCPX/TCPXO.
"""

from __future__ import annotations

import dataclasses
from typing import Any


A3_HIGH_NIC = 4 * 200e9 / 8 / 8  # bytes/s per GPU each way: 4 x 200 Gb/s per 8 GPUs
A3_MEGA_NIC = 8 * 200e9 / 8 / 8


@dataclasses.dataclass(frozen=True)
class PublishedRun:
    """One published measurement and the lab's closest configuration."""

    key: str
    kind: str  # absolute | order | relative
    what: str
    source: str
    measured_step_seconds: float | None  # None: see measured_tokens_per_s_per_gpu or relative
    derivation: str  # how the step time (or rate) follows from what the source prints
    model: str
    target: str  # the lab's target spec, e.g. "h100:1x8"
    mesh: str
    batch: int
    seq: int
    policy: Any  # a preset name, or a custom spec ("all_device": every name the model emits on the device)
    differs: tuple[str, ...]
    moe: dict = dataclasses.field(default_factory=dict)
    scan_layers: bool = True
    flags: str | None = None
    nic_per_gpu: float | None = None  # a VM's NIC rate per GPU where it is not the fabric's
    domain_gpus: int | None = None  # the job's GPUs per NVLink domain (``CollectiveModel.domain_gpus``)
    measured_tokens_per_s_per_gpu: float | None = None
    relative_to: str | None = None  # for kind "relative": the run this one is measured against (same fields)
    measured_ratio: float | None = None  # tokens/s of this run over relative_to's


_C1_SOURCE = ("AI-Hypercomputer/maxtext src/maxtext/configs/gpu/a3/llama_2_7b/README.md (commit efb6d9e4a, 2024-04-09), "
              "the 1vm..16vm.sh recipes at that commit")
_C1_DERIVATION = ("TFLOP/s/chip from the README; MaxText's counter at that commit counts 715.2 TFLOP per device-step "
                  "(6 x 6.738e9 params x 4 x 4096 + causal attention 52.8): step = 715.2 / TFLOP/s")
_C1_DIFFERS = ("XLA: a 2024-04 nightly (ghcr.io/nvidia/jax:base, unpinned) vs jaxlib 0.10.2; its flags mapped to "
               "0.10.2's spellings (MaxText's GPU preset)",
               "remat_policy minimal_flash (2024) = the lab's minimal_with_context (saved dots without batch dims "
               "and the attention context)",
               "logits_dot_in_fp32: true at that commit (the lab's head runs its dot in bf16, logits in fp32)",
               "A3 VMs: PCIe host links and 4 x 200 Gb/s TCPX NICs per 8 GPUs (priced at 12.5 GB/s per GPU)")


def _c1(vms: int, seconds: float, tflops: float) -> PublishedRun:
    return PublishedRun(
        f"C1-{vms}vm", "absolute", f"MaxText Llama 2 7B on {vms} A3 VM(s) ({8 * vms} H100), {tflops:g} TFLOP/s/chip",
        _C1_SOURCE, seconds, _C1_DERIVATION.replace("TFLOP/s", f"{tflops:g}", 1), "llama2-7b", f"h100:{vms}x8",
        f"fsdp=8,data={vms}" if vms > 1 else "fsdp=8", 32 * vms, 4096, "minimal_with_context", _C1_DIFFERS,
        scan_layers=False, nic_per_gpu=A3_HIGH_NIC)


RUNS: tuple[PublishedRun, ...] = (
    _c1(1, 715.2 / 492, 492), _c1(2, 715.2 / 422, 422), _c1(4, 715.2 / 407, 407), _c1(8, 715.2 / 409, 409),
    _c1(16, 715.2 / 375, 375),
    PublishedRun(
        "JT-7b", "absolute", "JAX-Toolbox MaxText Llama 2 7B on one DGX H100 (8 GPUs), per-device batch 2",
        "NVIDIA/JAX-Toolbox rosetta/rosetta/projects/maxtext/README.md (commit 8ef90e8e, 2024-05-01; GPU label fixed "
        "to H100 by 5fb41195)", 0.721, "step time as printed (22.19 sequences/s)", "llama2-7b", "h100:1x8", "fsdp=8",
        16, 4096, "minimal_with_context",
        ("container ghcr.io/nvidia/jax:maxtext-2024-04-15 vs jaxlib 0.10.2", "remat_policy minimal_flash (2024)",
         "logits_dot_in_fp32: false, as the lab"), scan_layers=False),
    PublishedRun(
        "B1-7b-256", "absolute", "MaxText Llama 2 7B on 256 H100 (32 A3 Mega VMs), DP 32 x FSDP 8",
        "AI-Hypercomputer/gpu-recipes training/a3mega/llama-2-7b/maxtext-pretraining-gke/README.md (d57d222, "
        "2025-01-15) and its llama-2-7b-256gpus-a3mega-bf16.yaml", 1.500, "seconds per step as the log prints",
        "llama2-7b", "h100:32x8", "fsdp=8,data=32", 1024, 4096, "minimal_with_context",
        ("JAX 0.4.36.dev20241202 (ghcr.io/nvidia/jax:jax-2024-12-04) vs jaxlib 0.10.2",
         "A3 Mega: 8 x 200 Gb/s TCPXO per 8 GPUs (priced at 25 GB/s per GPU)", "remat_policy minimal_flash (2024)"),
        scan_layers=False, nic_per_gpu=A3_MEGA_NIC),
    PublishedRun(
        "B3-70b-256", "absolute", "MaxText Llama 3.1 70B on 256 H200 (32 A3 Ultra VMs), DP 2 x FSDP 128, S 8192",
        "AI-Hypercomputer/gpu-recipes training/a3ultra/llama3-1-70b/maxtext-pretraining-gke/README.md (a3b9cab, "
        "2024-12-03)", 15.516, "seconds per step as the log prints", "llama3.1-70b", "h200:32x8", "fsdp=128,data=2",
        512, 8192, "save_dot_except_mlp",
        ("JAX 0.4.36.dev20241202 vs jaxlib 0.10.2", "bf16 inferred (the README's MFU uses the bf16 peak)",
         "A3 Ultra RoCE, one 400 Gb/s CX-7 per GPU: as the lab's H200 fabric")),
    PublishedRun(
        "B2-mixtral-256", "absolute", "MaxText Mixtral 8x7B on 256 H200 (A3 Ultra), EP 8 x FSDP 2 x DP 16, no remat",
        "AI-Hypercomputer/gpu-recipes training/a3ultra/mixtral-8x7b/maxtext-pretraining-gke/README.md (dc6ef1a, "
        "2024-12-23), mixtral-8x7b-256gpus-a3u-bf16.yaml", 3.437, "seconds per step as the log prints",
        "mixtral-8x7b", "h200:32x8", "expert=8,fsdp=2,data=16", 1280, 4096, "all_device",
        ("JAX 0.4.36.dev20241202 vs jaxlib 0.10.2", "weight_dtype bfloat16 in the recipe (the lab: float32 weights)",
         "megablox: false, capacity_factor: 1 read as MaxText's dense path at capacity 1 (whether that MaxText took "
         "its ragged_dot path instead is not settled)", "remat custom, every projection on the device: the lab "
         "saves every name the model emits"),
        moe={"dispatch": "dense", "capacity_factor": 1.0}, scan_layers=False),
    PublishedRun(
        "C2-dsv3-256", "order", "Megatron-Bridge DeepSeek-V3 (w/o MTP) BF16 on 256 GB200, TP1 PP4 VP4 EP64",
        "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 25.11 DGX-GB200 (97ad8cc6f, 2025-12-04)",
        None, "tokens/s/GPU as printed (3,139; force-balanced routing, dropless)", "deepseek-v3-671b", "gb200:64x4",
        "fsdp=4,expert=64", 256, 4096, "full",
        ("Megatron's pipeline parallelism (PP 4, VP 4, GA 64) and its kernels vs the lab's FSDP x EP and a "
         "grouped-GEMM stand-in", "recompute settings not published: the lab runs full remat", "no MTP in either",
         "placement not published: 64 GPUs per NVL72 rack assumed (Slurm --segment=16, as NVIDIA's GB200 recipes "
         "launch), so each EP 64 group is one rack"),
        moe={"dispatch": "grouped"}, measured_tokens_per_s_per_gpu=3139.0, domain_gpus=64),
    PublishedRun(
        "C4-pipelined", "relative", "XLA's pipelined host offload on GB200, Llama 3 8B, fsdp=8, MLP offload: ~12 % "
        "faster than offload alone", "openxla/xla PR #32297 (2025-10-06), its description", None,
        "the speedup as the PR states it; batch, sequence and GPU count not given (8 GPUs inferred)", "llama3-8b",
        "gb200:2x4", "fsdp=8", 16, 8192, {"mlpwi_0": "offload", "mlpwi_1": "offload", "mlpwo": "offload"},
        ("batch and sequence guessed (2 x 8192 per GPU)", "XLA at the PR vs jaxlib 0.10.2's"),
        flags="--xla_gpu_enable_pipelined_host_offloading=true", relative_to="C4-naive", measured_ratio=1.12),
    PublishedRun(
        "C4-naive", "relative", "the same step without pipelining (C4's baseline)", "openxla/xla PR #32297", None,
        "", "llama3-8b", "gb200:2x4", "fsdp=8", 16, 8192, {"mlpwi_0": "offload", "mlpwi_1": "offload", "mlpwo": "offload"},
        ("as C4-pipelined",)),
)

# C5, a GB300 host link as measured, is the host link ``targets.HOST_LINKS["nvlink_c2c_gb300_measured"]``:
# a labelled what-if beside the lab's GB200 assumption (bench_calibration prices C4 on both).
C5_LINK = "nvlink_c2c_gb300_measured"


def run(key: str) -> PublishedRun:
    for r in RUNS:
        if r.key == key:
            return r
    raise ValueError(f"unknown published run {key!r}; choose one of: {', '.join(r.key for r in RUNS)}")


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One published run against the lab's simulation of its closest configuration."""

    run: PublishedRun
    sweep: Any = dataclasses.field(repr=False)  # bands.Sweep: the step at the frozen constants and over their spread
    compile_seconds: float
    link: str  # the host link it was priced on
    report: Any = dataclasses.field(repr=False, default=None)  # the CompileReport, to re-price on another link

    @property
    def simulated_step_seconds(self) -> float:
        return self.sweep.nominal_seconds

    @property
    def simulated_tokens_per_s_per_gpu(self) -> float | None:
        return None if self.sweep.tokens is None else self.sweep.tokens / self.sweep.nominal_seconds

    @property
    def sweep_low_seconds(self) -> float:
        return min(self.sweep.sample_seconds)

    @property
    def sweep_high_seconds(self) -> float:
        return max(self.sweep.sample_seconds)

    @property
    def measured_step_seconds(self) -> float | None:
        r = self.run
        if r.measured_step_seconds is not None:
            return r.measured_step_seconds
        if r.measured_tokens_per_s_per_gpu and self.sweep.tokens:
            return self.sweep.tokens / r.measured_tokens_per_s_per_gpu
        return None

    @property
    def error(self) -> float | None:
        """Simulated over measured step time, minus one (positive: the simulation is slower)."""
        m = self.measured_step_seconds
        return None if m is None else self.simulated_step_seconds / m - 1

    def to_dict(self) -> dict:
        r = self.run
        return {"key": r.key, "kind": r.kind, "what": r.what, "source": r.source, "derivation": r.derivation,
                "configuration": f"{r.model} on {r.target} mesh {r.mesh}, B={r.batch} S={r.seq}, policy {r.policy}"
                                 + (f", MoE {r.moe}" if r.moe else "") + ("" if r.scan_layers else ", unscanned")
                                 + (f", flags {r.flags}" if r.flags else ""),
                "differs": list(r.differs), "measured_step_seconds": self.measured_step_seconds,
                "simulated_step_seconds": self.simulated_step_seconds,
                "simulated_tokens_per_s_per_gpu": self.simulated_tokens_per_s_per_gpu,
                "measured_tokens_per_s_per_gpu": r.measured_tokens_per_s_per_gpu, "error": self.error,
                "sweep_seconds": [self.sweep_low_seconds, self.sweep_high_seconds],
                "host_link": self.link, "compile_seconds": round(self.compile_seconds, 1)}


def compare(r: PublishedRun, link: str | None = None, report=None) -> Comparison:
    """Compile the lab's closest step for ``r`` on its system and simulate it (frozen constants, and the sweep);
    ``link``: price it on another host link (a what-if such as C5's); ``report``: a step already compiled."""
    import time

    from . import bands
    from ..compiling import compiler
    from .. import models
    from ..ground import sharding
    from ..hardware import targets
    from ..compiling import train

    target = targets.target(r.target)
    t0 = time.perf_counter()
    if report is None:
        cfg = models.config(r.model, scan_layers=r.scan_layers)
        cfg = cfg.with_moe(**r.moe) if r.moe else cfg
        mesh = sharding.parse_mesh(r.mesh, target.num_devices)
        policy = ({n: "device" for n in models.checkpoint_names(cfg)} if r.policy == "all_device" else r.policy)
        report = train.compile_step(train.trainer(cfg, policy), compiler.place(target, sharding.active_axes(mesh)),
                                    r.batch, r.seq, flags=r.flags)
    seconds = time.perf_counter() - t0
    target = target.with_link(link) if link else target
    swept = bands.sweep(report, target, nic_per_gpu=r.nic_per_gpu, domain_gpus=r.domain_gpus)  # nominal included
    return Comparison(r, swept, seconds, target.link.key, report)


# C2's step split by cause, and what-ifs of the MoE receive buffer (issue #40): the buffer's size is set by
# design — MaxText's worst case (-1), MaxText at factor 2, and sized to the routed rows (factor 1: the rows a
# dropless dispatch such as Megatron's receives under force-balanced routing) — never tuned to C2's error.
C2_BUFFER_FACTORS = {"MaxText's worst case (-1)": -1.0, "MaxText at factor 2": 2.0, "sized to the routed rows (1)": 1.0}


def split(c: Comparison) -> dict[str, float]:
    """A comparison's simulated step by cause, in seconds at the frozen constants: the grouped GEMMs, the other
    matmuls and attention, the memory-bound rest of the compute (routing, the receive buffer's permutations,
    norms, the optimizer), copies, exposed collectives, exposed host transfers; they add up to the step (the compute
    classes' busy seconds scaled to the step less what is exposed: launch gaps spread over them pro rata)."""
    from . import collectives, schedule

    model = schedule.CostModel(collectives=collectives.CollectiveModel(nic_per_gpu=c.run.nic_per_gpu,
                                                                       domain_gpus=c.run.domain_gpus))
    sim = schedule.prepare(c.report, cost_model=model).run()
    busy = dict(sim.time_by_kind)
    compute = {k: v for k, v in busy.items() if not k.startswith("collective")}
    scale = (sim.step_seconds - sim.exposed_collective_seconds - sim.exposed_transfer_seconds) / sum(compute.values())
    out = {"grouped GEMMs": compute.get("grouped_matmul", 0.0) * scale,
           "matmuls and attention": (compute.get("matmul", 0.0) + compute.get("attention", 0.0)) * scale,
           "memory-bound compute": compute.get("other_compute", 0.0) * scale, "copies": compute.get("copy", 0.0) * scale,
           "exposed collectives": sim.exposed_collective_seconds, "exposed transfers": sim.exposed_transfer_seconds}
    return out
