"""The code a result ran: the static import closure of its benchmark, each file's top-level statements as the key
reads them (shims, split modules and the package's face keyed as what they bind), the fingerprint."""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path
from typing import Any, Iterator, Mapping

from .rules import PROVENANCE, ROOT, TABLES


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


def _tree(text: str, name: str) -> ast.Module:
    """A file's syntax tree, parsed once per content wherever the file sits (its callers only read it)."""
    try:
        return _parsed(text)
    except SyntaxError:
        return ast.parse(text, name)  # raises again, naming the file


@functools.lru_cache(maxsize=2048)
def _parsed(text: str) -> ast.Module:
    return ast.parse(text)


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


def _face(root: Path) -> dict[str, str]:
    """The package's face: ``companion/__init__.py``'s ``_FACE`` (a short name -> the module its lazy
    ``__getattr__`` imports for it, ``"budget": "companion.memory.budget"``); {} where it has none."""
    init = root / "companion" / "__init__.py"
    return dict(_face_of(init.read_text(), str(init))) if init.is_file() else {}


@functools.lru_cache(maxsize=16)
def _face_of(text: str, name: str) -> tuple[tuple[str, str], ...]:
    for node in _tree(text, name).body:
        if _binds_face(node):
            return tuple(sorted(ast.literal_eval(node.value).items()))
    return ()


def _through_face(dotted: str, face: Mapping[str, str]) -> str:
    """``companion.budget.x`` -> ``companion.memory.budget.x`` where the face serves ``budget`` (as Python
    resolves ``from companion import budget``: the face's ``__getattr__``, not the old path's shim)."""
    parts = dotted.split(".")
    if len(parts) > 1 and parts[0] == "companion" and parts[1] in face:
        return ".".join([face[parts[1]], *parts[2:]])
    return dotted


def _imported_files(path: Path, root: Path, face: Mapping[str, str]) -> set[Path]:
    """The package's files (and sibling benchmark scripts) that ``path`` imports anywhere, with the
    ``__init__`` of every package on the way (importing ``companion.a.b`` runs ``companion/__init__.py``)."""
    files = set()
    for dotted in _imported_names(path.read_text(), str(path), _package_of(path, root)):
        if dotted.split(".")[0] == "companion":
            parts = _through_face(dotted, face).split(".")
            files |= {f for i in range(1, len(parts) + 1) if (f := _module_file(".".join(parts[:i]), root))}
        elif "." not in dotted and path.parent.name == "benchmarks" and (path.parent / f"{dotted}.py").is_file():
            files.add(path.parent / f"{dotted}.py")
    return files


def is_provenance(relative: str) -> bool:
    """Whether a file (relative to the checkout) is provenance: listed in ``PROVENANCE``, or in a folder listed."""
    return any(relative == p or p.endswith("/") and relative.startswith(p) for p in PROVENANCE)


def closure(producer: str | Path, root: Path = ROOT) -> list[str]:
    """The files whose code can run when ``producer`` (a benchmark script, relative to ``root``) runs: the script
    and every file it reaches through imports, less ``PROVENANCE``; sorted, relative to ``root``."""
    start = (root / producer).resolve()
    face = _face(root)
    seen, todo = {start}, [start]
    while todo:
        for f in _imported_files(todo.pop(), root, face):
            if f.resolve() not in seen and not is_provenance(_relative(f, root)):  # provenance: not followed either
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


# The package's face (``companion/__init__.py``): the map of short names and the lazy lookup that serves it,
# keyed by nothing while they are exactly this (they bind modules, never a number); any other form is keyed.
FACE_NAME = "_FACE"
FACE_CODE = '''
def __getattr__(name):
    if name in _FACE:
        import importlib

        return importlib.import_module(_FACE[name])
    raise AttributeError(f"module 'companion' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_FACE])
'''
_FACE_DUMPS = frozenset(ast.dump(n, include_attributes=False) for n in ast.parse(FACE_CODE).body)


