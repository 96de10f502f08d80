"""Moved to ``companion.timing.roofline``: this path warns, and goes at the next version bump.
``from companion import roofline`` stays (the package's face)."""

import warnings

from companion.timing.roofline import *  # noqa: F401,F403

warnings.warn("companion.roofline moved to companion.timing.roofline", DeprecationWarning, stacklevel=2)
