"""Moved to ``companion.timing.pgle``: this path warns, and goes at the next version bump.
``from companion import pgle`` stays (the package's face)."""

import warnings

from companion.timing.pgle import *  # noqa: F401,F403

warnings.warn("companion.pgle moved to companion.timing.pgle", DeprecationWarning, stacklevel=2)
