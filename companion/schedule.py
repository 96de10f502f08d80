"""Moved to ``companion.timing.schedule``: this path warns, and goes at the next version bump.
``from companion import schedule`` stays (the package's face)."""

import warnings

from companion.timing.schedule import *  # noqa: F401,F403

warnings.warn("companion.schedule moved to companion.timing.schedule", DeprecationWarning, stacklevel=2)
