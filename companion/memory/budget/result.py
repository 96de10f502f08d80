"""What the budget answers: its terms (``Term``) and the budget of one step (``Budget``), by space and kind."""

from __future__ import annotations

import dataclasses

from ...hardware import fit as fit_rule
from ...hardware.targets import DEFAULT_MEM_FRACTION, allocator_limit_bytes


GiB = 2**30
SPACES = ("device", "host")
KINDS = ("static", "persistent", "transient")


@dataclasses.dataclass(frozen=True)
class Term:
    key: str
    label: str
    bytes: int
    space: str  # device | host
    kind: str  # static | persistent | transient
    formula: str
    category: str  # parameters | optimizer | batch | gradients | activations | working | logits

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Budget:
    model: str
    batch: int
    seq: int
    policy: str
    mesh: dict[str, int]
    terms: tuple[Term, ...]
    peak_phase: str  # "layer backward" | "loss"
    recompute_flops: float  # added by remat, per device per step
    step_flops: float  # forward + backward matmul FLOPs without recompute, per device per step
    hbm_bytes: int | None = None
    other_phase: tuple[Term, ...] = ()  # the transient terms of the phases that are not the peak
    mem_fraction: float = DEFAULT_MEM_FRACTION  # JAX's allocator share of HBM
    phases: dict[str, tuple[Term, ...]] = dataclasses.field(default_factory=dict)  # every phase's transient terms
    # The peak is where XLA's latency-hiding scheduler starts buffers early until its memory limit stops it
    # (the second peeled MoE layer's zero-filled buffers, the loop tail's second layer): the budget counts
    # the bytes live there, the limit's, which leaves a margin of about 5 % (the slop factor's), and how
    # tightly XLA's heap packs them decides the allocation. Compiled (jaxlib 0.10.2): seven DeepSeek-V3 671B
    # steps at the limit (256 and 512 GB200, memory fractions 0.75 and 0.85; benchmarks/results/budget.json,
    # tests/test_budget.py) allocated from 2.3 % under to 1.1 % over usable HBM (the heap took most or all
    # of the slop), Llama 3.1 405B's loop tail (256 H100) 4.1 % under. There "fits" is the heap's call.
    at_scheduler_limit: bool = False
    uncalibrated: str = ""  # why the lab cannot stand behind this estimate ("": it can; UNCALIBRATED)
    host_limit_bytes: int | None = None  # pinned host bytes a GPU may hold (``fit.host_limit_bytes``; None: unchecked)
    runtime_usable_bytes: int | None = None  # a TPU's: the runtime's fixed limit (no allocator share to take)

    def phase_terms(self, phase: str) -> tuple[Term, ...]:
        """The transient terms of a phase: "loss", "layer backward", "backward end", "optimizer update"
        (and "loop tail" where pipelined host offloading peels the loop's last two layers, "peeled MoE
        backward" where a dropless MoE stack's backward loop has layers peeled to the top level)."""
        if phase not in self.phases:
            raise ValueError(f"unknown phase {phase!r}; choose one of: {', '.join(self.phases)}")
        return self.phases[phase]

    @property
    def device_bytes(self) -> int:
        return sum(t.bytes for t in self.terms if t.space == "device")

    @property
    def host_bytes(self) -> int:
        return sum(t.bytes for t in self.terms if t.space == "host")

    @property
    def usable_hbm_bytes(self) -> int | None:
        """What the step may allocate: JAX's allocator limit, ``mem_fraction`` x HBM, on a GPU; the runtime's fixed
        limit on a TPU (``Target.usable_hbm_bytes``)."""
        if self.runtime_usable_bytes is not None:
            return self.runtime_usable_bytes
        return None if self.hbm_bytes is None else allocator_limit_bytes(self.hbm_bytes, self.mem_fraction)

    @property
    def xla_memory_limit_bytes(self) -> int | None:
        """The limit XLA's latency-hiding scheduler plans for: (the allocator limit - the step's
        device arguments and outputs, donated ones once) x the slop factor (95 %). Above it the
        scheduler trades overlap for memory (and XLA's own remat pass, where it is not disabled as
        MaxText's GPU flags do, recomputes buffers by itself)."""
        usable = self.usable_hbm_bytes
        if usable is None:
            return None
        io = sum(t.bytes for t in self.terms if t.kind == "static" and t.space == "device")  # host args: not HBM
        return max((usable - io) * 95 // 100, 0)

    @property
    def over_scheduler_limit(self) -> bool | None:
        limit = self.xla_memory_limit_bytes
        if limit is None:
            return None
        temp = sum(t.bytes for t in self.terms if t.space == "device" and t.kind != "static")
        return temp > limit

    @property
    def fit(self):
        """The fits rule (``companion.fit``): device peak against usable HBM, pinned host bytes against the
        host RAM behind the GPU (None without a target)."""
        if self.hbm_bytes is None:
            return None
        host_limit = self.host_limit_bytes if self.host_limit_bytes is not None else max(self.host_bytes, 0)
        return fit_rule.Fit(self.device_bytes, self.usable_hbm_bytes, self.host_bytes, host_limit)

    @property
    def fits(self) -> bool | None:
        return None if self.fit is None else self.fit.fits

    @property
    def margin_bytes(self) -> int | None:
        """Usable HBM left after the peak (negative: by how much it does not fit)."""
        return None if self.hbm_bytes is None else self.usable_hbm_bytes - self.device_bytes

    def by_category(self, space: str = "device") -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.terms:
            if t.space == space:
                out[t.category] = out.get(t.category, 0) + t.bytes
        return out

    def to_dict(self) -> dict:
        return {"model": self.model, "batch": self.batch, "seq": self.seq, "policy": self.policy,
                "mesh": dict(self.mesh), "device_bytes": self.device_bytes, "host_bytes": self.host_bytes,
                "hbm_bytes": self.hbm_bytes, "mem_fraction": self.mem_fraction,
                "usable_hbm_bytes": self.usable_hbm_bytes, "fits": self.fits, "margin_bytes": self.margin_bytes,
                "host_limit_bytes": self.host_limit_bytes, "fit": self.fit.to_dict() if self.fit else None,
                "xla_memory_limit_bytes": self.xla_memory_limit_bytes, "over_scheduler_limit": self.over_scheduler_limit,
                "at_scheduler_limit": self.at_scheduler_limit, "uncalibrated": self.uncalibrated,
                "peak_phase": self.peak_phase, "recompute_flops": self.recompute_flops,
                "step_flops": self.step_flops, "terms": [t.to_dict() for t in self.terms]}

    def table(self) -> str:
        """One line per term: bytes per device, where, and the formula."""
        lines = [f"{self.model}  B={self.batch} S={self.seq}  policy {self.policy}  mesh "
                 + ",".join(f"{k}={v}" for k, v in self.mesh.items() if v > 1) + f"  (peak: {self.peak_phase})"]
        for t in self.terms:
            if t.bytes:
                lines.append(f"  {t.bytes / GiB:9.3f} GiB  {t.space:6} {t.kind:10} {t.label:38} {t.formula}")
        lines.append(f"  {self.device_bytes / GiB:9.3f} GiB  device total" + (
            f"   (usable HBM {self.usable_hbm_bytes / GiB:.1f} GiB = {self.mem_fraction:.2f} x "
            f"{self.hbm_bytes / GiB:.1f}: " + ("fits" if self.fit.fits_device else f"over by {-self.margin_bytes / GiB:.2f} GiB")
            + ("; at the scheduler's limit, where XLA's heap packing decides: compile to check)"
               if self.at_scheduler_limit else ")") if self.hbm_bytes else ""))
        lines.append(f"  {self.host_bytes / GiB:9.3f} GiB  host total" + (
            "" if self.host_limit_bytes is None else
            f"   (host limit {self.host_limit_bytes / GiB:.1f} GiB per GPU: "
            + ("fits" if self.fit.fits_host else "does not fit host RAM, over by "
               f"{(self.host_bytes - self.host_limit_bytes) / GiB:.1f} GiB") + ")"))
        if self.uncalibrated:
            lines.append(f"  not calibrated: {self.uncalibrated}")
        lines.append(f"  recompute adds {self.recompute_flops / 1e12:.2f} TFLOP per device per step "
                     f"({self.recompute_flops / self.step_flops:.1%} of the step's {self.step_flops / 1e12:.2f})")
        return "\n".join(lines)


# MaxText's scan_layers: false is another program (each layer its own remat, with CSE barriers; no loop whose
# buffers one layer reuses): the budget models the scanned stack only, the compile answers for the unscanned one
UNSCANNED = ("the budget models the scanned layer stack, an unscanned one is another program: compile it "
             "(python -m companion compile; the compile is the answer for unscanned steps), or budget it with "
             "scan_layers=true")
