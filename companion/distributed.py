"""Moved to ``companion.ground.distributed``: this path warns, and goes at the next version bump.
``from companion import distributed`` stays (the package's face)."""

import warnings

from companion.ground.distributed import *  # noqa: F401,F403

warnings.warn("companion.distributed moved to companion.ground.distributed", DeprecationWarning, stacklevel=2)
