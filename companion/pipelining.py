"""Moved to ``companion.timing.pipelining``: this path warns, and goes at the next version bump.
``from companion import pipelining`` stays (the package's face)."""

import warnings

from companion.timing.pipelining import *  # noqa: F401,F403

warnings.warn("companion.pipelining moved to companion.timing.pipelining", DeprecationWarning, stacklevel=2)
