"""When a stored result still holds: its stamp keys what decides its numbers, and nothing else.

A number a benchmark stores is a function of four things. ``stamp`` keys each, and ``check`` compares a
stored stamp with this checkout's:

1. **The compiler stack** (``versions``): jax and jaxlib; libtpu where the result compiled for a TPU. And the
   process's variables that move a number (``ENVIRONMENT``: ``XLA_FLAGS``, ...), which a benchmark runs without.
2. **The code that ran** (``code``): the benchmark script and every companion module it can reach through its
   imports — the static import closure (``closure``): Python runs only code it imported, so no code outside it
   can move a number. Each file is read as its syntax tree, and ``fingerprint`` keys the sorted top-level
   statements of them all. What cannot move a number does not change the key: docstrings, comments and layout;
   which file holds a statement (a module moved, or split, keeps every statement); the path of an import of a
   companion name (it binds the same definition: ``ambiguous_imports`` keeps every such name defined once in the
   package); a deprecation shim (``_is_shim``: imports and a warning, keyed where what it re-exports is
   defined); a module split into a package of parts (``split_packages``: its ``__init__`` only imports its
   parts), keyed as the one module it was — the parts' imports of each other dropped, an import two parts both
   need counted once; and the package's face (``companion/__init__.py``'s ``_FACE`` and the lazy
   ``__getattr__`` that serves it: ``from companion import budget`` for ``companion.memory.budget``), which the
   closure resolves as Python does and which binds no number. Nor does the Python that reads it: a statement is
   keyed as Python 3.12 writes its tree, on the chip lock's 3.11 too (``_dump``). Any other change — an
   expression, a constant, a default, a field, a decorator, a third-party import — changes the key. The lowered and compiled programs are functions of (1), (2) and (4): the models,
   the trainer and the compiler sit in the closure, so the stamp keys them through what makes them; the CI
   re-derivation (``benchmarks/rederive.py``) compiles sampled rows again, checks every field they give, and
   names each program it compiled by ``program_hash`` (its text without where Python traced it). No row stores
   those hashes yet: two of the CI sample's eight programs hashed differently in a clean clone than in the working
   checkout, with every field they gave equal, so the hash does not yet name a program across checkouts.
3. **Data files** the closure names (a ``data/`` folder's files anywhere in the package), by content
   (``_data_files``).
4. **The price tables and configs it read** (``TABLES``): left out of the code key, and kept per entry at
   the result's coordinates (``coordinates``: the models and accelerators its rows name, and what follows from an
   accelerator — its price family, host link and link kind). Changing one entry stales the results at that
   coordinate, and only those; a result that names no coordinate of a table's kind depends on the whole table.
   That rows read tables only at their coordinates is checked where it can be: the CI re-derivation records
   every table read while it recomputes rows (``recording``) and fails on a read the stamp does not hold.

Provenance code — what writes and stamps results but computes none of their numbers (``PROVENANCE``) — is left
out of the code key, so that improving it stales nothing. This module imports nothing of the package: it reads
the package's files, and imports a module only to read a table's current value.
"""

from .rules import *  # noqa: F401,F403
from .source import *  # noqa: F401,F403
from .tables import *  # noqa: F401,F403
from .stamps import *  # noqa: F401,F403
from .rederivation import *  # noqa: F401,F403
from .source import _bound_names  # noqa: F401
