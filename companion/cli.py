"""Moved to ``companion.surfaces.cli``: this path warns, and goes at the next version bump.
``from companion import cli`` stays (the package's face)."""

import warnings

from companion.surfaces.cli import *  # noqa: F401,F403

warnings.warn("companion.cli moved to companion.surfaces.cli", DeprecationWarning, stacklevel=2)
