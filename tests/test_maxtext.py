from pathlib import Path

import pytest
import yaml

from companion import budget, maxtext, models, policies, sharding, targets, train

MAXTEXT = Path(__file__).parent / "data" / "maxtext" / "configs"  # MaxText's configs at e591f30 (SOURCE.md)
BASE_YML_KEYS = frozenset(yaml.safe_load((MAXTEXT / "base.yml").read_text()))


def test_every_exported_and_read_key_is_maxtexts():
    """Every key the lab exports or reads is one of base.yml's (a renamed key fails here first), and the
    lab's list of the keys MaxText accepts (from its types.py) holds every key of base.yml."""
    assert set(maxtext.EXPORTED_KEYS) <= BASE_YML_KEYS
    assert maxtext.READ_KEYS - {"base_config"} <= BASE_YML_KEYS  # base_config: the chain, pyconfig reads it
    assert BASE_YML_KEYS <= maxtext.MAXTEXT_KEYS


def test_the_keys_the_lab_reads_default_as_base_yml_does():
    base = yaml.safe_load((MAXTEXT / "base.yml").read_text())
    assert {k: base[k] for k in maxtext.BASE_DEFAULTS} == maxtext.BASE_DEFAULTS


@pytest.mark.parametrize("model, policy, target, mesh, batch, state", [
    ("llama3.1-405b", "minimal_offloaded", "h100:32x8", "fsdp=256", 256, train.StateConfig()),
    ("llama3.1-70b", {"decoder_layer_input": "offload", "query_proj": "device", "mlpwi_0": "offload"}, "h100:8x8",
     "fsdp=8,tensor=8", 64, train.StateConfig(gradient_accumulation_steps=2)),
    ("deepseek-v3-671b", "full", "gb200:16x4", "fsdp=8,expert=8", 64, train.StateConfig(optimizer_memory_host_offload=True)),
])
def test_overrides_read_back_reproduce_the_budget(model, policy, target, mesh, batch, state):
    t = targets.target(target)
    mesh_shape = sharding.parse_mesh(mesh, t.num_devices)
    values = maxtext.overrides(model, policy, batch, 4096, mesh_shape, t.num_devices, t.topology.gpus_per_host, state)
    run = maxtext.read(values, sparse_kernel="grouped")  # the lab's default MoE kernel for MaxText's sparse path
    assert run.not_modelled == ()
    assert run.global_batch(t.num_devices) == batch and run.seq == 4096 and run.state == state
    assert run.mesh(t.num_devices, t.topology.gpus_per_host) == mesh_shape
    before = budget.estimate(model, batch, 4096, policy, mesh_shape, target=t, state=state)
    after = budget.estimate(run.config(), run.global_batch(t.num_devices), run.seq, run.policy,
                            run.mesh(t.num_devices, t.topology.gpus_per_host), target=t, state=run.state)
    assert (after.device_bytes, after.host_bytes) == (before.device_bytes, before.host_bytes)
    assert isinstance(run.policy, str) == isinstance(policy, str)


def test_the_mesh_splits_inside_hosts_first():
    ici, dcn = maxtext.split_mesh({"fsdp": 16, "tensor": 8}, 8)
    assert ici == {"tensor": 8, "expert": 1, "fsdp": 1, "data": 1} and dcn["fsdp"] == 16
    ici, dcn = maxtext.split_mesh({"fsdp": 8, "expert": 8}, 4)
    assert ici["expert"] == 4 and dcn["expert"] == 2 and dcn["fsdp"] == 8


def test_a_users_config_lists_what_the_lab_does_not_model_and_fills_the_minus_one_axis(tmp_path):
    path = tmp_path / "run.yml"
    path.write_text("model_name: llama3.1-8b\nremat_policy: save_qkv_proj\nper_device_batch_size: 2\n"
                    "max_target_length: 8192\nici_fsdp_parallelism: -1\ndcn_data_parallelism: 2\n"
                    "attention: cudnn_flash_te\nhardware: gpu\nlearning_rate: 3.e-5\nsteps: 100\n")
    run = maxtext.read(path)
    assert run.not_modelled == ("learning_rate", "steps")
    assert run.mesh(16, 8) == {"data": 2, "fsdp": 8, "tensor": 1, "expert": 1}
    assert (run.policy, run.seq, run.global_batch(16), run.attention) == ("save_qkv_proj", 8192, 32, "flash")


