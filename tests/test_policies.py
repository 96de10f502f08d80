import jax
import jax.numpy as jnp
import pytest

from companion import policies
from companion.models import toy

LLAMA_NAMES = {"decoder_layer_input", "query_proj", "key_proj", "value_proj", "context", "out_proj",
               "mlpwi_0", "mlpwi_1", "mlpwo"}
MAXTEXT_PRESETS = ["full", "minimal", "minimal_with_context", "save_dot_with_context_except_mlp",
                   "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj", "qkv_proj_offloaded",
                   "minimal_offloaded", "save_out_proj"]


def test_every_maxtext_preset_exists():
    assert set(MAXTEXT_PRESETS) == set(policies.PRESETS)
    assert "custom" in policies.PRESET_NAMES


def test_preset_contents_follow_maxtext():
    p = policies.PRESETS
    assert p["full"].device == () and p["full"].offload == ()
    assert p["minimal_with_context"].location("context") == "device"
    assert p["minimal"].location("context") == "remat"
    assert p["save_dot_except_mlpwi"].location("mlpwo") == "device"
    assert p["save_dot_except_mlpwi"].location("mlpwi_0") == "remat"
    assert p["qkv_proj_offloaded"].offload == ("query_proj", "value_proj", "key_proj", "kv_proj")
    assert set(p["minimal_offloaded"].offload) == set(p["minimal"].device) and p["minimal_offloaded"].device == ()
    assert [n for n, pol in p.items() if pol.offloads] == ["qkv_proj_offloaded", "minimal_offloaded"]


def test_jax_policies_are_the_matching_checkpoint_policies():
    # A policy is a function of (primitive, *avals, **params) -> saveable decision; check on a real trace.
    def f(x):
        a = jax.ad_checkpoint.checkpoint_name(jnp.sin(x), "query_proj")
        b = jax.ad_checkpoint.checkpoint_name(jnp.cos(a), "mlpwi_0")
        return jnp.sum(b * b)

    def residual_names(policy):
        return {why for _, why in policies.saved_residuals(jax.checkpoint(f, policy=policy.jax_policy()), jnp.ones(3))}

    assert not any("query_proj" in w for w in residual_names(policies.PRESETS["full"]))
    assert any("query_proj" in w for w in residual_names(policies.PRESETS["save_qkv_proj"]))
    assert any("mlpwi_0" in w for w in residual_names(policies.PRESETS["minimal"]))
    by_name = {p: policies.saved_names(jax.checkpoint(f, policy=policies.PRESETS[p].jax_policy()), jnp.ones(3))
               for p in ("full", "save_qkv_proj", "minimal")}
    assert by_name == {"full": [], "save_qkv_proj": ["query_proj"], "minimal": ["query_proj", "mlpwi_0"]}


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ValueError, match="did you mean minimal_offloaded.*choose one of full, minimal.*no_remat"):
        policies.resolve("minimal_ofloaded")
    with pytest.raises(ValueError, match="'custom' needs its per-tensor spec"):
        policies.resolve("custom")


def test_custom_spec_validation():
    pol = policies.custom({"query_proj": "offload", "mlpwo": "device", "context": "remat"})
    assert pol.offload == ("query_proj",) and pol.device == ("mlpwo",) and pol.location("context") == "remat"
    with pytest.raises(ValueError, match="unknown tensor 'query_prj'.*did you mean query_proj.*valid names"):
        policies.custom({"query_prj": "offload"})
    with pytest.raises(ValueError, match="bad location 'host'.*remat, device, offload"):
        policies.custom({"query_proj": "host"})
    with pytest.raises(ValueError, match="decoder_layer_input cannot be 'remat'"):
        policies.custom({"decoder_layer_input": "remat"})


def test_custom_naming_a_tensor_the_model_never_emits_is_an_error():
    with pytest.raises(ValueError, match="names mla_q, which this model never emits"):
        policies.resolve({"mla_q": "offload", "query_proj": "offload"}, emitted=LLAMA_NAMES)


def test_preset_touching_none_of_the_model_names_is_an_error():
    """The silent 'offload ignored' bug: a preset whose names the model does not use."""
    with pytest.raises(ValueError, match="silently behave like 'full'"):
        policies.resolve("minimal_offloaded", emitted={toy.HIDDEN})
    policies.resolve("full", emitted={toy.HIDDEN})  # full names nothing: fine anywhere
    assert policies.resolve({"hidden": "offload"}, emitted={toy.HIDDEN}).offload == ("hidden",)


def test_describe_lists_where_each_emitted_name_goes():
    text = policies.PRESETS["qkv_proj_offloaded"].describe(LLAMA_NAMES)
    assert "query_proj             offload" in text and "mlpwi_0                remat" in text
    assert "not emitted by this model (no effect): kv_proj" in text
    touched = policies.PRESETS["minimal"].touched(LLAMA_NAMES)
    assert touched["context"] == "remat" and touched["out_proj"] == "device"


def test_a_custom_file_named_like_a_preset_is_still_checked_as_custom(tmp_path):
    path = tmp_path / "minimal.json"
    path.write_text('{"query_proj": "offload", "mla_q": "offload"}')
    with pytest.raises(ValueError, match="names mla_q, which this model never emits"):
        policies.resolve(str(path), emitted=LLAMA_NAMES)


def test_load_custom_from_json(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text('{"decoder_layer_input": "offload", "query_proj": "device"}')
    pol = policies.resolve(str(path), emitted=LLAMA_NAMES)
    assert pol.name == "mine" and pol.offload == ("decoder_layer_input",)
    with pytest.raises(ValueError, match="not found"):
        policies.resolve(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold an object"):
        policies.resolve(str(bad))


def test_to_custom_spec_round_trips():
    pol = policies.PRESETS["minimal_offloaded"]
    spec = {k: v for k, v in pol.to_custom_spec().items() if v != "remat"}
    again = policies.custom(spec)
    assert set(again.offload) == set(pol.offload) and again.device == ()
