"""HBM budget of one training step, per device, as formulas: the analytic model of notebook 01.

``estimate(model, batch, seq, policy, mesh)`` lists every term that occupies device or host
memory at the step's peak, each with the tensor it stands for and its formula, plus the FLOPs
the policy's recompute adds. Pure Python over the config (no tracing, no compile): a widget can
call it on every slider move.

The terms, for the lab's models compiled as MaxText GPU users compile them (flash attention,
the MoE paths of ``models.moe``, MaxText's XLA flags) by the XLA jaxlib 0.10.2 pins, validated
against the compiler by ``benchmarks/bench_budget.py``:

* **static** — what the step's arguments hold: parameters (``weight_dtype``), AdamW's two
  moments, the token batch; on the host with ``optimizer_memory_host_offload`` /
  ``parameter_memory_host_offload``. Donated, so the updated copies reuse the same buffers.
* **persistent** — alive through the backward pass: the fp32 gradient accumulators of the
  scanned layers' weights (and a transposed copy of some of them under FSDP), and the
  *residuals* — every tensor the policy saves that the backward pass reads, stacked over the L
  layers (on the device, or on the host when offloaded; with pipelined host offloading one more
  layer of them on the device). With gradient accumulation, the fp32 accumulator (and, with
  double-buffered loops, a second microbatch's residuals and the accumulator's next value).
* **transient** — the largest of four phases: the **loss** (fp32 logits and their gradient,
  the head's gradient and shard in the compute dtype; inside gradient accumulation's microbatch
  loop also the target logits' gradient, scattered apart); a **layer backward** (the attention
  kernel's working set — cuDNN's or the lab's flash, or the ``[b, H, S, S]`` scores of the
  teaching options —, the MLP's or the routed experts' tensors, the layer weights gathered under
  FSDP: two layers and a bit with MaxText's pipelined all-gathers, some ``[b, S, D]`` scratch and
  the fp32 loss gradient, which the head's weight-gradient matmul after the layer loop reads); the
  **backward end** (the head's fp32 weight gradient, kept until its reduce-scatter); the
  **loop tail** (pipelined host offloading only: the last two layers, peeled out of the loop, whose
  backward and recompute the top-level scheduler overlaps up to its memory limit); the **peeled
  MoE backward** (sparse MoE stacks with a loop left after XLA peels 4 of their layers: the first
  peeled layer's working set next to the top-level layers' zero-filled receive-buffer gradients and
  combine buffers, allocated at the step's start by horizontally fused broadcasts; the loop's fp32
  gradient accumulators are not allocated yet); the
  **optimizer update** (offloaded state brought back to the device; offloaded moments arrive while
  the peeled last layers' weights, their weight gradients before the reduce-scatter and the saved
  activations are still there).

XLA peels the backward loop's last iteration (double-buffered loops; two with pipelined host
offloading) into the step's top level, where the scheduler interleaves it with the head's weight
gradient and the update's host copies: the phases above that sit after the loop model that tail.

**Its goal** (``benchmarks/bench_budget.py`` measures it): the fits verdict agrees with the compiler's,
the device bytes within a median |error| of 1.0 % (worst 3.0 %) over the real-size configurations that fit,
the host bytes exact (the goal ``budget.json`` stores; notebook 01 prints it and whether it is met). The
residual is where XLA's scheduler places buffers; the compile (``compiler.compile``, its seconds printed) is the
exact answer, and the budget is for what a widget or a search needs at once.

The latency-hiding scheduler keeps some buffers alive longer while it is under its memory limit
(extra fp32 score copies, offloaded moments brought in early): where it is, the budget says so.
Known gaps (``benchmarks/results/budget.json`` lists every configuration):

* the heap's fragmentation at the scheduler's limit: where a phase fills the limit (the loop tail
  under pipelined offload, Llama 3.1 405B at fsdp=128,tensor=2) the heap's packing decides. The
  budget flags such peaks (``Budget.at_scheduler_limit``), where its "fits" is the heap's call;
* the scheduler's cost model of each GPU: the same step, every tensor the same size, compiles to peaks
  2.9 % apart on 8 H100 and 8 B200 (Llama 3.1 8B, fsdp=8; the 70B on 64: 0.8 %), as the buffers XLA
  starts early differ; a budget without a model of the scheduler misses one of each pair by at least half
  that (``same_step_other_gpu`` in ``benchmarks/results/budget.json``'s summary);
* DeepSeek-V3's peeled MoE layers with memory to spare (512 GB200, fsdp=64, one sequence per GPU):
  the scheduler starts more or fewer of the receive-buffer-sized buffers and gathered expert weights
  early than the budget's count — the worst-case buffer within 5 % ("full", "minimal",
  qkv_proj_offloaded), ``ragged_buffer_factor`` 2 -12 %, pipelined minimal_offloaded +21 %, the dense
  path -5 %; where the step peaks in the layer loop (64 GB200, fsdp=8) every path is within 3 %
  (``tests/test_budget.py``, recorded compiles);
* gradient accumulation with a sparse MoE, over usable HBM: the double-buffered microbatch loop
  hoists each copy's peeled MoE buffers; the budget counts two sets (DeepSeek-V3, two microbatches on
  512 GB200: -7 %);
* where the scheduler places the ops it is free to move — the layer gradients' zero-fill broadcasts,
  which it uses as filler beside async collectives, and the fp32 copy of the gathered head that the
  loss gradient's matmul reads: Llama 3.1 8B on 8 H100 (fsdp=8, "full") zero-fills the ``mlp/wo``,
  ``attention/wq``, ``attention/wo``, ``wk`` and ``wv`` accumulators (1.5 GiB) after the loss's peak
  at S=8192 (+3.5 %), only the last three (0.4 GiB) at S=4096; with pipelined host offloading it
  converts the head to fp32 before the loss gradient, next to both fp32 logits (minimal_offloaded:
  -6 %), without it after; on 4 GH200 (qkv_proj_offloaded, pipelined) it zero-fills every
  accumulator but the transposed ones after the loss, and the step peaks after the layer loop
  instead (+4.6 %). The placement follows the scheduler's cost model, not the tensors' sizes;
* with the moments on the device and far over the scheduler's limit, XLA may compute the head's
  weight gradient before the layer loop instead of after it (Llama 3.1 405B on 256 H100, S=8192,
  "full", fsdp=256 or fsdp=128,tensor=2: +12 % and +4 %; Llama 3.1 70B, fsdp=8,tensor=8: +4 %;
  the condition is not modelled);
* tiny models, whose fixed-size buffers (cuBLAS workspaces, MBs) dominate and are not modelled.

Per-device sizes: ``b = B / (data x fsdp x expert)`` sequences; heads, MLP width and vocabulary
divided by ``tensor``; parameters by the sharding rules.
"""

from .result import *  # noqa: F401,F403
from .terms import *  # noqa: F401,F403
from .phases import *  # noqa: F401,F403
from .step import *  # noqa: F401,F403
