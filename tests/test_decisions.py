"""The decision experiment's rule (``companion.planning.decisions``): seeded, spanning, sorted by what compiles."""

import itertools

import pytest

from companion.hardware import targets
from companion.planning import decisions, regret

V5E = targets.target(decisions.TARGET)


def test_the_rule_is_seeded_and_spans_widths_sequences_depths_and_optimizer_offload():
    first = list(itertools.islice(decisions.draws(), 12))
    assert first == list(itertools.islice(decisions.draws(), 12))  # the same seed, the same draws
    assert first != list(itertools.islice(decisions.draws(seed=decisions.SEED + 1), 12))
    shapes = [shape for shape, _ in first]
    assert {s.d_model for s in shapes} == set(decisions.WIDTHS)  # seeded cycles: every width comes round
    assert {s.seq for s in shapes} == set(decisions.SEQS)
    assert {s.optimizer_offload for s in shapes} == {False, True}
    assert len({s.layers for s in shapes}) > 4
    for shape, depths in first:  # each depth one of its window's: consecutive depths around the chip's usable HBM
        assert shape.layers in depths and list(depths) == list(range(depths[0], depths[-1] + 1))


def test_a_shape_is_llama_3_s_layer_at_its_width_with_the_pallas_kernel():
    cfg = decisions.Shape(3584, 5, 8192, True).model()
    assert (cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim) == (
        3584, 5, 28, 14, 128, 14336)
    assert cfg.flash_kernel == "fused" and cfg.vocab_size == 32_000
    assert decisions.Shape(3584, 5, 8192, True).state().optimizer_memory_host_offload


def _compiler(peaks: dict[str, float]):
    """A stand-in compile: full remat at ``peaks[key]`` of usable HBM, the levers pulled at 0.8 of that."""
    starts = [s for s, _ in itertools.islice(decisions.draws(), 40)] + [decisions.Shape(2048, 4, 4096, False)]
    def compile_at_batch_1(shape, policy):
        start = shape if policy == "full" else next(s for s in starts if decisions.offloaded(s) == shape)
        share = peaks[start.key] * (1.0 if policy == "full" else 0.8)
        return share <= 1.0, int(share * V5E.usable_hbm_bytes)
    return compile_at_batch_1


def test_the_compiler_sorts_each_draw_and_the_quotas_end_the_draws():
    usable = V5E.usable_hbm_bytes
    shape = decisions.Shape(2048, 4, 4096, False)
    assert decisions.classify(shape, _compiler({shape.key: 0.97}), usable)[0] == "near"
    assert decisions.classify(shape, _compiler({shape.key: 0.90}), usable)[0] == "open"
    assert decisions.classify(shape, _compiler({shape.key: 1.10}), usable)[0] == "offload_only"
    assert decisions.classify(shape, _compiler({shape.key: 1.40}), usable)[0] is None
    peaks = {s.key: [0.97, 0.80, 1.10, 1.50][i % 4] for i, (s, _) in enumerate(itertools.islice(decisions.draws(), 40))}
    quotas = {"near": 2, "offload_only": 2, "open": 3}
    drawn = decisions.draw(_compiler(peaks), quotas=quotas)
    kept = decisions.kept(drawn, quotas)
    assert [s.category for s in kept].count("near") == 2 and len(kept) == 7
    assert drawn[-1] in kept and all(s.draw == i for i, s in enumerate(drawn))  # stopped when the last quota filled


