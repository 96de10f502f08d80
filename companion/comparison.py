"""Moved to ``companion.measuring.comparison``: this path warns, and goes at the next version bump.
``from companion import comparison`` stays (the package's face)."""

import warnings

from companion.measuring.comparison import *  # noqa: F401,F403

warnings.warn("companion.comparison moved to companion.measuring.comparison", DeprecationWarning, stacklevel=2)
