"""Moved to ``companion.models.flops``: this path warns, and goes at the next version bump.
``from companion import flops`` stays (the package's face)."""

import warnings

from companion.models.flops import *  # noqa: F401,F403

warnings.warn("companion.flops moved to companion.models.flops", DeprecationWarning, stacklevel=2)
