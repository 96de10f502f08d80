"""Moved to ``companion.hardware.fit``: this path warns, and goes at the next version bump.
``from companion import fit`` stays (the package's face)."""

import warnings

from companion.hardware.fit import *  # noqa: F401,F403

warnings.warn("companion.fit moved to companion.hardware.fit", DeprecationWarning, stacklevel=2)
