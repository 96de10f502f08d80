"""The rules of thumb people use for training memory, evaluated on the lab's configs.

* **10 bytes/parameter** (jax-ml scaling-book, "How to Scale Your Model", training section):
  bf16 parameters (2 B) + two fp32 Adam moments (8 B). No gradients, no fp32 master weights.
* **16 bytes/parameter** (the mixed-precision rule, Rajbhandari et al. 2020, ZeRO): 16-bit
  parameters (2) and gradients (2), fp32 master weights (4), fp32 Adam moments (8).
* **Korthikanti et al. 2022** ("Reducing Activation Recomputation in Large Transformer
  Models"), activations per layer in bytes, 16-bit, with dropout masks, sequence s, micro-batch
  b, hidden h, heads a, tensor parallel t (with sequence parallelism):
  no recompute ``sbh(34 + 5as/h) / t``; selective recompute (attention scores recomputed)
  ``34 sbh / t``; full recompute (only the layer input kept) ``2 sbh / t``.

They count parameter state and saved activations, not the transient working set, the logits or
what XLA keeps around; ``notebooks/01_hbm_budget`` puts them next to the compiler.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..ground import policies
from ..models import configs
from ..ground.sharding import MESH_AXES, batch_ways, mesh_of

RECOMPUTE = ("none", "selective", "full")


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, recompute: str = "none") -> float:
    """Activation bytes one transformer layer keeps for its backward pass (Korthikanti et al.)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    if recompute == "full":
        return 2 * s * b * h / t
    if recompute == "selective":
        return 34 * s * b * h / t
    return s * b * h * (34 + 5 * a * s / h) / t


def recompute_row(policy: str | policies.Policy) -> str:
    """The Korthikanti row closest to a MaxText preset: nothing saved -> full; projections saved ->
    selective (attention scores are always recomputed by the lab's models)."""
    pol = policies.resolve(policy)
    return "full" if not pol.device else "selective"


@dataclasses.dataclass(frozen=True)
class PeerEstimate:
    rule: str
    state_bytes: float  # parameters (+ gradients) + optimizer state, per device
    activation_bytes: float  # saved activations per device (Korthikanti row for the policy)

    @property
    def device_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes


def estimates(model, batch: int, seq: int, policy="full", mesh: Mapping[str, int] | str | None = None,
              num_devices: int | None = None) -> list[PeerEstimate]:
    """Both parameter rules, each with the Korthikanti activations for the policy's row, per device."""
    cfg = configs.config(model)
    mesh = mesh_of(mesh, num_devices)
    _, fsdp, tensor, expert = (mesh[a] for a in MESH_AXES)
    params_per_device = cfg.param_count() / (fsdp * tensor * expert)
    b = batch / batch_ways(mesh)
    row = recompute_row(policy)
    act = cfg.num_layers * korthikanti_layer_bytes(seq, b, cfg.d_model, cfg.num_heads, tensor, row)
    return [PeerEstimate("10 B/param (scaling-book) + Korthikanti " + row, 10 * params_per_device, act),
            PeerEstimate("16 B/param (mixed precision) + Korthikanti " + row, 16 * params_per_device, act)]
