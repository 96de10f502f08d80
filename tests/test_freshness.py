"""A stored result goes stale when what decides its numbers changes, and only then (``companion.freshness``).

The planted tests copy the package and the benchmark scripts, plant one change in the copy, and ask a process
that imports the copy whether stored stamps still hold there: a docstring edit and a module moved behind a shim
leave them fresh; one price-table constant stales the results that read it, and only those; a model dimension
stales the results that compiled that model.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from companion import freshness, results

ROOT = freshness.ROOT
STORED = ("central", "plan")  # results stamped under rule 2 whose producers compile GPU steps
CHECK = """
import json, sys
from pathlib import Path
from companion import freshness
stamps = json.loads(Path(sys.argv[1]).read_text())
print(json.dumps({name: freshness.check(name, s, root=Path.cwd()).changed for name, s in stamps.items()}))
"""


def _stamp(rows: list[dict], producer: str = "benchmarks/bench_central.py") -> dict:
    return freshness.stamp(producer, {"rows": rows})


def _stored() -> dict[str, dict]:
    out = {}
    for name in STORED:
        stamp = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())["stamp"]
        assert stamp["rule"] == freshness.RULE, name
        out[name] = stamp
    return out


# synthetic results at chosen coordinates, stamped by this checkout
H100_8B = [{"model": "llama3.1-8b", "target": "h100:1x8"}]
B200_8B = [{"model": "llama3.1-8b", "target": "b200:1x8"}]
GB200_DSV3 = [{"model": "deepseek-v3-671b", "target": "gb200:128x4"}]


@pytest.fixture(scope="module")
def stamps() -> dict[str, dict]:
    return {**_stored(), "h100 8b": _stamp(H100_8B), "b200 8b": _stamp(B200_8B), "gb200 dsv3": _stamp(GB200_DSV3),
            "tpu": freshness.stamp("benchmarks/bench_tpu_simulation.py", {"steps": []})}


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(ROOT / "companion", root / "companion", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "requirements", root / "requirements")  # the chip lock: the chip results' versions
    (root / "benchmarks").mkdir()
    for script in (ROOT / "benchmarks").glob("*.py"):
        shutil.copy(script, root / "benchmarks" / script.name)
    return root


def _changed_in(root: Path, stamps: dict[str, dict]) -> dict[str, list[str]]:
    """What each stamp says changed, checked by a process that imports the package from ``root``."""
    path = root / "stamps.json"
    path.write_text(json.dumps(stamps))
    out = subprocess.run([sys.executable, "-c", CHECK, str(path)], cwd=root, capture_output=True, text=True,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert text.count(old) >= count, (path, old)
    path.write_text(text.replace(old, new, count))


def test_the_stored_stamps_hold_here(stamps):
    for name in STORED:
        assert freshness.check(name, stamps[name]).fresh, freshness.check(name, stamps[name]).line()


def test_a_docstring_edit_a_move_behind_a_shim_and_a_split_leave_every_result_fresh(tmp_path, stamps):
    root = _copy(tmp_path)
    timing = root / "companion" / "timing"
    # docstrings and comments, in a module every GPU result runs
    _edit(timing / "schedule" / "__init__.py", '"""Step time from the compiled schedule', '"""Step time (edited)')
    _edit(timing / "schedule" / "prices.py", "    def matmul(self, accelerator: targets.Accelerator) -> float:\n"
          '        """', "    def matmul(self, accelerator: targets.Accelerator) -> float:\n"
          '        # a planted comment\n        """A planted docstring. ')
    # `schedule` (a split module whose parts hold five price tables) moved to another folder, its old path a shim
    moved = root / "companion" / "pricing"
    moved.mkdir()
    (moved / "__init__.py").write_text('"""The simulator\'s prices."""\n')
    shutil.move(timing / "schedule", moved / "schedule")
    for part in (moved / "schedule").glob("*.py"):  # its imports of the timing layer, from the new place
        text = re.sub(r"^(\s*)from \.\. import", r"\1from ...timing import", part.read_text(), flags=re.M)
        part.write_text(re.sub(r"^(\s*)from \.\.(\w)", r"\1from ...timing.\2", text, flags=re.M))
    (timing / "schedule.py").write_text(
        '"""Moved to ``companion.pricing.schedule``."""\n\nimport warnings\n\n'
        "from ..pricing.schedule import *  # noqa: F403\n"
        "from ..pricing.schedule import _compute_seconds  # noqa: F401\n\n"
        'warnings.warn("companion.timing.schedule moved to companion.pricing.schedule", DeprecationWarning, '
        "stacklevel=2)\n")
    # an importer that now takes the new path
    _edit(timing / "steps.py", "from . import bands, pipelining, schedule, workaround",
          "from . import bands, pipelining, workaround\nfrom ..pricing import schedule")
    # `roofline` split into a package of two parts: each part repeats the imports it needs (keyed once), the
    # second imports the first (a part's import of a part: not keyed)
    text = (timing / "roofline.py").read_text().replace("from ..", "from ...")
    cut = text.index("def offload_vs_recompute(")
    header = text[:text.index("\n\n\n", text.index("from ...hardware"))]
    (timing / "roofline.py").unlink()
    (timing / "roofline").mkdir()
    (timing / "roofline" / "rates.py").write_text(text[:cut])
    (timing / "roofline" / "recompute.py").write_text(
        header + "\nfrom .rates import OffloadPrice, break_even_bandwidth\n\n\n" + text[cut:])
    (timing / "roofline" / "__init__.py").write_text(
        '"""Rooflines."""\n\nfrom .rates import *  # noqa: F403\nfrom .recompute import *  # noqa: F403\n')
    changed = _changed_in(root, stamps)
    assert changed == {name: [] for name in stamps}


