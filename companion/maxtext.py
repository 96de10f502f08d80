"""Moved to ``companion.planning.maxtext``: this path warns, and goes at the next version bump.
``from companion import maxtext`` stays (the package's face)."""

import warnings

from companion.planning.maxtext import *  # noqa: F401,F403

warnings.warn("companion.maxtext moved to companion.planning.maxtext", DeprecationWarning, stacklevel=2)
