"""Moved to ``companion.xla.descriptors``: this path warns, and goes at the next version bump.
``from companion import descriptors`` stays (the package's face)."""

import warnings

from companion.xla.descriptors import *  # noqa: F401,F403

warnings.warn("companion.descriptors moved to companion.xla.descriptors", DeprecationWarning, stacklevel=2)
