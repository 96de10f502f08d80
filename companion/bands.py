"""Moved to ``companion.timing.bands``: this path warns, and goes at the next version bump.
``from companion import bands`` stays (the package's face)."""

import warnings

from companion.timing.bands import *  # noqa: F401,F403

warnings.warn("companion.bands moved to companion.timing.bands", DeprecationWarning, stacklevel=2)
