"""Moved to ``companion.timing.experiments``: this path warns, and goes at the next version bump.
``from companion import experiments`` stays (the package's face)."""

import warnings

from companion.timing.experiments import *  # noqa: F401,F403

warnings.warn("companion.experiments moved to companion.timing.experiments", DeprecationWarning, stacklevel=2)
