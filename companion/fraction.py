"""Moved to ``companion.memory.fraction``: this path warns, and goes at the next version bump.
``from companion import fraction`` stays (the package's face)."""

import warnings

from companion.memory.fraction import *  # noqa: F401,F403

warnings.warn("companion.fraction moved to companion.memory.fraction", DeprecationWarning, stacklevel=2)
