"""Bad input, everywhere: each case is answered in-process by one line naming the bad value (and the
valid choices where there are any), with no traceback and no dead kernel."""

import json

import pytest

from companion import cli, flags, targets, widgets

STEP = ["--batch", "4", "--seq", "64"]
TINY = ["--model", "tiny-llama", "--gpus", "2"]
DS = ["--model", "tiny-deepseek", "--gpus", "2"]


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


CLI_CASES = [
    # (id, argv builder, words the one-line message must contain)
    ("unknown model", lambda t: ["budget", "--model", "llama3-8bb", *STEP], ["'llama3-8bb'", "llama3.1-8b"]),
    ("unknown GPU", lambda t: ["budget", *TINY[:2], "--target", "h1000", *STEP], ["'h1000'", "h100", "gb200"]),
    ("unknown policy", lambda t: ["budget", *TINY, *STEP, "--policy", "fulll"], ["'fulll'", "minimal_offloaded"]),
    ("custom without spec", lambda t: ["budget", *TINY, *STEP, "--policy", "custom"], ["'custom'", ".json"]),
    ("missing policy file", lambda t: ["budget", *TINY, *STEP, "--policy", str(t / "nope.json")], ["nope.json", "not found"]),
    ("malformed policy file", lambda t: ["budget", *TINY, *STEP, "--policy", _write(t, "bad.json", "{query_proj: off")],
     ["bad.json", "not JSON"]),
    ("policy file not an object", lambda t: ["budget", *TINY, *STEP, "--policy", _write(t, "list.json", "[1, 2]")],
     ["list.json", "object"]),
    ("unknown tensor", lambda t: ["budget", *TINY, *STEP, "--policy", _write(t, "t.json", '{"query_prj": "offload"}')],
     ["'query_prj'", "query_proj"]),
    ("bad location", lambda t: ["budget", *TINY, *STEP, "--policy", _write(t, "l.json", '{"query_proj": "host"}')],
     ["'host'", "remat, device, offload"]),
    ("tensor the model lacks", lambda t: ["budget", *TINY, *STEP, "--policy", _write(t, "m.json", '{"mla_q": "offload"}')],
     ["mla_q", "never emits"]),
    ("layer input recomputed", lambda t: ["budget", *TINY, *STEP, "--policy",
                                         _write(t, "d.json", '{"decoder_layer_input": "remat"}')],
     ["decoder_layer_input", "'device' or 'offload'"]),
    ("misspelt flag", lambda t: ["budget", *TINY, *STEP, "--xla-flags", "--xla_gpu_enable_latency_hidng_scheduler=true"],
     ["xla_gpu_enable_latency_hidng_scheduler", "did you mean"]),
    ("flag absent from 0.10.2", lambda t: ["budget", *TINY, *STEP, "--xla-flags", "--xla_gpu_graph_level=0"],
     ["xla_gpu_graph_level", "--xla_gpu_enable_command_buffer="]),
    ("bad flag value", lambda t: ["budget", *TINY, *STEP, "--xla-flags", "--xla_gpu_enable_latency_hiding_scheduler=yes"],
     ["'yes'", "true or false"]),
    ("bad enum flag value", lambda t: ["budget", *TINY, *STEP, "--xla-flags",
                                      "--xla_gpu_enable_while_loop_unrolling=SOMETIMES"],
     ["'SOMETIMES'", "WHILE_LOOP_UNROLLING_AUTO_UNROLL"]),
    ("unknown preset", lambda t: ["budget", *TINY, *STEP, "--xla-flags", "maxtex"], ["'maxtex'", "maxtext_gpu, none"]),
    ("mesh not multiplying", lambda t: ["budget", *TINY, *STEP, "--mesh", "fsdp=4"], ["fsdp=4", "multiply to 2"]),
    ("batch not dividing", lambda t: ["budget", *TINY, "--batch", "3", "--seq", "64"], ["batch 3", "2 devices"]),
    ("zero batch", lambda t: ["budget", *TINY, "--batch", "0", "--seq", "64"], ["--batch", "got 0"]),
    ("negative sequence", lambda t: ["budget", *TINY, "--batch", "4", "--seq", "-8"], ["--seq", "got -8"]),
    ("zero GPUs", lambda t: ["budget", "--model", "tiny-llama", "--gpus", "0", *STEP], ["--gpus", "got 0"]),
    ("GPUs not whole hosts", lambda t: ["budget", "--model", "tiny-llama", "--gpus", "12", *STEP], ["12 GPUs", "8-GPU"]),
    ("malformed topology", lambda t: ["budget", "--model", "tiny-llama", "--target", "h100:8by8", *STEP],
     ["'8by8'", "HOSTSxGPUS"]),
    ("topology and GPUs disagree", lambda t: ["budget", "--model", "tiny-llama", "--target", "h100:1x8", "--gpus", "16",
                                             *STEP], ["h100:1x8", "16"]),
    ("malformed mesh", lambda t: ["budget", *TINY, *STEP, "--mesh", "fsdp:2"], ["fsdp:2"]),
    ("unknown mesh axis", lambda t: ["budget", *TINY, *STEP, "--mesh", "pipeline=2"], ["pipeline", "fsdp"]),
    ("zero mesh axis", lambda t: ["budget", *TINY, *STEP, "--mesh", "fsdp=0"], ["fsdp", "0"]),
    ("two open mesh axes", lambda t: ["budget", *TINY, *STEP, "--mesh", "fsdp=-1,tensor=-1"], ["-1"]),
    ("heads not dividing tensor", lambda t: ["budget", "--model", "tiny-llama", "--gpus", "8", "--batch", "8",
                                            "--seq", "64", "--mesh", "tensor=8"], ["heads 4", "8"]),
    ("mem fraction zero", lambda t: ["budget", *TINY, *STEP, "--mem-fraction", "0"], ["'0'", "(0, 1]"]),
    ("mem fraction above one", lambda t: ["budget", *TINY, *STEP, "--mem-fraction", "1.5"], ["'1.5'", "(0, 1]"]),
    ("mem fraction not a number", lambda t: ["budget", *TINY, *STEP, "--mem-fraction", "most"], ["'most'", "needed"]),
    ("mem fraction needed for a plan", lambda t: ["plan", "--model", "tiny-llama", "--gpus", "2", "--seq", "64",
                                                 "--mem-fraction", "needed"], ["'needed'", "float"]),
    ("batch not an integer", lambda t: ["budget", *TINY, "--batch", "eight", "--seq", "64"], ["'eight'"]),
    ("unknown attention", lambda t: ["budget", *TINY, *STEP, "--attention", "flashy"], ["'flashy'", "dot_product"]),
    ("targets mem fraction", lambda t: ["targets", "--mem-fraction", "2"], ["2.0", "(0, 1]"]),
    ("flags check", lambda t: ["flags", "--check", "--xla_gpu_enable_latency_hidng_scheduler=1"], ["did you mean"]),
    ("unknown preset to print", lambda t: ["flags", "--preset", "fast"], ["'fast'", "maxtext_gpu"]),
    ("unknown subcommand", lambda t: ["simulat"], ["'simulat'", "budget"]),
    ("compile: unknown model", lambda t: ["compile", "--model", "gpt-4", *STEP], ["'gpt-4'", "tiny-llama"]),
    ("unknown MoE path", lambda t: ["budget", *DS, *STEP, "--moe", "dropless"], ["'dropless'", "grouped", "ragged_dot"]),
    ("MoE factor on a dense model", lambda t: ["budget", *TINY, *STEP, "--capacity-factor", "2"],
     ["--capacity-factor", "tiny-llama has none"]),
    ("capacity factor zero", lambda t: ["budget", *DS, *STEP, "--moe", "dense", "--capacity-factor", "0"],
     ["capacity_factor 0.0", "-1", "> 0"]),
    ("buffer factor negative", lambda t: ["budget", *DS, *STEP, "--ragged-buffer-factor", "-2"],
     ["ragged_buffer_factor -2.0", "-1", "> 0"]),
    ("imbalance below one", lambda t: ["budget", *DS, *STEP, "--moe-imbalance", "0.5"], ["imbalance 0.5", "[1, 4]"]),
    ("imbalance over E/k", lambda t: ["budget", *DS, *STEP, "--moe-imbalance", "9"], ["imbalance 9.0", "[1, 4]"]),
    ("MaxText: unknown model_name", lambda t: ["budget", "--maxtext-config", _write(t, "a.yml", "model_name: gpt3-175b\n")],
     ["model_name 'gpt3-175b'", "llama2-7b", "mixtral-8x22b"]),
    ("MaxText: override without '='", lambda t: ["budget", "--maxtext-config", _write(t, "b.yml", "model_name: llama2-7b\n"),
                                                "run_name"], ["'run_name'", "key=value"]),
    ("MaxText: a key MaxText lacks", lambda t: ["budget", "--maxtext-config", _write(t, "c.yml", "model_name: llama2-7b\n"),
                                               "megablocks=false"], ["'megablocks'", "not a MaxText key", "megablox"]),
    ("MaxText: overrides without a config", lambda t: ["budget", *TINY, *STEP, "scan_layers=false"],
     ["'scan_layers=false'", "--maxtext-config"]),
    ("MaxText: Megablox on a GPU", lambda t: ["budget", "--maxtext-config",
                                             _write(t, "d.yml", "model_name: mixtral-8x7b\nmegablox: true\n")],
     ["megablox: true", "interpret mode", "megablox: false"]),
    ("MaxText: budget of unscanned layers", lambda t: ["budget", "--maxtext-config",
                                                      _write(t, "e.yml", "model_name: llama2-7b\nscan_layers: false\n")],
     ["scan_layers false", "compile"]),
    ("compile: bad flag", lambda t: ["compile", *TINY, *STEP, "--xla-flags", "--xla_gpu_offloading_memory_limit_gb=8"],
     ["xla_gpu_offloading_memory_limit_gb", "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"]),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input_is_one_line_naming_the_value(case, tmp_path, capsys):
    _, argv, words = case
    try:
        code = cli.main(argv(tmp_path))
    except SystemExit as exit_:  # argparse's own errors exit; ours return
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], (word, lines[0])


