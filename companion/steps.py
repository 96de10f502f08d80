"""Moved to ``companion.timing.steps``: this path warns, and goes at the next version bump.
``from companion import steps`` stays (the package's face)."""

import warnings

from companion.timing.steps import *  # noqa: F401,F403

warnings.warn("companion.steps moved to companion.timing.steps", DeprecationWarning, stacklevel=2)
