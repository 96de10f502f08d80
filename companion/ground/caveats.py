"""Known correctness caveats that travel with exported flags: what can silently go wrong, and the check to run.

An export (a plan, ``--maxtext-yaml``, ``flags export``) whose step offloads scan residuals or turns on
``--xla_gpu_enable_pipelined_host_offloading`` carries each caveat that applies (``applying``), in one
visible list (``CAVEATS``). Sources, read in each:

* openxla/xla #46231: offloaded scan residuals read back with wrong memcpy descriptors (silently wrong
  gradients); fixed by #46308 after jaxlib 0.10.2. The lab's workaround (``flags.WORKAROUNDS``) disables
  the pass that writes them; ``companion.descriptors`` checks a compiled module for the fault. The
  workaround turns those transfers into SM kernels (``companion.workaround``: XLA's source at 5a9e73cb,
  ``docs/research/46231-workaround-transfers.md``), which the caveat says with its cost.
* openxla/xla #37979 (2026-02-20, in jaxlib 0.10.2): pipelined host offloading made opt-in after its O1
  auto-enable caused a loss convergence failure (gemma3-27b on 2 x 8 B200: loss 12.8+ against 5.7);
  #45393 (2026-07-13, after 0.10.2) turned it back on at O1.
* The A/B check (the lab's recipe): the same run with and without offload from the same seed and data
  for ``AB_STEPS`` steps, each step's loss within ``AB_RELATIVE_TOLERANCE`` of the other — offload
  changes where bytes live, not the arithmetic, so the losses agree to bf16 round-off (an assumption
  stated as the tolerance); ``python -m companion train`` runs it on a tiny CPU model, where the
  offload annotations are dropped (the CPU backend has no pinned host memory space), so there it
  demonstrates the recipe, not the fault.
"""

from __future__ import annotations

import dataclasses

AB_STEPS = 50
AB_RELATIVE_TOLERANCE = 1e-2


@dataclasses.dataclass(frozen=True)
class Caveat:
    """One known way an offloading step can be wrong, when it applies, and how to check."""

    key: str
    applies: str  # offload | pipelined | any_offload
    risk: str
    workaround: str
    check: str
    source: str

    def line(self) -> str:
        return f"{self.key}: {self.risk} Workaround: {self.workaround} Check: {self.check}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_AB_CHECK = (f"run the first {AB_STEPS} steps twice from the same seed and data, with and without offload, and "
             f"compare each step's loss (relative difference <= {AB_RELATIVE_TOLERANCE:g}); `python -m companion "
             "train --model tiny-llama --steps 3 --policy minimal_offloaded` shows the recipe on CPU (offload is "
             "dropped there)")

CAVEATS: tuple[Caveat, ...] = (
    Caveat("openxla/xla#46231", "offload",
           "jaxlib 0.10.2 (and any XLA before openxla/xla #46308) reads offloaded scan residuals back with wrong memcpy "
           "descriptors: silently wrong gradients. Exported only for such a jaxlib (flags.DESCRIPTOR_BUG).",
           "--xla_disable_hlo_passes=dynamic-slice-annotator (the lab adds it; fixed by openxla/xla #46308 in later "
           "XLA). Same memory, still async, but not free: each offloaded residual's transfer becomes a generated "
           "kernel that reads or writes host memory over the link from the SMs (zero-copy) instead of a copy-engine "
           "memcpy, so it competes with compute for SMs and runs at the SM-driven rate (lower than the copy "
           "engine's on PCIe). Never measured on a GPU: the lab prices it over a range (companion.workaround) and "
           "calls a ranking inside that range 'unknown on this link'.",
           "python -m companion compile ... reports 'offload descriptors' (companion.descriptors) and which "
           "transfers run as SM kernels; then the A/B check; on the GPU, benchmarks/gpu/harness.py --workaround-ab "
           "times the step with and without it.", "https://github.com/openxla/xla/issues/46231"),
    Caveat("openxla/xla#37979", "pipelined",
           "pipelined host offloading's auto-enable at O1 caused a loss convergence failure (gemma3-27b on 2 x 8 "
           "B200: loss 12.8+ against 5.7) and was made opt-in; jaxlib 0.10.2 runs it only when this flag asks, "
           "0.12 also at jax_optimization_level O1 and above (openxla/xla #45393).",
           "none known: leave the flag off if the A/B check fails.", _AB_CHECK,
           "https://github.com/openxla/xla/pull/37979"),
    Caveat("ab-check", "any_offload",
           "host offload changes where tensors live, not the arithmetic: a loss that drifts from the run without "
           "offload is a compiler fault.", "keep the run without offload until the check passes.", _AB_CHECK,
           "the lab's recipe (this module's docstring)"),
)


def applying(offloads_residuals: bool, pipelined: bool, descriptor_bug: bool = True) -> list[Caveat]:
    """The caveats for a step that offloads scan residuals and/or runs pipelined host offloading, on a jaxlib with
    or without openxla/xla #46231 (``descriptor_bug``: ``flags.has_descriptor_bug`` of the jaxlib exported for)."""
    wanted = {"offload": offloads_residuals and descriptor_bug, "pipelined": pipelined,
              "any_offload": offloads_residuals or pipelined}
    return [c for c in CAVEATS if wanted[c.applies]]
