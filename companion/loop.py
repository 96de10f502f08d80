"""Moved to ``companion.measuring.loop``: this path warns, and goes at the next version bump.
``from companion import loop`` stays (the package's face)."""

import warnings

from companion.measuring.loop import *  # noqa: F401,F403

warnings.warn("companion.loop moved to companion.measuring.loop", DeprecationWarning, stacklevel=2)
