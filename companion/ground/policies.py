"""MaxText ``remat_policy`` presets and ``custom`` specs -> ``jax.checkpoint`` policies.

A policy decides, for each tensor a layer names with ``checkpoint_name``, where the backward
pass finds it: saved on the **device**, **offload**ed to pinned host memory (and streamed
back), or **remat**erialised (recomputed from the layer input). Everything unnamed is
recomputed. The presets follow MaxText (``src/maxtext/layers/decoders.py``, Aug 2026):

=================================  =========================================================
preset                             saved on device / offloaded to the host
=================================  =========================================================
full                               nothing (only the scan carry, the layer input)
minimal                            every projection output (q/k/v, out, MLP)
minimal_with_context               minimal + the attention context
save_dot_with_context_except_mlp   q/k/v, context, out projection
save_dot_except_mlpwi              q/k/v, out projection, MLP down projection
save_dot_except_mlp                q/k/v, out projection
save_qkv_proj                      q/k/v
qkv_proj_offloaded                 offload q/k/v
minimal_offloaded                  offload every projection output
save_out_proj                      out projection
custom                             per name: remat | device | offload
=================================  =========================================================

Names are only strings: a policy naming tensors a model never emits silently saves nothing —
the "offload ignored" bug. ``resolve(..., emitted=...)`` turns that into an error.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Callable, Iterable, Mapping

import jax

LOCATIONS = ("remat", "device", "offload")

# Every per-tensor key of MaxText's `custom` policy (src/maxtext/configs/base.yml lines 361-382,
# snapshot of 2026-08-22), in its order. MaxText leaves `engram` out of the lists its `custom`
# policy saves or offloads (configs/types.py), so it only ever means recompute there.
TENSOR_NAMES = (
    "decoder_layer_input", "indexer_cutoff_threshold", "context", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo",
    "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "query_proj", "key_proj", "value_proj", "kv_proj",
    "qkv_proj", "out_proj", "query_wa_proj", "kv_wa_proj", "mla_q", "mla_kv", "attention_out", "engram",
)

_QKV = ("query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj")
_MINIMAL = (*_QKV, "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")


@dataclasses.dataclass(frozen=True)
class Policy:
    """Which named tensors stay on the device and which go to the host; the rest is recomputed."""

    name: str
    device: tuple[str, ...] = ()
    offload: tuple[str, ...] = ()
    description: str = ""
    save_all: bool = False  # no remat at all: autodiff keeps every residual it needs
    is_custom: bool = False  # built from a per-tensor spec (checked strictly against the model's names)
    remat: tuple[str, ...] = ()  # names a custom spec sets to remat explicitly (reported when not emitted)

    @property
    def offloads(self) -> bool:
        return bool(self.offload)

    def location(self, tensor: str) -> str:
        if self.save_all:
            return "device"
        return "device" if tensor in self.device else "offload" if tensor in self.offload else "remat"

    def jax_policy(self) -> Callable:
        """The ``jax.checkpoint`` policy (``policy=`` of ``jax.checkpoint`` / ``nnx.remat``);
        ``None`` for ``no_remat``: the layers are not wrapped in ``jax.checkpoint`` at all."""
        if self.save_all:
            return None
        if not self.device and not self.offload:
            return jax.checkpoint_policies.nothing_saveable
        if not self.offload:
            return jax.checkpoint_policies.save_only_these_names(*self.device)
        return jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=list(self.device), names_which_can_be_offloaded=list(self.offload),
            offload_src="device", offload_dst="pinned_host")

    def touched(self, emitted: Iterable[str]) -> dict[str, str]:
        """For each name a model emits: where this policy puts it (sorted by name)."""
        return {n: self.location(n) for n in sorted(emitted)}

    def describe(self, emitted: Iterable[str]) -> str:
        """A table of the model's names and where this policy keeps each."""
        emitted = sorted(emitted)
        ignored = sorted(set(self.device + self.offload + self.remat) - set(emitted))
        lines = [f"policy {self.name}: {self.description}".rstrip(": ")]
        for tensor, where in self.touched(emitted).items():
            if tensor == "decoder_layer_input" and where == "remat":  # what the program does, and why
                where = "device (the scan carry: always a residual, named or not)"
            lines.append(f"  {tensor:22} {where}")
        if ignored:
            lines.append(f"  not emitted by this model (no effect): {', '.join(ignored)}")
        return "\n".join(lines)

    def to_custom_spec(self) -> dict[str, str]:
        """The MaxText ``custom`` form of this policy (name -> remat|device|offload)."""
        return {n: self.location(n) for n in TENSOR_NAMES}


PRESETS: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("full", description="recompute everything but the layer input"),
        Policy("minimal", device=_MINIMAL, description="save every projection output on device"),
        Policy("minimal_with_context", device=(*_MINIMAL, "context"),
               description="save every projection output and the attention context"),
        Policy("save_dot_with_context_except_mlp", device=(*_QKV, "context", "out_proj"),
               description="save attention projections and context, recompute the MLP"),
        Policy("save_dot_except_mlpwi", device=(*_QKV, "out_proj", "mlpwo"),
               description="save attention projections and the MLP down projection"),
        Policy("save_dot_except_mlp", device=(*_QKV, "out_proj"),
               description="save attention projections, recompute the MLP"),
        Policy("save_qkv_proj", device=_QKV, description="save q/k/v only"),
        Policy("qkv_proj_offloaded", offload=("query_proj", "value_proj", "key_proj", "kv_proj"),
               description="offload q/k/v to the host"),
        Policy("minimal_offloaded", offload=_MINIMAL, description="offload every projection output to the host"),
        Policy("save_out_proj", device=("out_proj",), description="save the attention block output only"),
    )
}
PRESET_NAMES = (*PRESETS, "custom")

