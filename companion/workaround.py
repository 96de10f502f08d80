"""Moved to ``companion.timing.workaround``: this path warns, and goes at the next version bump.
``from companion import workaround`` stays (the package's face)."""

import warnings

from companion.timing.workaround import *  # noqa: F401,F403

warnings.warn("companion.workaround moved to companion.timing.workaround", DeprecationWarning, stacklevel=2)
