"""The stamp a benchmark stores and its check against this checkout: versions (the chip lock's for the chip's
results), environment, code, data, tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator, Mapping

from .rules import ROOT, RULE
from .source import _data_files, closure, fingerprint
from .tables import coordinates, table_entries, table_values


# ----------------------------------------------------------------------------- the stamp

def versions(named: Mapping[str, list[str]], tpus: Mapping) -> dict[str, str | None]:
    """jax and jaxlib, and libtpu where the result names a TPU (a key of ``tpus``)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {name: version(name) for name in ("jax", "jaxlib")}
    if set(named.get("accelerator", ())) & set(tpus):
        try:
            out["libtpu"] = version("libtpu")
        except PackageNotFoundError:
            out["libtpu"] = None
    return out


# Results of the lent TPU v5e (measured on it, or compiled with its libtpu and priced against those measurements):
# its stack is the chip lock, not the main one (the chip's own index serves nothing newer). Their writers refuse
# any other jaxlib/libtpu (``refuse_off_lock``), and a reader on any lock holds them to the chip lock's versions.
CHIP_LOCK = "requirements/chip-lock.txt"
CHIP_PRODUCERS = ("benchmarks/bench_measured.py", "benchmarks/bench_tpu_simulation.py",
                  "benchmarks/bench_decision_shapes.py", "benchmarks/bench_decisions.py")


def locked_versions(lock: str = CHIP_LOCK, root: Path = ROOT) -> dict[str, str]:
    """jax, jaxlib and libtpu as a lock file pins them (``name==version`` lines)."""
    pins = dict(line.split("==", 1) for line in (root / lock).read_text().split() if "==" in line)
    return {name: pins[name] for name in ("jax", "jaxlib", "libtpu")}


def versions_for(producer: str, named: Mapping[str, list[str]], tpus: Mapping, root: Path = ROOT) -> dict:
    """The versions a result of ``producer`` is held to: the chip lock's for the chip's results, else the installed."""
    return locked_versions(root=root) if str(producer) in CHIP_PRODUCERS else versions(named, tpus)


def installed_tpu_stack() -> dict[str, str | None]:
    """jax, jaxlib and libtpu as installed here (libtpu None where there is none)."""
    return versions({"accelerator": ["tpu-v5e"]}, {"tpu-v5e": None})


def on_chip_lock(root: Path = ROOT) -> bool:
    """Whether this environment is the chip lock's stack (``CHIP_LOCK``)."""
    return installed_tpu_stack() == locked_versions(root=root)


def refuse_off_lock(producer: str, root: Path = ROOT) -> None:
    """A chip result is written on the chip lock only: SystemExit naming both stacks otherwise."""
    if str(producer) not in CHIP_PRODUCERS or on_chip_lock(root):
        return
    raise SystemExit(f"{producer} writes results of the lent TPU v5e: run it on the chip lock ({CHIP_LOCK}: "
                     + ", ".join(f"{k} {v}" for k, v in locked_versions(root=root).items())
                     + "; `make chip-setup`), not on "
                     + ", ".join(f"{k} {v}" for k, v in installed_tpu_stack().items()))


# Variables of the process that move a number the lab computes, and where each is read: a benchmark runs with
# them unset; a result written with one set says so, and is not this checkout's default (``check``).
ENVIRONMENT = (
    "XLA_FLAGS",  # XLA:GPU's flags at the backend's start (compiler.backend; flags.parse validates them)
    "LIBTPU_INIT_ARGS",  # libtpu's flags (libtpu.check_environment)
    "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB",  # the pinned host pool per GPU (targets.pinned_host_pool_bytes: fits)
)


def environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``ENVIRONMENT`` variables set in ``environ`` (default: this process's)."""
    import os

    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in ENVIRONMENT if environ.get(name)}


def stamp(producer: str, result: Any = None, root: Path = ROOT, *, named: Mapping[str, list[str]] | None = None,
          installed: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict:
    """What a benchmark stores beside ``result`` (its payload) so a reader can tell whether it still holds.
    ``producer``: the script, relative to ``root``; ``named``: the coordinates (default: read off ``result``);
    ``installed``: the versions (default: this environment's); ``environ``: the process's variables (default:
    this one's)."""
    named = dict(named) if named is not None else coordinates(result, producer)
    files, tables = closure(producer, root), table_values(root)
    installed = installed or versions_for(producer, named, tables["TPUS"][1], root)
    return {"rule": RULE, "producer": str(producer), "versions": dict(installed),
            "environment": environment(environ), "code": fingerprint(producer, root),
            "data": _data_files(files, root), "coordinates": named, "tables": table_entries(files, named, tables)}


@dataclasses.dataclass(frozen=True)
class Freshness:
    """A stored stamp against this checkout's: fresh where every part is equal; ``changed`` names what is not."""

    path: str
    stored: dict
    current: dict | None  # None: the stamp is of an older rule, or absent, or cannot be checked here (``why``)
    why: str = ""

    @property
    def changed(self) -> list[str]:
        if self.current is None:
            return [self.why or ("no stamp of this rule" if self.stored else "no stamp")]
        out = [f"{name} {self.stored['versions'].get(name)} -> {now}"
               for name, now in self.current["versions"].items() if self.stored["versions"].get(name) != now]
        written = self.stored.get("environment", {})  # absent: written before the stamp kept it, with none set
        out += [f"written with {name}={value!r} (the lab's benchmarks run with it unset)"
                for name, value in sorted(written.items())]
        if self.stored["code"] != self.current["code"]:
            out.append(f"the code it ran ({self.stored['producer']} and its imports)")
        out += [f"data file {name}" for name in sorted(set(self.stored["data"]) | set(self.current["data"]))
                if self.stored["data"].get(name) != self.current["data"].get(name)]
        for table in sorted(set(self.stored["tables"]) | set(self.current["tables"])):
            before, now = self.stored["tables"].get(table, {}), self.current["tables"].get(table, {})
            keys = [k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]
            out += [f"{table}[{k}]" if k != "*" else table for k in keys]
        return out

    @property
    def fresh(self) -> bool:
        return not self.changed

    def line(self) -> str:
        if self.current is None:
            return (f"{self.path}: {self.changed[0]} — STALE: rerun the benchmark that wrote it before trusting "
                    "these numbers")
        v = self.stored["versions"]
        written = f"{self.path}: written by {self.stored['producer']} with " + ", ".join(
            f"{k} {v[k]}" for k in v) + f"; code {self.stored['code']}"
        if self.fresh:
            return f"{written}: fresh (the code, tables and versions it ran are this checkout's)"
        return f"{written} — STALE: changed since: {'; '.join(self.changed)}; rerun {self.stored['producer']}"


def check(name: str, stored: Mapping | None, root: Path = ROOT) -> Freshness:
    """``stored`` (a result's stamp) against the stamp this checkout would write for the same coordinates, in the
    environment its benchmarks run in (``ENVIRONMENT`` unset, whatever this process has: the answer is the same
    in every reader's environment but for the installed versions)."""
    stored = dict(stored or {})
    if stored.get("rule") != RULE:
        return Freshness(name, stored, None)
    if not (root / stored["producer"]).is_file():
        return Freshness(name, stored, None, f"its producer, {stored['producer']}, is not in this checkout")
    current = stamp(stored["producer"], root=root, named=stored["coordinates"], environ={})
    return Freshness(name, stored, current)
