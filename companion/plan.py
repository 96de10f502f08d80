"""Moved to ``companion.planning.plan``: this path warns, and goes at the next version bump.
``from companion import plan`` stays (the package's face)."""

import warnings

from companion.planning.plan import *  # noqa: F401,F403

warnings.warn("companion.plan moved to companion.planning.plan", DeprecationWarning, stacklevel=2)
