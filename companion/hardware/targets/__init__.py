"""Accelerator targets: GPUs and TPUs with their datasheet facts, host links as they are shared,
topologies, usable HBM, and the ``GpuTargetConfigProto`` text XLA:GPU compiles against.

Everything here is plain data from public sources, named in each entry's ``sources``: NVIDIA
datasheets and technical briefs, XLA's spec files (``xla/backends/gpu/target_config/specs`` at
the commit jaxlib 0.10.2 pins, 5a9e73cb), ``nvidia-smi`` transcripts, and published bandwidth
measurements. What is not public is an explicit ``assumption`` on the object that makes it.

* ``Gpu.target_config_text()`` renders the full field set of XLA's own spec files (device info,
  the scalar and matrix unit rate tables XLA's dot cost model reads, ``model_str``, versions,
  NVLink links) from these facts. The matrix-unit clock is derived from the datasheet's dense
  bf16 peak, so XLA's cost model sees the same peak the lab's roofline uses.
* ``HostLink`` is the path host offload streams over: nominal and achievable bandwidth per
  direction, how many GPUs share the link, and the host memory behind it (and how many GPUs
  share that). ``transfer_seconds(nbytes, direction, concurrent_gpus)`` divides both among the
  GPUs transferring at once; by default every GPU that shares them (an SPMD step offloads on
  all GPUs together).
* ``Tpu`` is a TPU chip (``TPUS``: v5e, the chip the lab measures on): datasheet facts from
  Google's Cloud TPU pages, the HBM its runtime lets a program use, and the compile-only topology
  libtpu builds for it (``companion.libtpu``).
* ``Target`` is an accelerator (``Gpu`` or ``Tpu``) in a topology with its link and, on a GPU, the
  share of HBM JAX's allocator takes (``mem_fraction``, ``XLA_PYTHON_CLIENT_MEM_FRACTION``; default
  0.75 as in XLA; a TPU's runtime has no such share: its usable HBM is fixed). Every "fits" verdict
  compares against ``usable_hbm_bytes``, never the whole card.

Units: bytes, bytes per second, FLOP/s. GiB = 2**30 bytes; GB = 1e9 bytes.
"""

from .links import *  # noqa: F401,F403
from .chips import *  # noqa: F401,F403
from .systems import *  # noqa: F401,F403
