"""Logical axes -> mesh axes: how parameters and activations are laid out over the GPUs.

Every parameter and every constrained activation carries *logical* axis names ("embed",
"heads", "activation_batch", ...). ``AxisRules`` maps each to zero or more *mesh* axes
(``data``, ``fsdp``, ``tensor``, ``expert``), the MaxText way, so one model runs data
parallel, FSDP, tensor parallel or expert parallel by changing only the mesh:

* ``data``: replicas; ``fsdp``: the batch *and* the parameters (gathered per layer);
  ``tensor``: heads and MLP columns (Megatron-style, activations between blocks replicated);
  ``expert``: MoE experts, and the batch for everything else.

A dimension that does not divide its mesh axes is an error naming both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import jax
from jax.sharding import PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor", "expert")

DEFAULT_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # parameters
    ("layers", ()),
    ("vocab", ("tensor",)),
    ("embed", ("fsdp", "expert")),
    ("norm", ()),
    ("heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("head_dim", ()),
    ("mlp", ("tensor",)),
    ("q_lora", ()),
    ("kv_lora", ()),
    ("q_lora_up", ("fsdp", "expert")),
    ("kv_lora_up", ("fsdp", "expert")),
    ("exp", ("expert",)),
    ("embed_moe", ("fsdp",)),
    ("mlp_moe", ("tensor",)),
    ("router", ()),
    # activations
    ("activation_batch", ("data", "fsdp", "expert")),
    ("activation_length", ()),
    ("activation_embed", ()),
    ("activation_heads", ("tensor",)),
    ("activation_kv_heads", ("tensor",)),
    ("activation_mlp", ("tensor",)),
    ("activation_vocab", ("tensor",)),
    ("activation_group", ("data", "fsdp")),
    ("activation_exp", ("expert",)),
)


@dataclasses.dataclass(frozen=True)
class AxisRules:
    """Logical axis -> mesh axes; a mesh axis absent from the mesh (or of size 1) is skipped."""

    rules: tuple[tuple[str, tuple[str, ...]], ...] = DEFAULT_RULES

    def mesh_axes(self, logical: str | None) -> tuple[str, ...]:
        if logical is None:
            return ()
        for name, axes in self.rules:
            if name == logical:
                return axes
        raise ValueError(f"no sharding rule for logical axis {logical!r}; known: {', '.join(n for n, _ in self.rules)}")

    def spec(self, logical_axes: Sequence[str | None], mesh_shape: Mapping[str, int],
             shape: Sequence[int] | None = None, what: str = "array") -> PartitionSpec:
        """The PartitionSpec for an array with these logical axes on a mesh of this shape.

        With ``shape``, each dimension must divide the product of its mesh axes.
        """
        used: set[str] = set()
        entries = []
        for i, logical in enumerate(logical_axes):
            axes = tuple(a for a in self.mesh_axes(logical) if mesh_shape.get(a, 1) > 1 and a not in used)
            used.update(axes)
            if shape is not None and axes:
                ways = math.prod(mesh_shape[a] for a in axes)
                if shape[i] % ways:
                    sizes = " x ".join(f"{a}={mesh_shape[a]}" for a in axes)
                    raise ValueError(f"{what}: dimension {i} ({logical}, size {shape[i]}) does not divide "
                                     f"mesh axes {sizes} ({ways} ways); change the mesh or the shape")
            entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
        while entries and entries[-1] is None:
            entries.pop()
        return PartitionSpec(*entries)

    def shard_shape(self, shape: Sequence[int], logical_axes: Sequence[str | None],
                    mesh_shape: Mapping[str, int]) -> tuple[int, ...]:
        """The per-device shape of an array laid out by these rules."""
        spec = self.spec(logical_axes, mesh_shape, shape)
        out = []
        for i, dim in enumerate(shape):
            entry = spec[i] if i < len(spec) else None
            axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
            out.append(dim // math.prod(mesh_shape[a] for a in axes))
        return tuple(out)


def current_mesh_shape() -> dict[str, int]:
    """The mesh set by ``jax.set_mesh`` (what ``compiler.compile`` does), or {} outside one."""
    mesh = jax.sharding.get_abstract_mesh()
    return {} if mesh.empty else dict(mesh.shape)


def constrain(x: jax.Array, logical_axes: Sequence[str | None], rules: AxisRules = AxisRules()) -> jax.Array:
    """``with_sharding_constraint`` by logical axes under the current mesh (no-op without one)."""
    mesh_shape = current_mesh_shape()
    if not mesh_shape or all(v == 1 for v in mesh_shape.values()):
        return x
    spec = rules.spec(logical_axes, mesh_shape, x.shape, what=f"activation {tuple(logical_axes)}")
    return jax.lax.with_sharding_constraint(x, spec)


def parse_mesh(text: str | Mapping[str, int] | None, num_devices: int) -> dict[str, int]:
    """``"fsdp=8,tensor=8"`` -> ordered mesh axes; one axis may be -1 (the rest of the devices).

    Unnamed axes get size 1; the product must equal ``num_devices``.
    """
    if text is None or text == "":
        sizes = {"fsdp": -1}
    elif isinstance(text, Mapping):
        sizes = dict(text)
        for name, value in sizes.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"bad mesh size {value!r} for axis {name!r}: an integer (or -1)")
    else:
        sizes = {}
        for part in str(text).split(","):
            name, sep, value = part.strip().partition("=")
            name = name.strip()
            if not sep:
                raise ValueError(f"bad mesh entry {part!r}: write AXIS=SIZE, e.g. fsdp=8,tensor=8")
            if name in sizes:
                raise ValueError(f"mesh axis {name!r} is given twice in {text!r}")
            try:
                sizes[name] = int(value)
            except ValueError:
                raise ValueError(f"bad mesh size {value!r} for axis {name!r}: an integer (or -1)") from None
    for name in sizes:
        if name not in MESH_AXES:
            raise ValueError(f"unknown mesh axis {name!r}; choose from {', '.join(MESH_AXES)}")
    fill = [n for n, v in sizes.items() if v == -1]
    if len(fill) > 1:
        raise ValueError(f"only one mesh axis may be -1, got {', '.join(fill)}")
    bad = [f"{n}={v}" for n, v in sizes.items() if v != -1 and v < 1]
    if bad:
        raise ValueError(f"mesh axis sizes must be positive: {', '.join(bad)}")
    known = math.prod(v for v in sizes.values() if v != -1)
    if fill:
        if num_devices % known:
            raise ValueError(f"mesh {_fmt(sizes)} cannot fill {num_devices} devices ({num_devices} % {known} != 0)")
        sizes[fill[0]] = num_devices // known
    if math.prod(sizes.values()) != num_devices:
        raise ValueError(f"mesh {_fmt(sizes)} has {math.prod(sizes.values())} devices but the target has "
                         f"{num_devices}; make the sizes multiply to {num_devices}")
    return {a: sizes.get(a, 1) for a in MESH_AXES}


def mesh_of(mesh: str | Mapping[str, int] | None, num_devices: int | None = None) -> dict[str, int]:
    """``parse_mesh`` where the device count defaults to the mapping's product (1 for text or None)."""
    if num_devices is None:
        num_devices = math.prod(mesh.values()) if isinstance(mesh, Mapping) else 1
    return parse_mesh(mesh, num_devices)


def batch_ways(mesh: Mapping[str, int]) -> int:
    """How many ways the global batch is split: the product of the mesh axes ``activation_batch``
    maps to (data x fsdp x expert); each batch shard holds ``B / batch_ways`` sequences."""
    return math.prod(mesh.get(axis, 1) for axis in dict(DEFAULT_RULES)["activation_batch"])


def active_axes(mesh: Mapping[str, int]) -> dict[str, int]:
    """The axes of a full mesh that split something (size > 1), as ``compiler.place`` takes them."""
    return {k: v for k, v in mesh.items() if v > 1} or {"fsdp": 1}


def _fmt(sizes: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())
