"""Moved to ``companion.ground.notation``: this path warns, and goes at the next version bump.
``from companion import notation`` stays (the package's face)."""

import warnings

from companion.ground.notation import *  # noqa: F401,F403

warnings.warn("companion.notation moved to companion.ground.notation", DeprecationWarning, stacklevel=2)
