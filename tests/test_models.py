import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from companion import models, policies
from companion.models import configs as mc
from companion.models import moe
from companion.models.layers import rope_frequencies


@pytest.mark.parametrize("name", sorted(mc.PUBLISHED_PARAMS))
def test_parameter_counts_match_the_published_totals(name):
    cfg = models.config(name)
    assert cfg.param_count() == pytest.approx(mc.PUBLISHED_PARAMS[name], rel=0.01)


@pytest.mark.parametrize("name", sorted(mc.PUBLISHED_ACTIVE_PARAMS))
def test_active_parameter_counts_match_the_published_ones(name):
    assert models.config(name).param_count(active=True) == pytest.approx(mc.PUBLISHED_ACTIVE_PARAMS[name], rel=0.02)


def test_deepseek_active_parameters():
    cfg = models.config("deepseek-v3-671b")
    # ~37B activated per token (top-8 of 256 routed experts + the shared expert + attention).
    assert cfg.param_count(active=True) == pytest.approx(37e9, rel=0.02)
    assert cfg.num_dense_layers == 3 and cfg.num_moe_layers == 58


def test_published_shapes():
    c = models.config("llama3.1-405b")
    assert (c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.mlp_dim, c.vocab_size) == (
        126, 16384, 128, 8, 53248, 128256)
    d = models.config("deepseek-v3-671b")
    assert (d.num_layers, d.d_model, d.num_heads, d.mlp_dim, d.vocab_size) == (61, 7168, 128, 18432, 129280)
    assert (d.mla.q_lora_rank, d.mla.kv_lora_rank, d.mla.qk_nope_head_dim, d.mla.qk_rope_head_dim,
            d.mla.v_head_dim) == (1536, 512, 128, 64, 128)
    assert (d.moe.num_experts, d.moe.experts_per_token, d.moe.shared_experts, d.moe.expert_mlp_dim,
            d.moe.first_dense_layers) == (256, 8, 1, 2048, 3)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-deepseek", "tiny-mixtral", "llama3.1-405b", "deepseek-v3-671b",
                                  "mixtral-8x22b"])
def test_abstract_model_parameters_equal_the_config_count(name):
    model = models.abstract(name)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    counted = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    bias = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(rest))  # the router's balancing bias
    assert counted + bias == model.cfg.param_count()


@pytest.mark.parametrize("changes, message", [
    ({"num_heads": 6}, "does not divide d_model"),
    ({"num_kv_heads": 3}, "does not divide num_heads"),
    ({"d_model": 0}, "must be a positive integer"),
    ({"mlp_dim": -4}, "must be a positive integer"),
    ({"dtype": "bf16"}, "is not one of"),
    ({"attention": "splash"}, "is not one of"),
])
def test_invalid_llama_configs_are_clear_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        models.config("tiny-llama", **changes)


def test_invalid_moe_configs_are_clear_errors():
    base = models.config("tiny-deepseek")
    with pytest.raises(ValueError, match="experts_per_token 9 exceeds moe.num_experts 8"):
        base.replace(moe=mc.Moe(num_experts=8, experts_per_token=9, expert_mlp_dim=32))
    with pytest.raises(ValueError, match="first_dense_layers"):
        base.replace(moe=mc.Moe(num_experts=8, experts_per_token=2, expert_mlp_dim=32, first_dense_layers=7))
    with pytest.raises(ValueError, match="mla.kv_lora_rank must be a positive"):
        base.replace(mla=mc.Mla(32, 0, 16, 8, 16))
    with pytest.raises(ValueError, match="unknown model 'llama3-405b'.*did you mean llama3.1-405b"):
        models.config("llama3-405b")


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-deepseek", "tiny-mixtral"])
def test_models_report_exactly_the_names_they_emit(name):
    model = models.build(name)
    tokens = jnp.zeros((2, 8), jnp.int32)
    emitted = policies.emitted_names(lambda t: model(t), tokens)
    assert emitted == model.checkpoint_names()
    assert {"decoder_layer_input", "query_proj", "key_proj", "value_proj", "context", "out_proj",
            "mlpwi_0", "mlpwo"} <= emitted
    if name == "tiny-deepseek":
        assert {"mla_q", "mla_kv", "query_wa_proj", "kv_wa_proj", "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo"} <= emitted
    if name == "tiny-mixtral":  # MaxText's mixtral block: GQA attention, routed experts only (no shared MLP);
        # its sparse path names the up projection moe_mlpwi_1 only (moe.py at e591f30, line 1959), the gate and
        # down projections under both names
        assert {"moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo"} <= emitted and not {"mla_q", "mlpwi_1"} & emitted
    else:
        assert "mlpwi_1" in emitted


