"""FLOPs and bytes counted over compiled HLO, and the roofline times built on them."""

import functools

import jax
import jax.numpy as jnp
import pytest

from companion import budget, compiler, hlo, models, roofline, targets, train
from compiled import budget_miss_on_0_12

H100 = targets.target("h100", "1")


@pytest.fixture(scope="module")
def one_gpu():
    return compiler.place(H100, backend_kind="cuda")


def test_a_single_matmul_counts_2mnk(one_gpu):
    M, K, N = 512, 1024, 768
    a, b = one_gpu.abstract((M, K), jnp.bfloat16), one_gpu.abstract((K, N), jnp.bfloat16)
    r = compiler.compile(lambda a, b: a @ b, a, b, placement=one_gpu)
    assert r.flops.total == 2 * M * N * K


def test_batch_dims_and_a_scan_of_L_layers_count_L_times(one_gpu):
    L, B, M, K = 6, 4, 256, 512
    x = one_gpu.abstract((B, M, K), jnp.bfloat16)
    w = one_gpu.abstract((L, K, K), jnp.bfloat16)

    def stack(x, w):
        return jax.lax.scan(lambda h, wi: (jnp.einsum("bmk,kn->bmn", h, wi), None), x, w)[0]

    r = compiler.compile(stack, x, w, placement=one_gpu)
    assert r.flops.total == L * 2 * B * M * K * K
    assert r.flops.by_phase == {"other": r.flops.total}  # no autodiff: neither forward nor backward


GEMM_MODULE = """HloModule m

ENTRY %e (a: bf16[64,128], b: bf16[128,32]) -> bf16[64,32] {
  %a = bf16[64,128]{1,0} parameter(0)
  %b = bf16[128,32]{1,0} parameter(1)
  %g = (bf16[64,32]{1,0}, s8[1024]{0}) custom-call(%a, %b), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %k = bf16[4,8,30,30]{3,2,1,0} parameter(2)
  %w = bf16[16,8,3,3]{3,2,1,0} parameter(3)
  %c = bf16[4,16,28,28]{3,2,1,0} convolution(%k, %w), window={size=3x3}, dim_labels=bf01_oi01->bf01
  ROOT %r = bf16[64,32]{1,0} get-tuple-element(%g), index=0
}
"""


def test_cublas_gemm_and_convolution_flops():
    module = hlo.parse_module(GEMM_MODULE)
    by_name = module.computations["e"].by_name
    assert hlo.dot_flops(module, by_name["g"]) == 2 * 64 * 32 * 128
    # each of 4x16x28x28 outputs sums 8 input features x 3x3 window
    assert hlo.dot_flops(module, by_name["c"]) == 2 * (4 * 16 * 28 * 28) * (8 * 3 * 3)


@functools.cache
def stack_report(policy: str, flags: str | None = None):
    placement = compiler.place(targets.target("h100"))
    return train.compile_layer_stack(models.config("llama3.1-8b", num_layers=4), policy, placement, 8, 4096,
                                     flags=flags)


def test_full_remat_costs_one_extra_forward_pass_less_the_down_projection():
    full, none = stack_report("full").flops.by_phase, stack_report("no_remat").flops.by_phase
    assert "recompute" not in none and full["forward"] == none["forward"] and full["backward"] == none["backward"]
    # The recomputed forward skips `mlpwo`: its output only feeds the residual add, whose gradient
    # does not need it, so XLA removes it as dead code.
    cfg, per_gpu_tokens = models.config("llama3.1-8b", num_layers=4), 8 * 4096 // 8
    down_projection = 2 * per_gpu_tokens * cfg.d_model * cfg.mlp_dim
    assert full["recompute"] == full["forward"] - cfg.num_layers * down_projection


def test_offloading_adds_no_recompute_for_what_it_offloads():
    assert stack_report("minimal_offloaded").flops.recompute == stack_report("minimal").flops.recompute
    assert stack_report("minimal_offloaded").flops.recompute < stack_report("full").flops.recompute


@budget_miss_on_0_12("0.12 recomputes L - 1 layers (counted 412 against 550 GFLOP at L = 4)")
def test_counted_flops_match_the_budget_model():
    for policy in ("full", "minimal"):
        e = budget.estimate(models.config("llama3.1-8b", num_layers=4), 8, 4096, policy, {"fsdp": 8})
        assert stack_report(policy).flops.recompute == pytest.approx(e.recompute_flops, rel=1e-9)


