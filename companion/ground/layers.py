"""The package's architecture, read from its folders: each layer a folder, the layers in order, imports only down.

``companion/`` holds one folder per layer (``ORDER``, from the ground up); a layer's modules are the files and
subpackages in its folder (a module split into parts is one module: ``companion/xla/hlo/`` is ``xla.hlo``), and
its role is the first paragraph of the folder's docstring. A module may import modules of its own layer or of a
layer below, never above (``upward_imports``); every file of the package sits in a layer's folder
(``unplaced``), but the package's face (``companion/__init__.py``, ``__main__.py``, counted with the surfaces)
and the old paths' deprecation shims. ``tests/test_layers.py`` holds the package to it, and README's
"Architecture" section shows it: ``python scripts/architecture.py`` writes the layers and the diagram there
from ``mermaid()``, drawn from the imports the source really has (``imports``), not by hand.

Where a module sat awkwardly, the answer is written beside it (``PLACEMENTS``): either the module was
wrong and its code moved, or the layer is right and the reason is said.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # companion/: this module sits in companion/ground/

# The layers from the ground up: each a folder of companion/.
ORDER = ("ground", "hardware", "xla", "models", "compiling", "memory", "timing", "measuring", "planning", "surfaces")
FACE = ("__init__", "__main__")  # the package's face at companion/'s top, counted with the last layer


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    role: str  # the first paragraph of the folder's docstring: what the layer's modules are for
    modules: tuple[str, ...]  # its modules as ``layer.module`` (a subpackage whole; ``models`` the folder's face)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""


def _has_code(init: Path) -> bool:
    """Whether a folder's ``__init__.py`` does more than say what the folder is (the models' face does)."""
    body = ast.parse(init.read_text(), str(init)).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def layers(root: Path = PACKAGE) -> tuple[Layer, ...]:
    """The layers as the folders under ``root`` have them, in ``ORDER``."""
    out = []
    for name in ORDER:
        folder = root / name
        if not (folder / "__init__.py").is_file():
            raise ValueError(f"layer {name!r} has no folder {folder}: ORDER names {', '.join(ORDER)}")
        role = " ".join(_docstring(folder / "__init__.py").split("\n\n")[0].split())
        children = sorted([p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
                          + [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()])
        face = [name] if _has_code(folder / "__init__.py") else []
        out.append(Layer(name, role[:1].lower() + role[1:].rstrip("."),
                         tuple(face + [f"{name}.{c}" for c in children])))
    surfaces = out[-1]
    out[-1] = dataclasses.replace(surfaces, modules=surfaces.modules + FACE)
    return tuple(out)


LAYERS: tuple[Layer, ...] = layers()


# Modules that sat awkwardly, and the answer (the module was wrong: code moved; or the layer is right: why).
PLACEMENTS: dict[str, str] = {
    "memory.budget":
        "imported the trainer for `StateConfig` alone; the module was wrong: where the state lives is vocabulary, "
        "moved to `state` (ground), so the analytic budget no longer reaches up to the trainer",
    "timing.roofline":
        "reads `hlo`: the layer is right; a price reads the program it prices, and HLO reading sits below timing",
    "timing.collectives": "reads `hlo` (replica groups, wire bytes): the layer is right, as for `roofline`",
    "compiling.report_cache":
        "imports `results`: the layer is right; `results` is provenance (the source hash every stored number and "
        "cached report is keyed by), the ground floor",
    "models.flops":
        "read a model's config (`models.configs`) from the ground floor; the layer was wrong: MaxText's FLOP count of "
        "a model sits with the models, in their folder",
    "models":
        "asked the compiler which platform a step is lowered for (`models.flash` picks the Pallas TPU kernel by it); "
        "the module was wrong: the platform moved to `lowering` (ground), which the compiler sets and the models read. "
        "Its other imports, `hlo`'s names for its custom calls and scopes, point down: the reader owns the names both "
        "sides use",
    "hardware.fit":
        "the fits rule (a step's bytes against the target's limits) sits with the hardware because the compiler asks "
        "it; it reads nothing but `targets`",
}


def layer_index(layers_: tuple[Layer, ...] = LAYERS) -> dict[str, int]:
    """Module -> its layer's position (0 = ground)."""
    return {module: i for i, layer in enumerate(layers_) for module in layer.modules}


def _is_shim(path: Path) -> bool:
    """An old path's deprecation shim (``companion/budget.py``): imports and a ``DeprecationWarning``."""
    text = path.read_text()
    return "DeprecationWarning" in text and all(
        isinstance(n, (ast.Import, ast.ImportFrom)) or isinstance(n, ast.Expr)
        for n in ast.parse(text, str(path)).body)


def modules(root: Path = PACKAGE) -> list[str]:
    """The package's modules as ``layer.module`` (any top folder's children), the face, and any other file at
    the top that is not a shim (which no layer places)."""
    names = [p.stem for p in root.glob("*.py") if p.stem in FACE or not _is_shim(p)]
    for folder in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
        if _has_code(folder / "__init__.py"):
            names.append(folder.name)
        names += [f"{folder.name}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"]
        names += [f"{folder.name}.{p.name}" for p in folder.iterdir() if (p / "__init__.py").is_file()]
    return sorted(names)


