"""The tables a result read: each entry's value hash, the coordinates a result names, the entries at those
coordinates."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from .rules import ANY, EXTRA_COORDINATES, ROOT, TABLES
from .source import _bound_names, _homes, _relative, _split_package, _tree


# ----------------------------------------------------------------------------- the tables

def _canonical(value: Any) -> Any:
    """A JSON-able form of a table entry that two equal values share (dataclasses by field, floats by repr)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"@": type(value).__name__, **{f.name: _canonical(getattr(value, f.name))
                                               for f in dataclasses.fields(value)}}
    if isinstance(value, Mapping):
        return {"@map": sorted([_canonical(k), _canonical(v)] for k, v in value.items())}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_canonical(v) for v in value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return value


def value_hash(value: Any) -> str:
    """SHA-256 (16 hex) of ``_canonical(value)``."""
    return hashlib.sha256(json.dumps(_canonical(value), sort_keys=True, default=repr).encode()).hexdigest()[:16]


def _defining_modules(root: Path) -> dict[str, str]:
    """Each table's name -> the dotted module, of the table's home name, whose top level assigns it (one)."""
    found: dict[str, list[Path]] = {t.name: [] for t in TABLES}
    for f in sorted((root / "companion").rglob("*.py")):
        homed = {t.name for t in TABLES if t.home in _homes(f, _split_package(f, root))}
        if homed:
            for node in _tree(f.read_text(), str(f)).body:
                for name in set(_bound_names(node)) & homed:
                    found[name].append(f)
    out = {}
    for name, files in found.items():
        if len(set(files)) != 1:
            raise ValueError(f"table {name} is assigned in {len(set(files))} modules named as its home; it must "
                             "be one (TABLES)")
        parts = files[0].relative_to(root).with_suffix("").parts
        out[name] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return out


def table_values(root: Path = ROOT) -> dict[str, tuple[str, Mapping]]:
    """Each table: (the file that defines it, relative to ``root``; its current value), imported from ``root``
    (which must be the checkout this process imports ``companion`` from)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    out = {}
    for name, dotted in _defining_modules(root).items():
        module = importlib.import_module(dotted)
        where = Path(module.__file__).resolve()
        if not where.is_relative_to(root.resolve()):
            raise ValueError(f"{dotted} is imported from {where}, not from {root}: read another checkout's tables "
                             "in a process of its own")
        out[name] = (_relative(where, root), getattr(module, name))
    return out


def _coordinate_values(accelerators: set[str], tables: Mapping[str, tuple[str, Mapping]]) -> dict[str, set[str]]:
    """What follows from the accelerators a result names: their price families, host links and link kinds."""
    chips = {**tables["GPUS"][1], **tables["TPUS"][1]}
    families, links = set(), set()
    for key in accelerators:
        chip = chips.get(key)
        if chip is None:
            continue
        families.add(chip.price_family)
        link = getattr(chip, "host_link", None)
        if link is not None:
            links.add(link.key)
    kinds = {"c2c" if key.startswith("nvlink_c2c") else "pcie" for key in links}
    return {"price family": families, "host link": links, "link kind": kinds}


def coordinates(result: Any, producer: str | None = None) -> dict[str, list[str]]:
    """The models and accelerators a stored result names: every ``model`` and ``target`` string in it (a target
    ``"h100:1x8"`` names accelerator ``h100``), with the producer's ``EXTRA_COORDINATES``."""
    models, chips = set(), set()

    def walk(node):
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == "model" and isinstance(value, str):
                    models.add(value)
                elif key == "target" and isinstance(value, str):
                    chips.add(value.split(":")[0])
                elif key != "stamp":
                    walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value)

    walk(result)
    extra = EXTRA_COORDINATES.get(str(producer), {})
    models |= set(extra.get("model", ()))
    chips |= set(extra.get("accelerator", ()))
    return {"model": sorted(models), "accelerator": sorted(chips)}


def table_entries(files: list[str], named: Mapping[str, list[str]],
                  tables: Mapping[str, tuple[str, Mapping]]) -> dict[str, dict[str, str | None]]:
    """For each table defined in ``files`` (a closure): the hash of each entry at the coordinates ``named``
    (``{"*": hash}`` for the whole table where the result names no coordinate of its kind; ``None`` for a key it
    lacks). Models a result names that no table holds (a custom width) are code, not table entries."""
    values = {"model": set(named.get("model", ())), "accelerator": set(named.get("accelerator", ()))}
    values |= _coordinate_values(values["accelerator"], tables)
    out = {}
    stems = {Path(f).stem for f in files} | {Path(f).parent.name for f in files}  # a split module's parts: its name
    for table in TABLES:
        where, value = tables[table.name]
        if where not in files:
            continue
        keys = values[table.by] & set(_keys(value, table.depth)) if table.by == "model" else values[table.by]
        if not keys or stems & set(table.whole_in):
            out[table.name] = {"*": value_hash(value)}
        elif table.depth == 0:
            out[table.name] = {k: value_hash(value[k]) if k in value else None for k in sorted(keys)}
        else:
            out[table.name] = {f"{top}/{k}": value_hash(inner[k]) if k in inner else None
                               for top, inner in sorted(value.items()) for k in sorted({*keys, ANY})}
    return out


def _keys(value: Mapping, depth: int) -> list[str]:
    return list(value) if depth == 0 else [k for inner in value.values() for k in inner]
