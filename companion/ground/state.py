"""Where the training state lives and how a step consumes the batch: MaxText's three training-state keys.

``gradient_accumulation_steps`` (the batch split into microbatches, their gradients summed in an fp32
accumulator, one optimizer update), ``optimizer_memory_host_offload`` (AdamW's moments in pinned host memory,
brought to the device for the update) and ``parameter_memory_host_offload`` (the fp32 parameters in pinned host
memory, each scanned layer's weights brought over when the layer runs), as MaxText's ``base.yml`` names them.
The trainer (``companion.train``) runs them; the budget, the planner and MaxText configs read them.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class StateConfig:
    """Where the training state lives and how a step consumes the batch (MaxText's keys)."""

    gradient_accumulation_steps: int = 1
    optimizer_memory_host_offload: bool = False
    parameter_memory_host_offload: bool = False

    def __post_init__(self):
        n = self.gradient_accumulation_steps
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"gradient_accumulation_steps must be a positive integer, got {n!r}")
