"""What the planner weighs: a tensor's choice, a candidate step, its compiled check, its step time, the plan it
returns."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ...memory import budget as budget_lib
from ...timing import schedule
from ...ground import sharding
from ...hardware import targets
from ...compiling import train
from ...timing import workaround
from ...hardware import flags as xla_flags
from ...models import configs as model_configs
from ...hardware.targets import GiB, Target


STATE_CHOICES = (train.StateConfig(), train.StateConfig(optimizer_memory_host_offload=True),
                 train.StateConfig(optimizer_memory_host_offload=True, parameter_memory_host_offload=True))
PIPELINED_FLAG = xla_flags.PIPELINED_HOST_OFFLOADING
CARRY = "decoder_layer_input"  # the scan carry: on the device or offloaded, never recomputed


@dataclasses.dataclass(frozen=True)
class TensorChoice:
    """One named tensor: what saving it spares, what keeping or moving it costs, and where the plan puts it."""

    name: str
    bytes_per_layer: int  # per device, one microbatch
    layers: int
    spared_flops_per_layer: float  # recompute the plan avoids by saving it (greedy order: given those before it)
    link_seconds_per_layer: float  # one layer's write to the host at its engine's per-GPU rate, all GPUs offloading
    forward_seconds_per_layer: float  # one layer's forward matmuls at the GPU's peak: what a write can hide under
    location: str  # remat | device | offload
    reason: str

    @property
    def flops_per_byte(self) -> float:
        return self.spared_flops_per_layer / self.bytes_per_layer if self.bytes_per_layer else 0.0


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One point of the search: a per-tensor spec, the batch, pipelined offload, the state levers."""

    spec: tuple[tuple[str, str], ...]  # (name, device|offload) of the saved names, the rest remat
    batch: int  # global batch
    pipelined: bool
    state: train.StateConfig
    device_bytes: int  # the budget's
    host_bytes: int
    step_flops: float  # per device, without recompute
    recompute_flops: float
    estimated_seconds: float  # the analytic step time (see ``estimate_seconds``)
    tokens: float = 0.0  # per GPU per step (batch x seq / GPUs), set with the batch by ``_priced``

    @property
    def policy(self) -> dict[str, str]:
        return dict(self.spec)

    @property
    def offloads(self) -> bool:
        return any(where == "offload" for _, where in self.spec)

    @property
    def estimated_tflops(self) -> float:
        return self.step_flops / self.estimated_seconds / 1e12

    @property
    def estimated_tokens_per_second(self) -> float:
        """Per GPU: what the search ranks by (the same numerator for every policy)."""
        return self.tokens / self.estimated_seconds

    def label(self) -> str:
        saved = ", ".join(f"{n}:{w[:3]}" for n, w in self.spec) or "nothing saved (full remat)"
        levers = [k for k, on in (("opt-offload", self.state.optimizer_memory_host_offload),
                                  ("param-offload", self.state.parameter_memory_host_offload)) if on]
        if self.state.gradient_accumulation_steps > 1:
            levers.append(f"accum {self.state.gradient_accumulation_steps}")
        if self.offloads:
            levers.append("pipelined" if self.pipelined else "not pipelined")
        return f"B={self.batch} [{saved}]" + (f" ({', '.join(levers)})" if levers else "")

    def to_dict(self) -> dict:
        return {"policy": self.policy, "batch": self.batch, "pipelined": self.pipelined,
                "state": dataclasses.asdict(self.state), "device_bytes": self.device_bytes,
                "host_bytes": self.host_bytes, "recompute_flops": self.recompute_flops,
                "estimated_seconds": self.estimated_seconds, "estimated_tflops_per_gpu": self.estimated_tflops,
                "estimated_tokens_per_s_per_gpu": self.estimated_tokens_per_second, "label": self.label()}


