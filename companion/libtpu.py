"""Moved to ``companion.hardware.libtpu``: this path warns, and goes at the next version bump.
``from companion import libtpu`` stays (the package's face)."""

import warnings

from companion.hardware.libtpu import *  # noqa: F401,F403

warnings.warn("companion.libtpu moved to companion.hardware.libtpu", DeprecationWarning, stacklevel=2)
