"""Error bands of a simulated step: how far from a real run it may be, and whether one step beats another.

The simulator's constants (``schedule.CostModel``, ``collectives.CollectiveModel``, the host link's
bandwidth) are frozen at values from kernel measurements and the literature; each has a measured
spread (``SWEEP``, with sources). ``sweep(report)`` re-prices the same compiled step at ``SAMPLES``
points of that spread — a Latin hypercube with a fixed seed, the same points for every step of a
GPU generation — and keeps the step time at each (``Sweep``).

Two bands, each for its use:

* ``error_band_abs`` — how fast: the nominal step ± the simulator's error on published runs
  (``ABSOLUTE_ERROR``: the frozen model's worst, ``benchmarks/bench_calibration.py``), widened to the
  step's range over the sweep where that reaches further. Use it for "a step of this model on this
  system takes about ...". On the published dense Llama runs (H100/H200) the real steps were 15-28 %
  slower than simulated; the band stays symmetric because the Mixtral run simulated 2 % slow.
* ``error_band_paired`` — which is faster: two steps on the same system priced with the *same* constants
  at every sample, their ratio kept per sample (constants both steps share cancel), then widened by the
  method's own error on ratios (``PAIRED_MODEL_ERROR``: what the constants cannot move — an op priced
  at the wrong rate in one step and not the other, a schedule the replay reads differently). ``rank(a, b)``
  calls a tie when that band holds 1: then the lab cannot tell the two apart. Use it for "policy A beats
  policy B". Rankings compare tokens per second (the same numerator for every policy), which for steps
  of the same batch is step time.

How wide the method's own error on ratios is comes from measured pairs: ``conformal_band`` turns their errors
into a band with a stated coverage, and ``chance_of_misses`` says what a test of it on new pairs can show.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from . import collectives as coll
from . import schedule
from ..hardware import targets
from ..hardware.targets import GB, HostLink

SAMPLES = 12
SEED = 20261205


@dataclasses.dataclass(frozen=True)
class Spread:
    """One constant's measured range, and where it comes from."""

    low: float
    high: float
    source: str


# The constants that differ from one measurement to the next, per GPU generation where they differ.
SWEEP: dict[str, Mapping[str, Spread]] = {
    "matmul_efficiency": {
        "hopper": Spread(0.70, 0.80, "best shape 80.3 % on H100 (ml-engineering MAMF); typical layer shapes lower"),
        "blackwell": Spread(0.65, 0.75, "best shape 77.6 % B200 / 72.9 % GB200 (MAMF); cuBLAS 8192^3 72 % (pyptx)")},
    "attention_efficiency": {
        "hopper": Spread(0.45, 0.60, "cuDNN causal hdim128 S=4k: fwd 0.52, bwd 0.50; FA3 up to 0.62 (arXiv 2407.08608)"),
        "blackwell": Spread(0.45, 0.60, "as Hopper (an assumption; FA4 best shape 0.71, arXiv 2603.05451)")},
    "grouped_efficiency": {
        "hopper": Spread(0.55, 0.66, "TE grouped GEMM on H100, 8-16 experts: 0.56-0.66 (TransformerEngine PR #2045)"),
        "blackwell": Spread(0.53, 0.66, "Hopper's ratio to the dense GEMM on B200 (an assumption)")},
    "hbm_efficiency": {"any": Spread(0.80, 0.90, "streaming kernels reach 80-90 % of the datasheet bandwidth")},
    "kernel_gap_seconds": {"any": Spread(1e-6, 5e-6, "launch gaps 2.6-6.4 us measured on other GPUs (ocannl #488); "
                                                      "no H100 figure: an assumption")},
    "nvlink_efficiency": {"any": Spread(0.75, 0.85, "nccl-tests all-gather / reduce-scatter on 8 x H200: 80-81 %")},
    "network_efficiency": {"any": Spread(0.73, 0.96, "EFA 4 nodes 73 % of line rate; NDR 46-48 of 50 GB/s "
                                                      "(NVIDIA/nccl-tests #290)")},
    "nccl_sms": {"any": Spread(6, 16, "16 SMs on DGX with 8 NICs (NVIDIA/nccl #689); 6 with NVLSTree")},
    "transfer_kernel_sm_share": {"any": Spread(0.05, 1.0, "a transfer kernel (the #46231 workaround's) needs a few SMs "
                                                          "(PCIe) to ~10-25 (C2C) in flight but launches over every "
                                                          "element with no cap: from a sliver to serialized "
                                                          "(docs/research/46231-workaround-transfers.md)")},
}

