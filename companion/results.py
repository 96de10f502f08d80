"""Moved to ``companion.ground.results``: this path warns, and goes at the next version bump.
``from companion import results`` stays (the package's face)."""

import warnings

from companion.ground.results import *  # noqa: F401,F403

warnings.warn("companion.results moved to companion.ground.results", DeprecationWarning, stacklevel=2)
