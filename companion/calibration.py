"""Moved to ``companion.timing.calibration``: this path warns, and goes at the next version bump.
``from companion import calibration`` stays (the package's face)."""

import warnings

from companion.timing.calibration import *  # noqa: F401,F403

warnings.warn("companion.calibration moved to companion.timing.calibration", DeprecationWarning, stacklevel=2)
