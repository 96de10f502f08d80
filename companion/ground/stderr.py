"""Capture what XLA's C++ side writes to the process's stderr (file descriptor 2).

XLA and the CUDA plugin log through absl straight to fd 2 ("Could not find cuda drivers",
autotuner notes, ...). In a notebook that text would land in cell outputs and change from run
to run; in a script it buries the answer. ``capture()`` redirects fd 2 into a temporary file
for the duration of a block and hands the text back, so callers can keep it in a report.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile


class Captured:
    """The text written to fd 2 inside a ``capture()`` block (filled in when the block ends)."""

    def __init__(self) -> None:
        self.text = ""

    def lines(self) -> list[str]:
        return [line for line in self.text.splitlines() if line.strip()]


@contextlib.contextmanager
def capture():
    """Redirect fd 2 to a temporary file inside the block; yields a ``Captured``."""
    captured = Captured()
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", errors="replace")
