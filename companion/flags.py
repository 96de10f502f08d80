"""Moved to ``companion.hardware.flags``: this path warns, and goes at the next version bump.
``from companion import flags`` stays (the package's face)."""

import warnings

from companion.hardware.flags import *  # noqa: F401,F403

warnings.warn("companion.flags moved to companion.hardware.flags", DeprecationWarning, stacklevel=2)
