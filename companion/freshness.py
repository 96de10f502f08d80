"""When a stored result still holds: its stamp keys what decides its numbers, and nothing else.

A number a benchmark stores is a function of four things. ``stamp`` keys each, and ``check`` compares a
stored stamp with this checkout's:

1. **The compiler stack** (``versions``): jax and jaxlib; libtpu where the result compiled for a TPU. And the
   process's variables that move a number (``ENVIRONMENT``: ``XLA_FLAGS``, ...), which a benchmark runs without.
2. **The code that ran** (``code``): the benchmark script and every companion module it can reach through its
   imports — the static import closure (``closure``): Python runs only code it imported, so no code outside it
   can move a number. Each file is read as its syntax tree, and ``fingerprint`` keys the sorted top-level
   statements of them all. What cannot move a number does not change the key: docstrings, comments and layout;
   which file holds a statement (a module moved, or split, keeps every statement); the path of an import of a
   companion name (it binds the same definition: ``ambiguous_imports`` keeps every such name defined once in the
   package); a deprecation shim (``_is_shim``: imports and a warning, keyed where what it re-exports is
   defined). Any other change — an expression, a constant, a default, a field, a decorator, a third-party
   import — changes the key. The lowered and compiled programs are functions of (1), (2) and (4): the models,
   the trainer and the compiler sit in the closure, so the stamp keys them through what makes them; the CI
   re-derivation (``benchmarks/rederive.py``) compiles sampled rows again, checks every field they give, and
   names each program it compiled by ``program_hash`` (its text without where Python traced it). No row stores
   those hashes yet: two of the CI sample's eight programs hashed differently in a clean clone than in the working
   checkout, with every field they gave equal, so the hash does not yet name a program across checkouts.
3. **Data files** the closure names (``companion/data/*``), by content (``_data_files``).
4. **The price tables and configs it read** (``TABLES``): left out of the code key, and kept per entry at
   the result's coordinates (``coordinates``: the models and accelerators its rows name, and what follows from an
   accelerator — its price family, host link and link kind). Changing one entry stales the results at that
   coordinate, and only those; a result that names no coordinate of a table's kind depends on the whole table.
   That rows read tables only at their coordinates is checked where it can be: the CI re-derivation records
   every table read while it recomputes rows (``recording``) and fails on a read the stamp does not hold.

Provenance code — what writes and stamps results but computes none of their numbers (``PROVENANCE``) — is left
out of the code key, so that improving it stales nothing. This module imports nothing of the package: it reads
the package's files, and imports a module only to read a table's current value.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
RULE = 2  # of the stamp: 1 hashed every byte of companion/ (``source_hash``); 2 is this module's

# Files that write and stamp results but compute none of their numbers: outside every fingerprint.
PROVENANCE = ("companion/results.py", "companion/freshness.py", "benchmarks/_common.py")


@dataclasses.dataclass(frozen=True)
class Table:
    """A price table or config catalog: the module-level name that holds it in its home module (the module's own
    name, wherever in the package it sits), the coordinate its keys are (``by``), at the top level (``depth`` 0)
    or under each top-level entry (1), and the modules whose code reads every entry (``whole_in``: a result
    whose code reaches one depends on the whole table)."""

    name: str
    home: str
    by: str
    depth: int = 0
    whole_in: tuple[str, ...] = ()


COORDINATES = ("model", "accelerator", "price family", "host link", "link kind")
TABLES: tuple[Table, ...] = (
    Table("CONFIGS", "configs", "model"),
    # the budget asks the oldest GPU's compute capability whether cuDNN attention can run (budget.attention_kernel)
    Table("GPUS", "targets", "accelerator", whole_in=("budget",)),
    Table("TPUS", "targets", "accelerator"),
    Table("HOST_LINKS", "targets", "host link"),
    Table("FABRICS", "collectives", "accelerator"),
    Table("MATMUL_EFFICIENCY", "schedule", "price family"),
    Table("HBM_EFFICIENCY", "schedule", "price family"),
    Table("KERNEL_GAP_SECONDS", "schedule", "price family"),
    Table("GROUPED_GEMM_EFFICIENCY", "schedule", "price family"),
    Table("TRANSFER_KERNEL_SM_SHARE", "schedule", "link kind"),
    Table("SWEEP", "bands", "price family", depth=1),
    Table("LINK_SWEEP", "bands", "host link"),
    Table("KERNEL_LINK_SWEEP", "bands", "host link"),
)
ANY = "any"  # a depth-1 table's entry that holds for every coordinate (``bands.SWEEP``)

# Coordinates a producer's rows do not name but its code reads, with the reason (checked by the re-derivation).
EXTRA_COORDINATES: dict[str, dict[str, tuple[str, ...]]] = {
    # the chip grid's model is Llama 3 8B's layer at 1B-class width (``measured.grid_model``), on one v5e
    "benchmarks/bench_measured.py": {"model": ("llama3-8b",), "accelerator": ("tpu-v5e",)},
    "benchmarks/bench_tpu_simulation.py": {"model": ("llama3-8b",), "accelerator": ("tpu-v5e",)},
}


# ----------------------------------------------------------------------------- the code

def _relative(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


def _module_file(dotted: str, root: Path) -> Path | None:
    """``companion.a.b`` -> its file under ``root`` (a module, or a package's ``__init__``), or None."""
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path, root: Path) -> str | None:
    """The dotted package a file of the package sits in (``companion.models``), else None (a script)."""
    parts = path.resolve().relative_to(root.resolve()).parts
    return ".".join(parts[:-1]) if parts[0] == "companion" else None


