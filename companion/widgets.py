"""Moved to ``companion.surfaces.widgets``: this path warns, and goes at the next version bump.
``from companion import widgets`` stays (the package's face)."""

import warnings

from companion.surfaces.widgets import *  # noqa: F401,F403

warnings.warn("companion.widgets moved to companion.surfaces.widgets", DeprecationWarning, stacklevel=2)
