"""The series' order as a learner meets it (issue 53, items 1 and 2): each notebook answers its own question on its
first screen, and asks each prediction before the cells that reveal it.

    .venv/bin/python scripts/series_order.py        # each notebook's problems, or "in order"

**The first cell** holds a line beginning ``**Question.**`` and, after it, a line beginning ``**Answer.**``.

**A prediction** is tagged in the cells' metadata (Jupyter's cell tags, which JupyterLab shows and edits):
``predict:NAME`` on the markdown cell that asks it (its answer folded in ``<details>``), ``reveal:NAME`` on the
first cell that shows the answer, ``check:NAME`` on the code cell that asserts it. Each name is asked, then
revealed, then checked, in that order, and each notebook asks at least ``MIN_PREDICTIONS``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
MIN_PREDICTIONS = 3
ROLES = ("predict", "reveal", "check")


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


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


def check(path: Path) -> list[str]:
    cells = json.loads(Path(path).read_text())["cells"]
    return first_screen(cells) + predictions(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        problems = check(path)
        print(f"{path.name}: " + ("in order" if not problems else "\n  " + "\n  ".join(problems)))


if __name__ == "__main__":
    main()
