"""Re-execute notebooks in place (what `make notebooks` runs): fresh kernel, top to bottom.

    .venv/bin/python scripts/execute_notebooks.py notebooks/*.ipynb

Each notebook runs with its own folder as the working directory, in this interpreter's
environment (the same kernel nbval uses with --nbval-current-env). Timing metadata is not
recorded, so a re-run only changes outputs that really changed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths: list[str]) -> int:
    for p in paths:
        seconds = execute(Path(p))
        print(f"{p}: executed in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
