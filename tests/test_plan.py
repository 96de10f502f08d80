from companion import budget, plan, targets, train

H100 = targets.target("h100")  # 8 GPUs


def test_the_largest_batch_compiles_at_that_batch_and_not_at_the_next():
    """Llama 3.1 8B, full remat, S = 4096, FSDP over 8 H100: the compiler's boundary, found from the budget's."""
    r = plan.largest_batch("llama3.1-8b", H100, 4096, "full", "fsdp=8")
    assert r.batch_step == 8 and r.batch % 8 == 0 and r.batch >= 8
    assert r.device_bytes <= r.usable_hbm_bytes < r.next_device_bytes
    assert abs(r.budget_off_by_steps) <= 1  # the budget lands within one sequence per GPU of the compiler
    assert r.compiles <= 4
    at = budget.estimate("llama3.1-8b", r.budget_batch, 4096, "full", {"fsdp": 8}, target=H100)
    beyond = budget.estimate("llama3.1-8b", r.budget_batch + 8, 4096, "full", {"fsdp": 8}, target=H100)
    assert at.fits and not beyond.fits


def test_the_budget_search_steps_by_batch_ways_and_accumulation():
    """Accumulation holds fewer sequences' activations: MaxText's double-buffered microbatch loop keeps two
    microbatches in flight (and a third fp32 logits-sized buffer at the loss), so at S = 4096 two
    microbatches fit no larger a batch than one, and four fit twice as many."""
    one, two, four = (plan.budget_largest_batch("llama3.1-8b", H100, 4096, "full", {"fsdp": 8},
                                                train.StateConfig(gradient_accumulation_steps=n)) for n in (1, 2, 4))
    assert one % 8 == 0 and two % 16 == 0 and four % 32 == 0
    assert two == one and four == 2 * one
    assert plan.budget_largest_batch("llama3.1-405b", H100, 4096, "full", {"fsdp": 8}) == 0  # states alone overflow


def test_a_policy_that_keeps_more_fits_less():
    fits = {p: plan.budget_largest_batch("llama3.1-8b", H100, 4096, p, {"fsdp": 8}) for p in ("minimal", "full")}
    assert 0 < fits["minimal"] < fits["full"]


# ----------------------------------------------------------------------------- the planner

import dataclasses  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

from companion import maxtext, schedule  # noqa: E402


@pytest.fixture(scope="module")
def plan_8b():
    """Llama 3.1 8B, S = 4096, 8 H100, all-FSDP: two finalists compiled."""
    return plan.plan("llama3.1-8b", H100, 4096, "fsdp=8", max_compiles=2)


def test_the_plan_fits_once_compiled_and_the_budget_predicted_it(plan_8b):
    k = plan_8b.chosen
    assert k.fits and k.device_bytes <= plan_8b.usable_hbm_bytes and k.host_bytes <= plan_8b.host_limit_bytes
    assert abs(k.prediction_error) <= 0.05
    assert k.tflops_per_gpu == max(f.tflops_per_gpu for f in plan_8b.finalists if f.fits)
    assert plan_8b.searched > plan_8b.feasible > 0 and 1 <= len(plan_8b.finalists) <= 4
    assert k.candidate.batch % 8 == 0


def test_the_plan_explains_every_named_tensor(plan_8b):
    names = {t.name for t in plan_8b.tensors}
    assert {"query_proj", "mlpwi_0", "context", "decoder_layer_input"} <= names
    for t in plan_8b.tensors:
        assert t.location == plan_8b.candidate.policy.get(t.name, "device" if t.name == plan.CARRY else "remat")
        assert t.reason
    context = next(t for t in plan_8b.tensors if t.name == "context")
    assert context.spared_flops_per_layer == 0 and "flash" in context.reason
    spared = [t for t in plan_8b.tensors if t.spared_flops_per_layer > 0]
    assert all(t.bytes_per_layer > 0 and t.link_seconds_per_layer > 0 for t in spared)


def test_the_plan_reads_back_through_maxtext_to_the_same_budget(plan_8b):
    c = plan_8b.candidate
    run = maxtext.read(plan_8b.overrides())
    assert run.global_batch(8) == c.batch and run.state == c.state and run.seq == 4096
    again = budget.estimate(run.config(), run.global_batch(8), run.seq, run.policy, run.mesh(8, 8), target=H100,
                            state=run.state, flags=plan_8b.flag_set)
    assert again.device_bytes == c.device_bytes and again.host_bytes == c.host_bytes
    env = plan_8b.environment()
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.75" and int(env["XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"]) >= 64
    assert f"--xla_gpu_enable_pipelined_host_offloading={str(c.pipelined).lower()}" in env["XLA_FLAGS"]


