"""Step time from the compiled schedule: a replay of XLA's instruction order on a GPU's streams.

``simulate(report)`` walks the scheduled HLO of a ``CompileReport`` in the order XLA chose (the
entry computation, every ``while`` body by its trip count, ``call``s inline) and keeps one clock
per resource:

* ``compute`` — the GPU's compute stream: every kernel, one after another, each at its roofline
  (``CostModel``: counted matmul FLOPs at a share of the dense peak, HBM bytes at a share of the
  HBM bandwidth, plus a per-kernel gap);
* ``d2h`` and ``h2d`` — the copy engines: a host transfer takes bytes / the host link's achievable
  bandwidth in its direction per GPU, with every GPU sharing the link (and the host memory
  behind it) transferring at once (``targets.HostLink.bandwidth_per_gpu``);
* ``nvlink`` and ``network`` — collectives (``companion.collectives``): a group inside one NVLink
  domain on NVLink, one that spans domains on the scale-out NICs; each lane runs one collective
  at a time (concurrent collectives share the same wires);
* ``async`` — other async work (device-to-device ``copy-start``, async fusions).

Each kernel is priced as the kernel it stands for, by class (``hlo.OP_CLASSES``): cuBLAS matmuls and
XLA's fusions at their rooflines; cuDNN's fused attention at the attention efficiency; a MoE grouped
GEMM pass (the stand-in custom call of ``models.grouped_gemm``) as one grouped kernel: the rows its
routing assumption puts on the most-loaded device, each expert's share rounded up to whole tiles
(``Architecture.grouped_gemm_tile_rows``), FLOPs at a grouped GEMM's efficiency
(``GROUPED_GEMM_EFFICIENCY``), HBM bytes = the rows' activations once and each expert's weights once
(``hlo.GroupedGemm``); the MoE's ragged all-to-alls by the rows they carry, not their padded buffers
(``collectives.buffer_bytes``).

An async ``*-start`` issues its work when the compute stream reaches it; the work begins when its
lane is free and fewer than ``async_compute_limit`` host transfers and async computes are running
(XLA's ``--xla_gpu_experimental_parallel_async_compute_limit``, default 2: the scheduler keeps at
most that many in flight, ``GpuAsyncTracker`` at jaxlib 0.10.2's XLA); its ``*-done`` makes the
compute stream wait until the work has finished. That wait is *exposed* time: the step is
``compute + exposed transfers + exposed collectives + other waits``.

Loops: a body's iterations are independent once nothing started outside it is still running
(every async op a body starts, it also waits for), so one such iteration is simulated and its
time and stream busy times are multiplied by the remaining trips; the iterations before it (a
transfer or collective of the parent still running) are simulated one by one. A 126-layer stack
costs one or two iterations' work, not 126.

Effects of one stream on another, each with its source or stated assumption:

* NCCL's SMs: compute that runs beside an async collective loses the SMs NCCL holds
  (``CollectiveModel.nccl_sms`` of the GPU's ``sm_count``): its time is stretched by
  SMs / (SMs - nccl_sms) over the overlap.
* PCIe shared with the NIC (``HostLink.carries_nic_traffic``: DGX/HGX put each GPU and its NIC under
  one PCIe switch, so GPUDirect RDMA and the GPU's host copies cross the same x16 link, DGX H100/B200
  user guides): while a host transfer and a scale-out collective overlap each gets half the link, and
  the one that needs more than half is slowed.
* Transfers a kernel makes (``hlo.HostTransfer.engine == "kernel"``: a ``kLoop`` fusion reading or writing
  pinned host memory through its mapped pointer, what XLA:GPU's offloaded scan residuals become under the
  lab's #46231 workaround, ``--xla_disable_hlo_passes=dynamic-slice-annotator``; the mechanism, at XLA
  5a9e73cb, in ``docs/research/46231-workaround-transfers.md``): priced at the link's SM-driven rate
  (``HostLink.kernel_d2h/h2d``), and while one runs it holds a share of the SMs
  (``CostModel.transfer_kernel_sm_share``): compute beside it loses that share of its throughput over the
  overlap, the lost work done after (``s = 1``: the two serialize). A copy-engine transfer holds no SMs.

Exposed transfer time is split into the link's *floor* and the schedule's *excess* (``_Replay.scoped``):
per loop iteration (and for the entry computation's own ops), per direction, the floor is the transfer
time beyond that scope's compute — no schedule can hide it —, capped at what was exposed; the excess is
the rest, what a better placement could hide.

What is not modelled: a copy or a collective taking HBM bandwidth from concurrent kernels, host-side
launch latency beyond the per-kernel gap, conditionals (the slowest branch is taken), send/recv.
XLA's own estimate of the same schedule (its ``.schedule.txt`` dump, ``compare_with_xla``) prices
every host transfer at a constant — 5000 µs with the estimators GPU compiles use at jaxlib 0.10.2 —
whatever its bytes, here bytes / bandwidth; its dump totals the entry computation with each loop at
~0 µs, so its whole-step estimate is the entry plus every body times its trips (``xla_step_us``).
"""

from .prices import *  # noqa: F401,F403
from .simulation import *  # noqa: F401,F403
from .replay import *  # noqa: F401,F403
from .analysis import *  # noqa: F401,F403
from .prices import _compute_seconds  # noqa: F401
