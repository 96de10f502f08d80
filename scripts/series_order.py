"""The series' order as a learner meets it (issue 53, items 1 and 2): each notebook answers its own question on its
first screen, and asks each prediction before the cells that reveal it.

    .venv/bin/python scripts/series_order.py        # each notebook's problems, or "in order"

**The first cell** holds a line beginning ``**Question.**`` and, after it, a line beginning ``**Answer.**``.

**A prediction** is tagged in the cells' metadata (Jupyter's cell tags, which JupyterLab shows and edits):
``predict:NAME`` on the markdown cell that asks it (its answer folded in ``<details>``), ``reveal:NAME`` on the
first cell that shows the answer, ``check:NAME`` on the code cell that asserts it. Each name is asked, then
revealed, then checked, in that order, and each notebook asks at least ``MIN_PREDICTIONS``. The first cell's
answer gives none of them away: it states no number a prediction's folded answer holds and its question does not.

**An exercise** needs only the main line: its question sends the learner to no folded "Deeper" block and to no
appendix notebook (``A1_…``). **A reference** ("notebook 04", "notebook 06, section 3") names a notebook that
exists and a section it has.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from prose_numbers import numbers_in  # one reading of "a number with a unit" for both checks
from prose_numbers import source as _source

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
MIN_PREDICTIONS = 3
ROLES = ("predict", "reveal", "check")


def first_screen(cells: list[dict]) -> list[str]:
    """What the first cell lacks: the question, then the answer."""
    text = _source(cells[0]) if cells else ""
    question = re.search(r"^\*\*Question\.\*\*", text, re.MULTILINE)
    answer = re.search(r"^\*\*Answer\.\*\*", text, re.MULTILINE)
    if not question:
        return ["the first cell states no **Question.**"]
    if not answer or answer.start() < question.start():
        return ["the first cell gives no **Answer.** after its question"]
    return []


def tagged(cells: list[dict]) -> dict[str, dict[str, list[int]]]:
    """prediction name -> role -> the indices of the cells tagged with it."""
    found: dict[str, dict[str, list[int]]] = {}
    for i, cell in enumerate(cells):
        for tag in cell.get("metadata", {}).get("tags", []):
            role, _, name = tag.partition(":")
            if role in ROLES and name:
                found.setdefault(name, {r: [] for r in ROLES})[role].append(i)
    return found


def predictions(cells: list[dict]) -> list[str]:
    """What is out of order among the predictions: one asked after its reveal, revealed after its check, missing a
    role, or a role given twice; and too few predictions."""
    problems = []
    found = tagged(cells)
    for name, roles in sorted(found.items()):
        missing = [r for r in ROLES if not roles[r]]
        twice = [r for r in ROLES if len(roles[r]) > 1]
        if missing or twice:
            problems.append(f"prediction {name!r}: " + "; ".join(
                [f"no {r}:{name} cell" for r in missing] + [f"{r}:{name} on {len(roles[r])} cells" for r in twice]))
            continue
        (asked,), (revealed,), (checked,) = (roles[r] for r in ROLES)
        if not asked < revealed <= checked:
            problems.append(f"prediction {name!r}: asked in cell {asked}, revealed in cell {revealed}, checked in "
                            f"cell {checked} (ask, then reveal, then check)")
        elif "<details" not in _source(cells[asked]):
            problems.append(f"prediction {name!r}: its answer is not folded in the asking cell {asked}")
    if len(found) < MIN_PREDICTIONS:
        problems.append(f"{len(found)} prediction(s) tagged; a notebook asks at least {MIN_PREDICTIONS}")
    return problems


def answer_spares_predictions(cells: list[dict]) -> list[str]:
    """Predictions the first cell's answer gives away: a number (with its unit) that a prediction's folded answer
    states and its question does not, already stated in the first cell before its folded block."""
    def stated(text: str) -> set[str]:
        return {n for _, n in numbers_in(text)}

    answer = stated(_source(cells[0]).split("<details", 1)[0]) if cells else set()
    problems = []
    for i, cell in enumerate(cells):
        for name in (t.partition(":")[2] for t in cell.get("metadata", {}).get("tags", []) if t.startswith("predict:")):
            question, _, folded = _source(cell).partition("<details")
            given_away = (answer & stated(folded)) - stated(question)
            if given_away:
                problems.append(f"prediction {name!r} (cell {i}): the first cell's answer already states "
                                f"{', '.join(sorted(given_away))}")
    return problems


_LEANS_ON_FOLD = re.compile(r"\bA\d_|\bA\d\b|appendix|Deeper", re.IGNORECASE)


def exercises(cells: list[dict]) -> dict[int, str]:
    """{number: the exercise's text, solution included} from the notebook's Exercises section (none without one)."""
    text = "\n".join(_source(c) for c in cells if c["cell_type"] == "markdown")
    if "## Exercises" not in text:
        return {}
    section = text.split("## Exercises", 1)[1].split("## Takeaways", 1)[0]
    parts = re.split(r"^\*\*(\d+)\.\*\*", section, flags=re.M)
    return {int(number): body for number, body in zip(parts[1::2], parts[2::2])}


def exercises_stand_alone(cells: list[dict]) -> list[str]:
    """Exercises that send the learner to a folded "Deeper" block or to the appendix: an exercise needs only the
    main line (its own folded solution aside)."""
    problems = []
    for number, body in exercises(cells).items():
        asked = re.sub(r"<details>.*?</details>", "", body, flags=re.S)
        if m := _LEANS_ON_FOLD.search(asked):
            problems.append(f"exercise {number} leans on {m.group(0)!r}: an exercise needs only the main line")
    return problems


_NOTEBOOKS_NAMED = re.compile(r"\b[Nn]otebooks? ((?:\d\d|A\d)(?:(?:, | and | or |-|–)(?:\d\d|A\d))*)")
_SECTION_NAMED = re.compile(r"\b[Nn]otebook (\d\d|A\d)(?:'s|,)? section (\d+)")


def references(text: str, folder: Path = NOTEBOOKS) -> list[str]:
    """Each "notebook NN" in ``text`` that names no notebook of ``folder``, and each "notebook NN, section K" whose
    notebook has no "## K." heading (the series renumbered: a reference must follow)."""
    names = {p.name.split("_")[0]: p for p in Path(folder).glob("*.ipynb")}
    problems = []
    for m in _NOTEBOOKS_NAMED.finditer(text):
        for number in re.findall(r"\d\d|A\d", m.group(1)):
            if number not in names:
                problems.append(f"{m.group(0)!r}: no notebook {number}")
    for m in _SECTION_NAMED.finditer(text):
        number, section = m.groups()
        if number in names:
            headings = "\n".join(_source(c) for c in json.loads(names[number].read_text())["cells"]
                                 if c["cell_type"] == "markdown")
            if not re.search(rf"^##\s+{section}\.", headings, re.M):
                problems.append(f"{m.group(0)!r}: notebook {number} has no section {section}")
    return problems


def check(path: Path) -> list[str]:
    cells = json.loads(Path(path).read_text())["cells"]
    prose = "\n".join(_source(c) for c in cells if c["cell_type"] == "markdown")
    return (first_screen(cells) + predictions(cells) + answer_spares_predictions(cells) + exercises_stand_alone(cells)
            + references(prose, Path(path).parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        problems = check(path)
        print(f"{path.name}: " + ("in order" if not problems else "\n  " + "\n  ".join(problems)))


if __name__ == "__main__":
    main()
