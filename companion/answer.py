"""Moved to ``companion.planning.answer``: this path warns, and goes at the next version bump.
``from companion import answer`` stays (the package's face)."""

import warnings

from companion.planning.answer import *  # noqa: F401,F403

warnings.warn("companion.answer moved to companion.planning.answer", DeprecationWarning, stacklevel=2)