# Each host link's measured spread per GPU, (d2h, h2d) in bytes/s: what the sweep gives one GPU alone
# (the link's own sharing rules then apply).
LINK_SWEEP: dict[str, tuple[Spread, Spread]] = {
    "pcie5_x16": (Spread(47 * GB, 55.2 * GB, "nvbandwidth CE: 55.1-55.4 one way, 47-51 both ways at once"),
                  Spread(47 * GB, 55.4 * GB, "same")),
    "nvlink_c2c_gh200": (Spread(170 * GB, 296 * GB, "GH200 D2H: ~170 GB/s (4 x GH200, nvbandwidth, Megatron-LM "
                                                    "#6491) to 296 (OpenCL transcript)"),
                         Spread(346 * GB, 421 * GB, "GH200 H2D: 346 (nvbandwidth #23) to 411-421 (Megatron-LM #6491)")),
    "nvlink_c2c_gb200": (Spread(193 * GB, 296 * GB, "no GB200 measurement: GB300's 193 GB/s (Megatron-LM #6491) to "
                                                    "the lab's GH200-like assumption"),
                         Spread(211 * GB, 380 * GB, "GB300's 211 GB/s to the GH200-like assumption")),
    "nvlink_c2c_gb300_measured": (Spread(170 * GB, 193.5 * GB, "GB300 D2H: 193.5 alone, ~170 four at once (#6491)"),
                                  Spread(183 * GB, 211.5 * GB, "GB300 H2D: 211.5 alone, ~183 four at once (#6491)")),
}

# The rate a transfer kernel reaches reading or writing pinned host memory (SM-driven, zero-copy), per link,
# (d2h, h2d) in bytes/s for one GPU alone: no measurement of XLA's own kernel exists; the ranges of
# docs/research/46231-workaround-transfers.md (nvbandwidth's SM copies; GB200/GB300 assumed ~ their copy engines).
KERNEL_LINK_SWEEP: dict[str, tuple[Spread, Spread]] = {
    "pcie5_x16": (Spread(40 * GB, 53 * GB, "nvbandwidth #24 H100 SM d2h 52.8 GB/s; an untuned kernel lower"),
                  Spread(20 * GB, 35 * GB, "nvbandwidth #24 H100 SM h2d 35.2 GB/s; #42: 16.5-18 of 25 on big buffers")),
    "nvlink_c2c_gh200": (Spread(150 * GB, 295 * GB, "no SM d2h figure: up to the copy engine's 170-296"),
                         Spread(250 * GB, 345 * GB, "nvbandwidth #23 GH200 SM h2d 342 GB/s")),
    "nvlink_c2c_gb200": (Spread(150 * GB, 195 * GB, "no GB200 figure: GB300's copy engines (#6491), SM ~ CE as on GH200"),
                         Spread(160 * GB, 210 * GB, "same")),
    "nvlink_c2c_gb300_measured": (Spread(150 * GB, 195 * GB, "as GB200"), Spread(160 * GB, 210 * GB, "as GB200")),
}

# The frozen simulator's worst |error| on the published step times it was held against
# (benchmarks/results/calibration.json, its "worst_abs_error", at jaxlib 0.10.2). On jaxlib 0.12.0.1 that worst is
# 0.234: this figure covers it, and stays until central, central_space and plan, which carry it, are rerun with it
# (tests/test_bands.py keeps it at or above the benchmark's worst, and within 5 points of it).
ABSOLUTE_ERROR = 0.283

