"""The #46231 workaround's price: what it does to a step's host transfers, and what that costs on each link.

jaxlib 0.10.2's XLA (5a9e73cb) reads offloaded scan residuals back with wrong memcpy descriptors (openxla/xla
#46231); the lab compiles every offloading step with ``--xla_disable_hlo_passes=dynamic-slice-annotator``
(``flags.WORKAROUNDS``) and tells users to do the same. What that changes, from XLA's source at that commit
(``docs/research/46231-workaround-transfers.md``, file and line there):

* without the workaround, a loop's host transfer is a ``kCustom`` dynamic-slice fusion: XLA computes the
  slice's address from the descriptor and calls ``cuMemcpyDtoDAsync`` — a copy engine moves the bytes, no SM
  is used (that the driver puts it on a copy engine is NVIDIA's behaviour, not XLA code);
* with it, the same transfer stays a ``kLoop`` fusion: a generated kernel, launched over every element of the
  slice with no block cap on one of XLA's async compute streams, whose threads read or write the pinned host
  buffer through its mapped pointer — zero-copy over PCIe or NVLink-C2C, on the SMs. It reads the slice
  index at run time, which is why #46231 cannot happen on this path. Transfers outside a loop (a peeled
  layer, unscanned layers) are such kernels with or without the workaround: only a loop's slices get
  descriptors.

Nobody has measured XLA's own transfer kernel on any link, so it is priced over a range (``RANGE``): the
SM-driven rate per link and direction (``bands.KERNEL_LINK_SWEEP``; nominal ``HostLink.kernel_d2h/h2d``)
and the share of the SMs it takes from compute beside it (``bands.SWEEP["transfer_kernel_sm_share"]``;
nominal ``schedule.TRANSFER_KERNEL_SM_SHARE``). ``price(report)`` replays the step under the copy-engine
pricing the lab used before (what the bytes cost when a copy engine moves them), at the nominal kernel
pricing and at the range's four corners; ``compare(a, b)`` says which is faster only where every corner
agrees, and "unknown on this link" where the ranking flips inside the range.
"""

from __future__ import annotations

import dataclasses
import functools

from . import bands, schedule
from ..hardware import flags as xla_flags
from ..hardware.targets import HostLink

COPY_ENGINE = "copy engine"  # the transfers priced as copy-engine DMA, with no SM time (the lab's old pricing)
NOMINAL = "kernel, nominal"
UNKNOWN = "unknown on this link"
TIE = "a tie within the model error"  # every corner agrees, by less than the paired band's model error


@functools.cache
def in_effect() -> bool:
    """The lab compiles offloading steps with the workaround on this jaxlib: their loops' transfers are kernels."""
    return bool(xla_flags.resolve(None).workarounds)


def _corners(link: HostLink) -> dict[str, tuple[HostLink, float]]:
    """The kernel pricing's corners on ``link``: (link with the kernel rate at one end, SM share)."""
    rates = bands.KERNEL_LINK_SWEEP.get(link.key)
    share = bands.SWEEP["transfer_kernel_sm_share"]["any"]
    ends = {"slow": (rates[0].low, rates[1].low), "fast": (rates[0].high, rates[1].high)} if rates else {
        "as copy engine": (link.alone("d2h"), link.alone("h2d"))}
    out = {}
    for speed, (d2h, h2d) in ends.items():
        for sms, value in (("few SMs", share.low), ("all SMs", share.high)):
            out[f"kernel, {speed}, {sms}"] = (dataclasses.replace(link, kernel_d2h=d2h, kernel_h2d=h2d), value)
    return out


def corner_names(target) -> list[str]:
    """The corners' names on ``target``'s own link (a ``Target`` or its name)."""
    from ..hardware import targets

    return list(_corners(targets.target(target).link if isinstance(target, str) else target.link))