def _unscanned_twin(name: str):
    """A model and its unscanned twin (MaxText's scan_layers: false) with the same weights."""
    cfg = models.config(name, dtype="float32")
    scanned, unscanned = models.build(cfg), models.build(cfg.replace(scan_layers=False))
    stacked = nnx.state(scanned.layers)
    for i, layer in enumerate(unscanned.layers):
        nnx.update(layer, jax.tree.map(lambda x: x[i], stacked))
    for part in ("embed", "head"):
        nnx.update(getattr(unscanned, part), nnx.state(getattr(scanned, part)))
    return scanned, unscanned


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-mixtral"])
def test_unscanned_layers_compute_what_the_scanned_stack_does(name):
    """MaxText's scan_layers: false unrolls the same layers: the same logits and, under full remat with
    the CSE barriers MaxText adds there (prevent_cse), the same gradients."""
    scanned, unscanned = _unscanned_twin(name)
    assert isinstance(unscanned.layers, nnx.List) and len(unscanned.layers) == scanned.cfg.num_layers
    tokens = (jnp.arange(32, dtype=jnp.int32)[None] * 5) % 256
    np.testing.assert_allclose(scanned(tokens), unscanned(tokens), rtol=1e-5, atol=1e-5)
    policy = policies.resolve("full").jax_policy()

    def loss(model, prevent_cse):
        return jnp.mean(model(tokens, policy, prevent_cse=prevent_cse) ** 2)

    g_scan = nnx.grad(lambda m: loss(m, False))(scanned)
    g_unscan = nnx.grad(lambda m: loss(m, True))(unscanned)
    for i in range(scanned.cfg.num_layers):
        for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[i], nnx.state(g_scan.layers))),
                        jax.tree.leaves(nnx.state(g_unscan.layers[i]))):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_maxtext_s_prevent_cse_rule():
    """maxtext_utils.should_prevent_cse_in_remat: barriers for unscanned layers, except under gradient
    accumulation on a GPU; never for a scanned stack."""
    from companion import train

    unscanned = models.config("tiny-llama", scan_layers=False)
    assert train.trainer(unscanned, "full").prevent_cse
    assert not train.trainer(unscanned, "full", state=train.StateConfig(gradient_accumulation_steps=2)).prevent_cse
    assert not train.trainer("tiny-llama", "full").prevent_cse


def test_mixtral_routes_as_maxtext_s_mixtral_block():
    """Mixtral: softmax over the top-k logits, no balancing bias (only DeepSeek's sigmoid router has one)."""
    cfg = models.config("mixtral-8x7b")
    assert (cfg.moe.score_function, cfg.moe.shared_experts, cfg.moe.first_dense_layers) == ("softmax", 0, 0)
    assert cfg.stacks() == (("layers", 32, True),) and cfg.mla is None
    model = models.abstract("tiny-mixtral")
    _, rest = nnx.split(model, nnx.Param, ...)[1:]
    assert jax.tree.leaves(rest) == []  # no router bias


def test_forward_is_causal():
    model = models.build("tiny-llama")
    a = jnp.arange(16, dtype=jnp.int32)[None] % 256
    b = a.at[0, 10].set(99)
    la, lb = model(a), model(b)
    np.testing.assert_allclose(la[0, :10], lb[0, :10], rtol=1e-5, atol=1e-5)
    assert not np.allclose(la[0, 10:], lb[0, 10:])


@pytest.mark.parametrize("attention", ["chunked", "flash"])
def test_blockwise_attentions_equal_dot_product_in_float32(attention):
    """In float32 the three attentions agree to rounding (in bf16 they differ by bf16 rounding)."""
    full = models.build(models.config("tiny-llama", attention="dot_product", dtype="float32"))
    blocked = models.build(models.config("tiny-llama", attention=attention, attention_chunk=4, flash_block=4,
                                         dtype="float32"))
    tokens = (jnp.arange(32, dtype=jnp.int32)[None] * 7) % 256
    np.testing.assert_allclose(full(tokens), blocked(tokens), rtol=1e-4, atol=1e-4)


def test_expert_capacity_rounds_as_maxtext():
    """MaxText's generate_masks: int(max(ceil(S k / E) x factor, factor)) slots per expert and sequence."""
    assert moe.expert_capacity(4096, 8, 256, 1.25) == 160
    assert moe.expert_capacity(100, 2, 8, 1.5) == int(25 * 1.5)  # ceil first, then the factor, truncated
    assert moe.expert_capacity(4, 1, 256, 2.0) == 2  # never below the factor


def test_rope_scalings_change_low_frequencies_only():
    base = rope_frequencies(128, mc.Rope(theta=500_000.0))
    scaled = rope_frequencies(128, mc.Rope(theta=500_000.0, llama3_factor=8.0))
    assert scaled[0] == base[0] and scaled[-1] == pytest.approx(base[-1] / 8)
    yarn = rope_frequencies(64, mc.Rope(theta=10_000.0, yarn_factor=40.0))
    plain = rope_frequencies(64, mc.Rope(theta=10_000.0))
    assert yarn[0] == plain[0] and yarn[-1] == pytest.approx(plain[-1] / 40)
