"""Moved to ``companion.hardware.targets``: this path warns, and goes at the next version bump.
``from companion import targets`` stays (the package's face)."""

import warnings

from companion.hardware.targets import *  # noqa: F401,F403

warnings.warn("companion.targets moved to companion.hardware.targets", DeprecationWarning, stacklevel=2)