def test_in_place_updates_cost_only_the_slice():
    r = stack_report("no_remat")
    module = r.module
    costs = {c.name: c for c in hlo.op_costs(module)}
    dus = [c for name, c in costs.items() if name.startswith("loop_dynamic_update_slice_fusion")]
    assert dus
    for c in dus:
        instr = next(i for i in module.scheduled() if i.name == c.name)
        buffer = hlo.flatten_shape(instr.shape)[0]
        others = sum(s.bytes for s in module.operand_shapes(instr) if s != buffer)
        fused = module.computations[instr.called[0]]
        update = next(fused.by_name[i.operands[1]].shape.bytes for i in fused.instructions
                      if i.opcode == "dynamic-update-slice")
        # the stacked [L, ...] buffer is neither read nor rewritten whole: at most the fusion's other
        # inputs are read (less where it slices them), and the update (in the buffer's dtype) is written
        assert update <= c.bytes <= others + update and update < buffer.bytes, c


def test_roofline_times():
    g = targets.gpu("h100")
    matmul = hlo.OpCost("dot", "compute", 2e12, 10**6, "bf16", 1, "main", "forward")
    assert roofline.op_seconds(matmul, g) == pytest.approx(2e12 / g.bf16_dense_flops)
    copy = hlo.OpCost("copy", "compute", 0.0, 3.35e9, "", 1, "main", "forward")
    assert roofline.op_seconds(copy, g) == pytest.approx(1e-3)
    assert roofline.matmul_rate(g, "f32") == g.bf16_dense_flops / 2
    assert roofline.matmul_rate(g, "f8e4m3fn") == g.fp8_dense_flops
    pcie = targets.host_link("pcie5_x16")
    assert roofline.transfer_seconds(55.2e9, pcie, "d2h") == pytest.approx(1.0)  # the measured bandwidth
    gb200 = targets.host_link("nvlink_c2c_gb200")
    assert roofline.transfer_seconds(1e9, gb200, "h2d") == pytest.approx(2 * roofline.transfer_seconds(1e9, gb200, "h2d", 1))


def test_break_even_of_a_projection_is_two_peak_over_its_input_width():
    g = targets.gpu("h100")
    for D in (4096, 16384):
        bytes_, flops = 2 * 4096 * 1024, 2 * 4096 * D * 1024  # [S, 1024] output of a [S, D] x [D, 1024] matmul
        assert roofline.break_even_bandwidth(bytes_, flops, g) == pytest.approx(2 * g.bf16_dense_flops / D)
    (bw, offload, remat), = roofline.offload_vs_remat(1e9, 1e12, g, [100e9])
    assert offload == pytest.approx(0.02) and remat == pytest.approx(1e12 / g.bf16_dense_flops)


def test_naive_step_adds_transfers_to_compute():
    # the #46231 workaround as a flag (the lab adds it only on a jaxlib with the bug): every transfer a kernel
    r = stack_report("minimal_offloaded", "--xla_disable_hlo_passes=rematerialization,dynamic-slice-annotator")
    pcie = roofline.step_time(r, targets.target("h100"))
    c2c = roofline.step_time(r, targets.target("h100"), targets.host_link("nvlink_c2c_gh200"))
    assert pcie.d2h_bytes == r.offload.d2h_bytes_per_step > 0
    # the #46231 workaround's transfers are kernels: each at the SM-driven rate over PCIe, slower than a copy engine's
    link = targets.target("h100").link
    assert {t.engine for t in r.offload.transfers} == {"kernel"}
    assert pcie.transfer_seconds == pytest.approx(r.offload.d2h_bytes_per_step / link.kernel_d2h
                                                  + r.offload.h2d_bytes_per_step / link.kernel_h2d)
    assert pcie.transfer_seconds > r.offload.d2h_bytes_per_step / 55.2e9 + r.offload.h2d_bytes_per_step / 55.4e9
    assert pcie.naive_seconds == pytest.approx(pcie.compute_seconds + pcie.transfer_seconds)
    assert c2c.naive_seconds < pcie.naive_seconds and c2c.compute_seconds == pcie.compute_seconds
    assert pcie.overlapped_seconds == max(pcie.compute_seconds, pcie.d2h_seconds, pcie.h2d_seconds)
    layered = stack_report("minimal_offloaded", "none")  # XLA's defaults: one layer per loop iteration
    bodies = roofline.loop_body_seconds(layered, targets.target("h100"))
    assert sorted(trips for trips, _ in bodies.values()) == [4, 4]