def _stored_draws(set_name: str):
    """A set's stored draws, checked fresh (the chip lock's compiler sorted them), and the kept shapes."""
    from companion.ground import results

    seed, quotas = decisions.SETS[set_name]
    data, found = results.load(decisions.shapes_result(set_name))
    assert found.fresh, found.line()
    drawn = [decisions.Sorted(d["draw"], decisions.Shape(d["d_model"], d["layers"], d["seq"], d["optimizer_offload"]),
                              d["category"], d["full_peak_bytes"], d["offload_peak_bytes"], d["usable_hbm_bytes"],
                              tuple(d["depths"])) for d in data["draws"]]
    assert data["seed"] == seed and [s.draw for s in drawn] == list(range(len(drawn)))
    kept = decisions.kept(drawn, quotas)
    assert [s.shape.key for s in kept] == data["shapes"]  # every committed shape is in the stored result
    assert {c: [s.category for s in kept].count(c) for c in quotas} == quotas
    for s in drawn:  # each category as its peaks say (the sort is the compiler's, the rule's thresholds)
        usable = s.usable_hbm_bytes
        if s.category in ("near", "open"):
            assert s.full_peak_bytes <= usable and (s.full_peak_bytes >= decisions.NEAR * usable) == (s.category == "near")
        elif s.category == "offload_only":
            assert s.full_peak_bytes > usable >= s.offload_peak_bytes
    return kept


def test_the_second_set_is_drawn_by_the_same_rule_with_its_own_seed_and_quotas():
    kept = _stored_draws("second")
    first = {s.key for s in decisions.committed_shapes()}
    assert not first & {s.shape.key for s in kept}  # a new set: no shape of the one that showed the losses


def test_the_stored_shapes_are_the_rules_first_draws_each_sorted_and_spanning():
    kept = _stored_draws("first")
    shapes = [s.shape for s in kept]
    assert {min(s.d_model for s in shapes), max(s.d_model for s in shapes)} == {1536, 4096}
    assert {min(s.seq for s in shapes), max(s.seq for s in shapes)} == {2048, 32768}
    assert {s.optimizer_offload for s in shapes} == {False, True} and len({s.layers for s in shapes}) >= 6


def test_regret_is_the_picks_shortfall_against_the_best_measured_run():
    runs = [{"roles": ["pick", "preset:minimal"], "batch": 2, "tokens_per_s": 985.0},
            {"roles": ["preset:full"], "batch": 6, "tokens_per_s": 1000.0},
            {"roles": ["runner_up"], "batch": 3, "tokens_per_s": None}]  # refused on the chip: not a contender
    r = regret.regret("D2048-L4-S4096", runs)
    assert r.best == "preset:full B=6" and r.runs == 2 and abs(r.regret - 0.015) < 1e-12
    best_is_pick = regret.regret("s", [{**runs[0], "tokens_per_s": 1010.0}, runs[1]])
    assert best_is_pick.regret == 0.0
    with pytest.raises(ValueError, match="the pick was not measured"):
        regret.regret("s", [{**runs[0], "tokens_per_s": None}, runs[1]])
    lost = regret.regret("s", runs[1:], refused=True)  # the planner gave no pick where full remat trains
    assert lost.regret == 1.0 and lost.pick == regret.REFUSED and lost.best == "preset:full B=6"
    unmeasured = [{**runs[0], "simulated_tokens_per_s": 1000.0}, {**runs[1], "simulated_tokens_per_s": 1000.0},
                  {"roles": ["preset:minimal"], "batch": 1, "tokens_per_s": None, "not_run": True,
                   "simulated_tokens_per_s": 700.0}]
    labelled = regret.regret("s", unmeasured)
    assert (labelled.not_run, round(labelled.not_run_gap, 3), labelled.runs) == (1, 0.3, 2)
    assert regret.regret("s", runs).not_run == 0 and regret.regret("s", runs).not_run_gap is None
    judged = regret.goal_met([r, best_is_pick])
    assert judged["within_2_percent"] == 1.0 and abs(judged["median"] - 0.0075) < 1e-12 and judged["met"]
    assert not regret.goal_met([r, r, best_is_pick])["met"]  # median 1.5 %