# Where the absolute band does not hold: model families no published run calibrated, with the one run that
# says how far off the lab is there (benchmarks/results/calibration.json, its "error" for the key;
# frozen at jaxlib 0.10.2's calibration, +318.8 %; 0.12's is +316.9 %, re-frozen with ABSOLUTE_ERROR;
# tests/test_bands.py keeps them within 5 points). MoE: Megatron-Bridge's DeepSeek-V3 on 256 GB200 (C2) ran 4.2x
# faster than the lab simulates its nearest step; until MoE is calibrated its steps print that, not the band.
UNCALIBRATED = {"moe": ("C2-dsv3-256", 3.188)}


def uncalibrated(model: str | None) -> str | None:
    """For a model the absolute band does not cover, what to print instead (C2's error); else None."""
    from .. import models

    if model is None or models.config(model).moe is None:
        return None
    key, error = UNCALIBRATED["moe"]
    return f"uncalibrated: {key} {error:+.0%}"


# The method's error on step ratios, beyond its constants' spread: ``conformal_band`` over every pair measured
# on a TPU v5e before it was fixed (both halves of the grid, 167 pairs: the largest |simulated / measured ratio
# - 1|, 3.856 %, rounded up; coverage 167/168 for a new pair exchangeable with them), fixed in commit 82c462d and
# then tested on 55 pairs measured after it (benchmarks/results/tpu_simulation.json, its summary's "seen_band" and
# "fresh"; tests/test_bands.py keeps this equal to the band the stored comparison gives). What the coverage does
# not cover: the 167 errors are partly in-sample (the price table was mended once after both halves were seen),
# and pairs sharing a step are not independent. The first estimate, the training half's largest (3.3 %, coverage
# 36/37), held 129 of 131 held-out pairs — what such a coverage gives. The only measured ratios the lab holds:
# one chip, one backend. On a GPU it is an assumption that the method errs on ratios no more there; the one
# published GPU ratio, C4 (openxla/xla #32297, ~1.12), is its check.
PAIRED_MODEL_ERROR = 0.0386


def conformal_band(errors: list[float], coverage: float | None = None) -> tuple[float, float]:
    """The band that holds a new |error| with probability at least ``coverage`` where the new one is
    exchangeable with ``errors`` (split conformal prediction, Lei et al. 2018, "Distribution-free predictive
    inference for regression": the k-th smallest |error|, k = ceil((n + 1) x coverage)), and the coverage it
    attains, k / (n + 1). None: the largest |error|, the most ``n`` errors can promise — n / (n + 1). The promise
    needs exchangeability: errors of a model fitted on them, or of pairs that share a step, weaken it; a test on
    pairs measured afterwards (``chance_of_misses``) is what checks it."""
    ordered = sorted(abs(e) for e in errors)
    n = len(ordered)
    if not n or not all(math.isfinite(e) for e in ordered):
        raise ValueError(f"conformal_band needs finite errors: got {n} ({[e for e in ordered if not math.isfinite(e)]} not finite)")
    most = n / (n + 1)
    if coverage is not None and not 0 < coverage <= most + 1e-12:
        raise ValueError(f"coverage {coverage!r}: {n} errors promise at most {most:.4f} (valid: 0 < coverage <= n/(n+1))")
    k = n if coverage is None else min(n, max(1, math.ceil((n + 1) * coverage - 1e-9)))
    return ordered[k - 1], k / (n + 1)


