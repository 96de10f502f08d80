"""Moved to ``companion.ground.freshness``: this path warns, and goes at the next version bump.
``from companion import freshness`` stays (the package's face)."""

import warnings

from companion.ground.freshness import *  # noqa: F401,F403

warnings.warn("companion.freshness moved to companion.ground.freshness", DeprecationWarning, stacklevel=2)