@dataclasses.dataclass(frozen=True)
class Pricing:
    """One compiled step replayed under each pricing of its transfer kernels: seconds and tokens per GPU."""

    label: str
    link: str
    kernel_transfers: int
    copy_engine_transfers: int
    seconds: dict[str, float]  # pricing -> step seconds (COPY_ENGINE, NOMINAL, then the corners)
    tokens: float | None

    @property
    def corners(self) -> dict[str, float]:
        return {k: v for k, v in self.seconds.items() if k not in (COPY_ENGINE, NOMINAL)}

    @property
    def cost(self) -> float:
        """The nominal kernel pricing's step over the copy-engine pricing's, minus one."""
        return self.seconds[NOMINAL] / self.seconds[COPY_ENGINE] - 1

    @property
    def cost_range(self) -> tuple[float, float]:
        corners = [s / self.seconds[COPY_ENGINE] - 1 for s in self.corners.values()]
        return min(corners), max(corners)

    def to_dict(self) -> dict:
        return {"label": self.label, "link": self.link, "kernel_transfers": self.kernel_transfers,
                "copy_engine_transfers": self.copy_engine_transfers, "seconds": dict(self.seconds),
                "tokens": self.tokens, "cost": self.cost, "cost_range": list(self.cost_range)}

    @classmethod
    def from_dict(cls, stored: dict) -> "Pricing":
        """A stored pricing back (``steps.record`` keeps one per step)."""
        return cls(stored["label"], stored["link"], stored["kernel_transfers"], stored["copy_engine_transfers"],
                   dict(stored["seconds"]), stored["tokens"])


def price(report, label: str = "", target=None, link: HostLink | str | None = None) -> Pricing:
    """``report`` replayed with its transfer kernels priced as copy engines (no SM time), at the nominal kernel
    pricing, and at the range's corners (a step without transfer kernels takes the same time under each)."""
    nominal = schedule.prepare(report, target)
    run_on = nominal.target.with_link(link) if link is not None else nominal.target
    result = nominal.run(run_on.link, max_events=0)
    corners = _corners(run_on.link)
    if not report.offload.kernel_transfers:
        seconds = dict.fromkeys([COPY_ENGINE, NOMINAL, *corners], result.step_seconds)
    else:
        def at(link_: HostLink, share: float) -> float:  # the same program, the kernels priced otherwise
            model = dataclasses.replace(nominal.cost_model, transfer_kernel_sm_share=share)
            return dataclasses.replace(nominal, cost_model=model).run(link_, max_events=0).step_seconds

        plain = dataclasses.replace(run_on.link, kernel_d2h=run_on.link.alone("d2h"), kernel_h2d=run_on.link.alone("h2d"))
        seconds = {COPY_ENGINE: at(plain, 0.0), NOMINAL: result.step_seconds}
        seconds.update({name: at(corner_link, share) for name, (corner_link, share) in corners.items()})
    return Pricing(label, run_on.link.key, report.offload.kernel_transfers,
                   sum(t.engine == "copy_engine" for t in report.offload.transfers), seconds, result.tokens)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two steps' tokens/s ratio (a over b) under each pricing, and what can be said of it."""

    a: str
    b: str
    ratios: dict[str, float]  # pricing -> a's tokens/s over b's

    @property
    def corner_range(self) -> tuple[float, float]:
        corners = [v for k, v in self.ratios.items() if k not in (COPY_ENGINE, NOMINAL)]
        return min(corners), max(corners)

    @property
    def verdict(self) -> str:
        """``a`` or ``b`` where every corner of the kernel range agrees by more than the method's error on
        ratios (``bands.PAIRED_MODEL_ERROR``); ``TIE`` where they agree by less; ``UNKNOWN`` where they disagree."""
        low, high = self.corner_range
        if not (low > 1 or high < 1):
            return UNKNOWN
        widened = bands.Ranking(self.a, self.b, self.ratios[NOMINAL], low, high)  # the paired band's widening
        return self.a if widened.band_low > 1 else self.b if widened.band_high < 1 else TIE

    def summary(self) -> str:
        low, high = self.corner_range
        old = self.ratios[COPY_ENGINE]
        head = (f"{self.a} vs {self.b}: {self.ratios[NOMINAL]:.3f}x at the nominal kernel pricing, "
                f"{low:.3f}-{high:.3f}x over the kernel range (priced as copy engines: {old:.3f}x)")
        return f"{head}: {self.verdict if self.verdict in (UNKNOWN, TIE) else self.verdict + ' is faster'}"

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "ratios": dict(self.ratios), "corner_range": list(self.corner_range),
                "verdict": self.verdict}


def compare(a: Pricing, b: Pricing) -> Comparison:
    """``a``'s tokens/s over ``b``'s under each pricing (the same link)."""
    if a.link != b.link:
        raise ValueError(f"compare steps priced on one link: {a.link} against {b.link}")
    per_token = (a.tokens or 1.0) / (b.tokens or 1.0)
    return Comparison(a.label, b.label, {k: per_token * b.seconds[k] / a.seconds[k] for k in a.seconds})