def test_estimated_time_grows_with_recompute_and_with_transfers_the_compute_cannot_hide():
    t = targets.target("h100", 8)
    full = budget.estimate("llama3.1-8b", 16, 4096, "full", {"fsdp": 8}, target=t)
    minimal = budget.estimate("llama3.1-8b", 16, 4096, "minimal", {"fsdp": 8}, target=t)
    offloaded = budget.estimate("llama3.1-8b", 16, 4096, "minimal_offloaded", {"fsdp": 8}, target=t)
    cfg = plan.model_configs.config("llama3.1-8b")
    seconds = {name: plan.estimate_seconds(b, cfg, t, {"fsdp": 8}, 4096)
               for name, b in (("full", full), ("minimal", minimal), ("offloaded", offloaded))}
    assert seconds["minimal"] < seconds["full"]  # less recompute
    assert seconds["offloaded"] >= seconds["minimal"]  # the same recompute, plus what the link does not hide
    slow = dataclasses.replace(t, link=schedule.link_at(1e9))
    assert plan.estimate_seconds(offloaded, cfg, slow, {"fsdp": 8}, 4096) > seconds["offloaded"] * 1.5


def test_meshes_tried_split_heads_or_experts():
    t = targets.target("h100", 64)
    dense = plan.mesh_candidates(plan.model_configs.config("llama3.1-405b"), t)
    assert dense[0]["fsdp"] == 64 and {m["tensor"] for m in dense} == {1, 2, 4, 8}
    moe = plan.mesh_candidates(plan.model_configs.config("deepseek-v3-671b"), targets.target("gb200", 64))
    assert {m["expert"] for m in moe} == {1, 8, 16, 32}


def test_plan_cli_exports_yaml_that_reproduces_its_budget(tmp_path):
    out = tmp_path / "plan.yml"
    run = subprocess.run([sys.executable, "-m", "companion", "plan", "--model", "llama3.1-8b", "--target", "h100",
                          "--gpus", "8", "--seq", "4096", "--mesh", "fsdp=8", "--max-compiles", "1", "--json",
                          "--maxtext-yaml", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["chosen"]["fits"] and out.read_text() == result["yaml"]
    again = subprocess.run([sys.executable, "-m", "companion", "budget", "--maxtext-config", str(out), "--target",
                            "h100", "--gpus", "8", "--xla-flags", result["environment"]["XLA_FLAGS"], "--json"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["device_bytes"] == result["chosen"]["candidate"]["device_bytes"]
    # and the planner takes a MaxText config: its model, sequence and mesh; it chooses the rest
    replan = subprocess.run([sys.executable, "-m", "companion", "plan", "--maxtext-config", str(out), "--target", "h100",
                             "--gpus", "8", "--max-compiles", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert replan.returncode == 0, replan.stderr
    replanned = json.loads(replan.stdout)
    assert (replanned["model"], replanned["seq"], replanned["mesh"]) == ("llama3.1-8b", 4096, result["mesh"])
    clash = subprocess.run([sys.executable, "-m", "companion", "plan", "--maxtext-config", str(out), "--seq", "2048"],
                           capture_output=True, text=True, timeout=60)
    assert clash.returncode == 1 and "--maxtext-config all set the run" in clash.stderr


@pytest.mark.parametrize("args, message", [
    (["--objective", "memory"], "--objective 'memory': the planner maximizes throughput"),
    (["--max-compiles", "0"], "--max-compiles must be positive, got 0"),
    (["--seq", "0"], "--seq must be positive, got 0"),
])
def test_plan_cli_bad_input_is_one_line(args, message):
    base = {"--model": "llama3.1-8b", "--seq": "4096", "--gpus": "8"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = [x for kv in base.items() for x in kv]
    run = subprocess.run([sys.executable, "-m", "companion", "plan", *argv], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stderr.strip() == f"error: {message}"


def test_the_405b_plan_fits_once_compiled_and_within_3_percent_of_its_prediction(tmp_path):
    """The issue's acceptance command: Llama 3.1 405B on 256 H100, S = 8192, the planner's own meshes."""
    out = tmp_path / "plan.yml"
    run = subprocess.run([sys.executable, "-m", "companion", "plan", "--model", "llama3.1-405b", "--target", "h100",
                          "--gpus", "256", "--seq", "8192", "--json", "--maxtext-yaml", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    chosen = result["chosen"]
    assert chosen["fits"] and chosen["compiled_device_bytes"] <= result["usable_hbm_bytes"]
    assert abs(chosen["prediction_error"]) <= 0.03
    assert result["environment"]["XLA_FLAGS"] and out.read_text() == result["yaml"]
    run_back = maxtext.read(out)
    assert run_back.global_batch(256) == chosen["candidate"]["batch"] and run_back.seq == 8192


def test_a_fixed_global_batch_is_met_with_gradient_accumulation():
    """256 sequences of 4096 on 8 H100 fit no policy in one pass: the search splits them into microbatches."""
    found = plan.search("llama3.1-8b", H100, 4096, "fsdp=8", global_batch=256)
    assert found.ranked and all(c.batch == 256 for _, c in found.ranked)
    accums = {c.state.gradient_accumulation_steps for _, c in found.ranked}
    assert 1 not in accums and accums <= {2, 4, 8}
    overrides = found.overrides(0)
    n_acc = found.ranked[0][1].state.gradient_accumulation_steps
    assert overrides["gradient_accumulation_steps"] == n_acc
    assert overrides["per_device_batch_size"] * 8 * n_acc == 256  # MaxText's global batch
    with pytest.raises(ValueError, match="no configuration of llama3.1-405b fits h100:1x8 at S=4096"):
        plan.search("llama3.1-405b", H100, 4096, "fsdp=8")  # the states alone are 16 B x 405B / 8