@pytest.mark.parametrize("values, message", [
    ({"model_name": "gpt3-175b"}, "model_name 'gpt3-175b': the lab has llama2-7b, .*, deepseek3-671b"),
    ({"model_name": "llama3.1-8b", "remat_policy": "minimall"}, "remat_policy 'minimall': MaxText's are custom"),
    ({"model_name": "llama3.1-8b", "remat_policy": "custom", "query_proj": "host"}, "choose one of remat, device, offload"),
    ({"model_name": "llama3.1-8b", "ici_sequence_parallelism": 2}, "ici_sequence_parallelism: 2 is not modelled"),
    ({"model_name": "llama3.1-8b", "attention": "paged"}, "attention 'paged': the lab models"),
    ({"model_name": "llama3.1-8b", "scan_layers": "no"}, "scan_layers: 'no': true or false"),
    ({"model_name": "llama3.1-8b", "num_experts": 8}, "num_experts: 8 is not modelled for llama3.1-8b"),
    ({"model_name": "llama3.1-8b", "megablox_": True}, "'megablox_' is not a MaxText key .*did you mean megablox"),
    ({"model_name": "mixtral-8x7b", "megablox": True}, "megablox: true on a GPU: MaxText runs its Megablox kernel"),
    ({"model_name": "llama3.1-8b", "hardware": "cpu"}, "hardware: 'cpu': the lab models NVIDIA GPUs"),
])
def test_values_the_lab_cannot_honour_are_one_line_errors(values, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as err:
        maxtext.read(values)
    assert "\n" not in str(err.value)


def test_mesh_and_batch_errors_name_the_numbers():
    run = maxtext.read({"model_name": "llama3.1-8b", "per_device_batch_size": 0.5, "ici_fsdp_parallelism": 3})
    with pytest.raises(ValueError, match=r"ici_\*_parallelism over the 8 GPUs of a host: mesh .*fsdp=3.* has 3 devices"):
        run.mesh(8, 8)
    assert run.global_batch(3) == 1  # MaxText trains on int(0.5 x 3) sequences (types.calculate_global_batch_sizes)
    with pytest.raises(ValueError, match="per_device_batch_size 0.5 x 1 GPUs trains on 0 sequences"):
        run.global_batch(1)


def test_yaml_and_command_line_carry_maxtexts_keys_and_the_environment():
    t = targets.target("h100:2x8")
    values = maxtext.overrides("llama3.1-8b", "qkv_proj_offloaded", 32, 8192, {"fsdp": 16}, 16, 8)
    text = maxtext.to_yaml(values)
    assert "remat_policy: qkv_proj_offloaded\n" in text and "ici_fsdp_parallelism: 8\n" in text
    line = maxtext.command_line(values, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9", "XLA_FLAGS": "--a=1 --b=2"})
    assert line.startswith('XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 XLA_FLAGS="--a=1 --b=2" python3 -m maxtext.train ')
    assert " per_device_batch_size=2 " in line and " optimizer_memory_host_offload=false" in line
    with pytest.raises(ValueError, match="tiny-llama-eps is neither a MaxText model nor one reached"):
        maxtext.overrides(models.config("tiny-llama").replace(name="tiny-llama-eps", norm_eps=1e-3), "full", 8, 512,
                          {"fsdp": 2}, 2, 2)
    assert t.num_devices == 16
    assert policies.PRESETS["qkv_proj_offloaded"].offloads


def test_a_recipe_is_read_as_a_shell_runs_it(tmp_path):
    script = tmp_path / "1vm.sh"
    script.write_text(
        'export RUN_NAME="x"\n'
        'export XLA_FLAGS="--xla_dump_to=$OUTPUT_PATH/$RUN_NAME\n'
        '--xla_gpu_enable_latency_hiding_scheduler=true"\n'
        "python3 -m maxtext.trainers.pre_train.$EXECUTABLE "
        "${MAXTEXT_CONFIGS_DIR:-${MAXTEXT_REPO_ROOT:-$PWD}/src/maxtext/configs}/models/x.yml \\\n"
        "    run_name=$RUN_NAME per_device_batch_size=1\n")
    got = maxtext.recipe(script, {"OUTPUT_PATH": "/out", "RUN_NAME": "r", "EXECUTABLE": "train",
                                  "MAXTEXT_CONFIGS_DIR": "/cfg"})
    assert got.xla_flags == "--xla_dump_to=/out/r --xla_gpu_enable_latency_hiding_scheduler=true"
    assert got.argv == ("/cfg/models/x.yml", "run_name=r", "per_device_batch_size=1")
    with pytest.raises(ValueError, match=r"uses \$EXECUTABLE"):
        maxtext.recipe(script, {"OUTPUT_PATH": "/out", "RUN_NAME": "r", "MAXTEXT_CONFIGS_DIR": "/cfg"})
    with pytest.raises(ValueError, match="not a MaxText GPU recipe"):
        maxtext.recipe("echo hi\n", {})


def test_a_model_maxtext_does_not_name_exports_the_maxtext_way_and_reads_back():
    """A width MaxText has no file for goes as the model it is reached from, with override_model_config and the
    changed model-file keys on the command line; MaxText's reader (the lab's) gives the same model back."""
    from companion.measuring import measured

    grid = measured.grid_model(4)  # Llama 3's layer at 1B-class width: no MaxText model file
    values = maxtext.overrides(grid, "full", 2, 4096, {"fsdp": 1}, 1, 1, hardware="tpu")
    assert values["model_name"] == "llama3-8b" and values["override_model_config"] is True
    assert values["hardware"] == "tpu" and values["attention"] == "flash"  # Pallas on a TPU, not cuDNN's
    assert {k: values[k] for k in ("base_emb_dim", "base_num_query_heads", "base_num_decoder_layers", "vocab_size")} \
        == {"base_emb_dim": 2048, "base_num_query_heads": 16, "base_num_decoder_layers": 4, "vocab_size": 32000}
    assert "base_num_kv_heads" not in values  # unchanged from llama3-8b's file: not said
    tokens = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]
    run = maxtext.read(MAXTEXT / "base.yml", tokens)
    assert run.hardware == "tpu" and run.config() == grid.replace(name="llama3-8b")
    with pytest.raises(ValueError, match="hardware: tpu in the config, but --target h100:1x8 is a GPU"):
        run.check_target(targets.target("h100"))
    run.check_target(targets.target("tpu-v5e"))
