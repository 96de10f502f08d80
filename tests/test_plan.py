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
from compiled import budget_miss_on_0_12  # noqa: E402


@pytest.fixture(scope="module")
def plan_8b():
    """Llama 3.1 8B, S = 4096, 8 H100, all-FSDP: two finalists compiled."""
    return plan.plan("llama3.1-8b", H100, 4096, "fsdp=8", max_compiles=2)


def test_the_plan_fits_once_compiled_and_the_budget_predicted_it(plan_8b):
    k = plan_8b.chosen
    assert k.fits and k.host_bytes <= plan_8b.host_limit_bytes
    assert plan_8b.margin_bytes == max(int(0.02 * plan_8b.usable_hbm_bytes), int(1.5 * 2**30))
    assert k.device_bytes <= plan_8b.usable_hbm_bytes - plan_8b.margin_bytes  # with the margin
    # the budget never says "fits" by more than 3 % too few bytes; full remat (the pick since its baseline compiles,
    # at B 72) it prices 5.5 % above its compile: room left unused, which the step further takes back
    assert -0.03 <= k.prediction_error <= 0.06
    best = max(f.tokens_per_second for f in plan_8b.finalists if f.fits)
    if k.tokens_per_second < best:  # only a paired-band tie, broken by margin then simplicity, picks another
        assert plan_8b.tie_break.startswith("tied on tokens/s") and k.tokens_per_second >= plan.CONTENDERS * best
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


def test_a_candidate_repriced_at_a_smaller_batch_counts_that_batch_s_tokens():
    """A finalist whose compile does not fit steps down a batch (``plan._check``): its tokens/s must be that
    batch's (it had kept the larger batch's tokens, and a 405B finalist stepped 768 -> 512 ranked 1.5x high)."""
    t, cfg = targets.target("h100", 8), plan.model_configs.config("llama3.1-8b")
    found = plan.search(cfg, t, 4096, {"fsdp": 8})
    assert all(c.tokens == c.batch * 4096 / 8 for _, c in found.ranked)
    mesh, c = found.ranked[0]
    smaller = c.batch - 8
    b = budget.estimate(cfg, smaller, 4096, c.policy, mesh, target=t, state=c.state)
    stepped = plan._priced(dataclasses.replace(c, batch=smaller), b, cfg, t, mesh, 4096)
    assert stepped.tokens == smaller * 4096 / 8 < c.tokens
    assert stepped.estimated_tokens_per_second == stepped.tokens / stepped.estimated_seconds


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


