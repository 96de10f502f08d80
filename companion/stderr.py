"""Moved to ``companion.ground.stderr``: this path warns, and goes at the next version bump.
``from companion import stderr`` stays (the package's face)."""

import warnings

from companion.ground.stderr import *  # noqa: F401,F403

warnings.warn("companion.stderr moved to companion.ground.stderr", DeprecationWarning, stacklevel=2)
