"""The package's architecture, declared once: every module in a layer, the layers in order, imports only down.

``LAYERS`` lists the layers from the ground up; a module may import modules of its own layer or of a
layer below, never above (``upward_imports``), and every module of the package sits in exactly one
layer (``unplaced``). ``tests/test_layers.py`` holds the package to it, and README's "Architecture"
section shows it: ``python scripts/architecture.py`` writes the layers and the diagram there from
``mermaid()``, drawn from the imports the source really has (``imports``), not by hand.

Where a module sat awkwardly, the answer is written beside it (``PLACEMENTS``): either the module was
wrong and its code moved, or the layer is right and the reason is said.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    role: str  # one line: what the layer's modules are for
    modules: tuple[str, ...]  # top-level modules (``models`` is the subpackage, whole)


LAYERS: tuple[Layer, ...] = (
    Layer("ground", "vocabulary and provenance, importing nothing of the package: notation, caveats, MaxText's "
          "policy names, logical axes, where the training state lives, the platform being lowered for, the source "
          "stamp",
          ("notation", "caveats", "stderr", "results", "distributed", "policies", "sharding", "state", "lowering",
           "layers", "freshness")),
    Layer("hardware", "the accelerators, their host links and topologies, XLA's and libtpu's flags, the fits rule",
          ("targets", "flags", "libtpu", "fit")),
    Layer("hlo", "reading what XLA wrote: scheduled HLO, buffer assignment, transfer descriptors",
          ("hlo", "dump", "descriptors")),
    Layer("models", "what is trained, as JAX code: Llama, Mixtral, DeepSeek-V3 with MaxText's checkpoint names, "
          "and MaxText's count of their FLOPs", ("models", "flops")),
    Layer("compiling", "a training step compiled for a target: the trainer, the compiler, the report cache",
          ("train", "compiler", "report_cache")),
    Layer("memory", "what a step needs in HBM and host RAM, by formula, and the memory fraction that fits it",
          ("budget", "heuristics", "fraction")),
    Layer("time", "what a step costs in seconds and how sure the lab is: rooflines, the schedule replayed, bands, "
          "calibration against published runs",
          ("roofline", "collectives", "schedule", "pipelining", "pgle", "bands", "workaround", "steps",
           "experiments", "calibration", "published", "requirement")),
    Layer("measuring", "running on a real accelerator, and the lab's predictions held against it",
          ("measure", "measured", "comparison", "attribution", "loop")),
    Layer("planning", "what to run: the planner, MaxText configs in and plans out, a series' answer",
          ("plan", "maxtext", "answer")),
    Layer("surfaces", "what a learner or a terminal sees: tables, figures, widgets, the command line",
          ("tables", "plots", "widgets", "cli", "__main__", "__init__")),
)

# Modules that sat awkwardly, and the answer (the module was wrong: code moved; or the layer is right: why).
PLACEMENTS: dict[str, str] = {
    "budget": "imported the trainer for `StateConfig` alone; the module was wrong: where the state lives is "
              "vocabulary, moved to `state` (ground), so the analytic budget no longer reaches up to the trainer",
    "roofline": "reads `hlo`: the layer is right; a price reads the program it prices, and HLO reading sits below "
                "time",
    "collectives": "reads `hlo` (replica groups, wire bytes): the layer is right, as for `roofline`",
    "report_cache": "imports `results`: the layer is right; `results` is provenance (the source hash every stored "
                    "number and cached report is keyed by), the ground floor",
    "flops": "read a model's config (`models.configs`) from the ground floor; the layer was wrong: MaxText's FLOP "
             "count of a model sits with the models",
    "models": "asked the compiler which platform a step is lowered for (`models.flash` picks the Pallas TPU kernel "
              "by it); the module was wrong: the platform moved to `lowering` (ground), which the compiler sets and "
              "the models read. Its other imports, `hlo`'s names for its custom calls and scopes, point down: the "
              "reader owns the names both sides use",
    "fit": "the fits rule (a step's bytes against the target's limits) sits with the hardware because the compiler "
           "asks it; it reads nothing but `targets`",
}


def layer_index() -> dict[str, int]:
    """Module -> its layer's position (0 = ground)."""
    return {module: i for i, layer in enumerate(LAYERS) for module in layer.modules}


def modules(root: Path = PACKAGE) -> list[str]:
    """The package's top-level modules (``models`` for the subpackage)."""
    names = [p.stem for p in root.glob("*.py")]
    names += [p.name for p in root.iterdir() if (p / "__init__.py").exists()]
    return sorted(names)


def _top(name: str) -> str:
    return name.split(".")[0]


def _imported(tree: ast.AST, inside_subpackage: bool) -> set[str]:
    """Top-level package modules a file imports (relative or ``companion.``), at any depth of the file."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1 and not inside_subpackage or node.level == 2 and inside_subpackage:
                found |= {_top(base)} if base else {a.name for a in node.names}
            elif node.level == 0 and base.startswith("companion"):
                rest = base.split(".")[1:]
                found |= {rest[0]} if rest else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("companion.")}
    return found


def imports(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a subpackage's files counted as the subpackage)."""
    known = set(modules(root))
    graph: dict[str, set[str]] = {m: set() for m in known}
    for path in root.rglob("*.py"):
        relative = path.relative_to(root).parts
        module = relative[0] if len(relative) > 1 else path.stem
        found = _imported(ast.parse(path.read_text(), str(path)), len(relative) > 1)
        graph[module] |= {m for m in found if m in known and m != module}
    return graph


def unplaced(graph: dict[str, set[str]]) -> list[str]:
    """Modules of the package no layer lists, and listed modules the package no longer has."""
    placed = layer_index()
    return sorted(set(graph) ^ set(placed))


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points up a layer, as ``"importer (layer) -> imported (layer)"``."""
    index = layer_index()
    return sorted(f"{m} ({LAYERS[index[m]].name}) -> {d} ({LAYERS[index[d]].name})"
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


def mermaid(graph: dict[str, set[str]]) -> str:
    """The layers bottom-up as a Mermaid flowchart: each layer a box of its modules, each arrow a layer's
    imports of a lower one, labelled with how many module-to-module imports it carries."""
    index = layer_index()
    lines = ["flowchart BT"]
    for i, layer in enumerate(LAYERS):
        lines.append(f'    L{i}["<b>{layer.name}</b><br/>{" · ".join(layer.modules)}"]')
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
    rows += [f"| {layer.name} | {', '.join(f'`{m}`' for m in layer.modules)} | {layer.role} |"
             for layer in reversed(LAYERS)]
    placed = ["Modules that sat awkwardly, and the answer:", ""]
    placed += [f"- `{module}`: {answer}" for module, answer in PLACEMENTS.items()]
    return "\n".join(rows) + "\n\n```mermaid\n" + mermaid(graph) + "\n```\n\n" + "\n".join(placed) + "\n"
