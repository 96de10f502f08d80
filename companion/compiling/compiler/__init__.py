"""Compile a jittable function for a GPU or TPU target and report what XLA did with memory.

Five ways to get there, chosen per ``place(...)`` call:

* ``"cuda"``: the CUDA PJRT plugin's compile-only topology, built from the target's
  ``GpuTargetConfigProto``. Needs no GPU: the real GPU compiler (scheduler, host offload
  passes, buffer assignment) runs on the CPU of a laptop or a CI machine.
* ``"gpu"``: the GPUs of this machine, when there are any (the numbers are then also the
  ones the allocator will see at run time).
* ``"libtpu"``: libtpu's compile-only TPU topology (``companion.libtpu``): XLA:TPU on a machine
  without a TPU. Its flags are libtpu's (``libtpu.resolve``), never the GPU set or workaround.
* ``"tpu"``: the TPU chip of this machine (the compile the lab then runs: ``companion.measure``).
* ``"cpu"``: the CPU backend, when the CUDA plugin is missing (macOS, Windows). Reports say
  so: the CPU compiler drops host-offload annotations, so host bytes are always 0 there.

``"auto"`` picks the local accelerators when they match the target, else the compile-only
topology, else (GPU targets) the CPU with a one-line warning.

Where XLA:TPU differs from XLA:GPU in what the lab reads: a program over the chip's HBM is refused
at compile time (``DoesNotFit``, with the bytes it needed) rather than compiled and reported over;
loops carry no ``known_trip_count`` (``hlo`` reads the trip count from the loop's condition); dots
are ``convolution``s inside fusions; host transfers are native ``dynamic-(update-)slice-start``
ops on ``S(5)`` buffers, not fusions; the cost analysis counts a loop body once.
"""

from .placement import *  # noqa: F401,F403
from .report import *  # noqa: F401,F403
from .compilation import *  # noqa: F401,F403
from .compilation import _compile_without_cache  # noqa: F401
from .compilation import _compute_capability  # noqa: F401
