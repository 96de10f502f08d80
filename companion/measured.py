"""Moved to ``companion.measuring.measured``: this path warns, and goes at the next version bump.
``from companion import measured`` stays (the package's face)."""

import warnings

from companion.measuring.measured import *  # noqa: F401,F403

warnings.warn("companion.measured moved to companion.measuring.measured", DeprecationWarning, stacklevel=2)