def _module_of(path: Path, root: Path) -> str:
    """The module a file belongs to: ``xla/hlo/costs.py`` -> ``xla.hlo``; ``models/__init__.py`` -> ``models``."""
    parts = path.relative_to(root).with_suffix("").parts
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2 and parts[1] == "__init__":
        return parts[0]
    return f"{parts[0]}.{parts[1]}"


def _imported(tree: ast.AST, package: list[str], known: set[str]) -> set[str]:
    """The package's modules a file imports (relative or ``companion.``), at any depth of the file: each
    import resolved to the longest module it names (``from ..models import configs`` -> ``models.configs``;
    ``from ..models import CONFIGS`` -> ``models``, the folder's face)."""

    def resolve(dotted: list[str]) -> str | None:
        for k in range(len(dotted), 0, -1):
            if ".".join(dotted[:k]) in known:
                return ".".join(dotted[:k])
        return None

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif (node.module or "").split(".")[0] == "companion":
                base = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:  # `from ..xla import hlo`: the module hlo; `from ..xla.hlo import X`: hlo
                found.add(resolve(base + [alias.name]) or resolve(base))
        elif isinstance(node, ast.Import):
            found |= {resolve(a.name.split(".")[1:]) for a in node.names if a.name.startswith("companion.")}
    return found - {None}


def imports(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a subpackage's files counted as the subpackage)."""
    known = set(modules(root))
    graph: dict[str, set[str]] = {m: set() for m in known}
    for path in root.rglob("*.py"):
        if path.parent == root and path.stem not in FACE and _is_shim(path):
            continue
        if path.name == "__init__.py" and path.parent.parent == root and not _has_code(path):
            continue  # a layer's folder, saying what it is
        module = _module_of(path, root)
        package = list(path.relative_to(root).parent.parts)
        found = _imported(ast.parse(path.read_text(), str(path)), package, known)
        graph[module] |= {m for m in found if m != module}
    return graph


def unplaced(graph: dict[str, set[str]], layers_: tuple[Layer, ...] | None = None) -> list[str]:
    """Modules of the package no layer holds (a file at the top that is neither the face nor a shim, a folder
    ``ORDER`` does not name), and held modules the package no longer has."""
    placed = layer_index(layers_ or LAYERS)
    return sorted(set(graph) ^ set(placed))


def upward_imports(graph: dict[str, set[str]], layers_: tuple[Layer, ...] | None = None) -> list[str]:
    """Every import that points up a layer, as ``"importer (layer) -> imported (layer)"``."""
    layers_ = layers_ or LAYERS
    index = layer_index(layers_)
    return sorted(f"{m} ({layers_[index[m]].name}) -> {d} ({layers_[index[d]].name})"
                  for m, deps in graph.items() for d in deps
                  if m in index and d in index and index[d] > index[m])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles (within a layer, where the layer rule cannot see them): each as the modules around it."""
    found, state = [], {}

    def visit(m: str, path: list[str]):
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                found.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def _short(module: str) -> str:
    """A module as its layer's folder lists it: ``xla.hlo`` -> ``hlo/`` (a package), ``xla.dump`` -> ``dump``."""
    if module in ORDER:
        return "__init__"  # the folder's face (the models' build, abstract, config)
    name = module.split(".")[-1]
    return name + "/" if "." in module and (PACKAGE / module.replace(".", "/") / "__init__.py").is_file() else name


def mermaid(graph: dict[str, set[str]]) -> str:
    """The layers bottom-up as a Mermaid flowchart: each layer a box of its modules, each arrow a layer's
    imports of a lower one, labelled with how many module-to-module imports it carries."""
    index = layer_index()
    lines = ["flowchart BT"]
    for i, layer in enumerate(LAYERS):
        lines.append(f'    L{i}["<b>{layer.name}/</b><br/>{" · ".join(map(_short, layer.modules))}"]')
    counts: dict[tuple[int, int], int] = {}
    for m, deps in graph.items():
        for d in deps:
            if index[d] != index[m]:
                counts[index[m], index[d]] = counts.get((index[m], index[d]), 0) + 1
    for (a, b), n in sorted(counts.items()):
        lines.append(f"    L{a} -->|{n}| L{b}")
    return "\n".join(lines)


def readme_section(graph: dict[str, set[str]]) -> str:
    """README's generated part of "Architecture": the layers top-down, one line each, and the diagram."""
    rows = ["| layer | modules | what it holds |", "|---|---|---|"]
    rows += [f"| `{layer.name}/` | {', '.join(f'`{_short(m)}`' for m in layer.modules)} | {layer.role} |"
             for layer in reversed(LAYERS)]
    placed = ["Modules that sat awkwardly, and the answer:", ""]
    placed += [f"- `{module}`: {answer}" for module, answer in PLACEMENTS.items()]
    return "\n".join(rows) + "\n\n```mermaid\n" + mermaid(graph) + "\n```\n\n" + "\n".join(placed) + "\n"
