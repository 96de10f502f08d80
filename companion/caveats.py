"""Moved to ``companion.ground.caveats``: this path warns, and goes at the next version bump.
``from companion import caveats`` stays (the package's face)."""

import warnings

from companion.ground.caveats import *  # noqa: F401,F403

warnings.warn("companion.caveats moved to companion.ground.caveats", DeprecationWarning, stacklevel=2)
