"""Moved to ``companion.measuring.attribution``: this path warns, and goes at the next version bump.
``from companion import attribution`` stays (the package's face)."""

import warnings

from companion.measuring.attribution import *  # noqa: F401,F403

warnings.warn("companion.attribution moved to companion.measuring.attribution", DeprecationWarning, stacklevel=2)
