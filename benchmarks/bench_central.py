"""The series' central question at full size: does pipelined host offload train faster than
rematerialization and than naive offload? (Notebook 07 reads the answer from here: each DeepSeek-V3
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
the Grace has behind each GPU (notebook 07, section 2).

**The published experiment's space** (``SPACE``, issue #40; NVIDIA's July 2026 MaxText runs on Blackwell + Grace
report pipelined offload +57 % over remat at "larger batch configurations", 165.2 GiB in use = 0.896 of a
GB200): DeepSeek-V3 on 256 and 512 GB200 at fractions 0.85 and 0.90, experts within one NVL72 rack (EP 64,
``ragged_buffer_factor`` 2: the receive buffer twice the balanced rows) beside EP 8 with the worst-case buffer
(-1): full remat, the routed experts' activations offloaded (naive, pipelined), the layer input offloaded with
the optimizer's moments (the planner's first choice at 0.85 before this search), each at its largest batch
(compiled one sequence per GPU at a time until it no longer fits); full remat at B = 1024 on 512 GB200; Q/K/V
offloaded and kept on the device at one sequence per GPU on both meshes; and the planner's own choice at 0.85 and 0.90 on 512 GB200 (EP 64,
factor 2), compiled again and simulated. Rows carry ``space: true``.

Results: benchmarks/results/central.json (the cases) and central_space.json (the space), each stamped by ``_common.write``
(``--part`` writes one of them).
"""

from __future__ import annotations

import argparse
import time

import _common

import companion  # noqa: F401

from companion import compiler, plan, sharding, steps, targets, train  # noqa: E402

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


# the published experiment's space (module docstring)
MOE_OFF = dict.fromkeys(("moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo"), "offload")  # the routed experts' activations
OPT_OFF = train.StateConfig(optimizer_memory_host_offload=True)
SPACE_SYSTEMS = (("gb200:64x4", 256), ("gb200:128x4", 512))
SPACE_FRACTIONS = (0.85, 0.90)
SPACE_MESHES = {"EP 64": (lambda n: f"fsdp={n // 64},expert=64", 2.0), "EP 8": (lambda n: f"fsdp={n // 8},expert=8", -1.0)}
# on EP 64 at factor 2, each at its largest batch: (label, policy, flags, state, its naive twin at that batch?)
SPACE_LARGEST = [
    ("full remat", "full", None, train.StateConfig(), False),
    ("MoE activations offloaded, pipelined", MOE_OFF, PIPELINED, train.StateConfig(), True),
    ("layer input offloaded + optimizer offload, pipelined", CARRY, PIPELINED, OPT_OFF, False),
]
SPACE_FIXED = [  # one sequence per GPU, on both meshes
    ("QKV offloaded, pipelined", "qkv_proj_offloaded", PIPELINED, train.StateConfig()),
    ("QKV kept on device", "save_qkv_proj", None, train.StateConfig()),
]
MAX_SEQUENCES_PER_GPU = 8
FIXED_BATCH = 1024  # full remat on 512 GB200 at this global batch too, on both meshes and fractions


def row(model, target, mesh, seq, batch, label, policy, flags, dispatch, *, state=train.StateConfig(),
        factor: float | None = None, **meta) -> dict:
    from companion import models

    cfg = models.config(model)
    if dispatch is not None:
        cfg = cfg.with_moe(dispatch=dispatch)
    if factor is not None:
        cfg = cfg.with_moe(ragged_buffer_factor=factor)
    placement = compiler.place(target, sharding.active_axes(sharding.parse_mesh(mesh, target.num_devices)))
    report = train.compile_step(train.trainer(cfg, policy, state=state), placement, batch, seq, flags=flags)
    extra = {} if factor is None else {"ragged_buffer_factor": factor,
                                       "optimizer_offload": state.optimizer_memory_host_offload, **meta}
    out = steps.record(report, label, layers=cfg.num_layers, model=model, target=target.name, mesh=mesh, seq=seq,
                       batch=batch, policy=policy, flags=flags, dispatch=dispatch, **extra)
    print(f"{model} on {target.name} ({mesh}) B={batch} {label}: fits={report.fits} peak "
          f"{report.device.peak_bytes / 2**30:.1f} GiB, host {report.host.total_bytes / 2**30:.1f} GiB, compile "
          f"{report.compile_seconds:.0f} s, step {out['step_seconds']:.2f} s, {out['tokens_per_second']:.0f} "
          "tokens/s/GPU", flush=True)
    return out


