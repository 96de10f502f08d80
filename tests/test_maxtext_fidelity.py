"""The models as MaxText GPU users run them: flash attention, the sparse MoE path, MaxText's names and
custom keys, and the training-state levers, each checked against the compiler or a reference."""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compiled import small
from cpu import jit
from companion import budget, cli, compiler, hlo, models, policies, schedule, targets, train
from companion.models import flash, moe
from compiled import budget_miss_on_0_12

GiB = 2**30


# ----------------------------------------------------------------------------- flash attention


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-deepseek"])
def test_flash_gradients_equal_the_dot_product_ones_on_the_cpu(name):
    base = models.config(name, dtype="float32")  # bf16 rounding would flip the router's top-k choices
    t, params, rest, _ = train.init(base.replace(attention="dot_product"), "full")
    batch = train.synthetic_batch(base, 4, 64)
    reference = jit(t.grads)(params, rest, batch)
    flashed = train.trainer(base, "full")  # the same parameters, the lab's flash kernel on the CPU
    got = jit(flashed.grads)(params, rest, batch)
    for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(got)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    assert float(jit(flashed.loss)(params, rest, batch)) == pytest.approx(float(jit(t.loss)(params, rest, batch)), rel=1e-5)


def test_flash_kernel_skips_blocks_above_the_diagonal():
    q = jnp.ones((1, 64, 2, 8))
    lowered = jax.jit(lambda q: flash.flash_attention(q, q, q, 0.1, block=16)).lower(q).compile().as_text()
    module = hlo.parse_module(lowered)
    counted = hlo.flop_summary(module).total
    pairs = flash.pairs_in_blocks(64, 16)  # 4 blocks: 10 of the 16 block pairs
    assert pairs == 16 * 16 * 10
    assert counted == pytest.approx(flash.flops(1, 2, 8, 8, pairs)[0])


def test_cudnn_attention_flops_are_counted_from_the_custom_call():
    text = """HloModule m
ENTRY %e (q: bf16[2,1024,8,128], k: bf16[2,1024,2,128]) -> bf16[2,8,1024,128] {
  %q = bf16[2,1024,8,128]{3,2,1,0} parameter(0)
  %k = bf16[2,1024,2,128]{3,2,1,0} parameter(1)
  %f = (bf16[2,8,1024,128]{3,1,2,0}, f32[2,8,1024]{2,1,0}, u8[0]{0}) custom-call(%q, %k, %k), custom_call_target="__cudnn$fmhaSoftmax", backend_config={"cudnn_fmha_backend_config":{"mask_type":"CAUSAL"}}
  %b = (bf16[2,1024,8,128]{3,2,1,0}, u8[0]{0}) custom-call(%q, %k, %k), custom_call_target="__cudnn$fmhaSoftmaxBackward", backend_config={"cudnn_fmha_backend_config":{"mask_type":"CAUSAL"}}
  ROOT %r = bf16[2,8,1024,128]{3,1,2,0} get-tuple-element(%f), index=0
}
"""
    module = hlo.parse_module(text)
    fwd, bwd = module.computations["e"].by_name["f"], module.computations["e"].by_name["b"]
    pairs = flash.causal_pairs(1024)
    assert hlo.dot_flops(module, fwd) == flash.flops(2, 8, 128, 128, pairs)[0]
    assert hlo.dot_flops(module, bwd) == flash.flops(2, 8, 128, 128, pairs)[1] == 2.5 * hlo.dot_flops(module, fwd)