def chance_of_misses(calibration: int, k: int, tested: int, misses: int) -> float:
    """The chance that at least ``misses`` of ``tested`` new errors fall outside the k-th smallest of
    ``calibration`` errors, all exchangeable: the band's own coverage is Beta(k, calibration + 1 - k), so the
    misses are beta-binomial (Vovk 2012, "Conditional validity of inductive conformal predictors"). What a test of
    a band on fresh pairs can tell: a small chance says the promise failed, a large one that the test cannot say."""
    if not 1 <= k <= calibration or tested < 0:
        raise ValueError(f"k {k!r} of {calibration!r} calibration errors, {tested!r} tested (valid: 1 <= k <= calibration)")
    a, b = calibration + 1 - k, k  # a miss's probability is Beta(a, b)

    def log_pmf(j: int) -> float:
        return (math.lgamma(tested + 1) - math.lgamma(j + 1) - math.lgamma(tested - j + 1) + math.lgamma(j + a)
                + math.lgamma(tested - j + b) - math.lgamma(tested + a + b) + math.lgamma(a + b) - math.lgamma(a)
                - math.lgamma(b))

    return min(1.0, sum(math.exp(log_pmf(j)) for j in range(max(0, misses), tested + 1)))


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One step's simulated seconds at the nominal constants and at each sweep sample."""

    nominal_seconds: float
    sample_seconds: tuple[float, ...]
    tokens: float | None  # per GPU per step (None without a workload)
    generation: str
    link: str

    def tokens_per_second(self, seconds: float) -> float:
        return (self.tokens or 1.0) / seconds

    def error_band_abs(self) -> dict:
        """How fast: the nominal step widened by the calibration error, and further where the sweep reaches."""
        low = min([self.nominal_seconds * (1 - ABSOLUTE_ERROR), *self.sample_seconds])
        high = max([self.nominal_seconds * (1 + ABSOLUTE_ERROR), *self.sample_seconds])
        return {"low_seconds": low, "high_seconds": high, "calibration_error": ABSOLUTE_ERROR,
                "sweep_seconds": [min(self.sample_seconds, default=self.nominal_seconds),
                                  max(self.sample_seconds, default=self.nominal_seconds)],
                "basis": "the nominal step +- the frozen simulator's worst error on published runs (bench_calibration), "
                         "widened to the step's range over its constants' measured spread (bands.SWEEP) where that "
                         "reaches further"}

    def error_band_paired(self) -> dict:
        """The per-sample seconds another step's sweep is compared with, sample by sample (``rank``)."""
        return {"samples": SAMPLES, "seed": SEED, "generation": self.generation, "link": self.link,
                "nominal_seconds": self.nominal_seconds, "sample_seconds": list(self.sample_seconds),
                "tokens": self.tokens}

    def to_dict(self) -> dict:
        return {"error_band_abs": self.error_band_abs(), "error_band_paired": self.error_band_paired()}

    @classmethod
    def from_paired(cls, stored: dict) -> "Sweep":
        """A sweep back from its ``error_band_paired()`` (a stored benchmark's), refused if it was drawn
        with other samples than this checkout's: paired bands compare the same draws only."""
        if (stored["samples"], stored["seed"]) != (SAMPLES, SEED):
            raise ValueError(f"stored sweep drew {stored['samples']} samples with seed {stored['seed']}, this lab "
                             f"{SAMPLES} with seed {SEED}: rerun the benchmark that stored it")
        return cls(stored["nominal_seconds"], tuple(stored["sample_seconds"]), stored["tokens"],
                   stored["generation"], stored["link"])

    def summary(self) -> str:
        band = self.error_band_abs()
        return (f"how fast: {_ms(band['low_seconds'])}-{_ms(band['high_seconds'])} ms per step (the simulator's worst "
                f"error on published runs, +-{ABSOLUTE_ERROR:.0%}, or its constants' spread, "
                f"{_ms(band['sweep_seconds'][0])}-{_ms(band['sweep_seconds'][1])} ms, whichever reaches further)")


