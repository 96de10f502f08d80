"""Notebook widgets over pure functions: each ``*_view`` function is what a widget shows, tested
without a frontend; the widget only collects inputs, calls it, and draws.

``budget_explorer()``: model, batch, sequence, policy, target, GPUs and mesh -> the per-device
budget as a stacked bar against the target's HBM, fits / does not fit with the margin; a
"check with XLA" button compiles the same step and overlays the compiler's number.
"""

from .common import *  # noqa: F401,F403
from .budget import *  # noqa: F401,F403
from .policy import *  # noqa: F401,F403
from .step_time import *  # noqa: F401,F403
from .flags import *  # noqa: F401,F403
from .plan import *  # noqa: F401,F403
from .common import _on_click_compile  # noqa: F401
