"""Moved to ``companion.xla.dump``: this path warns, and goes at the next version bump.
``from companion import dump`` stays (the package's face)."""

import warnings

from companion.xla.dump import *  # noqa: F401,F403

warnings.warn("companion.dump moved to companion.xla.dump", DeprecationWarning, stacklevel=2)