@dataclasses.dataclass(frozen=True)
class Checked:
    """A finalist compiled and simulated from its schedule."""

    candidate: Candidate
    device_bytes: int  # compiled peak
    host_bytes: int  # compiled pinned host bytes
    fits: bool  # device under usable HBM and host under the pool the plan can set
    step_seconds: float  # simulated
    tflops_per_gpu: float  # simulated model TFLOP/s per GPU (recompute not counted)
    exposed_transfer_seconds: float
    exposed_collective_seconds: float
    compile_seconds: float
    descriptor_issues: int  # offloaded scan residuals read with a wrong memcpy descriptor (openxla/xla #46231)
    margin_bytes: int = 0  # usable HBM left after the compiled peak
    report: object = dataclasses.field(repr=False, default=None, compare=False)  # the CompileReport
    refused_batch: int | None = None  # the smallest batch above it compiled and found over the margin (None: untried)

    @property
    def tokens_per_second(self) -> float:
        """Simulated tokens per second per GPU: the plan's ranking key."""
        return self.candidate.tokens / self.step_seconds

    @property
    def prediction_error(self) -> float:
        """(budget - compiled) / compiled device peak."""
        return (self.candidate.device_bytes - self.device_bytes) / self.device_bytes

    def to_dict(self) -> dict:
        return {"candidate": self.candidate.to_dict(), "compiled_device_bytes": self.device_bytes,
                "compiled_host_bytes": self.host_bytes, "fits": self.fits, "step_seconds": self.step_seconds,
                "tokens_per_s_per_gpu": self.tokens_per_second, "margin_bytes": self.margin_bytes,
                "tflops_per_gpu": self.tflops_per_gpu, "exposed_transfer_seconds": self.exposed_transfer_seconds,
                "exposed_collective_seconds": self.exposed_collective_seconds,
                "compile_seconds": self.compile_seconds, "prediction_error": self.prediction_error,
                "descriptor_issues": self.descriptor_issues}


def estimate_seconds(b: budget_lib.Budget, cfg, target: Target, mesh: Mapping[str, int], seq: int) -> float:
    """An analytic step time per GPU, to rank candidates before compiling any (the simulator has the
    last word on the few that are compiled).

    * compute: the step's matmul FLOPs plus the recompute at the GPU's dense bf16 peak;
    * offloaded activations: written during the forward pass and read back during the backward pass at
      the link's per-GPU bandwidth with every GPU sharing it busy; only what outlasts the pass's compute
      is exposed. Under the #46231 workaround (jaxlib <= 0.10.2: what the lab compiles) a generated kernel
      moves them (``companion.workaround``): the link's SM-driven rate, and the compute beside it loses the
      kernel's share of the SMs for as long as both run (``schedule.CostModel.kernel_sm_share``);
    * optimizer / parameter host offload: their bytes cross the link both ways per step, exposed (an
      assumption: the update waits for them);
    * the optimizer update: 7 passes over the fp32 parameter shard (read p, g, mu, nu; write p, mu,
      nu) at HBM bandwidth;
    * FSDP: weights gathered in bf16 twice (forward, backward) and fp32 gradients reduce-scattered at
      the bandwidth of the axis's slowest group (``collectives.axis_bandwidth``: NVLink inside a domain,
      the thinner side's NICs across); exposed only beyond the compute they overlap;
    * tensor and expert parallelism: the activation all-gathers / reduce-scatters (four per layer
      forward, eight backward with remat's rerun) and the token all-to-alls (dispatch and combine, both
      passes), exposed (XLA's GPU backend runs them between the matmuls that need them).
    """
    from ...timing import collectives

    gpu, link = target.gpu, target.link
    peak = gpu.bf16_dense_flops
    forward = b.step_flops / 3 / peak
    backward = (2 * b.step_flops / 3 + b.recompute_flops) / peak
    seconds = forward + backward
    by_key = {t.key: t.bytes for t in b.terms}
    act = by_key.get("residuals_host", 0)
    if act:
        engine = "kernel" if workaround.in_effect() else "copy_engine"
        share = schedule.CostModel().kernel_sm_share(link) if engine == "kernel" else 0.0
        for direction, compute in (("d2h", forward), ("h2d", backward)):
            moving = link.transfer_seconds(act, direction, engine=engine)
            seconds += max(0.0, moving - compute) + share * min(moving, compute)
    state_host = b.host_bytes - act
    if state_host:
        seconds += link.transfer_seconds(state_host, "h2d") + link.transfer_seconds(state_host, "d2h")
    param_shard = by_key.get("parameters", 0)
    seconds += 7 * param_shard / gpu.hbm_bandwidth
    fabric = target.fabric
    fsdp, tensor, expert = mesh.get("fsdp", 1), mesh.get("tensor", 1), mesh.get("expert", 1)
    active = sharding.active_axes(mesh)
    if fsdp > 1:
        full = param_shard * fsdp / 4  # the layer's parameters (not fsdp-sharded), in parameter count
        wire = full * (2 * 2 + 4) * (fsdp - 1) / fsdp
        seconds += max(0.0, wire / collectives.axis_bandwidth(active, ["fsdp"], target) - (forward + backward))
    tokens = b.batch * seq / sharding.batch_ways(mesh)  # per batch shard, every microbatch
    if tensor > 1:
        wire = 12 * cfg.num_layers * tokens * cfg.d_model * cfg.act_bytes * (tensor - 1) / tensor
        seconds += wire / fabric.nvlink_bytes_per_s(0.8)
    if expert > 1 and cfg.moe is not None:
        wire = 6 * cfg.num_moe_layers * tokens * cfg.moe.experts_per_token * cfg.d_model * cfg.act_bytes * (expert - 1) / expert
        seconds += wire / collectives.axis_bandwidth(active, ["expert"], target)
    return seconds


