import json
import os
import subprocess
import sys

import pytest


def companion(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "companion", *args], capture_output=True, text=True, timeout=120)


def test_targets_json_lists_the_catalog_with_memory_and_links():
    out = companion("targets", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    gpus = {g["key"]: g for g in data["gpus"]}
    assert set(gpus) >= {"h100", "h200", "gh200", "b200", "gb200"}
    for g in gpus.values():
        assert g["hbm_bytes"] > 70 * 2**30 and g["usable_hbm_bytes"] < g["hbm_bytes"] and g["mem_fraction"] == 0.75
        assert g["host_link_bidirectional_bytes_per_s"] == 2 * g["host_link_per_direction_bytes_per_s"]
    assert gpus["gb200"]["host_link_bidirectional_bytes_per_s"] == 900e9
    assert gpus["h100"]["host_link_bidirectional_bytes_per_s"] == 128e9
    links = data["host_links"]
    for link in links.values():  # nominal and achievable per direction, who shares it, the memory behind it
        assert link["nominal_gb_per_s_per_direction"] >= max(link["achievable_gb_per_s"].values()) > 0
        assert link["gpus_per_link"] >= 1 and link["host_memory_gb_per_s"] > 0 and link["gpus_per_host_memory"] >= 1
    assert links["nvlink_c2c_vera_rubin"]["nominal_gb_per_s_per_direction"] == 900
    assert links["nvlink_c2c_gb200"]["gpus_per_link"] == 2 and links["nvlink_c2c_gh200"]["gpus_per_link"] == 1
    assert links["pcie5_x16"]["achievable_gb_per_s"]["h2d"] == pytest.approx(55, abs=1)
    assert out.stderr == ""


def test_targets_table_and_flag_listing():
    table = companion("targets")
    assert table.returncode == 0 and "gb200" in table.stdout and "NVLink-C2C" in table.stdout
    listing = companion("flags")
    assert listing.returncode == 0 and "--xla_gpu_enable_pipelined_host_offloading=false" in listing.stdout


def test_unknown_subcommand_fails():
    assert companion("nonsense").returncode != 0


def test_compile_prints_one_json_object_per_device(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"query_proj": "offload", "mlpwi_0": "device"}')
    out = companion("compile", "--model", "tiny-llama", "--target", "h100", "--gpus", "2", "--mesh", "fsdp=2",
                    "--batch", "4", "--seq", "64", "--policy", str(spec), "--json",
                    "--xla-flags", "--xla_gpu_enable_latency_hiding_scheduler=true")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["target"] == "h100:1x2" and report["num_devices"] == 2 and report["policy"] == "spec"
    for key in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "peak_bytes"):
        assert report["device"][key] >= 0
    for key in ("argument_bytes", "output_bytes", "temp_bytes"):
        assert key in report["host"]
    assert report["host"]["temp_bytes"] > 0 and report["offload"]["d2h_ops"] >= 1 and report["offload"]["h2d_ops"] >= 1
    assert report["compile_seconds"] > 0
    assert report["flags"]["xla_gpu_enable_latency_hiding_scheduler"] == "true"
    assert report["flag_set"]["preset"] == "maxtext_gpu" and report["flag_set"]["workarounds"] == []  # 0.12: no #46231
    assert report["flag_set"]["overrides"] == {"xla_gpu_enable_latency_hiding_scheduler": "true"}
    assert report["mem_fraction"] == 0.75 and report["usable_hbm_bytes"] < report["hbm_bytes"]
    assert report["fits"] is True and report["margin_bytes"] == report["usable_hbm_bytes"] - report["device"]["peak_bytes"]
    assert report["offload"]["checks"]["verdict"] != "wrong" and report["offload"]["checks"]["host_wrong"] == 0
    # matmul FLOPs per device per step, and the bytes the offload moves each way
    assert report["flops"] > 0 and report["flops_by_phase"]["backward"] > report["flops_by_phase"]["forward"]
    # every offloaded byte goes out; jaxlib 0.12 keeps the last layer's forward values, so one layer's fewer come back
    assert report["offload"]["d2h_bytes_per_step"] > report["offload"]["h2d_bytes_per_step"] > 0


def test_compile_errors_are_one_line():
    cases = [
        (["--model", "llama3-8bb"], "unknown model"),
        (["--model", "tiny-llama", "--policy", "fulll"], "unknown remat policy"),
        (["--model", "tiny-llama", "--gpus", "2", "--batch", "3"], "does not divide"),
        (["--model", "tiny-llama", "--gpus", "2", "--mesh", "fsdp=4"], "make the sizes multiply to 2"),
        (["--model", "tiny-llama", "--gpus", "0"], "must be positive"),
        (["--model", "tiny-llama", "--target", "h1000"], "unknown accelerator"),
        (["--model", "tiny-llama", "--xla-flags", "--xla_gpu_enable_latency_hidng_scheduler=true"], "did you mean"),
    ]
    for extra, message in cases:
        args = ["compile", "--batch", "4", "--seq", "64", *extra]
        out = companion(*args)
        assert out.returncode == 1, (extra, out.stderr)
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, (extra, out.stderr)


def test_budget_and_compile_agree_for_405b_on_8x8_h100():
    common = ["--model", "llama3.1-405b", "--target", "h100", "--gpus", "64", "--batch", "64", "--seq", "4096",
              "--policy", "minimal_offloaded", "--json"]
    b = companion("budget", *common)
    c = companion("compile", *common)
    assert b.returncode == 0 and c.returncode == 0, (b.stderr, c.stderr)
    b, c = json.loads(b.stdout), json.loads(c.stdout)
    assert abs(b["device_bytes"] - c["device"]["peak_bytes"]) <= 0.03 * c["device"]["peak_bytes"]
    assert b["host_bytes"] == c["host"]["temp_bytes"]
    terms = {t["key"]: t for t in b["terms"]}
    assert terms["residuals_host"]["space"] == "host" and "query_proj" in terms["residuals_host"]["formula"]
    assert b["fits"] is False and b["target"] == "h100:8x8"