@budget_miss_on_0_12("a finalist's budget is more than 3 % below its compile")
def test_the_405b_plan_fits_once_compiled_and_its_budget_is_never_over_3_percent_low(tmp_path):
    """The issue's acceptance command: Llama 3.1 405B on 256 H100, S = 8192, the planner's own meshes.

    Since the #46231 workaround's transfers are priced as kernels, two finalists tie on tokens/s: B = 256 with
    the carry and ``mlpwi_0`` offloaded (the budget within 3 %) and B = 512 with the carry and the moments
    offloaded, chosen for its margin, whose budget is 6.2 % *above* its compile (the budget's peeled loop tail
    at two sequences per GPU: a known gap, on the side that costs room, not a failed run). So: every finalist's
    budget at most 3 % under its compile, and the calibrated finalist within 3 % either way."""
    out = tmp_path / "plan.yml"
    run = subprocess.run([sys.executable, "-m", "companion", "plan", "--model", "llama3.1-405b", "--target", "h100",
                          "--gpus", "256", "--seq", "8192", "--json", "--maxtext-yaml", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    chosen = result["chosen"]
    assert chosen["fits"] and chosen["compiled_device_bytes"] <= result["usable_hbm_bytes"]
    assert all(f["prediction_error"] >= -0.03 for f in result["finalists"])  # never "fits" by more than 3 % too few
    state_offload = ("optimizer_memory_host_offload", "parameter_memory_host_offload")
    calibrated = [f for f in result["finalists"]
                  if f["candidate"]["batch"] == 256 and not any(f["candidate"]["state"][k] for k in state_offload)]
    assert calibrated and all(abs(f["prediction_error"]) <= 0.03 for f in calibrated)
    assert chosen in calibrated or result["tie_break"].startswith("tied on tokens/s")
    assert result["environment"]["XLA_FLAGS"] and out.read_text() == result["yaml"]
    pool = result["pinned_pool"]  # one pool per GPU, capped each (jaxlib 0.10.2), for one process per node
    assert pool["processes_per_node"] == 1 and pool["gpus_per_node"] == 8 and pool["pools_per_node"] == 9
    assert result["environment"]["XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"] == str(pool["gib_per_gpu_pool"])
    assert pool["gib_per_gpu_pool"] >= chosen["compiled_host_bytes"] / 2**30
    assert pool["pinned_bytes_per_node"] <= pool["host_limit_bytes_per_node"]
    assert chosen["compiled_device_bytes"] <= result["usable_hbm_bytes"] - result["margin_bytes"]
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


def test_at_a_fixed_global_batch_spare_hbm_goes_to_saving():
    """16 sequences on 8 H100 leave HBM spare under full remat: the search's best saves every tensor worth saving (no
    recompute) rather than recompute it, and it still fits by the budget."""
    found = plan.search("llama3.1-8b", H100, 4096, "fsdp=8", global_batch=16)
    _, best = found.ranked[0]
    saved = {name for name, where in best.spec if where == "device"}
    same_state = [c for _, c in found.ranked if c.state == best.state]
    assert best.batch == 16 and {"mlpwi_0", "query_proj", "out_proj"} <= saved
    assert best.recompute_flops == min(c.recompute_flops for c in same_state)  # the least recompute there is
    full = [c for c in same_state if not c.spec]
    assert full and full[0].recompute_flops > best.recompute_flops
    assert full[0].device_bytes < best.device_bytes <= found.usable_hbm_bytes  # the saving spends spare HBM


def _finalist(step_seconds: float, tflops: float, batch: int = 64) -> plan.Checked:
    c = plan.Candidate((), batch, False, plan.train.StateConfig(), 0, 0, 0.0, 0.0, 1.0, tokens=batch * 4096 / 8)
    return plan.Checked(c, 10, 0, True, step_seconds, tflops, 0.0, 0.0, 1.0, 0, margin_bytes=1)


def test_the_planner_ranks_by_tokens_per_second_whatever_the_tflops():
    """Same batch: the shorter step wins, even where its TFLOP/s reads lower."""
    fast, slow = _finalist(1.0, 100.0), _finalist(1.3, 200.0)
    (mesh, chosen), why = plan._choose([({"fsdp": 8}, slow), ({"fsdp": 8}, fast)])
    assert chosen is fast and why == "the most simulated tokens/s"


def test_the_plan_export_states_the_pool_per_gpu_and_carries_the_caveats(plan_8b):
    pool = plan_8b.pinned_pool()
    assert pool["gib_per_gpu_pool"] == plan_8b.host_pool_gib and pool["processes_per_node"] == 1
    assert pool["pools_per_node"] == 8 + 1 and "not their sum" in pool["reading"]
    out = plan_8b.to_dict()
    assert out["jaxlib"] == plan.xla_flags.INSTALLED_JAXLIB
    assert out["environment"]["XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"] == str(plan_8b.host_pool_gib)
    keys = {c["key"] for c in out["caveats"]}
    if plan_8b.candidate.offloads:  # the main lock's jaxlib has the #46231 fix: that caveat is 0.10.2's
        assert "openxla/xla#46231" not in keys and "ab-check" in keys
    if plan_8b.candidate.pipelined:
        assert "openxla/xla#37979" in keys and "CAVEAT openxla/xla#37979" in plan_8b.summary()


def test_every_export_with_pipelined_offload_carries_the_caveats_and_names_its_jaxlib():
    fs = plan.xla_flags.resolve("--xla_gpu_enable_pipelined_host_offloading=true")
    out = plan.xla_flags.export(fs, offloads=True)
    assert out["jaxlib"] == plan.xla_flags.INSTALLED_JAXLIB == "0.12.0.1"
    assert [c["key"] for c in out["caveats"]] == ["openxla/xla#37979", "ab-check"]
    assert all(c["check"] for c in out["caveats"])
    older = plan.xla_flags.export(fs, offloads=True, for_jaxlib="0.10.2")  # a jaxlib with #46231
    assert "--xla_gpu_enable_pipelined_all_gather=true" in older["XLA_FLAGS"] and older["jaxlib"] == "0.10.2"
    assert "dynamic-slice-annotator" in older["XLA_FLAGS"] and older["notes"]
    assert [c["key"] for c in older["caveats"]] == ["openxla/xla#46231", "openxla/xla#37979", "ab-check"]
    with pytest.raises(ValueError, match="older than the lab's flag tables"):
        plan.xla_flags.export(fs, for_jaxlib="0.9.0")
    assert plan.xla_flags.export(plan.xla_flags.resolve(None))["caveats"] == []  # nothing offloaded, nothing to say


def test_a_step_over_the_host_ram_share_does_not_fit_in_the_budget_or_the_batch_search():
    """DeepSeek-V3 minimal_offloaded with MaxText's worst-case buffer on 512 GB200: ~1 TiB pinned per GPU."""
    gb200 = plan.targets.target("gb200", 512)
    mesh = {"fsdp": 8, "expert": 64}
    b = plan.budget_lib.estimate("deepseek-v3-671b", 512, 4096, "minimal_offloaded", mesh, target=gb200)
    assert not b.fit.fits_host and not b.fits and "does not fit host RAM" in b.table()
    assert "does not fit host RAM" in b.fit.reason()
    assert plan.budget_largest_batch("deepseek-v3-671b", gb200, 4096, "minimal_offloaded", mesh) == 0


def test_a_plan_whose_host_bytes_exceed_the_pool_given_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"host 0 GiB per GPU"):
        plan.search("llama3.1-8b", H100, 4096, "fsdp=8", host_pool_gib=0, states=(plan.STATE_CHOICES[1],))


def test_a_compiled_step_over_its_host_limit_does_not_fit():
    from companion import compiler

    report = plan.train.compile_step(plan.train.trainer("tiny-llama", "minimal_offloaded"),
                                     compiler.place(plan.targets.target("h100", "1x2")), 4, 128)
    assert report.host.total_bytes > 0 and report.fits and report.host_limit_bytes > report.host.total_bytes
    starved = dataclasses.replace(report, host_limit_bytes=report.host.total_bytes - 1)
    assert not starved.fits and starved.fit.fits_device and "does not fit host RAM" in starved.summary()


# ----------------------------------------------------------------------------- the budget on the MoE path

def _moe_budget_rows():
    """Every DeepSeek-V3 step benchmarks/bench_central.py compiled on the grouped path (the cases and the published
    space), with the budget of the same configuration."""
    from pathlib import Path

    from companion import models, sharding

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    stored = [r for name in ("central.json", "central_space.json") for r in json.loads((results / name).read_text())["rows"]]
    out = []
    for r in stored:
        if r["model"] != "deepseek-v3-671b" or r["dispatch"] != "grouped":
            continue
        cfg = models.config(r["model"]).with_moe(ragged_buffer_factor=r.get("ragged_buffer_factor", -1.0))
        target = targets.target(r["target"], mem_fraction=r["mem_fraction"])
        state = train.StateConfig(optimizer_memory_host_offload=r.get("optimizer_offload", False))
        b = budget.estimate(cfg, r["batch"], r["seq"], r["policy"], sharding.parse_mesh(r["mesh"], target.num_devices),
                            target=target, state=state, flags=r["flags"])
        out.append((r, cfg, b))
    return out


@budget_miss_on_0_12("the MoE budget error bounds (-16.0 % and +39.7 % at 0.12)")
def test_the_planner_never_prunes_a_moe_step_that_fits_compiled():
    """The budget's error on DeepSeek-V3's grouped path is what ``plan``'s comment states (median |error| about 4 %,
    within 5 %; from about -16 % to +29 %), its worst overestimate of a step that fits is
    ``plan.MOE_BUDGET_OVERESTIMATE`` (to 0.5 %), and the search's device rule keeps every step that compiled under
    usable HBM."""
    rows = _moe_budget_rows()
    errors = sorted(b.device_bytes / r["device_peak_bytes"] - 1 for r, _, b in rows)
    assert len(rows) >= 60
    assert -0.17 < errors[0] < -0.15 and 0.28 < errors[-1] < 0.30
    assert 0.035 <= sorted(abs(e) for e in errors)[len(errors) // 2] <= 0.045
    fitting = [b.device_bytes / r["device_peak_bytes"] - 1 for r, _, b in rows if r["fits"]]
    assert plan.MOE_BUDGET_OVERESTIMATE - 0.005 <= max(fitting) <= plan.MOE_BUDGET_OVERESTIMATE  # rounded up
    pruned = [(r["label"], r["batch"], r["mesh"]) for r, cfg, b in rows
              if r["fits"] and not plan.budget_keeps(cfg, b.device_bytes, r["usable_hbm_bytes"])]
    assert pruned == []
    from companion import models

    usable = targets.target("h100", 8).usable_hbm_bytes  # a dense model keeps the plain 2 % margin
    assert not plan.budget_keeps(models.config("llama3.1-8b"), usable, usable)
    assert plan.budget_keeps(models.config("deepseek-v3-671b"), usable, usable)


def test_the_next_batch_lies_between_what_fitted_and_what_did_not():
    """``_next_batch``: one compile scales the budget by its miss; two follow the compiled bytes' line; the answer
    stays strictly inside the bracket, in batch steps, and None once the bracket is closed."""
    from companion.planning.plan import planner
    from companion.hardware.targets import GiB

    def budget(batch):  # 1 GiB fixed, 1 GiB a sequence
        return (1 + batch) * GiB

    room = 10 * GiB
    # one compile at B 8, 20 % over its budget (10.8 GiB): the largest batch whose budget x 1.2 fits is 7
    assert planner._next_batch([(8, int(10.8 * GiB), False)], room, budget, 1, 64) == 7
    # one compile that fitted at B 4 with half its budget: up to the largest whose half-budget fits (19)
    assert planner._next_batch([(4, int(2.5 * GiB), True)], room, budget, 1, 64) == 19
    # ... never past the search's ceiling
    assert planner._next_batch([(4, int(2.5 * GiB), True)], room, budget, 1, 12) == 12
    # two compiles: on their line (2 GiB + 1 GiB a sequence: B 8 at 10 GiB), in steps of 2
    assert planner._next_batch([(4, 6 * GiB, True), (12, 14 * GiB, False)], room, budget, 2, 64) == 8
    # the bracket closed: B 4 fitted, B 5 did not
    assert planner._next_batch([(4, 9 * GiB, True), (5, 11 * GiB, False)], room, budget, 1, 64) is None


def test_a_tpu_plan_keeps_no_margin_a_gpu_plan_does():
    """XLA:TPU refuses over-HBM programs at compile time (every chip step that compiled ran): no headroom there."""
    from companion.planning import plan as plan_lib
    from companion.hardware.targets import GiB

    assert plan_lib.plan_margin(targets.target("tpu-v5e")).of(targets.target("tpu-v5e").usable_hbm_bytes) == 0
    h100 = targets.target("h100")
    assert plan_lib.plan_margin(h100).of(h100.usable_hbm_bytes) == int(1.5 * GiB)


def test_every_maxtext_preset_is_weighed_by_the_search():
    """The greedy order's prefixes miss some presets (``qkv_proj_offloaded`` saves q/k/v without the MLP's): the
    search adds each preset's spec on the model's names, and ranks those that fit beside its own."""
    from companion import models
    from companion.planning.plan import planner

    cfg = models.config("llama3.1-8b")
    specs = planner.preset_specs(cfg)
    qkv = {"query_proj": "offload", "key_proj": "offload", "value_proj": "offload"}
    assert dict(specs[0]) == {} and qkv in [dict(s) for s in specs]  # full remat first; q/k/v offloaded among them
    assert all(where in ("device", "offload") for s in specs for _, where in s)
    found = plan.search("llama3.1-8b", H100, 4096, "fsdp=8")
    ranked = {(frozenset(c.spec), c.state) for _, c in found.ranked}
    assert (frozenset(qkv.items()), plan.train.StateConfig()) in ranked


def test_full_remat_is_compiled_as_the_baseline_at_the_fastest_finalist_s_batch_and_levers():
    """``_remat_baseline``: full remat on the fastest fitting finalist's mesh, state levers and batch, priced there;
    nothing where full remat with those levers is already a finalist, or nothing fits."""
    from companion import models
    from companion.planning.plan import planner

    mesh, on_host = {"fsdp": 8}, plan.train.StateConfig(optimizer_memory_host_offload=True)
    cfg = models.config("llama3.1-8b")

    def candidate(spec, batch, state):
        return plan.Candidate(spec, batch, False, state, 0, 0, 0.0, 0.0, 1.0, tokens=batch * 4096 / 8)

    fast = candidate((("mlpwi_0", "offload"),), 24, on_host)
    slow = candidate((("mlpwi_0", "device"),), 8, plan.train.StateConfig())
    checked = [(mesh, plan.Checked(fast, 10, 0, True, 1.0, 0.0, 0.0, 0.0, 1.0, 0)),
               (mesh, plan.Checked(slow, 10, 0, True, 2.0, 0.0, 0.0, 0.0, 1.0, 0))]
    flag_sets = planner._flag_sets(None, H100)
    m, base = planner._remat_baseline(checked, cfg, H100, 4096, flag_sets)
    assert m == mesh and base.spec == () and base.batch == 24 and base.state == on_host
    assert base.device_bytes == budget.estimate(cfg, 24, 4096, {}, mesh, target=H100, state=on_host,
                                                flags=flag_sets[False]).device_bytes
    already = checked + [(mesh, plan.Checked(base, 10, 0, False, 1.0, 0.0, 0.0, 0.0, 1.0, 0))]
    assert planner._remat_baseline(already, cfg, H100, 4096, flag_sets) is None
    nothing_fits = [(m, dataclasses.replace(k, fits=False)) for m, k in checked]
    assert planner._remat_baseline(nothing_fits, cfg, H100, 4096, flag_sets) is None


def test_the_pick_is_the_largest_batch_that_compiles(plan_8b):
    """The pick's program was compiled one batch step further (by its own search or after it) and did not fit
    under the margin: the batch it gives is the largest that compiles."""
    k, step = plan_8b.chosen, 8
    further = [f for f in plan_8b.finalists if f.candidate.spec == k.candidate.spec
               and f.candidate.state == k.candidate.state and f.candidate.batch == k.candidate.batch + step]
    assert k.refused_batch == k.candidate.batch + step or (further and not further[0].fits)