def test_a_regret_with_an_unmeasured_run_near_the_best_is_a_lower_bound_judged_only_where_it_already_misses():
    """``settled``: every run the chip skipped is simulated more than the margin below the best; the margin is the
    simulator's worst paired error over the measured runs."""
    near = regret.Regret("a", "pick B=7", 100.0, "pick B=7", 100.0, 2, not_run=1, not_run_gap=-0.07)
    far = regret.Regret("b", "pick B=1", 95.0, "full B=2", 100.0, 9, not_run=2, not_run_gap=0.39)
    missed = regret.Regret("c", "pick B=8", 90.0, "full B=5", 100.0, 7, not_run=6, not_run_gap=0.05)
    assert not near.settled(0.2) and far.settled(0.2) and near.settled(-0.1)
    assert [r["regret"] for r in regret.regret_rows([near, far, missed], 0.2)] == [">= 10.0%", "5.0%", ">= 0.0%"]
    judged = regret.goal_met([near, far, missed], 0.2)  # "a" may still lose: left out; "c" misses whatever is faster
    assert (judged["shapes"], judged["unsettled"]) == (2, ["a"]) and not judged["met"]
    assert regret.goal_met([near, far, missed])["shapes"] == 3
    picks = {"entries": [{"shape": "s", "runs": [{"roles": ["pick"], "program": "p", "simulated_tokens_per_s": 100.0},
                                                  {"roles": ["full"], "program": "q", "simulated_tokens_per_s": 50.0},
                                                  {"roles": ["minimal"], "program": "r", "simulated_tokens_per_s": 90.0}]}]}
    measured = {"entries": [{"shape": "s", "runs": [{"program": "p", "tokens_per_s": 100.0},
                                                    {"program": "q", "tokens_per_s": 40.0}]}]}  # r not measured
    assert abs(regret.paired_error(picks, measured) - 0.2) < 1e-12  # 100/50 simulated against 100/40 measured


def test_the_regret_table_joins_the_chip_s_runs_to_the_committed_picks_by_program():
    """A program measured once counts under every role it holds, on the shape it was committed for; a shape with
    nothing measured waits; a refused plan is a loss where anything ran."""
    a, b, c = (decisions.shape_of(k) for k in ("D2048-L4-S4096", "D3072-L2-S8192", "D1536-L8-S2048+opt_offload"))
    picks = {"parts": [
        {"shape": a.key, "job": "plan", "plan": {}, "runs": [{"roles": ["pick"], "batch": 2, "program": "p1"},
                                                              {"roles": ["runner_up"], "batch": 4, "program": "p2"}]},
        {"shape": a.key, "job": "preset:minimal", "runs": [{"roles": ["preset:minimal"], "batch": 2, "program": "p1"}]},
        {"shape": b.key, "job": "plan", "plan": {}, "runs": [{"roles": ["pick"], "batch": 1, "program": "p3"}]},
        {"shape": c.key, "job": "plan", "plan": {"error": "none fits"}, "runs": []},
        {"shape": c.key, "job": "preset:full", "runs": [{"roles": ["preset:full"], "batch": 3, "program": "p4"}]}]}
    measured = {"parts": [{"shape": a.key, "runs": [{"program": "p1", "tokens_per_s": 900.0},
                                                    {"program": "p2", "tokens_per_s": 1000.0}]},
                          {"shape": c.key, "runs": [{"program": "p4", "tokens_per_s": 500.0}]}]}
    table, waiting = regret.regret_table([picks], [measured], [a, b, c])
    assert waiting == [b.key] and [r.shape for r in table] == [a.key, c.key]
    assert table[0].pick == "pick/preset:minimal B=2" and table[0].best == "runner_up B=4"
    assert abs(table[0].regret - 0.1) < 1e-12 and table[1].regret == 1.0 and table[1].pick == regret.REFUSED