@functools.lru_cache(maxsize=1024)
def _tree(text: str, name: str) -> ast.Module:
    """A file's syntax tree, parsed once per content (its callers only read it)."""
    return ast.parse(text, name)


@functools.lru_cache(maxsize=1024)
def _imported_names(text: str, name: str, package: str | None) -> frozenset[str]:
    """The dotted names a file's imports name anywhere in it (relative ones resolved in ``package``)."""
    found: set[str] = set()
    for node in ast.walk(_tree(text, name)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None:
                    continue
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names if alias.name != "*"}
    return frozenset(found)


def _imported_files(path: Path, root: Path) -> set[Path]:
    """The package's files (and sibling benchmark scripts) that ``path`` imports anywhere, with the
    ``__init__`` of every package on the way (importing ``companion.a.b`` runs ``companion/__init__.py``)."""
    files = set()
    for dotted in _imported_names(path.read_text(), str(path), _package_of(path, root)):
        if dotted.split(".")[0] == "companion":
            parts = dotted.split(".")
            files |= {f for i in range(1, len(parts) + 1) if (f := _module_file(".".join(parts[:i]), root))}
        elif "." not in dotted and path.parent.name == "benchmarks" and (path.parent / f"{dotted}.py").is_file():
            files.add(path.parent / f"{dotted}.py")
    return files


def closure(producer: str | Path, root: Path = ROOT) -> list[str]:
    """The files whose code can run when ``producer`` (a benchmark script, relative to ``root``) runs: the script
    and every file it reaches through imports, less ``PROVENANCE``; sorted, relative to ``root``."""
    start = (root / producer).resolve()
    seen, todo = {start}, [start]
    while todo:
        for f in _imported_files(todo.pop(), root):
            if f.resolve() not in seen and _relative(f, root) not in PROVENANCE:  # provenance: not followed either
                seen.add(f.resolve())
                todo.append(f.resolve())
    return sorted(_relative(f, root) for f in seen)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


def _is_shim_warning(node: ast.stmt) -> bool:
    """``warnings.warn(..., DeprecationWarning, ...)`` at a module's top: what a moved module's shim says."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    call = node.value
    named = ast.unparse(call.func) in ("warnings.warn", "warn")
    return named and any(isinstance(a, ast.Name) and a.id == "DeprecationWarning"
                         for a in [*call.args, *(k.value for k in call.keywords)])


class _Normalize(ast.NodeTransformer):
    """Docstrings out; an import of a companion name keyed by the names it binds, not the path it comes by —
    but for a name the package binds in more than one file (``ambiguous``): that import keeps its module's own
    name (``companion.a.targets`` -> ``targets``), which a move does not change."""

    def __init__(self, in_package: bool, ambiguous: frozenset[str]):
        self.in_package, self.ambiguous = in_package, ambiguous

    def _body(self, node):
        self.generic_visit(node)
        node.body = _without_docstring(node.body) or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _body

    def visit_ImportFrom(self, node: ast.ImportFrom):
        ours = node.level > 0 if self.in_package else False
        if ours or (node.module or "").split(".")[0] == "companion":  # one statement per name it binds
            which = "." + (node.module or "").split(".")[-1]
            return [ast.ImportFrom(module="<companion>" + (which if a.name in self.ambiguous else ""), names=[a],
                                   level=0) for a in node.names]
        return node

    def visit_Import(self, node: ast.Import):
        return [ast.Import(names=[ast.alias(name=a.name.split(".")[-1] if a.name.startswith("companion") else a.name,
                                            asname=a.asname)]) for a in node.names]


def _is_shim(body: list[ast.stmt]) -> bool:
    """A moved module's shim: nothing but imports and a deprecation warning."""
    return any(map(_is_shim_warning, body)) and all(
        isinstance(n, (ast.Import, ast.ImportFrom)) or _is_shim_warning(n) for n in body)


