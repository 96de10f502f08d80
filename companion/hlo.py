"""Moved to ``companion.xla.hlo``: this path warns, and goes at the next version bump.
``from companion import hlo`` stays (the package's face)."""

import warnings

from companion.xla.hlo import *  # noqa: F401,F403

warnings.warn("companion.hlo moved to companion.xla.hlo", DeprecationWarning, stacklevel=2)
