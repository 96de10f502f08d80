"""Moved to ``companion.memory.heuristics``: this path warns, and goes at the next version bump.
``from companion import heuristics`` stays (the package's face)."""

import warnings

from companion.memory.heuristics import *  # noqa: F401,F403

warnings.warn("companion.heuristics moved to companion.memory.heuristics", DeprecationWarning, stacklevel=2)