def statements(path: Path, root: Path = ROOT, ambiguous: frozenset[str] | None = None) -> list[str]:
    """One file's top-level statements as ``fingerprint`` keys them (a table's value replaced by its name; a shim
    has none: what it re-exports is keyed where it is defined)."""
    if ambiguous is None:
        ambiguous = frozenset(ambiguous_imports(root))
    return list(_statements(path.read_text(), str(path), path.stem, _package_of(path, root) is not None, ambiguous))


@functools.lru_cache(maxsize=1024)
def _statements(text: str, name: str, stem: str, in_package: bool, ambiguous: frozenset[str]) -> tuple[str, ...]:
    tree = ast.parse(text, name)  # a tree of its own: the normalization rewrites it
    if _is_shim(_without_docstring(tree.body)):
        return ()
    normalize = _Normalize(in_package, ambiguous)
    tables = {t.name for t in TABLES if t.home == stem}
    out = []
    for node in _without_docstring(tree.body):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and target.id in tables:
            out.append(f"table {target.id}")
            continue
        visited = normalize.visit(node)
        out += [ast.dump(n, annotate_fields=False, include_attributes=False)
                for n in (visited if isinstance(visited, list) else [visited])]
    return tuple(out)


def _data_files(files: list[str], root: Path) -> dict[str, str]:
    """Files of ``companion/data`` named by a string in ``files``, each with the SHA-256 (16 hex) of its bytes."""
    data = root / "companion" / "data"
    names = {p.name: p for p in data.iterdir() if p.is_file()} if data.is_dir() else {}
    found = {}
    for f in files:
        for string in _strings((root / f).read_text(), f) & set(names):
            found[string] = hashlib.sha256(names[string].read_bytes()).hexdigest()[:16]
    return dict(sorted(found.items()))


@functools.lru_cache(maxsize=1024)
def _strings(text: str, name: str) -> frozenset[str]:
    """Every string constant in a file."""
    return frozenset(n.value for n in ast.walk(_tree(text, name)) if isinstance(n, ast.Constant)
                     and isinstance(n.value, str))


def fingerprint(producer: str | Path, root: Path = ROOT) -> str:
    """SHA-256 (16 hex) of the sorted top-level statements of ``closure(producer)``: the code a result ran."""
    ambiguous = frozenset(ambiguous_imports(root))
    keyed = sorted(s for f in closure(producer, root) for s in statements(root / f, root, ambiguous))
    digest = hashlib.sha256()
    for s in keyed:
        digest.update(s.encode() + b"\0")
    return digest.hexdigest()[:16]


def ambiguous_imports(root: Path = ROOT) -> list[str]:
    """Names the package imports from its own modules that more than one of its files binds at top level with
    different statements: an import keyed by name alone would not say which one it binds."""
    files = tuple((str(p), p.read_text()) for p in sorted((root / "companion").rglob("*.py")))
    return list(_ambiguous(files))


@functools.lru_cache(maxsize=8)
def _ambiguous(files: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    bound: dict[str, set[str]] = {}
    imported: set[str] = set()
    for name, text in files:
        tree = _tree(text, name)
        for node in tree.body:
            for name in _bound_names(node):
                bound.setdefault(name, set()).add(ast.dump(node, include_attributes=False))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("companion")):
                imported |= {a.name for a in node.names}
    return tuple(sorted(n for n in imported if len(bound.get(n, ())) > 1))


