"""The series' central question at full size: does pipelined host offload train faster than
rematerialization and than naive offload? (Notebook 06 reads the answer from here: each DeepSeek-V3
compile takes 15-30 s on 2 cores.)

    .venv/bin/python benchmarks/bench_central.py

DeepSeek-V3 671B on 512 GB200 (128 compute trays of an NVL72 deployment, fsdp=64 x expert=8, experts
within a rack), S = 4096, ``XLA_PYTHON_CLIENT_MEM_FRACTION`` 0.85 (what MaxText's GPU launcher exports:
``tools/orchestration/gpu_multi_process_run.sh`` at e591f30),
routed experts as a grouped GEMM. The same tensors three ways — recomputed (``full``), kept on the
device (``save_qkv_proj``), offloaded to the Grace (``qkv_proj_offloaded``, naive and pipelined) — at a
fixed global batch (B = 512, one sequence per GPU) and one batch step up (B = 1024): which fit (device
and host), the simulated step with its time by op class, tokens/s per GPU, and each step's sweep over
the simulator's constants, so the notebook ranks them with the paired band. Beside them, full remat with
MaxText's ``ragged_dot`` path as pip jaxlib 0.10.2 compiles it (dense over the local experts).
Notebook 04's 8B step (8 H100, 8 GB200, one 4-GPU GH200 node; one sequence per GPU at S = 8192, every
projection offloaded; on GB200 the MLP alone too, openxla/xla #32297's case) naive and pipelined, and twice
its batch on 8 H100, where `minimal` no longer fits — with the conditions under which pipelining pays
(``companion.pipelining``, read off every naive offload compile here). On 256 GB200 (fsdp=32 x expert=8, B = 256): full remat against the decoder-layer carry offloaded (naive,
pipelined), the one activation offload that keeps less on the device than full remat; and full remat at B =
512 on 512 GB200 at JAX's default fraction, 0.75, beside the same step at 0.85. A step that does not fit is
simulated too (what it would take), without a sweep.
Then Llama 3.1 405B on 256 H100 (fsdp=256, S = 8192, 0.85) at B = 256: full remat (which does not fit
there) and the decoder-layer carry offloaded, naive and pipelined.
``minimal_offloaded`` is left out: at B = 512 it needs ~297 GiB of pinned host memory per GPU, more than
the Grace has behind each GPU (notebook 06, section 2).

Results: benchmarks/results/central.json, stamped with ``results.stamp()`` (jaxlib, companion source).
"""

from __future__ import annotations

import time

import _common

import companion  # noqa: F401

from companion import compiler, results, sharding, steps, targets, train  # noqa: E402

