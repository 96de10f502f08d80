"""scripts/series_length.py: the series' main line counted as issue 53 counts it (words outside <details>)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import series_length  # noqa: E402


def _notebook(tmp_path, cells) -> Path:
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_planted_notebook_is_counted_word_for_word(tmp_path):
    md = {"cell_type": "markdown", "source": [
        "# Title here\n", "Five words, and 42 GiB.\n", "| a | b |\n", "|---|---|\n", "| 1 | 2 |\n",
        "<details><summary>Solution</summary>\n", "three folded words <details>nested two</details>\n",
        "</details>\n", "back outside\n"]}
    exercises = {"cell_type": "markdown", "source": "## Exercises\n\n**1.** Predict it.\n\n**2.** Then check.\n"}
    code = {"cell_type": "code", "source": "x = 1", "outputs": [
        {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}},
        {"output_type": "display_data", "data": {"text/markdown": "| k | v |\n|---|---|\n| x | 1 |\n"}},
        {"output_type": "execute_result", "data": {"text/html": "<table><tr><td>1</td></tr></table>"}}]}
    n = series_length.measure(_notebook(tmp_path, [md, exercises, code]))
    # main line: "Title here" 2; "Five words, and GiB." 4 ("42" has no letter); the table's "a", "b" 2;
    # "back outside" 2; the exercises cell: "Exercises", "Predict it.", "Then check." 5 ("**1.**" has none)
    assert n.words == 2 + 4 + 2 + 2 + 5
    assert n.folded_words == len("Solution</summary> three folded words nested two".split())
    assert (n.tables, n.figures, n.exercises, n.code_cells, n.markdown_cells) == (3, 1, 2, 1, 2)
    assert n.minutes == pytest.approx(n.words / 238 + 3 + 1 + 0.5)


def test_the_series_is_measured_and_its_goal_is_stated():
    lengths = series_length.series()
    assert [x.notebook[:2] for x in lengths] == sorted(x.notebook[:2] for x in lengths) and len(lengths) >= 8
    assert all(x.words > 0 and x.exercises >= 3 for x in lengths)
    table = series_length.markdown_table(lengths)
    assert f"**{sum(x.words for x in lengths):,}**" in table


def test_the_series_main_line_is_within_issue_53s_goal():
    assert sum(x.words for x in series_length.series()) <= series_length.GOAL_WORDS


def test_the_appendix_is_measured_apart_from_the_main_line(tmp_path):
    cell = {"cell_type": "markdown", "source": "## Exercises\n**1.** One.\n**2.** Two.\n**3.** Three.\n"}
    for name in ("00_first.ipynb", "01_second.ipynb", "A1_deeper.ipynb"):
        (tmp_path / name).write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert [x.notebook for x in series_length.series(tmp_path)] == ["00_first.ipynb", "01_second.ipynb"]
    assert [x.notebook for x in series_length.series(tmp_path, series_length.APPENDIX)] == ["A1_deeper.ipynb"]
