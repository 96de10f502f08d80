"""Moved to ``companion.surfaces.plots``: this path warns, and goes at the next version bump.
``from companion import plots`` stays (the package's face)."""

import warnings

from companion.surfaces.plots import *  # noqa: F401,F403

warnings.warn("companion.plots moved to companion.surfaces.plots", DeprecationWarning, stacklevel=2)