def _binds_face(node: ast.stmt) -> bool:
    """``_FACE = ...``: the statement that binds the face's map."""
    return isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [FACE_NAME]


def _is_face(node: ast.stmt) -> bool:
    """``_FACE = {...}`` (string constants only) or the exact ``FACE_CODE`` lookup, in ``companion/__init__.py``."""
    if _binds_face(node):
        value = node.value
        return isinstance(value, ast.Dict) and all(
            isinstance(x, ast.Constant) and isinstance(x.value, str) for x in [*value.keys, *value.values])
    return ast.dump(node, include_attributes=False) in _FACE_DUMPS


def split_packages(root: Path = ROOT) -> list[str]:
    """The package's folders that are one module split into parts: an ``__init__.py`` that, past its docstring,
    only imports its own parts (``from .part import ...``), at least once. Sorted, relative to ``root``."""
    return sorted(_relative(init.parent, root) for init in (root / "companion").rglob("__init__.py")
                  if _is_split(init.read_text(), str(init)))


@functools.lru_cache(maxsize=1024)
def _is_split(text: str, name: str) -> bool:
    body = _without_docstring(_tree(text, name).body)
    return bool(body) and all(isinstance(n, ast.ImportFrom) and n.level == 1 for n in body)


def _split_package(path: Path, root: Path) -> Path | None:
    """The split package ``path`` is a part (or the ``__init__``) of, else None."""
    init = path.parent / "__init__.py"
    inside = path.resolve().is_relative_to((root / "companion").resolve())
    return path.parent if inside and init.is_file() and _is_split(init.read_text(), str(init)) else None


def _homes(path: Path, split: Path | None) -> tuple[str, ...]:
    """The names a file's tables may be homed under (``Table.home``): its module's own name — a part of a split
    package (``split``: ``_split_package``'s answer) answers to the package's name too, an ``__init__`` to its
    folder's."""
    names = {path.parent.name if path.stem == "__init__" else path.stem}
    if split is not None:
        names.add(path.parent.name)
    return tuple(sorted(names))


def statements(path: Path, root: Path = ROOT, ambiguous: frozenset[str] | None = None) -> list[str]:
    """One file's top-level statements as ``fingerprint`` keys them (a table's value replaced by its name; a shim
    has none: what it re-exports is keyed where it is defined; a part of a split package without its imports of
    the other parts; the package's face without ``_FACE`` and its lookup)."""
    if ambiguous is None:
        ambiguous = frozenset(ambiguous_imports(root))
    face = _relative(path, root) == "companion/__init__.py"
    split = _split_package(path, root)
    return list(_statements(path.read_text(), _homes(path, split), _package_of(path, root) is not None,
                            ambiguous, split is not None, face))


@functools.lru_cache(maxsize=1024)
def _statements(text: str, homes: tuple[str, ...], in_package: bool, ambiguous: frozenset[str],
                part: bool = False, face: bool = False) -> tuple[str, ...]:
    tree = ast.parse(text)  # a tree of its own: the normalization rewrites it (a bad file failed in _tree)
    if _is_shim(_without_docstring(tree.body)):
        return ()
    normalize = _Normalize(in_package, ambiguous)
    tables = {t.name for t in TABLES if t.home in homes}
    out = []
    for node in _without_docstring(tree.body):
        if part and isinstance(node, ast.ImportFrom) and node.level == 1 or face and _is_face(node):
            continue  # a part's import of another part; the face
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and target.id in tables:
            out.append(f"table {target.id}")
            continue
        visited = normalize.visit(node)
        out += [_dump(n)
                for n in (visited if isinstance(visited, list) else [visited])]
    return tuple(out)