def _ms(seconds: float) -> str:
    """Milliseconds to three significant figures (at least)."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


@dataclasses.dataclass(frozen=True)
class Ranking:
    """Two steps compared sample by sample: ``ratio`` = a's tokens/s over b's (> 1: a faster); the band
    is the sweep's range widened by the method's error on ratios (a measured ratio within ``model_error``
    of a simulated one: ``measured = simulated / (1 + error)``)."""

    a: str
    b: str
    ratio: float  # at the nominal constants
    low: float  # the smallest ratio over the sweep
    high: float
    model_error: float = PAIRED_MODEL_ERROR

    @property
    def band_low(self) -> float:
        return self.low / (1 + self.model_error)

    @property
    def band_high(self) -> float:
        return self.high / (1 - self.model_error)

    @property
    def tie(self) -> bool:
        return self.band_low <= 1 <= self.band_high

    @property
    def faster(self) -> str | None:
        return None if self.tie else (self.a if self.ratio > 1 else self.b)

    def summary(self) -> str:
        within = f"+-{self.model_error:.1%} model error"
        if self.tie:
            return (f"{self.a} vs {self.b}: a tie — {self.ratio - 1:+.1%} at the nominal constants, "
                    f"{self.band_low - 1:+.1%} to {self.band_high - 1:+.1%} over their measured spread and the "
                    f"{within}")
        slow, fast = (self.b, self.a) if self.ratio > 1 else (self.a, self.b)
        factor = self.ratio if self.ratio > 1 else 1 / self.ratio
        lo, hi = ((self.band_low, self.band_high) if self.ratio > 1 else (1 / self.band_high, 1 / self.band_low))
        return (f"{fast} is {factor:.3f}x {slow}'s tokens/s ({lo:.3f}-{hi:.3f}x over the constants' spread and the "
                f"{within})")

    def short(self) -> str:
        """For a table cell: a's tokens/s over b's with the paired band, or "tie"."""
        band = f"{self.band_low:.3f}-{self.band_high:.3f}"
        return f"tie ({band})" if self.tie else f"{self.ratio:.3f}x ({band})"

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "ratio": self.ratio, "low": self.low, "high": self.high,
                "model_error": self.model_error, "band": [self.band_low, self.band_high], "tie": self.tie,
                "faster": self.faster}


def rank(a: Sweep, b: Sweep, names: tuple[str, str] = ("a", "b"), model_error: float = PAIRED_MODEL_ERROR) -> Ranking:
    """Which step has more tokens per second, sample by sample (the same constants for both), within the
    method's ``model_error`` on ratios (0: the constants' spread alone)."""
    if (a.generation, a.link) != (b.generation, b.link) or len(a.sample_seconds) != len(b.sample_seconds):
        raise ValueError(f"paired bands compare steps swept the same way: {a.generation}/{a.link} with "
                         f"{len(a.sample_seconds)} samples against {b.generation}/{b.link} with {len(b.sample_seconds)}")
    ratios = [a.tokens_per_second(x) / b.tokens_per_second(y) for x, y in zip(a.sample_seconds, b.sample_seconds)]
    nominal = a.tokens_per_second(a.nominal_seconds) / b.tokens_per_second(b.nominal_seconds)
    return Ranking(*names, nominal, min(ratios + [nominal]), max(ratios + [nominal]), model_error)


def _points(dims: int) -> list[list[float]]:
    """``SAMPLES`` Latin-hypercube points in the unit cube (a fixed seed: the same for every step)."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    cols = [(rng.permutation(SAMPLES) + rng.random(SAMPLES)) / SAMPLES for _ in range(dims)]
    return [[float(c[i]) for c in cols] for i in range(SAMPLES)]


def _spread(name: str, generation: str) -> Spread:
    per = SWEEP[name]
    return per.get(generation) or per["any"]


def _at(spread: Spread, u: float) -> float:
    return spread.low + u * (spread.high - spread.low)


