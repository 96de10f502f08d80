"""The architecture holds: every module in one layer's folder, imports only down, no cycles, README's picture current."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from companion import layers

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_sits_in_one_layers_folder():
    names = [m for layer in layers.LAYERS for m in layer.modules]
    assert len(names) == len(set(names)), "a module is in two layers"
    assert [layer.name for layer in layers.LAYERS] == list(layers.ORDER)
    assert all(layer.role for layer in layers.LAYERS)  # each folder's docstring says what its layer holds
    assert layers.unplaced(layers.imports()) == []


def test_no_import_points_up_a_layer_and_none_goes_round():
    graph = layers.imports()
    assert layers.upward_imports(graph) == []
    assert layers.cycles(graph) == []
    assert "compiling.train" not in graph["memory.budget"]  # the awkward import this table's first answer removed


@pytest.fixture
def package_copy(tmp_path):
    copy = tmp_path / "companion"
    shutil.copytree(layers.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    return copy


def test_a_planted_upward_import_and_an_unplaced_module_fail(package_copy):
    # the hardware layer reaching up to the planner, inside a function (imports at any depth count)
    fit = package_copy / "hardware" / "fit.py"
    fit.write_text(fit.read_text() + "\n\ndef _planted():\n    from ..planning import plan\n    return plan\n")
    (package_copy / "newcomer.py").write_text("from .xla import hlo\n")  # at the top, no layer's folder
    (package_copy / "annex").mkdir()  # a folder no layer is
    (package_copy / "annex" / "__init__.py").write_text("from ..xla import hlo\n")
    graph = layers.imports(package_copy)
    held = layers.layers(package_copy)
    assert layers.upward_imports(graph, held) == ["hardware.fit (hardware) -> planning.plan (planning)"]
    assert layers.unplaced(graph, held) == ["annex", "newcomer"]


def test_a_planted_cycle_inside_a_layer_is_found(package_copy):
    hlo = package_copy / "xla" / "hlo" / "costs.py"
    hlo.write_text(hlo.read_text() + "\nfrom .. import dump\n")
    assert [set(cycle) for cycle in layers.cycles(layers.imports(package_copy))] == [{"xla.dump", "xla.hlo"}]


def test_a_subpackage_counts_as_one_module_with_its_files_imports():
    graph = layers.imports()
    # the split schedule: its parts' imports are the module's; a part is no module of its own
    assert {"ground.sharding", "xla.hlo"} <= graph["models.moe"] and "xla.hlo.costs" not in graph
    assert {"xla.hlo", "timing.collectives", "timing.roofline"} <= graph["timing.schedule"]
    assert not any(m.startswith("timing.schedule.") for deps in graph.values() for m in deps)


def test_readme_and_the_api_page_show_the_architecture_as_the_source_has_it():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- architecture: begin.*?-->\n(.*?)<!-- architecture: end -->", readme, flags=re.S)
    assert block and block.group(1) == layers.readme_section(layers.imports())
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "architecture.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr  # stale: run `python scripts/architecture.py`
    api = (ROOT / "docs" / "api.md").read_text()
    assert all(f"companion.{m}\n" in api for layer in layers.LAYERS for m in layer.modules if not m.startswith("__"))
    assert "companion.timing.schedule.replay\n" in api  # a split module's parts, each with its members


SHIMS = """
import importlib, json, warnings
import companion
served = {name: getattr(companion, name).__name__ for name in companion._FACE}  # the face: no warning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old = {name: importlib.import_module(f"companion.{name}") for name in companion._FACE}
print(json.dumps({"served": served, "warned": sorted(str(w.message) for w in caught
                                                     if w.category is DeprecationWarning),
                  "exported": {name: sorted(n for n in vars(m) if not n.startswith("_")) for name, m in old.items()}}))
"""


def test_every_old_path_is_a_shim_that_warns_and_the_face_serves_each_without_one():
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning:companion", "-c", SHIMS], cwd=ROOT,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.splitlines()[-1])
    from companion import _FACE

    assert found["served"] == _FACE  # `from companion import budget` is companion.memory.budget
    assert found["warned"] == sorted(f"companion.{name} moved to {where}" for name, where in _FACE.items())
    assert {"estimate", "Budget"} <= set(found["exported"]["budget"])  # the shim re-exports the module's names
    shims = sorted(p.stem for p in layers.PACKAGE.glob("*.py") if p.stem not in layers.FACE)
    assert shims == sorted(_FACE)  # every old path has its shim, and only those