@budget_miss_on_0_12("the flash step's budget is 6.7 % over its compile (target 0-4 %)")
def test_8b_at_8192_has_no_score_buffers_and_the_budget_predicts_both_attentions():
    h100 = targets.target("h100", "1x8")
    placement = compiler.place(h100)
    reports, budgets = {}, {}
    for attention in ("flash", "dot_product"):
        cfg = models.config("llama3.1-8b", attention=attention)
        reports[attention] = train.compile_step(train.trainer(cfg, "full"), placement, 8, 8192)
        budgets[attention] = budget.estimate(cfg, 8, 8192, "full", {"fsdp": 8}, target=h100)
    # no [b, H, S, S] buffer (H = 32 heads, as 8 KV groups of 4) with flash
    scores = re.compile(r"\[(\d+,)+8192,8192\]")  # [..., S, S] with batch or head dims in front
    assert not [line for line in reports["flash"].hlo_text.splitlines() if scores.search(line)]
    assert [line for line in reports["dot_product"].hlo_text.splitlines() if scores.search(line)]
    assert reports["flash"].device.peak_bytes < reports["dot_product"].device.peak_bytes
    assert budgets["dot_product"].device_bytes == pytest.approx(reports["dot_product"].device.peak_bytes, rel=0.03)
    # Flash peaks in the loss phase. At S = 8192 XLA's scheduler puts the zero-initialisation of
    # two gradient accumulators (FSDP's untransposed wi_0 and wq, 1.125 GiB) after the loss instead
    # of before it, as it does at S = 4096; the budget keeps the conservative order: +3.5 %.
    error = budgets["flash"].device_bytes / reports["flash"].device.peak_bytes - 1
    assert 0 <= error <= 0.04
    if flash.cudnn_available():  # Llama's head dims take cuDNN's kernel, as on a MaxText GPU run
        assert "__cudnn$fmhaSoftmax" in reports["flash"].hlo_text


# ----------------------------------------------------------------------------- dropless MoE


_EP_SCRIPT = """
import os, json
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import companion, jax, numpy as np
from jax.sharding import Mesh
from companion import models, train
cfg = models.config("tiny-deepseek")
t, params, rest, _ = train.init(cfg, "full")
batch = train.synthetic_batch(cfg, 8, 32)
loss = jax.jit(t.loss, compiler_options={"xla_backend_optimization_level": 0})  # tests/cpu.py
ref = float(loss(params, rest, batch))
out = {}
for axes in ({"expert": 4}, {"expert": 2, "fsdp": 2}, {"expert": 2, "tensor": 2}):
    mesh = Mesh(np.array(jax.devices("cpu")[:4]).reshape(tuple(axes.values())), tuple(axes))
    with jax.set_mesh(mesh):
        out[",".join(axes)] = float(loss(params, rest, batch))
print(json.dumps({"single": ref, **out}))
"""


