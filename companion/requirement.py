"""Moved to ``companion.timing.requirement``: this path warns, and goes at the next version bump.
``from companion import requirement`` stays (the package's face)."""

import warnings

from companion.timing.requirement import *  # noqa: F401,F403

warnings.warn("companion.requirement moved to companion.timing.requirement", DeprecationWarning, stacklevel=2)
