"""Moved to ``companion.ground.sharding``: this path warns, and goes at the next version bump.
``from companion import sharding`` stays (the package's face)."""

import warnings

from companion.ground.sharding import *  # noqa: F401,F403

warnings.warn("companion.sharding moved to companion.ground.sharding", DeprecationWarning, stacklevel=2)
