"""What a published gain would require of the lab's own step: could "+57 % over remat" happen here?

The published figures (``PUBLISHED``): NVIDIA's July 2026 MaxText runs on Blackwell + Grace — pipelined host
offload +57 % over rematerialisation and +67.7 % over naive offload, at "larger batch configurations", with
165.2 GiB of HBM in use (0.896 of a GB200's 184.3 GiB). The blog ("Reducing High-Bandwidth Memory Bottlenecks
in JAX-Based LLM Training with Host Offloading") is listed in NVIDIA/JAX-Toolbox's README (snapshot 2026-07-24);
its text is not in the lab's corpora, so the figures are as issue #40 quotes them: cited, not checked.

A speed-up over a baseline step can come from only two places in the lab's model, and ``require`` measures
both on stored steps (``steps.record`` rows, e.g. ``benchmarks/results/central.json``):

* **Time removed at the same batch.** Offload can at most remove the recompute: its FLOPs at the matmul
  rate the simulator prices dense matmuls at (``schedule.MATMUL_EFFICIENCY``: an upper bound on how fast
  recompute runs, so a lower bound on what it costs is not claimed). A gain ``g`` at a fixed batch needs
  ``1 - 1/g`` of the step removable.
* **A larger batch.** The baseline's steps at successive batches fit ``step = fixed + per_batch x B`` (the
  collectives and the optimizer do not grow with the batch; the layers do). Tokens/s then rise toward
  ``S / (GPUs x per_batch)``; with the recompute removed too, ``per_batch`` falls by the recompute's share.
  The batch a gain needs follows, and so do the bytes per sequence a policy must free for it: the baseline's
  device peak fits ``peak = base + per_sequence x sequences per GPU``.
* **Over naive offload** a gain ``g`` needs at least ``1 - 1/g`` of the naive step to be exposed transfers
  (pipelining can hide them, nothing more).

The fits are two-point lines through the baseline's two largest fitting batches (an assumption: the lab's
steps are close to linear in the batch there; ``residual`` says how far a third point lies off the line).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from . import schedule
from ..hardware.targets import Target

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Published:
    """A published speed-up, as cited."""

    over_remat: float
    over_naive: float
    hbm_in_use_gib: float
    source: str


PUBLISHED = Published(1.57, 1.677, 165.2, "NVIDIA, July 2026 (MaxText on Blackwell + Grace; blog text unverified, "
                                          "as issue #40 quotes it)")


@dataclasses.dataclass(frozen=True)
class Requirement:
    """The lab's baseline step and what ``gain`` over it would take."""

    gain: float
    batch: int  # the baseline's fastest fitting global batch
    step_seconds: float
    tokens_per_second: float  # per GPU
    recompute_seconds: float  # the recompute at the dense matmul rate
    fixed_seconds: float  # the step's part that does not grow with the batch (the line's intercept)
    seconds_per_batch: float  # per sequence of the global batch
    residual: float  # the third-largest batch's step off the line, relative (0 with two points)
    base_bytes: int  # the device peak's part that does not grow with the batch
    bytes_per_sequence: float  # per sequence per GPU
    usable_bytes: int
    gpus: int
    seq: int
    worst_naive_exposed_share: float | None  # the largest exposed-transfer share of a naive offload step given

    @property
    def recompute_share(self) -> float:
        return self.recompute_seconds / self.step_seconds

    @property
    def removable_needed(self) -> float:
        """The share of the baseline step a same-batch gain must remove."""
        return 1 - 1 / self.gain

    @property
    def gain_without_recompute(self) -> float:
        """The most a policy gains at the baseline's batch: every recomputed FLOP gone, nothing added."""
        return 1 / (1 - self.recompute_share)

    @property
    def gain_at_any_batch(self) -> float:
        """Tokens/s as the batch grows without bound, recompute kept, over the baseline's."""
        return self.seq / (self.gpus * self.seconds_per_batch) / self.tokens_per_second

    def batch_needed(self) -> float | None:
        """The global batch at which a step with no recompute (and nothing exposed) reaches ``gain``: None
        where no batch does."""
        per_batch = self.seconds_per_batch - self.recompute_seconds / self.batch
        goal = self.gain * self.tokens_per_second  # per GPU
        room = self.seq / self.gpus - goal * per_batch
        return None if room <= 0 else goal * self.fixed_seconds / room

    def bytes_to_free_per_sequence(self) -> float | None:
        """What a policy must keep off the device, per sequence per GPU, to hold ``batch_needed`` where the
        baseline keeps ``bytes_per_sequence``: 0 where the baseline already fits it."""
        batch = self.batch_needed()
        if batch is None:
            return None
        sequences = batch / self.gpus
        allowed = (self.usable_bytes - self.base_bytes) / sequences
        return max(0.0, self.bytes_per_sequence - allowed)

    @property
    def exposed_needed_over_naive(self) -> float:
        return 1 - 1 / PUBLISHED.over_naive

    def link_seconds(self, target: Target) -> float | None:
        """Those bytes out and back for every sequence a GPU holds at ``batch_needed``, one way after the
        other at the link's copy-engine rates: what pipelining must hide under the step's compute."""
        free, batch = self.bytes_to_free_per_sequence(), self.batch_needed()
        if free is None or batch is None:
            return None
        moved = free * batch / self.gpus
        return target.link.transfer_seconds(moved, "d2h") + target.link.transfer_seconds(moved, "h2d")

    def rows(self, target: Target) -> list[dict[str, Any]]:
        """The requirement as a table: what the published gain needs, what the lab's step has."""
        batch, free, link = self.batch_needed(), self.bytes_to_free_per_sequence(), self.link_seconds(target)
        rows = [
            ("baseline", f"full remat at B = {self.batch}: {self.step_seconds:.2f} s, "
                         f"{self.tokens_per_second:,.0f} tokens/s per GPU", ""),
            (f"+{self.gain - 1:.0%} at the same batch", f"{self.removable_needed:.0%} of the step removed",
             f"all recompute is {self.recompute_share:.1%} ({self.recompute_seconds:.2f} s): at most "
             f"{self.gain_without_recompute:.3f}x"),
            ("the batch, recompute kept", f"tokens/s x{self.gain:.2f}",
             f"at most {self.gain_at_any_batch:.3f}x at any batch (the step grows {self.seconds_per_batch * 1e3:.2f} "
             f"ms per sequence; {self.fixed_seconds:.2f} s does not grow)"),
            ("the batch, no recompute", "a batch where the step without recompute gives the gain",
             "no batch does" if batch is None else f"B = {batch:,.0f} ({batch / self.gpus:.1f} sequences per GPU)"),
        ]
        if free is not None:
            rows.append(("device bytes at that batch", f"{free / GiB:.1f} GiB per sequence freed",
                         f"full remat keeps {self.bytes_per_sequence / GiB:.1f} GiB per sequence; "
                         f"{self.usable_bytes / GiB:.1f} GiB usable"))
            rows.append(("the link", f"{link:.2f} s out and back per step, hidden",
                         f"against a step of about {self.fixed_seconds + self.seconds_per_batch * batch:.1f} s"))
        if self.worst_naive_exposed_share is not None:
            rows.append((f"+{PUBLISHED.over_naive - 1:.1%} over naive offload",
                         f"{self.exposed_needed_over_naive:.0%} of the naive step exposed",
                         f"the lab's naive offload steps: at most {self.worst_naive_exposed_share:.1%}"))
        return [{"question": q, "the published gain needs": need, "the lab's step": has} for q, need, has in rows]


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Intercept and slope through the last two points."""
    (x0, x1), (y0, y1) = xs[-2:], ys[-2:]
    slope = (y1 - y0) / (x1 - x0)
    return y1 - slope * x1, slope


def require(remat: Sequence[Mapping[str, Any]], target: Target, *, gain: float = PUBLISHED.over_remat,
            naive: Sequence[Mapping[str, Any]] = ()) -> Requirement:
    """What ``gain`` over the fastest fitting of ``remat`` (stored full-remat steps of one system, two
    batches or more) would take on ``target``; ``naive``: stored naive offload steps, for the gain over naive."""
    fitting = sorted((r for r in remat if r["fits"]), key=lambda r: r["batch"])
    if len(fitting) < 2:
        raise ValueError(f"the batch line needs two fitting baseline steps, got {len(fitting)}: "
                         f"{', '.join(str(r['batch']) for r in remat) or 'none'}")
    best = max(fitting, key=lambda r: r["tokens_per_second"])
    batches = [r["batch"] for r in fitting]
    fixed, per_batch = _line(batches, [r["step_seconds"] for r in fitting])
    residual = 0.0
    if len(fitting) > 2:
        x, y = batches[-3], fitting[-3]["step_seconds"]
        residual = (fixed + per_batch * x) / y - 1
    gpus = target.num_devices
    base, per_sequence = _line([b / gpus for b in batches], [r["device_peak_bytes"] for r in fitting])
    rate = target.gpu.bf16_dense_flops * schedule.MATMUL_EFFICIENCY[target.gpu.price_family]
    shares = [r["exposed_transfer_seconds"] / r["step_seconds"] for r in naive]
    return Requirement(gain, best["batch"], best["step_seconds"], best["tokens_per_second"],
                       best["recompute_flops"] / rate, fixed, per_batch, residual, int(base), per_sequence,
                       best["usable_hbm_bytes"], gpus, best["seq"], max(shares) if shares else None)
