"""Moved to ``companion.ground.state``: this path warns, and goes at the next version bump.
``from companion import state`` stays (the package's face)."""

import warnings

from companion.ground.state import *  # noqa: F401,F403

warnings.warn("companion.state moved to companion.ground.state", DeprecationWarning, stacklevel=2)
