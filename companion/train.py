"""Moved to ``companion.compiling.train``: this path warns, and goes at the next version bump.
``from companion import train`` stays (the package's face)."""

import warnings

from companion.compiling.train import *  # noqa: F401,F403

warnings.warn("companion.train moved to companion.compiling.train", DeprecationWarning, stacklevel=2)