def _codes(root: Path) -> dict[str, str]:
    """The code key of the stored producers in the tree at ``root`` (read from files: no import, no process)."""
    return {name: freshness.fingerprint(stamp["producer"], root) for name, stamp in _stored().items()}


def test_a_split_module_is_keyed_as_one_and_its_parts_code_still_counts(tmp_path):
    assert "companion/xla/hlo" in freshness.split_packages()
    root = _copy(tmp_path)
    before = _codes(root)
    assert before == {name: stamp["code"] for name, stamp in _stored().items()}
    hlo = root / "companion" / "xla" / "hlo"
    # a statement moved from one part to another: the module is the same
    costs, transfers = (hlo / "costs.py").read_text(), (hlo / "transfers.py").read_text()
    moved = "GROUPED_GEMM_TILE_ROWS = 128"
    line = next(x for x in costs.splitlines() if x.startswith(moved))
    (hlo / "costs.py").write_text(costs.replace(line + "\n", "").replace(
        "from .transfers import ", "from .transfers import GROUPED_GEMM_TILE_ROWS, "))
    (hlo / "transfers.py").write_text(transfers + "\n" + line + "\n")
    assert _codes(root) == before
    # but the constant's value is code
    _edit(hlo / "transfers.py", moved, "GROUPED_GEMM_TILE_ROWS = 64")
    assert all(now != before[name] for name, now in _codes(root).items())


def test_the_face_binds_no_number_but_an_edit_to_it_is_code(tmp_path):
    root = _copy(tmp_path)
    before = _codes(root)
    init = root / "companion" / "__init__.py"
    _edit(init, '    "workaround": "companion.timing.workaround",\n', '    "workaround": "companion.timing.workaround",\n'
          '    "newcomer": "companion.timing.steps",\n')  # one more name served: binds a module, no number
    assert _codes(root) == before
    _edit(init, "has no attribute {name!r}", "has no attribute {name!r} (edited)")  # the lookup's code
    assert all(now != before[name] for name, now in _codes(root).items())


def test_one_price_constant_stales_the_results_that_read_it_and_only_those(tmp_path, stamps):
    root = _copy(tmp_path)
    _edit(root / "companion" / "timing" / "schedule" / "prices.py", 'MATMUL_EFFICIENCY = {"hopper": 0.75,', 'MATMUL_EFFICIENCY = {"hopper": 0.76,')
    changed = _changed_in(root, stamps)
    for name in ("central", "plan", "h100 8b"):  # Hopper steps priced with it
        assert changed[name] == ["MATMUL_EFFICIENCY[hopper]"], (name, changed[name])
    for name in ("b200 8b", "gb200 dsv3", "tpu"):  # Blackwell and TPU steps read their own rows
        assert changed[name] == [], (name, changed[name])