PIPELINED = "--xla_gpu_enable_pipelined_host_offloading=true"
CARRY = {"decoder_layer_input": "offload"}
MLP_OFF = dict.fromkeys(("mlpwi_0", "mlpwi_1", "mlpwo"), "offload")
ATTENTION_KEPT_MLP_OFF = {**dict.fromkeys(("query_proj", "key_proj", "value_proj", "out_proj"), "device"), **MLP_OFF}
# (model, target, mesh, seq, XLA_PYTHON_CLIENT_MEM_FRACTION, batches, [(label, policy, flags, moe dispatch)])
CASES = [
    # notebook 04's step: Llama 3.1 8B, one sequence per GPU at S = 8192, every projection offloaded
    ("llama3.1-8b", "h100:1x8", "fsdp=8", 8192, 0.75, (8,), [
        ("every projection offloaded, naive", "minimal_offloaded", None, None),
        ("every projection offloaded, pipelined", "minimal_offloaded", PIPELINED, None),
    ]),
    ("llama3.1-8b", "gb200:2x4", "fsdp=8", 8192, 0.75, (8,), [
        ("every projection offloaded, naive", "minimal_offloaded", None, None),
        ("every projection offloaded, pipelined", "minimal_offloaded", PIPELINED, None),
        # openxla/xla #32297 measured ~+12 % for this model, fsdp=8, MLP offload + pipelining vs offload alone
        ("MLP offloaded, naive", MLP_OFF, None, None),
        ("MLP offloaded, pipelined", MLP_OFF, PIPELINED, None),
    ]),
    # one GH200 node (4 GPUs, one NVLink domain: no network in the step)
    ("llama3.1-8b", "gh200:1x4", "fsdp=4", 8192, 0.75, (4,), [
        ("full remat", "full", None, None),
        ("every projection offloaded, naive", "minimal_offloaded", None, None),
        ("every projection offloaded, pipelined", "minimal_offloaded", PIPELINED, None),
    ]),
    # twice the batch on 8 H100: `minimal` no longer fits, offload does (notebook 04, section 8)
    ("llama3.1-8b", "h100:1x8", "fsdp=8", 8192, 0.75, (16,), [
        ("full remat", "full", None, None),
        ("minimal", "minimal", None, None),
        ("every projection offloaded, naive", "minimal_offloaded", None, None),
        ("every projection offloaded, pipelined", "minimal_offloaded", PIPELINED, None),
        ("attention kept, MLP offloaded, pipelined", ATTENTION_KEPT_MLP_OFF, PIPELINED, None),
    ]),
    ("deepseek-v3-671b", "gb200:128x4", "fsdp=64,expert=8", 4096, 0.85, (512, 1024), [
        ("full remat", "full", None, "grouped"),
        ("QKV kept on device", "save_qkv_proj", None, "grouped"),
        ("QKV offloaded, naive", "qkv_proj_offloaded", None, "grouped"),
        ("QKV offloaded, pipelined", "qkv_proj_offloaded", PIPELINED, "grouped"),
    ]),
    ("deepseek-v3-671b", "gb200:128x4", "fsdp=64,expert=8", 4096, 0.85, (512,), [
        ("full remat, ragged_dot", "full", None, "ragged_dot"),
    ]),
    # half the GPUs: full remat no longer fits one sequence per GPU at 0.85; the carry offloaded frees its bytes
    ("deepseek-v3-671b", "gb200:64x4", "fsdp=32,expert=8", 4096, 0.85, (256,), [
        ("full remat", "full", None, "grouped"),
        ("carry offloaded, naive", CARRY, None, "grouped"),
        ("carry offloaded, pipelined", CARRY, PIPELINED, "grouped"),
    ]),
    # the same step at another fraction: JAX's default, 0.75
    ("deepseek-v3-671b", "gb200:128x4", "fsdp=64,expert=8", 4096, 0.75, (512,), [
        ("full remat", "full", None, "grouped"),
    ]),
    ("llama3.1-405b", "h100:32x8", "fsdp=256", 8192, 0.85, (256,), [
        ("full remat", "full", None, None),
        ("carry offloaded, naive", CARRY, None, None),
        ("carry offloaded, pipelined", CARRY, PIPELINED, None),
    ]),
]


def row(model, target, mesh, seq, batch, label, policy, flags, dispatch) -> dict:
    from companion import models

    cfg = models.config(model)
    if dispatch is not None:
        cfg = cfg.with_moe(dispatch=dispatch)
    placement = compiler.place(target, sharding.active_axes(sharding.parse_mesh(mesh, target.num_devices)))
    report = train.compile_step(train.trainer(cfg, policy), placement, batch, seq, flags=flags)
    out = steps.record(report, label, layers=cfg.num_layers, model=model, target=target.name, mesh=mesh, seq=seq,
                       batch=batch, policy=policy, flags=flags, dispatch=dispatch)
    print(f"{model} on {target.name} B={batch} {label}: fits={report.fits} peak {report.device.peak_bytes / 2**30:.1f} "
          f"GiB, host {report.host.total_bytes / 2**30:.1f} GiB, compile {report.compile_seconds:.0f} s, step "
          f"{out['step_seconds']:.2f} s, {out['tokens_per_second']:.0f} tokens/s/GPU", flush=True)
    return out


def main() -> None:
    rows, start = [], time.perf_counter()
    for model, key, mesh, seq, fraction, batches, variants in CASES:
        target = targets.target(key, mem_fraction=fraction)
        for batch in batches:
            for label, policy, flags, dispatch in variants:
                rows.append(row(model, target, mesh, seq, batch, label, policy, flags, dispatch))
    _common.write("central", {"stamp": results.stamp(), "seconds": round(time.perf_counter() - start),
                              "rows": rows})


if __name__ == "__main__":
    main()