def test_time_call_measures_a_real_call():
    f = jax.jit(lambda x: (x @ x).sum())
    seconds = train.time_call(f, jnp.ones((64, 64)), repeats=3)
    assert 0 < seconds < 5


def test_pinned_host_pool_from_the_environment():
    assert targets.pinned_host_pool_bytes({}) == 64 * 2**30  # GiB: XLA reads the value << 30
    assert targets.pinned_host_pool_bytes({"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "256"}) == 256 * 2**30
    assert targets.pinned_host_pool_bytes({"XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE": "true"}) == 16 * 2**30
    with pytest.raises(ValueError, match="whole number of GiB"):
        targets.pinned_host_pool_bytes({"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "lots"})


# ----------------------------------------------------------------------------- model FLOPs (MaxText's count)


def _maxtext_tflops(c) -> float:
    """MaxText's ``calculate_tflops_training_per_device`` (src/maxtext/utils/maxtext_utils.py L1149-L1392 and
    L648-L771 at AI-Hypercomputer/maxtext e591f30), its branches for the lab's families transcribed line by
    line from the source, on a config stub ``c`` with MaxText's key names; TFLOPs per device per step."""
    def ffn(mlp_dim):  # calculate_ffn_mamtul_tflops_per_device
        ffn1 = 2 * c.per_device_batch_size * c.max_target_length * mlp_dim * c.emb_dim * len(c.mlp_activations)
        return ffn1 + 2 * c.per_device_batch_size * c.max_target_length * mlp_dim * c.emb_dim

    if c.num_experts > 1:
        gate = 2 * c.per_device_batch_size * c.max_target_length * c.emb_dim * c.num_experts
        if c.decoder_block == "deepseek":  # calculate_routed_and_shared_ffn_tflops_per_device
            moe_layers = c.num_decoder_layers - c.first_num_dense_layers
            total_ffn_all = (ffn(c.mlp_dim) * c.first_num_dense_layers
                             + (gate + ffn(c.moe_mlp_dim) * c.shared_experts + ffn(c.moe_mlp_dim) * c.num_experts_per_tok)
                             * moe_layers)
        else:
            total_ffn_all = (gate + ffn(c.moe_mlp_dim) * c.num_experts_per_tok) * c.num_decoder_layers
    else:
        total_ffn_all = ffn(c.mlp_dim) * c.num_decoder_layers
    batch_len = c.per_device_batch_size * c.max_target_length
    if c.attention_type == "mla":  # calculate_mla_tflops_per_device, q_lora_rank > 0, no indexer
        qk = c.qk_nope_head_dim + c.qk_rope_head_dim
        q = 2 * batch_len * (c.emb_dim * c.q_lora_rank + c.q_lora_rank * c.num_query_heads * qk)
        kv = 2 * batch_len * (c.emb_dim * (c.kv_lora_rank + c.qk_rope_head_dim)
                              + c.kv_lora_rank * c.num_query_heads * (c.qk_nope_head_dim + c.v_head_dim))
        qkv, causal = q + kv, 2 * batch_len * c.max_target_length * c.num_query_heads * (qk + c.v_head_dim) / 2
        projection = 2 * batch_len * c.emb_dim * c.num_query_heads * c.v_head_dim
    else:
        qkv = 2 * batch_len * c.emb_dim * (c.num_query_heads + 2 * c.num_kv_heads) * c.head_dim
        causal = 4 * c.per_device_batch_size * c.max_target_length ** 2 * c.num_query_heads * c.head_dim / 2
        projection = 2 * batch_len * c.emb_dim * c.num_query_heads * c.head_dim
    embedding = 2 * batch_len * c.emb_dim * c.vocab_size
    learnable = (total_ffn_all + (qkv + projection) * c.num_decoder_layers + embedding) * 3 / 10**12
    attention = causal * c.num_decoder_layers * 3 / 10**12
    return (learnable + attention) * c.gradient_accumulation_steps


def _maxtext_keys(cfg, per_device_batch_size: float, seq: int):
    """The lab's config under MaxText's key names."""
    import types

    m, a = cfg.moe, cfg.mla
    return types.SimpleNamespace(
        per_device_batch_size=per_device_batch_size, max_target_length=seq, gradient_accumulation_steps=1,
        emb_dim=cfg.d_model, mlp_dim=cfg.mlp_dim, num_query_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, num_decoder_layers=cfg.num_layers, vocab_size=cfg.vocab_size,
        mlp_activations=("silu", "linear"), num_experts=m.num_experts if m else 1,
        num_experts_per_tok=m.experts_per_token if m else 1, moe_mlp_dim=m.expert_mlp_dim if m else 0,
        shared_experts=m.shared_experts if m else 0, first_num_dense_layers=m.first_dense_layers if m else 0,
        decoder_block="deepseek" if a is not None else ("mixtral" if m else "llama2"),
        attention_type="mla" if a is not None else "global",
        **({"q_lora_rank": a.q_lora_rank, "kv_lora_rank": a.kv_lora_rank, "qk_nope_head_dim": a.qk_nope_head_dim,
            "qk_rope_head_dim": a.qk_rope_head_dim, "v_head_dim": a.v_head_dim} if a else {}))


@pytest.mark.parametrize("name, pdbs, seq", [("llama3.1-8b", 2, 8192), ("llama3.1-405b", 1.0, 4096),
                                             ("llama3.1-70b", 0.5, 4096), ("deepseek-v3-671b", 1, 4096),
                                             ("tiny-deepseek", 3, 256)])
def test_model_flops_are_maxtexts_count(name, pdbs, seq):
    from companion import flops

    cfg = models.config(name)
    assert flops.model_flops(cfg, pdbs, seq).total / 1e12 == pytest.approx(
        _maxtext_tflops(_maxtext_keys(cfg, pdbs, seq)), rel=1e-9)


def test_model_flops_match_maxtexts_own_output():
    """Values MaxText's own function printed at e591f30 (executed on stub configs from its model YAMLs)."""
    from companion import flops

    assert flops.model_flops(models.config("deepseek-v3-671b"), 1, 4096).total / 1e12 == pytest.approx(1025.842738, abs=1e-6)
    assert flops.model_flops(models.config("llama3.1-405b"), 1, 8192).total / 1e12 == pytest.approx(20676.247441, abs=1e-6)


@pytest.mark.parametrize("policy", ["full", "minimal", "save_dot_except_mlp", "save_qkv_proj", "minimal_offloaded",
                                    "qkv_proj_offloaded", "save_out_proj", "minimal_with_context"])
def test_executed_minus_recompute_is_the_model_count_for_every_preset(policy):
    """Llama 3.1 8B (4 layers) on 8 H100: the compiled program's matmul FLOPs less those tagged recompute equal
    MaxText's model count plus the one term a fused attention kernel adds — its backward recomputes QK^T
    (``flash.flops``: 5 block matmuls against the forward's 2, where MaxText counts the backward as twice the
    forward), and cuDNN's causal mask computes the diagonal's s(s+1)/2 pairs, not s^2/2. A backward tagged as
    recompute (a custom VJP inside a remat region) would fall short of it."""
    from companion import flops, schedule
    from companion.models import flash

    cfg = models.config("llama3.1-8b", num_layers=4)
    placement = compiler.place(targets.target("h100", "1x8"), {"fsdp": 8})
    r = train.compile_step(train.trainer(cfg, policy), placement, 8, 4096)
    sim = schedule.simulate(r)
    b, S, H, d = 1, 4096, cfg.num_heads, cfg.head_dim
    attention_fwd, attention_bwd = flash.flops(b, H, d, d, flash.causal_pairs(S))
    flash_extra = cfg.num_layers * (attention_fwd + attention_bwd) - flops.model_flops(cfg, 1, S).attention
    assert sim.model_flops == flops.model_flops(cfg, 1, 4096).total
    assert sim.hardware_flops - sim.recompute_flops == pytest.approx(sim.model_flops + flash_extra, rel=1e-9)