def duplicate_bindings(root: Path = ROOT) -> list[str]:
    """``file: name`` for each name a file binds twice at its top level by definition or assignment (sorted
    statements would not keep which one wins)."""
    out = []
    for path in sorted((root / "companion").rglob("*.py")):
        names: list[str] = []
        for node in _tree(path.read_text(), str(path)).body:
            if not isinstance(node, (ast.Import, ast.ImportFrom, ast.If, ast.Try)):
                names += _bound_names(node)
        out += [f"{_relative(path, root)}: {n}" for n in sorted({n for n in names if names.count(n) > 1})]
    return out


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return [node.target.id]
    return []


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
        homed = {t.name for t in TABLES if t.home == (f.parent.name if f.stem == "__init__" else f.stem)}
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
    stems = {Path(f).stem for f in files}
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
CHIP_PRODUCERS = ("benchmarks/bench_measured.py", "benchmarks/bench_tpu_simulation.py")


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


# ----------------------------------------------------------------------------- what the re-derivation checks

_STACK_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_SOURCE_POSITION = re.compile(r'\s*(?:stack_frame_id|source_(?:file|line|end_line|column|end_column))=(?:"[^"]*"|\d+)')


def program_hash(hlo_text: str) -> str:
    """SHA-256 (16 hex) of a compiled program's text without where in Python its ops were traced: the module's
    stack-frame tables (``FileNames``, ``FunctionNames``, ``FileLocations``, ``StackFrames``: the checkout's paths,
    lines and callers) and each op's ``stack_frame_id`` / ``source_*`` fields, which a docstring edit, a moved module
    or another calling script shifts. What each op does, and its ``op_name`` (which the lab reads), stay."""
    kept, table = [], False
    for line in hlo_text.split("\n"):
        if line in _STACK_TABLES:
            table = True
        elif table and (not line or line[0].isdigit()):
            continue
        else:
            table = False
            kept.append(_SOURCE_POSITION.sub("", line))
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]


class _Recording(Mapping):
    """A table that notes each entry read (``reads``) and hands out its entries (recording at depth 1)."""

    def __init__(self, name: str, value: Mapping, depth: int, reads: set[str], prefix: str = ""):
        self._name, self._value, self._depth, self._reads, self._prefix = name, value, depth, reads, prefix

    def _note(self, key) -> None:
        if self._depth == 0:
            self._reads.add(f"{self._name}[{self._prefix}{key}]")

    def __getitem__(self, key):
        self._note(key)  # a key it lacks too: adding it later would change what the code does
        item = self._value[key]
        if self._depth == 1 and isinstance(item, Mapping):
            return _Recording(self._name, item, 0, self._reads, f"{key}/")
        return item

    def __contains__(self, key) -> bool:
        return key in self._value

    def __iter__(self) -> Iterator:
        return iter(self._value)

    def __len__(self) -> int:
        return len(self._value)

    def values(self):
        return [self[k] for k in self._value]

    def items(self):
        return [(k, self[k]) for k in self._value]


@contextlib.contextmanager
def recording(root: Path = ROOT) -> Iterator[set[str]]:
    """Within the block, every module attribute that holds a table reads through a recorder: the set it yields
    collects ``NAME[key]`` (``NAME[top/key]`` at depth 1) for each entry read. Iterating keys is not a read."""
    reads: set[str] = set()
    swapped = []
    tables = table_values(root)
    for table in TABLES:
        value = tables[table.name][1]
        proxy = _Recording(table.name, value, table.depth, reads)
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if not file or module is sys.modules[__name__] or not Path(file).resolve().is_relative_to(root.resolve()):
                continue  # only the checkout's modules (the package, the benchmark scripts) are redirected
            for attr, held in list(vars(module).items()):
                if held is value:
                    setattr(module, attr, proxy)
                    swapped.append((module, attr, value))
    try:
        yield reads
    finally:
        for module, attr, value in swapped:
            setattr(module, attr, value)


def uncovered(reads: set[str], stored: Mapping) -> list[str]:
    """Reads a stamp's table entries do not hold (a table held whole covers every read of it)."""
    held = stored.get("tables", {})
    out = []
    for read in sorted(reads):
        name, key = read[:-1].split("[", 1)
        entries = held.get(name)
        if entries is None:
            out.append(f"{read} (its table is not in the stamp)")
        elif "*" not in entries and key not in entries:
            out.append(read)
    return out
