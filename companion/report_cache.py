"""Moved to ``companion.compiling.report_cache``: this path warns, and goes at the next version bump.
``from companion import report_cache`` stays (the package's face)."""

import warnings

from companion.compiling.report_cache import *  # noqa: F401,F403

warnings.warn("companion.report_cache moved to companion.compiling.report_cache", DeprecationWarning, stacklevel=2)
