"""Every number the series' prose states with a unit, held against what its cells printed (issue 53, item 6).

    .venv/bin/python scripts/prose_numbers.py            # each notebook's uncited numbers, and the count
    .venv/bin/python scripts/prose_numbers.py --all      # every number found, cited or not

A printed number cites with its unit, or bare in an output that names the unit elsewhere (a table's cell under a
"GiB" header, ``attention 0.11`` beside "GiB:").

A **prose number** is a number followed by a unit a learner would read as a measurement — ms, µs, s, GiB, GB, MiB,
GB/s, TFLOP(/s), GFLOP, %, × or x — in a markdown cell, outside code spans. It is **cited** where the same number
and unit appear in an output of a code cell above it in the same notebook — as printed, or rounded to the digits the prose gives (a printed
22.3 % cites a prose 22 %, never 23 %) — or where ``notebooks/prose_numbers.json`` allows it with a reason (a datasheet figure, a
setting the reader chooses, a number the prose derives and a test checks). Anything else is uncited: either the
prose is wrong, or it cites an output that does not exist.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
ALLOWED = NOTEBOOKS / "prose_numbers.json"

_UNIT = r"(?:ms|µs|us|s|GiB|GB/s|GB|MiB|MB|TB/s|TFLOP/s|TFLOP|GFLOP|%|×|x)"
_NUMBER = re.compile(r"(?<![\w.])([-+−]?\d[\d,]*(?:\.\d+)?)\s?(" + _UNIT + r")(?![\w/])")
_CODE_SPAN = re.compile(r"`[^`]*`")


@dataclasses.dataclass(frozen=True)
class ProseNumber:
    notebook: str
    cell: int
    text: str  # as the prose writes it, e.g. "21.6 GiB"
    cited: str  # "output" | "allowed" | "" (uncited)


def normalize(number: str, unit: str) -> str:
    """One spelling of a number and its unit: thousands' commas and a space before the unit dropped, a Unicode
    minus as '-', 'x' as '×'."""
    return number.replace(",", "").replace("−", "-").lstrip("+") + {"x": "×", "us": "µs"}.get(unit, unit)


def cites(printed: set[str], number: str) -> bool:
    """Whether a printed number (normalized) says ``number``: the same, or the same rounded to its digits."""
    if number in printed:
        return True
    value, unit = _split(number)
    digits = len(value.split(".")[1]) if "." in value else 0
    return any(u == unit and round(float(v), digits) == float(value) for v, u in map(_split, printed))


def _split(normalized: str) -> tuple[str, str]:
    m = re.match(r"(-?[\d.]+)(.*)", normalized)
    return m.group(1), m.group(2)


def numbers_in(text: str) -> list[tuple[str, str]]:
    """``(as written, normalized)`` for each number with a unit in ``text`` (code spans left out)."""
    return [(m.group(0), normalize(m.group(1), m.group(2))) for m in _NUMBER.finditer(_CODE_SPAN.sub(" ", text))]


_BARE = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?![\w.])")
_UNIT_TOKEN = re.compile(r"(?<![\w/])" + _UNIT + r"(?![\w/])")


def printed_numbers(text: str) -> set[str]:
    """The numbers an output prints, normalized with their units: a number followed by its unit, and a bare number
    (a table's cell, ``attention 0.11`` beside "GiB:") with each unit the same output names elsewhere."""
    found = {n for _, n in numbers_in(text)}
    units = {"×" if u == "x" else u for u in _UNIT_TOKEN.findall(_NUMBER.sub(" ", text))} | {_split(n)[1] for n in found}
    for bare in _BARE.findall(text.replace(",", "")):
        found |= {bare + u for u in units}
    return found


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def source(cell: dict) -> str:
    """A cell's source as one string (a notebook stores it as a string or a list of lines)."""
    return _text(cell.get("source", ""))


def _printed(cell: dict) -> str:
    out = []
    for o in cell.get("outputs", []):  # each output its own block: a unit names the numbers of its own output
        out.append(_text(o.get("text", "")))
        data = o.get("data", {})
        for kind in ("text/plain", "text/markdown", "text/html"):
            out.append(_text(data.get(kind, "")))
    return "\n".join(out)


def allowed(path: Path = ALLOWED) -> dict[str, dict[str, str]]:
    """notebook -> normalized number -> why the prose may state it without an output above it."""
    return json.loads(path.read_text()) if path.exists() else {}


CHECK = "# The exercises' answers, checked"  # the first line of a notebook's one check cell
_SOLUTION = re.compile(r"<details><summary>Solution</summary>(.*?)</details>", re.S)


def _tags(cell: dict, role: str) -> list[str]:
    return [t.partition(":")[2] for t in cell.get("metadata", {}).get("tags", []) if t.startswith(role + ":")]


def _citing(cells: list[dict]) -> dict[int, set[str]]:
    """cell index -> what cites its prose beyond the outputs above it (the rules in ``check``)."""
    printed_to = []  # printed_to[i]: every number printed by the cells up to and including cell i
    seen: set[str] = set()
    for cell in cells:
        if cell["cell_type"] == "code":
            seen = seen | printed_numbers(_printed(cell))
        printed_to.append(seen)
    reveal = {name: i for i, c in enumerate(cells) for name in _tags(c, "reveal")}
    extra = {0: printed_to[-1] if cells else set()}
    for i, cell in enumerate(cells):
        for name in _tags(cell, "predict"):
            if name in reveal:
                extra[i] = extra.get(i, set()) | printed_to[reveal[name]]
    checks = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and source(c).startswith(CHECK)]
    if checks:
        literals = printed_numbers(source(cells[checks[0]]))  # each literal with every unit its source names
        extra["solutions"] = printed_to[checks[0]] | literals
    return extra


def check(notebook: Path, allow: dict[str, str] | None = None) -> list[ProseNumber]:
    """Every prose number of one notebook, each with how it is cited. Beyond the outputs above it, three things
    cite a number: cell 0's answer is cited by any output of the notebook (it states what the notebook shows); a
    prediction's folded answer (a ``predict:NAME`` cell) by the outputs up to its ``reveal:NAME`` cell; an
    exercise's folded solution by the outputs up to the exercises' check cell and the literals that cell asserts."""
    allow = allow or {}
    cells = json.loads(Path(notebook).read_text())["cells"]
    citing = _citing(cells)
    seen: set[str] = set()
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            seen |= printed_numbers(_printed(cell))
            continue
        if cell["cell_type"] != "markdown":
            continue
        text = source(cell)
        solutions = {n for block in _SOLUTION.findall(text) for _, n in numbers_in(block)}
        for written, n in numbers_in(text):
            cited_by = seen | citing.get(i, set()) | (citing.get("solutions", set()) if n in solutions else set())
            found.append(ProseNumber(Path(notebook).name, i, written, "output" if cites(cited_by, n) else
                                     "allowed" if n in allow else ""))
    return found


def series(folder: Path = NOTEBOOKS) -> list[ProseNumber]:
    allow = allowed(folder / ALLOWED.name)
    return [n for p in sorted(Path(folder).glob("*.ipynb")) for n in check(p, allow.get(p.name, {}))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every prose number, cited or not")
    args = parser.parse_args()
    found = series()
    for n in found:
        if args.all or not n.cited:
            print(f"{n.notebook} cell {n.cell}: {n.text!r} {n.cited or 'UNCITED'}")
    uncited = [n for n in found if not n.cited]
    print(f"{len(found)} prose numbers, {len(found) - len(uncited)} cited, {len(uncited)} uncited")


if __name__ == "__main__":
    main()
