"""Recompute counted right for every family, MoE included: full remat recomputes no more than the layers'
forward, and the compiled program's FLOPs are model + recompute + grouped-GEMM padding + the fused attention's
extra. Where a DeepSeek step recomputes more (expert parallelism), XLA's all-gather pipeliner is why."""

import pytest

from companion import compiler, flops, hlo, models, schedule, targets, train
from companion.models import flash

TWO_H100 = targets.target("h100", "1x2")
ROUTER = "bsd,de->bse"  # the router's einsum: upstream of the MoE's counts all-gather


def _deepseek(**moe):
    """DeepSeek-like shapes small enough to compile in seconds: MLA, 16 routed experts (k = 2), a shared one."""
    cfg = models.config("tiny-deepseek", d_model=256, num_layers=4, num_heads=4, num_kv_heads=4, flash_block=128)
    return cfg.replace(moe=cfg.moe.__class__(**{**dict(num_experts=16, experts_per_token=2, expert_mlp_dim=128,
                                                      shared_experts=1, first_dense_layers=1), **moe}))


def _step(cfg, mesh, seq=256, policy="full", flags=None):
    return train.compile_step(train.trainer(cfg, policy), compiler.place(TWO_H100, mesh), 4, seq, flags=flags)


def _layer_flops(module, phase: str) -> float:
    """Matmul FLOPs of ``phase`` inside the decoder layers' scan (the LM head and the loss excluded)."""
    return sum(hlo.dot_flops(module, i) * module.executions(i) for i in module.instructions()
               if i.opcode in ("dot", "convolution", "custom-call") and "/while/body/" in i.op_name
               and hlo.phase_of(i.op_name) == phase)


@pytest.mark.parametrize("cfg", [models.config("tiny-llama"), models.config("tiny-mixtral"), _deepseek()],
                         ids=["llama", "mixtral", "deepseek"])
def test_full_remat_recomputes_no_more_than_the_layers_forward(cfg):
    module = _step(cfg, {"fsdp": 2}).module
    recompute, forward = _layer_flops(module, "recompute"), _layer_flops(module, "forward")
    assert 0 < recompute <= forward


def test_with_expert_parallelism_the_all_gather_pipeliner_recomputes_the_pre_moe_chain_again():
    """Under ``expert`` > 1 the MoE all-gathers its row counts; XLA's backward collective pipeliner
    (``xla_gpu_pipeline_all_gather``, on in MaxText's GPU flags) prefetches the next layer's all-gather
    by cloning its whole operand chain — norm, MLA, attention, the router — into the loop: real recompute the
    program runs (JAX emits it once). With the pipeliner off, each MoE layer's router is recomputed once."""
    cfg = _deepseek()
    moe_layers = cfg.num_moe_layers
    on = _step(cfg, {"fsdp": 1, "expert": 2}).module
    off = _step(cfg, {"fsdp": 1, "expert": 2}, flags="--xla_gpu_pipeline_all_gather=off").module
    assert hlo.einsum_runs(off, ROUTER, "recompute") == hlo.einsum_runs(off, ROUTER, "forward") == moe_layers
    assert hlo.einsum_runs(on, ROUTER, "forward") == moe_layers and hlo.einsum_runs(on, ROUTER, "recompute") > moe_layers
    assert _layer_flops(on, "recompute") > _layer_flops(off, "recompute")


@pytest.mark.parametrize("policy", ["full", "minimal"])
def test_hardware_flops_are_model_recompute_padding_and_the_attention_kernels_extra(policy):
    """DeepSeek-like, expert parallelism 2, S = 384: each expert's 192 routed rows run as two 128-row tiles,
    so the grouped GEMMs compute padding. What the program executes less what it recomputes is MaxText's model
    count plus that padding and the fused attention's own extra (its backward recomputes QK^T), within 1 %."""
    cfg, seq, per_device = _deepseek(), 384, 2
    report = _step(cfg, {"fsdp": 1, "expert": 2}, seq, policy)
    sim, padding = schedule.simulate(report), hlo.grouped_padding_flops(report.module)
    assert padding["forward"] > 0
    m = cfg.mla
    fwd, bwd = flash.flops(1, cfg.num_heads, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim,
                           flash.causal_pairs(seq))
    attention_extra = cfg.num_layers * per_device * (fwd + bwd) - flops.model_flops(cfg, per_device, seq).attention
    executed = sim.hardware_flops - sim.recompute_flops - padding["forward"] - padding["backward"]
    assert sim.model_flops == flops.model_flops(cfg, per_device, seq).total
    assert executed == pytest.approx(sim.model_flops + attention_extra, rel=0.01)