@dataclasses.dataclass(frozen=True)
class Plan:
    """The planner's answer: the configuration it chose (compiled and simulated), the finalists it
    compared, why each tensor sits where it does, and the run as MaxText overrides and XLA flags."""

    model: str
    target: str
    num_devices: int
    gpus_per_host: int
    seq: int
    mesh: dict[str, int]
    mem_fraction: float
    usable_hbm_bytes: int
    host_limit_bytes: int  # pinned host memory the plan may use per GPU (pool cap, or RAM share)
    chosen: Checked
    finalists: tuple[Checked, ...]
    tensors: tuple[TensorChoice, ...]
    searched: int  # candidates the budget evaluated
    feasible: int  # ... that fit by the budget
    search_seconds: float
    total_seconds: float
    flag_set: xla_flags.FlagSet | None = dataclasses.field(repr=False, default=None)
    config: model_configs.ModelConfig | None = dataclasses.field(repr=False, default=None)  # with its attention, MoE
    margin_bytes: int = 0  # the device headroom the plan required (``PLAN_MARGIN`` of usable HBM)
    tie_break: str = ""  # why the chosen finalist, in words
    processes_per_node: int = 1  # the launcher layout the export states
    for_jaxlib: str | None = None  # the jaxlib the exported flags are spelled for (None: the installed one)
    hardware: str = "gpu"  # MaxText's ``hardware`` key: gpu, or tpu (libtpu's flags, no pool or fraction to export)

    @property
    def candidate(self) -> Candidate:
        return self.chosen.candidate

    @property
    def host_pool_gib(self) -> int:
        """``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB`` for the plan: its compiled host bytes with 10 % to spare,
        never below XLA's default pool, never above the host limit."""
        return targets.host_pool_gib(self.chosen.host_bytes, spare=0.1, limit_bytes=self.host_limit_bytes)

    @property
    def policy_name(self) -> str | None:
        """The MaxText preset the chosen spec is, on this model's names (None: only ``custom`` says it)."""
        from ... import models
        from ...ground import policies

        emitted = models.checkpoint_names(self.config or self.model)
        chosen = policies.resolve(self.candidate.policy).touched(emitted)
        return next((name for name, p in policies.PRESETS.items()
                     if name != "no_remat" and p.touched(emitted) == chosen), None)

    def overrides(self) -> dict:
        from .. import maxtext

        c = self.candidate
        return maxtext.overrides(self.config or self.model, self.policy_name or c.policy, c.batch, self.seq,
                                 self.mesh, self.num_devices, self.gpus_per_host, c.state, hardware=self.hardware)

    def pinned_pool(self) -> dict:
        """The exported pinned pool and what it assumes (module docstring; ``targets.pinned_host_pool_bytes``):
        the cap per GPU pool, the pools per node for the stated launcher layout, and the host's RAM against
        its GPUs' pinned bytes together. A TPU has no such pool to size: empty."""
        if self.hardware == "tpu":
            return {}
        per_host = self.gpus_per_host
        ram = self.host_limit_bytes * per_host if self.host_limit_bytes else 0
        return {"env": targets.HOST_POOL_ENV, "gib_per_gpu_pool": self.host_pool_gib,
                "processes_per_node": self.processes_per_node, "gpus_per_node": per_host,
                "pools_per_node": per_host + self.processes_per_node,
                "pinned_bytes_per_node": self.chosen.host_bytes * per_host, "host_limit_bytes_per_node": ram,
                "memlock_gib_per_node": (per_host + self.processes_per_node) * self.host_pool_gib,
                "reading": f"{targets.HOST_POOL_ENV}={self.host_pool_gib} caps each of the node's {per_host} GPU "
                           f"pools (offloaded activations and pinned_host arrays of that GPU) and each of its "
                           f"{self.processes_per_node} process staging pool(s) separately, not their sum "
                           "(jaxlib 0.10.2: se_gpu_pjrt_client.cc:1419-1426, 1875-1879); pools grow as used, so "
                           f"the node pins about {self.chosen.host_bytes * per_host / GiB:.0f} GiB; `ulimit -l` must "
                           f"allow every pool at its cap, {(per_host + self.processes_per_node) * self.host_pool_gib} GiB"}

    def exported(self) -> dict:
        """``XLA_FLAGS``, the environment (mem fraction, the pinned pool), the jaxlib the flags are spelled
        for and the correctness caveats that travel with them (on a TPU, ``LIBTPU_INIT_ARGS`` alone)."""
        if self.hardware == "tpu":
            from ...hardware import libtpu

            return libtpu.export(self.flag_set, offloads=self.candidate.offloads)
        return xla_flags.export(self.flag_set, mem_fraction=self.mem_fraction, host_pool_gib=self.host_pool_gib,
                                offloads=self.candidate.offloads, for_jaxlib=self.for_jaxlib)

    def environment(self) -> dict[str, str]:
        out = self.exported()
        return out["env"] if self.hardware == "tpu" else {**out["env"], "XLA_FLAGS": out["XLA_FLAGS"]}

    def yaml(self) -> str:
        from .. import maxtext

        return maxtext.to_yaml(self.overrides())

    def command_line(self) -> str:
        from .. import maxtext

        return maxtext.command_line(self.overrides(), self.environment())

    def to_dict(self) -> dict:
        return {"model": self.model, "target": self.target, "num_devices": self.num_devices, "seq": self.seq,
                "mesh": self.mesh, "mem_fraction": self.mem_fraction, "usable_hbm_bytes": self.usable_hbm_bytes,
                "host_limit_bytes": self.host_limit_bytes, "host_pool_gib": self.host_pool_gib,
                "chosen": self.chosen.to_dict(), "finalists": [f.to_dict() for f in self.finalists],
                "tensors": [dataclasses.asdict(t) | {"flops_per_byte": t.flops_per_byte} for t in self.tensors],
                "searched": self.searched, "feasible": self.feasible, "search_seconds": self.search_seconds,
                "total_seconds": self.total_seconds, "maxtext": self.overrides(), "environment": self.environment(),
                "command_line": self.command_line(), "margin_bytes": self.margin_bytes, "tie_break": self.tie_break,
                "pinned_pool": self.pinned_pool(), "jaxlib": self.exported().get("jaxlib"),
                "flag_notes": self.exported()["notes"], "caveats": self.exported()["caveats"]}

    def summary(self) -> str:
        c, k = self.candidate, self.chosen
        lines = [f"plan for {self.model} on {self.target}, S={self.seq}: {c.label()}",
                 f"  mesh {_mesh_text(self.mesh)}; searched {self.searched} candidates with the budget "
                 f"({self.feasible} fit) in {self.search_seconds:.1f} s (wall clock); compiled {len(self.finalists)} "
                 f"finalist{'s' if len(self.finalists) != 1 else ''}; in all {self.total_seconds:.1f} s (wall clock)",
                 f"  device: predicted {c.device_bytes / GiB:.2f} GiB, compiled {k.device_bytes / GiB:.2f} GiB "
                 f"({k.prediction_error:+.1%}) of {self.usable_hbm_bytes / GiB:.2f} GiB usable; host "
                 f"{k.host_bytes / GiB:.2f} GiB" + ("" if self.hardware == "tpu" else f" (pool {self.host_pool_gib} GiB)"),
                 f"  simulated step {k.step_seconds:.2f} s: {k.tokens_per_second:,.0f} tokens/s and "
                 f"{k.tflops_per_gpu:.0f} TFLOP/s per GPU (exposed transfers {k.exposed_transfer_seconds:.2f} s, "
                 f"collectives {k.exposed_collective_seconds:.2f} s); chosen: {self.tie_break}"]
        if self.pinned_pool():
            lines.append(f"  pinned pool: {self.pinned_pool()['reading']}")
        if k.descriptor_issues:
            lines.append(f"  WARNING: {k.descriptor_issues} offloaded scan residual read(s) carry a wrong memcpy "
                         "descriptor (openxla/xla #46231): on a GPU the gradients are silently wrong")
        lines.append("  finalists (simulated):")
        for f in self.finalists:
            lines.append(f"    {'*' if f is k else ' '} {f.tokens_per_second:8,.0f} tokens/s  {f.tflops_per_gpu:6.0f} "
                         f"TFLOP/s  {f.device_bytes / GiB:6.2f} GiB  {'fits' if f.fits else 'does not fit'}  "
                         f"{f.candidate.label()}")
        lines.append("  tensors (greedy order: recompute spared per byte):")
        for t in self.tensors:
            lines.append(f"    {t.name:16} {t.location:8} {t.reason}")
        for c in self.exported()["caveats"]:
            lines.append(f"  CAVEAT {c['key']}: {c['risk']} Workaround: {c['workaround']} Check: {c['check']}")
        return "\n".join(lines)


def _mesh_text(mesh: Mapping[str, int]) -> str:
    return ",".join(f"{axis}={size}" for axis, size in sharding.active_axes(mesh).items())
