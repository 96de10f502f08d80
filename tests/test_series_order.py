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


@pytest.mark.xfail(strict=True, reason="issue 53 items 1-2: no notebook yet answers on its first screen or tags its "
                                      "predictions")
def test_every_notebook_of_the_series_is_in_order():
    assert {p.name: series_order.check(p) for p in sorted(series_order.NOTEBOOKS.glob("*.ipynb"))
            if series_order.check(p)} == {}