def test_a_model_dimension_stales_the_results_that_compiled_that_model(tmp_path, stamps):
    root = _copy(tmp_path)
    _edit(root / "companion" / "models" / "configs.py", 'ModelConfig("deepseek-v3-671b", vocab_size=129280, '
          "d_model=7168, num_layers=61,", 'ModelConfig("deepseek-v3-671b", vocab_size=129280, d_model=7168, '
          "num_layers=60,")
    changed = _changed_in(root, stamps)
    for name in ("central", "plan", "gb200 dsv3"):
        assert changed[name] == ["CONFIGS[deepseek-v3-671b]"], (name, changed[name])
    for name in ("h100 8b", "b200 8b", "tpu"):
        assert changed[name] == [], (name, changed[name])


def test_a_change_of_code_stales_every_result_that_runs_it_and_says_so(tmp_path, stamps):
    root = _copy(tmp_path)
    _edit(root / "companion" / "timing" / "schedule" / "simulation.py", "SCHEMA = 2", "SCHEMA = 3")
    changed = _changed_in(root, stamps)
    for name in ("central", "plan", "h100 8b", "tpu"):
        assert changed[name] == [f"the code it ran ({stamps[name]['producer']} and its imports)"], name


def test_closure_follows_imports_and_leaves_provenance_out():
    files = freshness.closure("benchmarks/bench_tpu_simulation.py")
    assert "benchmarks/bench_measured.py" in files  # a benchmark it imports
    assert {"companion/__init__.py", "companion/timing/schedule/replay.py", "companion/models/configs.py"} <= set(files)
    assert not [f for f in files if freshness.is_provenance(f)] and freshness.is_provenance("companion/ground/freshness/source.py")
    assert not [f for f in files if f.startswith(("companion/surfaces/widgets/", "companion/surfaces/cli/"))]


def test_a_name_imported_by_name_alone_is_bound_once_and_no_file_binds_a_name_twice():
    # names bound in more than one file keep their module's name in the key (``_Normalize``); these are they
    assert freshness.ambiguous_imports() == ["GiB", "RESULTS", "Shape", "checkpoint_names"]  # Shape: HLO's and a decision's
    assert freshness.duplicate_bindings() == []


def test_a_result_whose_code_reads_every_entry_of_a_table_depends_on_the_whole_table(stamps):
    # the budget (in central's and plan's closures) asks every GPU's compute capability: found by the CI
    # re-derivation, which saw plan's H100 rows read GPUS[b200]; the tables whose keys it reads one by one stay per key
    for name in ("central", "plan", "h100 8b"):
        assert stamps[name]["tables"]["GPUS"] == {"*": freshness.value_hash(freshness.table_values()["GPUS"][1])}
        assert set(stamps[name]["tables"]["MATMUL_EFFICIENCY"]) <= {"hopper", "blackwell"}


def test_every_table_has_one_home_and_its_coordinate():
    tables = freshness.table_values()
    assert set(tables) == {t.name for t in freshness.TABLES}
    assert {t.by for t in freshness.TABLES} <= set(freshness.COORDINATES)


def test_recording_notes_each_entry_read():
    from companion import schedule, targets

    with freshness.recording() as reads:
        gpu = targets.GPUS["h100"]
        schedule.CostModel().matmul(gpu)
        list(targets.GPUS)  # iterating keys is not a read
    assert reads == {"GPUS[h100]", "MATMUL_EFFICIENCY[hopper]"}
    assert isinstance(targets.GPUS, dict) and isinstance(schedule.MATMUL_EFFICIENCY, dict)  # restored
    held = {"tables": {"GPUS": {"h100": "x"}, "MATMUL_EFFICIENCY": {"*": "y"}}}
    assert freshness.uncovered(reads, held) == []
    assert freshness.uncovered(reads | {"GPUS[b200]"}, held) == ["GPUS[b200]"]


def test_a_stamp_of_the_old_rule_or_none_is_stale_with_its_reason():
    old = freshness.check("r.json", {"companion_source": "ee11aff51bb0a3f9", "jaxlib": "0.10.2"})
    assert not old.fresh and old.line() == ("r.json: no stamp of this rule — STALE: rerun the benchmark that wrote "
                                            "it before trusting these numbers")
    assert freshness.check("r.json", None).changed == ["no stamp"]
    gone = freshness.check("r.json", {**_stamp(H100_8B), "producer": "benchmarks/bench_gone.py"})
    assert gone.changed == ["its producer, benchmarks/bench_gone.py, is not in this checkout"] and "STALE" in gone.line()