def sample_models(target: targets.Target, nic_per_gpu: float | None = None,
                  domain_gpus: int | None = None) -> list[tuple[schedule.CostModel, HostLink]]:
    """The sweep's cost models and host links for ``target`` (its generation's spreads); ``nic_per_gpu``,
    ``domain_gpus``: the system's own NIC rate and GPUs per NVLink domain (``CollectiveModel``)."""
    generation = target.gpu.architecture.name
    names = list(SWEEP)
    spreads = {n: _spread(n, generation) for n in names}
    link_spread, kernel_spread = LINK_SWEEP.get(target.link.key), KERNEL_LINK_SWEEP.get(target.link.key)
    out = []
    for point in _points(len(names) + 2):
        v = {n: _at(spreads[n], u) for n, u in zip(names, point)}
        collectives = coll.CollectiveModel(nvlink_efficiency=v["nvlink_efficiency"],
                                           network_efficiency=v["network_efficiency"],
                                           nccl_sms=int(round(v["nccl_sms"])), nic_per_gpu=nic_per_gpu,
                                           domain_gpus=domain_gpus)
        model = schedule.CostModel(matmul_efficiency=v["matmul_efficiency"],
                                   attention_efficiency=v["attention_efficiency"],
                                   grouped_efficiency=v["grouped_efficiency"],
                                   grouped_wgrad_efficiency=v["grouped_efficiency"] * 0.55 / 0.60,
                                   hbm_efficiency=v["hbm_efficiency"], kernel_gap_seconds=v["kernel_gap_seconds"],
                                   collectives=collectives, transfer_kernel_sm_share=v["transfer_kernel_sm_share"])
        link = target.link
        if link_spread is not None:  # one draw for both directions: a slow link is slow both ways
            d2h, h2d = (_at(spread, point[-2]) for spread in link_spread)
            link = dataclasses.replace(link, achievable_d2h=d2h, achievable_h2d=h2d)
        if kernel_spread is not None:
            d2h, h2d = (_at(spread, point[-1]) for spread in kernel_spread)
            link = dataclasses.replace(link, kernel_d2h=d2h, kernel_h2d=h2d)
        out.append((model, link))
    return out


def sweep(compiled, target: targets.Target | str | None = None, link: HostLink | str | None = None,
          nic_per_gpu: float | None = None, domain_gpus: int | None = None, *,
          nominal: schedule.Simulator | None = None) -> Sweep:
    """The step of a ``CompileReport`` at the nominal constants and at each sample of the sweep (``SAMPLES``
    re-pricings of the same schedule: a few seconds for a full-size step; none on a TPU, whose constants and
    paired band were measured on the chip). ``nominal``: the step already
    priced at the nominal constants (``schedule.prepare(compiled, target)``), not priced again."""
    nominal_model = schedule.CostModel(collectives=coll.CollectiveModel(nic_per_gpu=nic_per_gpu,
                                                                          domain_gpus=domain_gpus))
    if nominal is not None and nominal.cost_model != nominal_model:
        raise ValueError("sweep(nominal=...) takes a step priced at the nominal constants, "
                         f"not at {nominal.cost_model}")
    nominal = nominal or schedule.prepare(compiled, target, cost_model=nominal_model)
    target = nominal.target.with_link(link) if link is not None else nominal.target
    base = nominal.run(target.link, max_events=0)
    if target.is_tpu:  # the chip's constants are its measured ones, the paired band measured there: no spread
        return Sweep(base.step_seconds, (), base.tokens, "tpu", target.link.key)
    seconds = []
    for model, sample_link in sample_models(target, nic_per_gpu, domain_gpus):
        sim = schedule.prepare(compiled, target, cost_model=model)
        seconds.append(sim.run(sample_link, max_events=0).step_seconds)
    return Sweep(base.step_seconds, tuple(seconds), base.tokens, target.gpu.architecture.name, target.link.key)


def rank_records(a: Mapping[str, Any], b: Mapping[str, Any]) -> Ranking:
    """Rank two stored step records (``steps.record``) with the paired band of their stored sweeps."""
    return rank(Sweep.from_paired(a["sweep"]), Sweep.from_paired(b["sweep"]), (a["label"], b["label"]))


def rank_stored(records, a: str, b: str) -> Ranking:
    """Rank two stored step records (``steps.record``, e.g. from ``benchmarks/results/central.json``) by
    their labels, with the paired band of their stored sweeps."""
    swept = {r["label"]: r for r in records if "sweep" in r}
    missing = [label for label in (a, b) if label not in swept]
    if missing:
        raise ValueError(f"no stored sweep for {', '.join(map(repr, missing))} (a step that does not fit is not "
                         f"ranked); ranked steps: {', '.join(sorted(swept))}")
    return rank_records(swept[a], swept[b])