WIDGET_CASES = [
    ("model", lambda: widgets.budget_view("gpt-4", 8, 4096, "full", "h100", 8, ""), "'gpt-4'"),
    ("GPUs", lambda: widgets.budget_view("llama3.1-8b", 8, 4096, "full", "h100", 0, ""), "got 0"),
    ("policy", lambda: widgets.budget_view("llama3.1-8b", 8, 4096, "fll", "h100", 8, ""), "'fll'"),
    ("mesh", lambda: widgets.budget_view("llama3.1-8b", 8, 4096, "full", "h100", 8, "fsdp=3"), "multiply to 8"),
    ("fraction", lambda: widgets.budget_view("llama3.1-8b", 8, 4096, "full", "h100", 8, "", mem_fraction=0.0), "(0, 1]"),
    ("batch", lambda: widgets.budget_view("llama3.1-8b", 0, 4096, "full", "h100", 8, ""), "batch=0"),
    ("GPU", lambda: widgets.policy_view({"query_proj": "offload"}, gpu="a100"), "'a100'"),
    ("link", lambda: widgets.policy_view({"query_proj": "offload"}, link="pcie4"), "'pcie4'"),
    ("location", lambda: widgets.policy_view({"query_proj": "cpu"}), "'cpu'"),
    ("sequence", lambda: widgets.policy_view({"query_proj": "offload"}, seq=0), "seq=0"),
]