def _data_files(files: list[str], root: Path) -> dict[str, str]:
    """Files of the package's ``data/`` folders (each beside the module that reads it) named by a string in
    ``files``, each with the SHA-256 (16 hex) of its bytes. A file name is one file in the whole package."""
    names: dict[str, Path] = {}
    for folder in sorted((root / "companion").rglob("data")):
        for p in sorted(folder.iterdir()) if folder.is_dir() else ():
            if p.is_file() and names.setdefault(p.name, p) != p:
                raise ValueError(f"data file {p.name} is in two folders, {names[p.name].parent} and {folder}")
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


# Python 3.12 gave definitions a ``type_params`` field (PEP 695): ast.dump writes it, 3.11's has none. The chip lock
# runs 3.11, the main lock 3.12: a statement is keyed as 3.12 writes it on either (an empty field where 3.11 has none).
_PEP_695 = {ast.FunctionDef: "type_params", ast.AsyncFunctionDef: "type_params", ast.ClassDef: "type_params"}


def _dump(node: ast.AST) -> str:
    """``ast.dump`` of a statement as Python 3.12 writes it, on 3.11 too."""
    missing = {cls: field for cls, field in _PEP_695.items() if field not in cls._fields}
    if not missing:
        return ast.dump(node, annotate_fields=False, include_attributes=False)
    for n in ast.walk(node):
        if type(n) in missing:
            setattr(n, missing[type(n)], [])
    saved = {cls: cls._fields for cls in missing}
    try:
        for cls, field in missing.items():
            cls._fields = (*cls._fields, field)
        return ast.dump(node, annotate_fields=False, include_attributes=False)
    finally:
        for cls, fields in saved.items():
            cls._fields = fields


def keyed_statements(files: list[str], root: Path = ROOT) -> list[str]:
    """The statements ``fingerprint`` keys for ``files`` (a closure), sorted: each file's, but a split package's
    parts keyed as the one module they were — an import two parts both make counted once."""
    ambiguous = frozenset(ambiguous_imports(root))
    out: list[str] = []
    imports_of: dict[Path, set[str]] = {}
    for f in files:
        keyed = statements(root / f, root, ambiguous)
        split = _split_package(root / f, root)
        if split is None:
            out += keyed
            continue
        seen = imports_of.setdefault(split, set())
        for s in keyed:
            if not s.startswith(("Import(", "ImportFrom(")):
                out.append(s)
            elif s not in seen:
                seen.add(s)
                out.append(s)
    return sorted(out)


def fingerprint(producer: str | Path, root: Path = ROOT) -> str:
    """SHA-256 (16 hex) of the sorted top-level statements of ``closure(producer)``: the code a result ran."""
    keyed = keyed_statements(closure(producer, root), root)
    digest = hashlib.sha256()
    for s in keyed:
        digest.update(s.encode() + b"\0")
    return digest.hexdigest()[:16]


def ambiguous_imports(root: Path = ROOT) -> list[str]:
    """Names the package imports from its own modules that more than one of its files binds at top level with
    different statements: an import keyed by name alone would not say which one it binds."""
    files = tuple((str(p), p.read_text(), _split_package(p, root) is not None)
                  for p in sorted((root / "companion").rglob("*.py")))
    return list(_ambiguous(files))


@functools.lru_cache(maxsize=8)
def _ambiguous(files: tuple[tuple[str, str, bool], ...]) -> tuple[str, ...]:
    """A shim's imports, and a split package's imports of its own parts (keyed as one module: dropped), are
    left out: they name what is defined once."""
    bound: dict[str, set[str]] = {}
    imported: set[str] = set()
    for name, text, part in files:
        tree = _tree(text, name)
        for node in tree.body:
            for name in _bound_names(node):
                bound.setdefault(name, set()).add(ast.dump(node, include_attributes=False))
        if _is_shim(_without_docstring(tree.body)):
            continue
        for node in ast.walk(tree):
            if part and isinstance(node, ast.ImportFrom) and node.level == 1 and node in tree.body:
                continue
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