def space_rows() -> list[dict]:
    """The published experiment's space (module docstring): each row a compiled, simulated step. A policy's
    largest batch is searched one sequence per GPU at a time from one (at the first fraction) or from its
    largest at the first fraction less one (at a larger fraction usable HBM only grew; two fitting batches give
    ``companion.requirement`` its line), up to ``MAX_SEQUENCES_PER_GPU``."""
    model, seq, out = "deepseek-v3-671b", 4096, []
    for key, n in SPACE_SYSTEMS:
        found: dict[str, int] = {}
        for fraction in SPACE_FRACTIONS:
            target = targets.target(key, mem_fraction=fraction)
            for mesh_name, (mesh_of, factor) in SPACE_MESHES.items():
                mesh, common = mesh_of(n), dict(factor=factor, space=True, mesh_name=mesh_name)
                if mesh_name == "EP 64":
                    for label, policy, flags, state, twin in SPACE_LARGEST:
                        largest = None
                        start = max(1, found.get(label, 1) - 1)  # one below, so that each fraction has a batch line
                        for per_gpu in range(start, MAX_SEQUENCES_PER_GPU + 1):  # until it does not fit
                            r = row(model, target, mesh, seq, per_gpu * n, label, policy, flags, "grouped",
                                    state=state, **common)
                            out.append(r)
                            if not r["fits"]:
                                break
                            largest = per_gpu
                        found[label] = largest or 1
                        if twin and largest:  # the same tensors offloaded without pipelining, at that batch
                            out.append(row(model, target, mesh, seq, largest * n, label.replace("pipelined", "naive"),
                                           policy, None, "grouped", state=state, **common))
                for label, policy, flags, state in SPACE_FIXED:
                    out.append(row(model, target, mesh, seq, n, f"{label} ({mesh_name})", policy, flags,
                                   "grouped", state=state, **common))
                have = {(r["label"], r["batch"], r["mesh"], r["mem_fraction"]) for r in out}
                if n == 512 and ("full remat", FIXED_BATCH, mesh, fraction) not in have:  # the fixed global batch
                    out.append(row(model, target, mesh, seq, FIXED_BATCH, "full remat", "full", None, "grouped",
                                   **common))
    out += [planner_row(fraction) for fraction in SPACE_FRACTIONS]
    return out


def planner_row(fraction: float) -> dict:
    """The planner's choice on 512 GB200 (EP 64, factor 2, S 4096) at ``fraction``, compiled again and simulated."""
    from companion import models

    cfg = models.config("deepseek-v3-671b").with_moe(ragged_buffer_factor=2.0)
    target = targets.target("gb200:128x4", mem_fraction=fraction)
    mesh = "fsdp=8,expert=64"
    chosen = plan.plan(cfg, target, 4096, sharding.parse_mesh(mesh, target.num_devices), max_compiles=2)
    c = chosen.chosen.candidate
    print(f"planner at {fraction}: {chosen.summary().splitlines()[0]}", flush=True)
    flags = PIPELINED if c.pipelined else None
    return row("deepseek-v3-671b", target, mesh, 4096, c.batch, "planner's choice", dict(c.spec), flags, "grouped",
               state=c.state, factor=2.0, space=True, mesh_name="EP 64", plan_spec=c.policy,
               plan_pipelined=c.pipelined, plan_estimated_tflops=c.estimated_tflops)


def case_rows() -> list[dict]:
    """The series' cases (``CASES``: notebooks 04, 06 and 07), each a compiled, simulated step."""
    rows = []
    for model, key, mesh, seq, fraction, batches, variants in CASES:
        target = targets.target(key, mem_fraction=fraction)
        for batch in batches:
            for label, policy, flags, dispatch in variants:
                rows.append(row(model, target, mesh, seq, batch, label, policy, flags, dispatch))
    return rows


# result name -> its rows: the cases (30 compiles, ~5 minutes on 2 cores at jaxlib 0.12.0.1) and the published space
# (80 DeepSeek-V3 rows on 256 and 512 GB200, ~48 minutes on 2 cores shared with the tests), written apart so that
# each can be rerun alone
PARTS = {"central": case_rows, "central_space": space_rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", nargs="+", choices=tuple(PARTS), default=tuple(PARTS),
                        help="which results to write (default: both)")
    for name in parser.parse_args().part:
        start = time.perf_counter()
        rows = PARTS[name]()
        _common.write(name, {"seconds": round(time.perf_counter() - start), "rows": rows})


if __name__ == "__main__":
    main()
