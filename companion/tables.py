"""Moved to ``companion.surfaces.tables``: this path warns, and goes at the next version bump.
``from companion import tables`` stays (the package's face)."""

import warnings

from companion.surfaces.tables import *  # noqa: F401,F403

warnings.warn("companion.tables moved to companion.surfaces.tables", DeprecationWarning, stacklevel=2)
