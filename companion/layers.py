"""Moved to ``companion.ground.layers``: this path warns, and goes at the next version bump.
``from companion import layers`` stays (the package's face)."""

import warnings

from companion.ground.layers import *  # noqa: F401,F403

warnings.warn("companion.layers moved to companion.ground.layers", DeprecationWarning, stacklevel=2)
