"""scripts/prose_numbers.py: a number the prose states with a unit is one a cell above printed (issue 53, item 6)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import prose_numbers  # noqa: E402


def _notebook(tmp_path, prose: str) -> Path:
    cells = [
        {"cell_type": "markdown", "source": "Before any output: 80 GB of HBM (the datasheet)."},
        {"cell_type": "code", "source": "print(...)", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "peak 21.61 GiB, step 105.3 ms\n"},
            {"output_type": "display_data", "data": {"text/markdown": "| term | GiB |\n|---|---|\n| logits | 3.914 |\n"}}]},
        {"cell_type": "markdown", "source": prose}]
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _uncited(path, allow=None):
    return [n.text for n in prose_numbers.check(path, allow) if not n.cited]


def test_a_number_is_cited_as_printed_or_rounded_to_its_digits(tmp_path):
    path = _notebook(tmp_path, "The peak is 21.61 GiB (21.6 GiB, about 22 GiB); the logits 3.9 GiB; `99 GiB` is code.")
    assert _uncited(path) == ["80 GB"]  # before the output that could cite it, and not allowed
    assert _uncited(path, {"80GB": "the H100 SXM datasheet's HBM3"}) == []


def test_a_planted_mismatch_fails(tmp_path):
    assert _uncited(_notebook(tmp_path, "The peak is 21.7 GiB."), {"80GB": "datasheet"}) == ["21.7 GiB"]
    assert _uncited(_notebook(tmp_path, "A step takes 106 ms."), {"80GB": "datasheet"}) == ["106 ms"]


def test_a_planted_uncited_number_fails(tmp_path):
    assert _uncited(_notebook(tmp_path, "Offload wins above 483 GB/s."), {"80GB": "datasheet"}) == ["483 GB/s"]


def test_spellings_are_one_number():
    assert prose_numbers.normalize("1,024", "x") == "1024×" and prose_numbers.normalize("−6.7", "%") == "-6.7%"
    assert [n for _, n in prose_numbers.numbers_in("8× faster, 3.2x, 12 %, 0.9 s and 14 GB/s")] == [
        "8×", "3.2×", "12%", "0.9s", "14GB/s"]


def test_every_prose_number_of_the_series_is_cited():
    assert [f"{n.notebook} cell {n.cell}: {n.text}" for n in prose_numbers.series() if not n.cited] == []


def _cells_notebook(tmp_path, cells) -> Path:
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _printing(text, tags=(), source="print(...)"):
    return {"cell_type": "code", "source": source, "metadata": {"tags": list(tags)},
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}


def test_the_answer_a_prediction_and_a_solution_are_cited_by_what_reveals_them(tmp_path):
    cells = [
        {"cell_type": "markdown", "source": "**Question.** How big?\n**Answer.** 21.61 GiB, in 105.3 ms."},
        {"cell_type": "markdown", "source": "Predict the step. <details>It takes 105.3 ms.</details>",
         "metadata": {"tags": ["predict:step"]}},
        _printing("peak 21.61 GiB\n"),
        _printing("step 105.3 ms\n", tags=["reveal:step"]),
        {"cell_type": "markdown", "source": "## Exercises\n**1.** Halve it. <details><summary>Solution</summary>"
                                            "About 52.6 ms, or 10.8 GiB.</details>"},
        _printing("exercises 1-1: answers check out\n", source="# The exercises' answers, checked\n"
                                                               "assert round(half, 1) == 52.6  # ms"),
        {"cell_type": "markdown", "source": "## Takeaways\nIt peaks at 21.61 GiB in 105.3 ms."}]
    assert _uncited(_cells_notebook(tmp_path, cells)) == ["10.8 GiB"]  # the solution's one number no check asserts


def test_a_prediction_is_not_cited_by_outputs_after_its_reveal_nor_the_answer_by_nothing(tmp_path):
    cells = [
        {"cell_type": "markdown", "source": "**Question.** How big?\n**Answer.** 99 GiB."},
        {"cell_type": "markdown", "source": "Predict. <details>105.3 ms</details>", "metadata": {"tags": ["predict:s"]}},
        _printing("peak 21.61 GiB\n", tags=["reveal:s"]),
        _printing("step 105.3 ms\n")]
    assert _uncited(_cells_notebook(tmp_path, cells)) == ["99 GiB", "105.3 ms"]