def test_a_result_written_with_xla_flags_set_says_so_whatever_the_readers_environment(monkeypatch):
    written = freshness.stamp("benchmarks/bench_central.py", {"rows": H100_8B},
                              environ={"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=false"})
    monkeypatch.setenv("XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB", "32")  # the reader's: not the result's
    assert freshness.check("r.json", written).changed == [
        "written with XLA_FLAGS='--xla_gpu_enable_latency_hiding_scheduler=false' (the lab's benchmarks run with it "
        "unset)"]
    clean = freshness.stamp("benchmarks/bench_central.py", {"rows": H100_8B}, environ={})
    assert freshness.check("r.json", clean).fresh


def test_a_version_change_is_named(tmp_path):
    stamp = _stamp(H100_8B)
    stamp["versions"]["jaxlib"] = "0.0.1"
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"stamp": stamp, "x": 1}))
    data, found = results.load(path)
    assert data["x"] == 1 and found.changed[0].startswith("jaxlib 0.0.1 -> ") and "STALE" in found.line()


def test_program_hash_ignores_where_python_traced_the_ops_only():
    def module(path, line, op="add", frame=1):
        return (f'HloModule jit_f\n\nFileNames\n1 "{path}"\n\nFileLocations\n1 {{file_name_id=1 line={line}}}\n\n'
                f'ENTRY %main {{\n  x = f32[2] {op}(y, z), metadata={{op_name="jit(f)/add" stack_frame_id={frame}}}\n}}')

    same = module("/a/b.py", 10)
    assert freshness.program_hash(same) == freshness.program_hash(module("/c/d.py", 99, frame=7))
    assert freshness.program_hash(same) != freshness.program_hash(module("/a/b.py", 10, op="multiply"))
    traced = 'x = f32[2] add(y, z), metadata={op_name="jit(f)/add" source_file="/a/b.py" source_line=10}'
    assert freshness.program_hash(traced) == freshness.program_hash(traced.replace("source_line=10", "source_line=12"))


def test_no_statement_that_runs_at_import_reads_a_tables_entries():
    """``recording`` sees reads made while rows are computed; a value derived from a table's entries at import
    would escape it. What runs at import: module-level statements, class bodies, decorators, default arguments."""
    import ast

    names = {t.name for t in freshness.TABLES}
    found = []
    for path in sorted((ROOT / "companion").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if set(freshness._bound_names(node)) & names:
                continue  # the table itself
            at_import = [node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                at_import = [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]
            elif isinstance(node, ast.ClassDef):
                at_import = [*node.decorator_list, *(n for n in node.body if not isinstance(
                    n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
                at_import += [d for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                              for d in [*n.decorator_list, *n.args.defaults, *n.args.kw_defaults]]
            for part in filter(None, at_import):
                used = {n.id for n in ast.walk(part) if isinstance(n, ast.Name)}
                used |= {n.attr for n in ast.walk(part) if isinstance(n, ast.Attribute)}
                if used & names:
                    found.append(f"{path.relative_to(ROOT)}: {ast.unparse(part)}")
    assert found == ["companion/hardware/targets/chips.py: ACCELERATORS = (*GPUS, *TPUS)"]  # their keys only: not a read of entries


def test_the_chips_results_are_held_to_the_chip_lock_and_written_only_there():
    locked = freshness.locked_versions()
    assert locked["jaxlib"] == "0.10.2" and locked["libtpu"] == "0.0.42.1"
    chip = freshness.stamp("benchmarks/bench_tpu_simulation.py", {"steps": []})
    assert chip["versions"] == locked  # whatever this environment has installed
    gpu = freshness.stamp("benchmarks/bench_central.py", {"rows": []})
    assert gpu["versions"]["jaxlib"] == freshness.versions({}, {})["jaxlib"]
    if not freshness.on_chip_lock():  # the main lock
        with pytest.raises(SystemExit, match="run it on the chip lock.*jaxlib 0.10.2, libtpu 0.0.42.1"):
            freshness.refuse_off_lock("benchmarks/bench_measured.py")
    freshness.refuse_off_lock("benchmarks/bench_central.py")  # a GPU result: any lock


def test_make_benchmarks_leaves_the_chips_benchmarks_to_the_chip_lock():
    makefile = (freshness.ROOT / "Makefile").read_text()
    chip = re.search(r"^CHIP_BENCHMARKS := (.*)$", makefile, re.M).group(1).split()
    assert sorted(chip) == sorted(freshness.CHIP_PRODUCERS)