def test_expert_parallel_dispatch_matches_one_device():
    """The all-to-all path (sort, send, local sort, grouped matmuls, send back) on 4 CPU devices."""
    run = subprocess.run([sys.executable, "-c", _EP_SCRIPT], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "XLA_FLAGS": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    losses = json.loads(run.stdout.strip().splitlines()[-1])
    for mesh, loss in losses.items():
        assert loss == pytest.approx(losses["single"], rel=1e-3), mesh


@budget_miss_on_0_12("DeepSeek-V3's grouped step outside 3 %")
def test_671b_grouped_step_counts_the_routed_flops_by_pass_and_matches_the_budget():
    """The acceptance step (64 GB200, fsdp=8,expert=8, B=64, S=4096, full remat): the grouped GEMMs execute
    the routed rows (1,024 per local expert: whole 256-row tiles, no padding) in every pass full remat runs
    — forward, its recompute, dgrad, wgrad —, the simulator's grouped_matmul class is exactly that, and the
    budget is within 3 % of the compiled peak."""
    cfg = models.config("deepseek-v3-671b")
    target = targets.target("gb200", "16x4")
    placement = compiler.place(target, {"fsdp": 8, "expert": 8})
    r = train.compile_step(train.trainer(cfg, "full"), placement, 64, 4096)
    routed_forward = cfg.num_moe_layers * 2 * (64 * 4096 // 64) * cfg.moe.experts_per_token * cfg.expert_params()
    module = r.module
    by_phase = {}
    for i in module.instructions():
        if i.custom_call_target == hlo.GROUPED_GEMM_TARGET:
            phase = hlo.phase_of(i.op_name)
            by_phase[phase] = by_phase.get(phase, 0.0) + hlo.dot_flops(module, i, 256) * module.executions(i)
    assert by_phase["forward"] == routed_forward
    assert by_phase["recompute"] == routed_forward and by_phase["backward"] == 2 * routed_forward
    sim = schedule.simulate(r)
    assert sim.flops_by_kind["grouped_matmul"] == 4 * routed_forward
    assert sim.model_flops == pytest.approx(1025.842738e12, rel=1e-9)  # MaxText's own function (flops.py)
    b = budget.estimate(cfg, 64, 4096, "full", {"fsdp": 8, "expert": 8}, target=target)
    assert b.device_bytes == pytest.approx(r.device.peak_bytes, rel=0.03), b.table()


def test_moe_names_are_maxtexts_sparse_path():
    dropless = models.config("tiny-deepseek")
    names = models.checkpoint_names(dropless)
    assert {"moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "mlpwi_0", "mlpwo", "attention_out", "context"} <= names
    z = budget.layer_sizes(dropless, 2, 16, {"data": 1, "fsdp": 1, "tensor": 1, "expert": 1}, routed=True)
    nodes = {n.key: n for n in models.graph.layer_graph(dropless, z, routed=True).nodes}
    assert nodes["moe_up"].names == ("moe_mlpwi_1",)  # w1: MaxText's sparse path tags it moe_mlpwi_1 only
    assert set(nodes["moe_gate"].names) == {"moe_mlpwi_0", "mlpwi_0"}
    capacity = dropless.with_moe(dispatch="dense", capacity_factor=1.25)
    z = budget.layer_sizes(capacity, 2, 16, {"data": 1, "fsdp": 1, "tensor": 1, "expert": 1}, routed=True)
    nodes = {n.key: n for n in models.graph.layer_graph(capacity, z, routed=True).nodes}
    assert set(nodes["moe_up"].names) == {"moe_mlpwi_1", "mlpwi_1"}


# ----------------------------------------------------------------------------- names and custom keys

MAXTEXT_CUSTOM_KEYS = (  # src/maxtext/configs/base.yml, lines 361-382 (2026-08-22)
    "decoder_layer_input", "indexer_cutoff_threshold", "context", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo",
    "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj",
    "out_proj", "query_wa_proj", "kv_wa_proj", "mla_q", "mla_kv", "attention_out", "engram",
)


def test_every_maxtext_custom_key_is_accepted_and_missing_ones_reported():
    assert set(policies.TENSOR_NAMES) == set(MAXTEXT_CUSTOM_KEYS)
    emitted = models.checkpoint_names("llama3.1-8b")
    spec = {k: "remat" for k in MAXTEXT_CUSTOM_KEYS if k != "decoder_layer_input"}
    policy = policies.resolve(spec, emitted=emitted)
    assert "not emitted by this model (no effect): " in policy.describe(emitted)
    assert "engram" in policy.describe(emitted) and "mla_q" in policy.describe(emitted)
    with pytest.raises(ValueError, match="mla_q, which this model never emits"):
        policies.resolve({"mla_q": "offload"}, emitted=emitted)
    assert policies.resolve({"attention_out": "offload"}, emitted=emitted).offload == ("attention_out",)


def test_attention_out_is_emitted_on_every_path_and_context_on_flash():
    for attention in ("flash", "dot_product", "chunked"):
        names = models.checkpoint_names(models.config("llama3.1-8b", attention=attention))
        assert "attention_out" in names and ("context" in names) == (attention == "flash")
        assert models.abstract(models.config("tiny-llama", attention=attention)).checkpoint_names() == \
            models.checkpoint_names(models.config("tiny-llama", attention=attention))


# ----------------------------------------------------------------------------- training-state levers


def test_optimizer_offload_puts_the_moments_on_the_host(capsys):
    assert cli.main(["compile", "--model", "llama3.1-8b", "--gpus", "8", "--batch", "8", "--seq", "4096",
                     "--policy", "full", "--offload-optimizer", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert cli.main(["budget", "--model", "llama3.1-8b", "--gpus", "8", "--batch", "8", "--seq", "4096",
                     "--policy", "full", "--offload-optimizer", "--json"]) == 0
    estimate = json.loads(capsys.readouterr().out)
    moments = next(t["bytes"] for t in estimate["terms"] if t["key"] == "optimizer")
    assert next(t["space"] for t in estimate["terms"] if t["key"] == "optimizer") == "host"
    # AdamW's two moments (and its step counters, a few bytes) are the host arguments
    assert abs(report["host"]["argument_bytes"] - moments) <= 64
    assert report["device"]["argument_bytes"] + report["host"]["argument_bytes"] == pytest.approx(
        small("full").device.argument_bytes, abs=64)
    assert report["state"]["optimizer_memory_host_offload"] is True and estimate["host_bytes"] >= moments