# Not a MaxText preset: the baseline every remat policy is measured against.
NO_REMAT = Policy("no_remat", description="no rematerialization: keep every intermediate", save_all=True)


def custom(spec: Mapping[str, str], name: str = "custom", known: Iterable[str] = TENSOR_NAMES) -> Policy:
    """A policy from ``{tensor: "remat" | "device" | "offload"}`` (MaxText's ``custom``)."""
    known = tuple(known)
    device, offload, remat = [], [], []
    for tensor, where in spec.items():
        if tensor not in known:
            close = difflib.get_close_matches(tensor, known, n=2, cutoff=0.6)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ValueError(f"unknown tensor {tensor!r} in custom policy{hint}; valid names: {', '.join(known)}")
        if where not in LOCATIONS:
            raise ValueError(f"bad location {where!r} for {tensor!r}; choose one of {', '.join(LOCATIONS)}")
        if tensor == "decoder_layer_input" and where == "remat":
            raise ValueError("decoder_layer_input cannot be 'remat': it is the scan carry every layer recomputes "
                             "from; choose 'device' or 'offload'")
        (device if where == "device" else offload if where == "offload" else remat).append(tensor)
    return Policy(name, tuple(device), tuple(offload), "custom", is_custom=True, remat=tuple(remat))


def load_custom(path: str | Path) -> Policy:
    """A custom policy from a JSON file ``{"query_proj": "offload", ...}``."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"custom policy file {str(path)!r} not found") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"custom policy file {str(path)!r} is not JSON: {err}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"custom policy file {str(path)!r} must hold an object {{name: location}}")
    return custom(spec, name=path.stem)


def resolve(policy: str | Policy | Mapping[str, str], emitted: Iterable[str] | None = None) -> Policy:
    """A preset name, a ``.json`` custom spec, a mapping, or a ``Policy`` -> ``Policy``.

    With ``emitted`` (the names a model really emits), a policy that touches names the model
    never emits is refused: a custom spec naming any such tensor, or a preset that saves or
    offloads none of the model's names.
    """
    if isinstance(policy, Policy):
        resolved = policy
    elif isinstance(policy, Mapping):
        resolved = custom(policy, known=tuple(TENSOR_NAMES) + tuple(emitted or ()))
    elif isinstance(policy, str) and policy.endswith(".json"):
        resolved = load_custom(policy)
    elif isinstance(policy, str) and policy in PRESETS:
        resolved = PRESETS[policy]
    elif policy == NO_REMAT.name:
        resolved = NO_REMAT
    elif policy == "custom":
        raise ValueError("policy 'custom' needs its per-tensor spec: pass a .json file or a mapping "
                         "{name: remat|device|offload}")
    else:
        choices = (*PRESETS, NO_REMAT.name)
        close = difflib.get_close_matches(str(policy), choices, n=2, cutoff=0.6)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise ValueError(f"unknown remat policy {policy!r}{hint}; choose one of {', '.join(choices)}, "
                         "or custom: a .json file or a mapping {name: remat|device|offload}")
    if emitted is not None:
        check(resolved, emitted)
    return resolved


def check(policy: Policy, emitted: Iterable[str]) -> None:
    emitted = set(emitted)
    named = set(policy.device) | set(policy.offload)
    if policy.save_all:
        return
    if policy.is_custom:  # every named tensor must exist
        missing = sorted(named - emitted)
        if missing:
            raise ValueError(f"custom policy {policy.name!r} names {', '.join(missing)}, which this model never "
                             f"emits, so it would silently save nothing for them; the model emits: "
                             f"{', '.join(sorted(emitted))}")
    elif named and not named & emitted:
        raise ValueError(f"preset {policy.name!r} saves/offloads {', '.join(sorted(named))} but this model emits "
                         f"none of them ({', '.join(sorted(emitted)) or 'no names'}): it would silently behave "
                         "like 'full'")


# ----------------------------------------------------------------------------- what a function emits


def emitted_names(fn: Callable, *args, **kwargs) -> frozenset[str]:
    """The ``checkpoint_name`` strings ``fn(*args)`` really emits, found by tracing it.

    ``args`` may be abstract (``jax.ShapeDtypeStruct``): nothing runs.
    """
    jaxpr = jax.make_jaxpr(fn)(*args, **kwargs)
    return frozenset(_names(jaxpr.jaxpr))


def _names(jaxpr) -> set[str]:
    found = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "name":
            found.add(eqn.params["name"])
        for value in eqn.params.values():
            for sub in _subjaxprs(value):
                found |= _names(sub)
    return found


def _subjaxprs(value):
    if hasattr(value, "jaxpr") and hasattr(value, "consts"):  # ClosedJaxpr
        yield value.jaxpr
    elif hasattr(value, "eqns"):  # Jaxpr
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _subjaxprs(v)


def saved_residuals(fn: Callable, *args) -> list[tuple[str, str]]:
    """What ``fn``'s backward pass keeps: ``(shape, why)`` per residual (why names the tensor)."""
    from jax._src.ad_checkpoint import saved_residuals as _saved  # the data print_saved_residuals prints

    return [(f"{aval.str_short()}", why) for aval, why in _saved(fn, *args)]


def saved_names(fn: Callable, *args) -> list[str]:
    """The ``checkpoint_name``s ``fn``'s backward pass keeps, in the order JAX lists its residuals
    (``saved_residuals`` entries whose reason is "named '<name>'")."""
    return [why.split("'")[1] for _, why in saved_residuals(fn, *args) if why.startswith("named")]
