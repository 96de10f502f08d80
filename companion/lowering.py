"""Moved to ``companion.ground.lowering``: this path warns, and goes at the next version bump.
``from companion import lowering`` stays (the package's face)."""

import warnings

from companion.ground.lowering import *  # noqa: F401,F403

warnings.warn("companion.lowering moved to companion.ground.lowering", DeprecationWarning, stacklevel=2)