def test_budget_table_and_errors():
    out = companion("budget", "--model", "tiny-deepseek", "--gpus", "1", "--batch", "2", "--seq", "32")
    assert out.returncode == 0 and "device total" in out.stdout and "routed experts" in out.stdout
    bad = companion("budget", "--model", "tiny-llama", "--gpus", "2", "--batch", "3", "--seq", "32")
    assert bad.returncode == 1 and "does not divide" in bad.stderr


def test_budget_refuses_a_custom_spec_naming_tensors_the_model_lacks(tmp_path):
    spec = tmp_path / "minimal.json"  # named like a preset: still checked as a custom spec
    spec.write_text('{"query_proj": "offload", "mla_q": "offload"}')
    bad = companion("budget", "--model", "tiny-llama", "--gpus", "1", "--batch", "2", "--seq", "32",
                    "--policy", str(spec))
    assert bad.returncode == 1 and "mla_q, which this model never emits" in bad.stderr


def test_a_maxtext_config_in_and_its_overrides_out_give_the_same_budget(tmp_path):
    config = tmp_path / "run.yml"
    config.write_text("model_name: llama3.1-405b\nhardware: gpu\nremat_policy: custom\ndecoder_layer_input: offload\n"
                      "query_proj: device\nmlpwi_0: offload\nper_device_batch_size: 1\nmax_target_length: 8192\n"
                      "ici_fsdp_parallelism: 8\ndcn_fsdp_parallelism: 32\noptimizer_memory_host_offload: true\n"
                      "learning_rate: 3.e-5\n")
    out = tmp_path / "overrides.yml"
    first = companion("budget", "--target", "h100:32x8", "--maxtext-config", str(config), "--maxtext-yaml", str(out),
                      "--json")
    assert first.returncode == 0, first.stderr
    a = json.loads(first.stdout)
    assert a["batch"] == 256 and a["seq"] == 8192 and a["mesh"]["fsdp"] == 256
    assert a["maxtext"]["not_modelled"] == ["learning_rate"]
    assert a["maxtext"]["overrides"]["remat_policy"] == "custom" and a["maxtext"]["overrides"]["mlpwi_0"] == "offload"
    assert "XLA_FLAGS=" in a["maxtext"]["command_line"] and "optimizer_memory_host_offload=true" in a["maxtext"]["command_line"]
    again = json.loads(companion("budget", "--target", "h100:32x8", "--maxtext-config", str(out), "--json").stdout)
    assert (again["device_bytes"], again["host_bytes"]) == (a["device_bytes"], a["host_bytes"])
    both = companion("budget", "--target", "h100:32x8", "--maxtext-config", str(config), "--mesh", "fsdp=256")
    assert both.returncode == 1 and both.stderr.strip() == (
        "error: --mesh and --maxtext-config both set the run: give one of them")
    none = companion("budget", "--target", "h100")
    assert none.returncode == 1 and "--model, --batch and --seq are required (or --maxtext-config FILE)" in none.stderr


def test_a_run_s_bad_xla_flags_are_one_line_not_an_abort():
    """The run's XLA_FLAGS in the environment (here an older XLA's boolean and a removed flag) read with --xla-flags
    env: one line naming both with the string to paste, before JAX's backend would start with them and abort."""
    env = {**os.environ, "XLA_FLAGS": "--xla_gpu_enable_pipelined_all_gather=true --xla_gpu_graph_level=0"}
    out = subprocess.run([sys.executable, "-m", "companion", "compile", "--model", "tiny-llama", "--gpus", "2",
                          "--batch", "4", "--seq", "64", "--xla-flags", "env"], capture_output=True, text=True,
                         timeout=120, env=env)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: 2 XLA flags"), out.stderr
    assert 'ready to paste: XLA_FLAGS="--xla_gpu_pipeline_all_gather=on"' in lines[0]


def test_train_refuses_a_model_this_machine_cannot_hold_in_one_line():
    import time

    t = time.perf_counter()
    out = companion("train", "--model", "llama3.1-8b", "--steps", "1")
    assert out.returncode == 1 and time.perf_counter() - t < 30
    line = out.stderr.strip()
    assert "\n" not in line and line.startswith("error: train --model llama3.1-8b") and "GiB of host RAM" in line
    assert "tiny-llama" in line and "Traceback" not in out.stderr


def test_the_host_memory_check_passes_a_tiny_model_and_counts_the_state():
    from companion import loop, models

    tiny = loop.RunConfig(model="tiny-llama", steps=1)
    loop.check_host_memory(tiny, 1, available=8 * 2**30)
    big = loop.RunConfig(model="llama3.1-8b", steps=1)
    assert loop.host_bytes_needed(big, 1) >= 16 * models.config("llama3.1-8b").param_count()
    with pytest.raises(MemoryError, match="needs about"):
        loop.check_host_memory(big, 1, available=2**40 // 8)


def test_simulate_batch_max_compiles_under_usable_hbm_and_the_next_batch_does_not():
    out = companion("simulate", "--model", "llama3.1-8b", "--target", "h100:1x8", "--seq", "4096", "--batch", "max",
                    "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    found = result["batch_max"]
    assert result["batch"] == found["batch"] > 0 and found["batch"] % 8 == 0
    assert found["device_bytes"] <= found["usable_hbm_bytes"] < found["next_device_bytes"]
    assert result["peak_device_bytes"] == found["device_bytes"] and result["step_seconds"] > 0