@pytest.mark.parametrize("case", WIDGET_CASES, ids=[c[0] for c in WIDGET_CASES])
def test_widget_functions_answer_bad_input_with_a_message(case):
    _, view, word = case
    result = view()  # never raises
    assert not result.ok and result.message.startswith("Cannot budget this:") and word in result.message
    assert "\n" not in result.message


LIBRARY_CASES = [
    ("zero bandwidth", lambda: targets.HostLink("x", "x", 0, 1, 1, 1, 1, 1, ""), "positive bandwidth"),
    ("direction", lambda: targets.host_link("pcie5_x16").transfer_seconds(1, "sideways"), "'sideways'"),
    ("concurrency", lambda: targets.host_link("pcie5_x16").bandwidth_per_gpu("d2h", -1), "-1"),
    ("pool", lambda: targets.pinned_host_pool_bytes({"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "lots"}), "'lots'"),
]


@pytest.mark.parametrize("case", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_library_bad_input_is_a_value_error_naming_it(case):
    _, call, word = case
    with pytest.raises(ValueError) as err:
        call()
    assert word in str(err.value) and "\n" not in str(err.value)


def test_there_are_at_least_forty_cases():
    assert len(CLI_CASES) + len(WIDGET_CASES) + len(LIBRARY_CASES) >= 40


def test_a_good_budget_call_still_prints_json(capsys):
    assert cli.main(["budget", *TINY, *STEP, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mem_fraction"] == 0.75 and data["usable_hbm_bytes"] < data["hbm_bytes"]


def test_xla_flags_env_reads_the_run_s_flags_and_names_every_bad_one(monkeypatch, capsys):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert cli.main(["budget", *TINY, *STEP, "--xla-flags", "env"]) == 1
    assert "XLA_FLAGS is not set" in capsys.readouterr().err
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_pipelined_all_gather=true --xla_gpu_graph_level=0 "
                                    "--xla_gpu_enable_latency_hiding_scheduler=true")
    assert cli.main(["budget", *TINY, *STEP, "--xla-flags", "env"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: 2 XLA flags jaxlib {flags.KNOWN_JAXLIB} rejects")
    assert "xla_gpu_enable_pipelined_all_gather" in err[0] and "xla_gpu_graph_level" in err[0]
    assert 'ready to paste: XLA_FLAGS="--xla_gpu_pipeline_all_gather=on ' in err[0]
