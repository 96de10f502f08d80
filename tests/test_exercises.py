"""Every notebook's exercises are answered and the answers are checked.

Each notebook ends its exercises with a cell that recomputes every solution's stated number and
asserts it ("The exercises' answers, checked"); nbval runs that cell against the live library in
``make test``. This file holds the notebooks to that form, so an exercise cannot be added without
its check, and a stored check that did not pass cannot be committed.
"""

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import prose_numbers  # noqa: E402  (the check cell's first line)
import series_order  # noqa: E402  (the series' one reading of an Exercises section)

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECK = prose_numbers.CHECK


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_at_least_three_exercises_each_with_a_solution_that_states_its_answer(path):
    exercises = series_order.exercises(_cells(path))
    assert len(exercises) >= 3, path.name
    for number, body in exercises.items():
        assert "<details><summary>Solution</summary>" in body and "</details>" in body, (path.name, number)
        solution = body.split("<details><summary>Solution</summary>", 1)[1].split("</details>", 1)[0]
        prose = re.sub(r"```.*?```", "", solution, flags=re.S)
        assert len(prose.split()) >= 8, (path.name, number, "the solution explains its answer in words")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_exercise_has_a_checked_answer_that_passed(path):
    cells = _cells(path)
    checks = [c for c in cells if c["cell_type"] == "code" and _source(c).startswith(CHECK)]
    assert len(checks) == 1, path.name
    check = checks[0]
    code = _source(check)
    assert "assert " in code
    checked = {int(n) for n in re.findall(r"#\s*(\d+)\b", code)}
    assert checked >= set(series_order.exercises(cells)), (path.name, sorted(set(series_order.exercises(cells)) - checked))
    out = "".join("".join(o.get("text", "")) for o in check["outputs"])
    assert f"exercises 1-{max(series_order.exercises(cells))}: answers check out" in out, (path.name, "the check's stored output")
    assert not any(o.get("output_type") == "error" for o in check["outputs"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_exercises_and_takeaways_are_separate_cells_after_the_check(path):
    cells = _cells(path)
    index = {kind: next(i for i, c in enumerate(cells) if pred(c)) for kind, pred in {
        "exercises": lambda c: c["cell_type"] == "markdown" and "## Exercises" in _source(c),
        "check": lambda c: _source(c).startswith(CHECK),
        "takeaways": lambda c: c["cell_type"] == "markdown" and "## Takeaways" in _source(c)}.items()}
    assert index["exercises"] < index["check"] < index["takeaways"], (path.name, index)
    assert "## Takeaways" not in _source(cells[index["exercises"]]), path.name
