"""Which flags each jaxlib's XLA has (``data/xla_flags.json``), the installed one's, and a flag set carried across
versions."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Mapping

from .catalog import JAX_OPTIMIZATION_LEVEL, RENAMES, Rename, format_value


def version_key(version: str) -> tuple[int, ...]:
    """``"0.12.0.1"`` -> (0, 12, 0, 1), for ordering jaxlib versions."""
    return tuple(int(p) for p in re.findall(r"\d+", str(version)))


def _installed_jaxlib() -> str:
    try:
        from importlib.metadata import version

        return version("jaxlib")
    except Exception:  # noqa: BLE001 - not installed as a distribution: ask the module
        import jaxlib

        return jaxlib.__version__


_DATA = Path(__file__).with_name("data") / "xla_flags.json"
TABLES: dict[str, dict[str, str]] = json.loads(_DATA.read_text())["jaxlibs"]  # jaxlib -> {flag name: type}
SUPPORTED_JAXLIBS: tuple[str, ...] = tuple(sorted(TABLES, key=version_key))


def table_for(jaxlib: str) -> str:
    """The flag table that speaks for ``jaxlib``: its own, else the newest one below it; an older jaxlib refused."""
    older = [v for v in SUPPORTED_JAXLIBS if version_key(v) <= version_key(jaxlib)]
    if not older:
        raise ValueError(f"jaxlib {jaxlib} is older than the lab's flag tables: choose one of "
                         f"{', '.join(SUPPORTED_JAXLIBS)} or newer")
    return older[-1]


INSTALLED_JAXLIB: str = _installed_jaxlib()
KNOWN_JAXLIB: str = table_for(INSTALLED_JAXLIB)  # the table validation uses
KNOWN: dict[str, str] = dict(TABLES[KNOWN_JAXLIB])  # every name jaxlib accepts -> bool|int|float|string|enum|message


@dataclasses.dataclass(frozen=True)
class FlagChanges:
    """What XLA's flag names did from one jaxlib's table to another's."""

    old: str
    new: str
    removed: tuple[str, ...]
    added: tuple[str, ...]
    renamed: tuple[Rename, ...]
    retyped: dict[str, tuple[str, str]]


def changes(old: str, new: str) -> FlagChanges:
    """Flags removed, added, renamed and retyped between two jaxlibs' tables (``SUPPORTED_JAXLIBS``)."""
    for v in (old, new):
        if v not in TABLES:
            raise ValueError(f"no flag table for jaxlib {v!r}; choose one of: {', '.join(SUPPORTED_JAXLIBS)}")
    a, b = TABLES[old], TABLES[new]
    renamed = tuple(r for r in RENAMES if r.old in a and r.new in b)
    moved = {r.old for r in renamed} | {r.new for r in renamed}
    return FlagChanges(old, new, tuple(sorted(set(a) - set(b) - moved)), tuple(sorted(set(b) - set(a) - moved)),
                       renamed, {n: (a[n], b[n]) for n in sorted(set(a) & set(b)) if a[n] != b[n]})


def _rename_of(name: str) -> Rename | None:
    return next((r for r in RENAMES if name in (r.old, r.new)), None)


def _respell(name: str, value: Any, known: Mapping[str, str]) -> tuple[str, Any] | None:
    """``name=value`` as a jaxlib whose table is ``known`` spells it, where XLA renamed it; None where it cannot."""
    rename = _rename_of(name)
    if rename is None:
        return None
    if name == rename.new and rename.old in known:
        return rename.old, rename.to_old(value)
    if name == rename.old and rename.new in known:
        return rename.new, rename.to_new(value)
    return None


def for_jaxlib(flags: Mapping[str, Any], jaxlib: str, *, what: str = "flags") -> tuple[dict[str, Any], list[str]]:
    """``flags`` as ``jaxlib`` takes them: a renamed flag respelled, one its XLA lacks dropped (a preset's flags,
    or an export for another jaxlib; a caller's own unknown flag is refused by ``parse`` instead); and the one-line
    note that says so (none where nothing changed)."""
    table = table_for(jaxlib)
    known = TABLES[table]
    out, respelled, dropped = {}, [], []
    for name, value in flags.items():
        if name == JAX_OPTIMIZATION_LEVEL or name in known:
            out[name] = value
        elif (spelled := _respell(name, value, known)) is not None:
            out[spelled[0]] = spelled[1]
            respelled.append(f"--{name}={format_value(value).lower()} as --{spelled[0]}={format_value(spelled[1])}")
        else:
            dropped.append(f"--{name}")
    parts = ([f"respelled {', '.join(respelled)}"] if respelled else []) + \
            ([f"dropped {', '.join(dropped)} (not in its XLA: it would abort)"] if dropped else [])
    table_note = "" if table == jaxlib else f" (checked against jaxlib {table}'s flag table, the newest below it)"
    return out, [f"{what} on jaxlib {jaxlib}{table_note}: {'; '.join(parts)}"] if parts else []
