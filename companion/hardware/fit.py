"""The fits rule: one step's memory against what it may use, the same for every command.

A step fits when, per GPU,

- its device peak (the budget's, or the compiled one) is at most usable HBM (JAX's allocator limit,
  ``Target.usable_hbm_bytes``) less a required ``margin`` (none for a verdict on a given run; the
  planner asks for headroom), and
- its pinned host bytes (offloaded activations, host-offloaded optimizer state or parameters) are at
  most the host limit: ``HOST_RAM_SHARE`` of the host RAM behind the GPU (``Gpu.host_memory_per_gpu_bytes``,
  shared as the board shares it), and at most the pinned pool where one is given
  (``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB``, per GPU at jaxlib 0.10.2: ``targets.pinned_host_pool_bytes``).

``HOST_RAM_SHARE`` is an assumption: the rest of the host's RAM is left to the OS, the input pipeline
and checkpointing.
"""

from __future__ import annotations

import dataclasses

from .targets import GiB, Target

HOST_RAM_SHARE = 0.75  # of the host RAM behind a GPU that pinned buffers may take (an assumption: above)


@dataclasses.dataclass(frozen=True)
class Margin:
    """Device headroom a verdict requires: the larger of a share of usable HBM and a fixed amount."""

    fraction: float = 0.0
    bytes: int = 0

    def __post_init__(self):
        if not 0 <= self.fraction < 1 or self.bytes < 0:
            raise ValueError(f"margin {self.fraction!r} of usable HBM and {self.bytes!r} bytes: give a share in "
                             "[0, 1) and bytes >= 0")

    def of(self, usable_bytes: int) -> int:
        return max(int(self.fraction * usable_bytes), self.bytes)


NO_MARGIN = Margin()


def host_limit_bytes(target: Target, pool_bytes: int | None = None) -> int:
    """Pinned host bytes one GPU's step may hold: ``HOST_RAM_SHARE`` of the RAM behind it, and no more
    than the pinned pool when one is given."""
    ram = int(HOST_RAM_SHARE * target.gpu.host_memory_per_gpu_bytes)
    return ram if pool_bytes is None else min(ram, pool_bytes)


@dataclasses.dataclass(frozen=True)
class Fit:
    """A step's per-GPU memory against its limits (see the module docstring)."""

    device_bytes: int
    usable_hbm_bytes: int
    host_bytes: int
    host_limit_bytes: int
    margin_bytes: int = 0  # device headroom required

    @property
    def device_limit_bytes(self) -> int:
        return self.usable_hbm_bytes - self.margin_bytes

    @property
    def fits_device(self) -> bool:
        return self.device_bytes <= self.device_limit_bytes

    @property
    def fits_host(self) -> bool:
        return self.host_bytes <= self.host_limit_bytes

    @property
    def fits(self) -> bool:
        return self.fits_device and self.fits_host

    def reason(self) -> str:
        """One line: fits with what to spare, or which limit it is over and by how much."""
        def gib(n):
            return f"{n / GiB:.2f} GiB"

        if self.fits:
            return (f"fits: {gib(self.device_bytes)} of {gib(self.device_limit_bytes)} usable"
                    + (f" (after a {gib(self.margin_bytes)} margin)" if self.margin_bytes else "")
                    + (f", {gib(self.host_bytes)} of {gib(self.host_limit_bytes)} pinned host" if self.host_bytes else ""))
        over = []
        if not self.fits_device:
            over.append(f"device peak {gib(self.device_bytes)} is over {gib(self.device_limit_bytes)} usable"
                        + (f" (after a {gib(self.margin_bytes)} margin)" if self.margin_bytes else "")
                        + f" by {gib(self.device_bytes - self.device_limit_bytes)}")
        if not self.fits_host:
            over.append(f"does not fit host RAM: pinned host {gib(self.host_bytes)} per GPU is over its host limit "
                        f"{gib(self.host_limit_bytes)} (the pinned pool, or {HOST_RAM_SHARE:.0%} of the RAM behind "
                        f"the GPU) by {gib(self.host_bytes - self.host_limit_bytes)}")
        return "does not fit: " + "; ".join(over)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "fits": self.fits, "fits_device": self.fits_device,
                "fits_host": self.fits_host}


def check(device_bytes: int, host_bytes: int, target: Target, margin: Margin = NO_MARGIN,
          pool_bytes: int | None = None) -> Fit:
    """The fits rule for one step's per-GPU peak and pinned host bytes on ``target``."""
    usable = target.usable_hbm_bytes
    return Fit(int(device_bytes), usable, int(host_bytes), host_limit_bytes(target, pool_bytes), margin.of(usable))
