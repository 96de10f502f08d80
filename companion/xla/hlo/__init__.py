"""Read a scheduled XLA HLO module as text: shapes, memory spaces, loops, offload and collectives.

Pure Python (no jax import), so it runs on any HLO text: ``compiled.as_text()``, a file
from ``--xla_dump_to``, or a string in a test. The vocabulary:

* memory space ``S(5)`` in a layout (``f32[4,512]{1,0:S(5)}``) marks a buffer in pinned host
  memory; everything else lives in device HBM.
* an *execution count* is how often a computation runs per call of the entry computation:
  a ``while`` body with ``known_trip_count`` n runs n times per execution of its caller.
* a *host transfer* is an instruction that reads from or writes to ``S(5)``: async ones come
  as a ``*-start`` / ``*-done`` pair (``copy-start``, ``fusion-start`` wrapping a
  ``dynamic-update-slice`` or ``dynamic-slice``, ``async-start``), sync ones as a single op.
"""

from .shapes import *  # noqa: F401,F403
from .module import *  # noqa: F401,F403
from .transfers import *  # noqa: F401,F403
from .costs import *  # noqa: F401,F403
from .costs import _hbm_bytes  # noqa: F401
from .costs import _matmul_class  # noqa: F401
from .module import _parse_instruction  # noqa: F401
from .costs import _real_taps  # noqa: F401
from .transfers import _start_parts  # noqa: F401
from .module import _strip_comments  # noqa: F401
