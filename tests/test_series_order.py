"""scripts/series_order.py: the answer on the first screen, and each prediction asked before its reveal."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import series_order  # noqa: E402

FIRST = {"cell_type": "markdown", "source": "# 01\n\n**Question.** How much HBM?\n\n**Answer.** 21.6 GiB of 59.3.\n"}


def _md(text, *tags):
    return {"cell_type": "markdown", "source": text, "metadata": {"tags": list(tags)}}


def _code(*tags):
    return {"cell_type": "code", "source": "x", "outputs": [], "metadata": {"tags": list(tags)}}


def _asked(name, folded=True):
    return _md(f"Predict {name}." + (" <details><summary>Solution</summary>it</details>" if folded else ""),
               f"predict:{name}")


def test_a_notebook_in_order_passes():
    cells = [FIRST]
    for name in ("a", "b", "c"):
        cells += [_asked(name), _code(f"reveal:{name}"), _code(f"check:{name}")]
    assert series_order.first_screen(cells) == [] and series_order.predictions(cells) == []


def test_a_missing_answer_and_an_answer_before_its_question_fail():
    assert series_order.first_screen([_md("# 01\n\n**Question.** How much?")]) == [
        "the first cell gives no **Answer.** after its question"]
    assert series_order.first_screen([_md("**Answer.** 4.\n**Question.** What?")]) == [
        "the first cell gives no **Answer.** after its question"]
    assert series_order.first_screen([_md("# 01 — the HBM budget")]) == ["the first cell states no **Question.**"]


@pytest.mark.parametrize("cells, problem", [
    ([_code("reveal:a"), _asked("a"), _code("check:a")], "asked in cell 2, revealed in cell 1"),
    ([_asked("a"), _code("check:a"), _code("reveal:a")], "revealed in cell 3, checked in cell 2"),
    ([_asked("a", folded=False), _code("reveal:a"), _code("check:a")], "not folded"),
    ([_asked("a"), _code("reveal:a")], "no check:a cell"),
])
def test_a_prediction_out_of_order_fails(cells, problem):
    assert any(problem in p for p in series_order.predictions([FIRST, *cells]))


def test_too_few_predictions_fail():
    assert series_order.predictions([FIRST]) == ["0 prediction(s) tagged; a notebook asks at least 3"]


def test_every_notebook_of_the_series_is_in_order():
    assert {p.name: series_order.check(p) for p in sorted(series_order.NOTEBOOKS.glob("*.ipynb"))
            if series_order.check(p)} == {}


def test_an_exercise_that_leans_on_a_fold_or_the_appendix_fails():
    ok = _md("## Exercises\n**1.** Predict the peak. <details><summary>Solution</summary>See the Deeper block, "
             "A1.</details>\n## Takeaways")
    bad = _md("## Exercises\n**1.** Open the Deeper block above.\n**2.** Read appendix A1 and say why.\n## Takeaways")
    assert series_order.exercises_stand_alone([FIRST, ok]) == []
    assert [p.split(" leans")[0] for p in series_order.exercises_stand_alone([FIRST, bad])] == [
        "exercise 1", "exercise 2"]


def test_a_reference_names_a_notebook_and_a_section_that_exist(tmp_path):
    import json
    cells = [_md("# 04\n## 3. Pipelining"), _md("## Exercises")]
    (tmp_path / "04_pipelined.ipynb").write_text(json.dumps({"cells": cells}))
    (tmp_path / "A1_bug.ipynb").write_text(json.dumps({"cells": cells}))
    assert series_order.references("see notebook 04, section 3 and notebooks 04 and A1", tmp_path) == []
    assert series_order.references("notebook 06 and notebooks 04-07; notebook 04, section 8", tmp_path) == [
        "'notebook 06': no notebook 06", "'notebooks 04-07': no notebook 07",
        "'notebook 04, section 8': notebook 04 has no section 8"]


def test_the_project_s_own_pages_reference_notebooks_that_exist():
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", root / "benchmarks" / "README.md", *sorted((root / "docs").glob("*.md"))]
    assert [f"{p.name}: {problem}" for p in pages for problem in series_order.references(p.read_text())] == []


def test_the_code_s_docstrings_and_comments_reference_notebooks_that_exist():
    root = Path(__file__).resolve().parents[1]
    files = [p for d in ("companion", "benchmarks", "scripts") for p in sorted((root / d).rglob("*.py"))]
    assert [f"{p.relative_to(root)}: {problem}" for p in files
            for problem in series_order.references(p.read_text())] == []


def test_an_answer_that_gives_a_prediction_away_fails():
    spoiler = _md("# 02\n\n**Question.** Which is fastest?\n\n**Answer.** `minimal`, 35.1 ms on 55 GB/s.\n"
                  "<details><summary>Objectives</summary>38.3 ms</details>")
    asked = _md("Predict the step at 55 GB/s. <details><summary>Answer</summary>35.1 ms at 55 GB/s; "
                "38.3 ms without.</details>", "predict:a")
    assert series_order.answer_spares_predictions([spoiler, asked]) == [
        "prediction 'a' (cell 1): the first cell's answer already states 35.1ms"]  # 55 GB/s is the question's given
    assert series_order.answer_spares_predictions([FIRST, asked]) == []
