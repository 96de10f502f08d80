"""Moved to ``companion.timing.collectives``: this path warns, and goes at the next version bump.
``from companion import collectives`` stays (the package's face)."""

import warnings

from companion.timing.collectives import *  # noqa: F401,F403

warnings.warn("companion.collectives moved to companion.timing.collectives", DeprecationWarning, stacklevel=2)
