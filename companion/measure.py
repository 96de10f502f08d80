"""Moved to ``companion.measuring.measure``: this path warns, and goes at the next version bump.
``from companion import measure`` stays (the package's face)."""

import warnings

from companion.measuring.measure import *  # noqa: F401,F403

warnings.warn("companion.measure moved to companion.measuring.measure", DeprecationWarning, stacklevel=2)
