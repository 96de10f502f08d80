"""Moved to ``companion.memory.budget``: this path warns, and goes at the next version bump.
``from companion import budget`` stays (the package's face)."""

import warnings

from companion.memory.budget import *  # noqa: F401,F403

warnings.warn("companion.budget moved to companion.memory.budget", DeprecationWarning, stacklevel=2)
