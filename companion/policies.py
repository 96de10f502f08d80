"""Moved to ``companion.ground.policies``: this path warns, and goes at the next version bump.
``from companion import policies`` stays (the package's face)."""

import warnings

from companion.ground.policies import *  # noqa: F401,F403

warnings.warn("companion.policies moved to companion.ground.policies", DeprecationWarning, stacklevel=2)