def test_a_loss_is_read_side_by_side_and_the_table_lists_the_worst_first():
    run = {"roles": ["pick"], "batch": 3, "measured_step_seconds": 1.9, "simulated_step_seconds": 1.87,
           "exposed_transfer_seconds": 0.96, "recompute_flops": 8.4e12,
           "time_by_kind": {"matmul": 0.8, "copy": 0.1, "transfer:d2h": 0.5}}
    best = {**run, "roles": ["full_at_pick_batch"], "measured_step_seconds": 1.74, "exposed_transfer_seconds": 0.0,
            "recompute_flops": 9.9e12, "time_by_kind": {"matmul": 1.1, "fusion": 0.3}}
    rows = regret.loss_rows({"shape": "D4096-L2-S8192", "runs": [run, best]}, kinds=2)
    assert [r[""] for r in rows][-2:] == ["busy: matmul (s)", "busy: transfer:d2h (s)"]  # the two busiest classes
    transfers = next(r for r in rows if r[""].startswith("exposed host"))
    assert transfers == {"": "exposed host transfers (s)", "pick (pick)": "0.960", "best (full_at_pick_batch)": "0.000"}
    lost = regret.Regret("a", "pick B=3", 90.0, "full B=3", 100.0, 4)
    won = regret.Regret("b", "pick B=1", 100.0, "pick B=1", 100.0, 3)
    assert [r["shape"] for r in regret.regret_rows([won, lost])] == ["a", "b"]
    assert regret.regret_rows([lost])[0]["regret"] == "10.0%"


@pytest.mark.parametrize("set_name", ["first", "second"])
def test_every_committed_shape_is_in_the_stored_experiment_picked_before_it_was_measured(set_name):
    """Each set as stored: each committed shape has its plan (a pick or a refusal), its presets and its runs;
    the chip measured only committed programs; and git holds the order — the shapes' commit before any pick's, each
    shape's picks before any of its measurements."""
    stored = regret.stored(set_name)
    keys = [s.key for s in stored.shapes]
    assert [e["shape"] for e in stored.picks["entries"]] == keys == stored.picks["shapes"]
    assert [e["shape"] for e in stored.measured["entries"]] == keys
    for picked, measured in zip(stored.picks["entries"], stored.measured["entries"]):
        assert ("label" in picked["plan"] and "command_line" in picked["plan"]) or "error" in picked["plan"], picked["shape"]
        assert any("pick" in r["roles"] for r in picked["runs"]) != ("error" in picked["plan"]), picked["shape"]
        assert set(picked["presets"]) == set(decisions.distinct_presets(decisions.shape_of(picked["shape"]).model()))
        committed = {r["program"] for r in picked["runs"]}
        assert measured["runs"] and {r["program"] for r in measured["runs"]} <= committed, picked["shape"]
    table, waiting = stored.regrets()
    assert not waiting and len(table) == len(keys)


def _first_added(path: str) -> str:
    import subprocess

    out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", path], capture_output=True,
                         text=True, cwd=decisions.SHAPES_RESULT.parents[2])
    return out.stdout.split()[-1] if out.returncode == 0 and out.stdout.split() else ""


def _before(a: str, b: str) -> bool:
    import subprocess

    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=decisions.SHAPES_RESULT.parents[2]).returncode == 0


@pytest.mark.parametrize("set_name", ["first", "second"])
def test_git_holds_the_order_shapes_then_picks_then_measurements(set_name):
    """The shapes' commit precedes every pick's; each program the chip measured was committed in a pick's part
    before the part that measured it."""
    import json

    parts = decisions.SHAPES_RESULT.parent / "parts"
    suffix = "" if set_name == "first" else f"_{set_name}"
    shapes = _first_added(f"benchmarks/results/{decisions.shapes_result(set_name).name}")
    if not shapes:
        pytest.skip("no git history here (an sdist or a shallow copy): the order is checked in a clone")
    picked: dict[str, list[str]] = {}  # program -> commits that added a pick's part holding it
    for path in parts.glob(f"decision_picks{suffix}-*.json"):
        added = _first_added(f"benchmarks/results/parts/{path.name}")
        assert _before(shapes, added) and added != shapes, path.name
        for part in json.loads(path.read_text())["parts"]:
            for run in part["runs"]:
                picked.setdefault(run["program"], []).append(added)
    measured = 0
    for path in parts.glob(f"decision_measured{suffix}-*.json"):
        added = _first_added(f"benchmarks/results/parts/{path.name}")
        for part in json.loads(path.read_text())["parts"]:
            for run in part["runs"]:
                assert any(_before(c, added) and c != added for c in picked.get(run["program"], [])), \
                    (path.name, run["roles"])
                measured += 1
    assert measured >= len(decisions.committed_shapes(decisions.shapes_result(set_name)))
