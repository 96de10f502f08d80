"""Moved to ``companion.timing.published``: this path warns, and goes at the next version bump.
``from companion import published`` stays (the package's face)."""

import warnings

from companion.timing.published import *  # noqa: F401,F403

warnings.warn("companion.published moved to companion.timing.published", DeprecationWarning, stacklevel=2)
