"""Moved to ``companion.compiling.compiler``: this path warns, and goes at the next version bump.
``from companion import compiler`` stays (the package's face)."""

import warnings

from companion.compiling.compiler import *  # noqa: F401,F403

warnings.warn("companion.compiler moved to companion.compiling.compiler", DeprecationWarning, stacklevel=2)
