"""The architecture holds: every module in one declared layer, imports only down, no cycles, README's picture current."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from companion import layers

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_sits_in_one_layer():
    names = [m for layer in layers.LAYERS for m in layer.modules]
    assert len(names) == len(set(names)), "a module is listed in two layers"
    assert layers.unplaced(layers.imports()) == []


def test_no_import_points_up_a_layer_and_none_goes_round():
    graph = layers.imports()
    assert layers.upward_imports(graph) == []
    assert layers.cycles(graph) == []
    assert "train" not in graph["budget"]  # the awkward import this table's first answer removed


@pytest.fixture
def package_copy(tmp_path):
    copy = tmp_path / "companion"
    shutil.copytree(layers.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    return copy


def test_a_planted_upward_import_and_an_unlisted_module_fail(package_copy):
    # the hardware layer reaching up to the planner, inside a function (imports at any depth count)
    targets = package_copy / "targets.py"
    targets.write_text(targets.read_text() + "\n\ndef _planted():\n    from .plan import plan\n    return plan\n")
    (package_copy / "newcomer.py").write_text("from . import hlo\n")
    graph = layers.imports(package_copy)
    assert layers.upward_imports(graph) == ["targets (hardware) -> plan (planning)"]
    assert layers.unplaced(graph) == ["newcomer"]


def test_a_planted_cycle_inside_a_layer_is_found(package_copy):
    hlo = package_copy / "hlo.py"
    hlo.write_text(hlo.read_text() + "\nfrom . import dump\n")
    assert [set(cycle) for cycle in layers.cycles(layers.imports(package_copy))] == [{"dump", "hlo"}]


def test_a_subpackage_counts_as_one_module_with_its_files_imports():
    graph = layers.imports()
    assert {"sharding", "hlo"} <= graph["models"] and "configs" not in graph["models"]


def test_readme_and_the_api_page_show_the_architecture_as_the_source_has_it():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- architecture: begin.*?-->\n(.*?)<!-- architecture: end -->", readme, flags=re.S)
    assert block and block.group(1) == layers.readme_section(layers.imports())
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "architecture.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr  # stale: run `python scripts/architecture.py`
    api = (ROOT / "docs" / "api.md").read_text()
    assert all(f"companion.{m}\n" in api for layer in layers.LAYERS for m in layer.modules if not m.startswith("__"))
