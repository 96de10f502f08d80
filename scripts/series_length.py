"""How long the series is to read: per notebook, the main line's words, what is folded, tables, figures, exercises,
and an estimated reading time (issue 53's before-and-after table and its goal: main-line words <= 14,000).

    .venv/bin/python scripts/series_length.py            # a table of the main line (notebooks/NN_*), the total,
                                                         # and the appendix (notebooks/A1_*) apart
    .venv/bin/python scripts/series_length.py --json     # the same as JSON

**Words** are whitespace-separated tokens with at least one letter, in markdown cells, outside ``<details>`` blocks
(the main line a learner reads); words inside them are counted apart as folded. A markdown table, in a cell or in
an output, is one table (its header rule, ``|---``); an HTML ``<table>`` in an output is one. A figure is an image
output (PNG, SVG or JPEG; a widget's static fallback is one). An exercise is a bold number at a line's start in the
"## Exercises" section (``series_order.exercises``).

**Minutes** are a floor, not a measurement: the main line at 238 words a minute (Brysbaert 2019, "How many words do
we read per minute?", J. Memory and Language 109: the mean for silent reading of English non-fiction), plus one
minute per table and per figure and half a minute per code cell (assumptions: to look at it and its output). A
careful learner who predicts, checks and does the exercises takes longer; the review that prompted issue 53 put the
series at 10-12 hours.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

from prose_numbers import source as _source
from series_order import exercises  # the series' one reading of an Exercises section

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
GOAL_WORDS = 14_000  # issue 53: the series' main line

WORDS_PER_MINUTE = 238
MINUTES_PER_TABLE = MINUTES_PER_FIGURE = 1.0
MINUTES_PER_CODE_CELL = 0.5

_DETAILS = re.compile(r"(<details\b[^>]*>|</details>)", re.IGNORECASE)
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)+\|?\s*$", re.MULTILINE)
_IMAGES = ("image/png", "image/svg+xml", "image/jpeg")


@dataclasses.dataclass(frozen=True)
class Length:
    notebook: str
    markdown_cells: int
    code_cells: int
    words: int  # the main line: markdown outside <details>
    folded_words: int  # markdown inside <details>
    tables: int
    figures: int
    exercises: int

    @property
    def minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + MINUTES_PER_TABLE * self.tables + MINUTES_PER_FIGURE * self.figures
                + MINUTES_PER_CODE_CELL * self.code_cells)

    def row(self) -> dict:
        return {**dataclasses.asdict(self), "minutes": round(self.minutes)}


def split_details(markdown: str) -> tuple[str, str]:
    """The text outside ``<details>`` blocks and the text inside them (nested blocks count as inside)."""
    outside, inside, depth = [], [], 0
    for piece in _DETAILS.split(markdown):
        if _DETAILS.fullmatch(piece):
            depth = depth + 1 if not piece.startswith("</") else max(depth - 1, 0)
        else:
            (inside if depth else outside).append(piece)
    return "".join(outside), "".join(inside)


def words(text: str) -> int:
    return sum(bool(re.search(r"[A-Za-z]", token)) for token in text.split())


def _output_tables_and_figures(cell: dict) -> tuple[int, int]:
    tables = figures = 0
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        figures += any(kind in data for kind in _IMAGES)
        markdown = data.get("text/markdown")
        html = data.get("text/html")
        if markdown is not None:
            tables += len(_TABLE_RULE.findall(markdown if isinstance(markdown, str) else "".join(markdown)))
        elif html is not None:
            tables += (html if isinstance(html, str) else "".join(html)).lower().count("<table")
    return tables, figures


def measure(path: Path) -> Length:
    """One notebook's length (``Length``)."""
    cells = json.loads(Path(path).read_text())["cells"]
    markdown = [_source(c) for c in cells if c["cell_type"] == "markdown"]
    main, folded = zip(*(split_details(m) for m in markdown)) if markdown else ((), ())
    tables = sum(len(_TABLE_RULE.findall(m)) for m in main)
    figures = 0
    for c in cells:
        t, f = _output_tables_and_figures(c)
        tables, figures = tables + t, figures + f
    return Length(Path(path).name, len(markdown), sum(c["cell_type"] == "code" for c in cells),
                  sum(map(words, main)), sum(map(words, folded)), tables, figures, len(exercises(cells)))


MAIN_LINE = "[0-9][0-9]_*.ipynb"  # 00_..., 09_...: the lessons, in order
APPENDIX = "A[0-9]_*.ipynb"  # A1_...: what the lessons point to and do not need (outside the goal)


def series(folder: Path = NOTEBOOKS, pattern: str = MAIN_LINE) -> list[Length]:
    """The main line's notebooks measured (``pattern=APPENDIX``: the appendix's)."""
    return [measure(p) for p in sorted(Path(folder).glob(pattern))]


def markdown_table(lengths: list[Length], total_label: str = "series") -> str:
    head = "| notebook | words | folded | tables | figures | exercises | code cells | minutes (floor) |"
    rows = [f"| {x.notebook} | {x.words:,} | {x.folded_words:,} | {x.tables} | {x.figures} | {x.exercises} | "
            f"{x.code_cells} | {x.minutes:.0f} |" for x in lengths]
    total = (f"| **{total_label}** | **{sum(x.words for x in lengths):,}** | {sum(x.folded_words for x in lengths):,} | "
             f"{sum(x.tables for x in lengths)} | {sum(x.figures for x in lengths)} | "
             f"{sum(x.exercises for x in lengths)} | {sum(x.code_cells for x in lengths)} | "
             f"{sum(x.minutes for x in lengths):.0f} |")
    return "\n".join([head, "|---|---:|---:|---:|---:|---:|---:|---:|", *rows, total])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="JSON instead of a markdown table")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="the folder of notebooks to measure")
    args = parser.parse_args()
    lengths = series(args.notebooks)
    total = sum(x.words for x in lengths)
    if args.json:
        print(json.dumps({"notebooks": [x.row() for x in lengths], "words": total, "goal_words": GOAL_WORDS,
                          "appendix": [x.row() for x in series(args.notebooks, APPENDIX)]},
                         indent=1))
        return
    print(markdown_table(lengths))
    appendix = series(args.notebooks, APPENDIX)
    if appendix:
        print("\nAppendix (outside the goal):\n" + markdown_table(appendix, "appendix"))
    print(f"\nmain-line words: {total:,} (goal <= {GOAL_WORDS:,}: {'met' if total <= GOAL_WORDS else 'not met'})")


if __name__ == "__main__":
    main()
