"""The simulator held against the chip (companion.comparison): the stored comparison covers every measured step
that ran, its halves follow the fixed split, and the paired errors and the band are computed as stated."""

import statistics

import pytest

from companion import comparison, measured


@pytest.fixture(scope="module")
def stored():
    return measured.load(), comparison.load()


def test_every_step_that_ran_is_simulated_and_split_by_the_fixed_rule(stored):
    m, c = stored
    assert {s.key for s in c.steps} == {s.key for s in m.steps if s.runs}
    assert all(s.fresh == m.step(s.key).fresh and s.held_out == (measured.held_out(s.key) and not s.fresh)
               for s in c.steps)
    assert 0 < sum(s.held_out for s in c.steps) < len(c.steps) and len(c.commit) == 40
    for s in c.steps:
        assert s.measured_seconds == m.step(s.key).seconds and s.simulated_seconds > 0


def test_the_stored_comparison_was_priced_with_this_checkouts_v5e_table():
    """Steps added later (``--only``) keep the pricing commit: the tables must still be the ones it froze."""
    import json

    from companion import schedule

    stored = json.loads(comparison.RESULTS.read_text())
    assert stored["cost_model"] == {k: getattr(schedule, k)["tpu-v5e"]
                                    for k in ("MATMUL_EFFICIENCY", "HBM_EFFICIENCY", "KERNEL_GAP_SECONDS")}


def test_absolute_errors_are_the_held_out_halfs(stored):
    _, c = stored
    errors = [abs(s.simulated_seconds / s.measured_seconds - 1) for s in c.steps if s.held_out and not s.fresh]
    summary = c.absolute(comparison.HELD_OUT)
    assert summary["median_abs_error"] == statistics.median(errors) and summary["worst_abs_error"] == max(errors)
    assert summary["steps"] == len(errors) and c.worst(1)[0].key in {s.key for s in c.steps if s.group == "held-out"}


def test_pairs_share_a_shape_and_rank_slower_over_faster(stored):
    m, c = stored
    assert len(c.pairs) >= 50
    for p in c.pairs:
        a, b = m.step(p.a), m.step(p.b)
        assert (a.layers, a.batch, a.seq, a.flash_kernel) == (b.layers, b.batch, b.seq, b.flash_kernel)
        assert p.measured_ratio >= 1 and p.spread >= max(x for x in (a.spread, b.spread, 0) if x is not None)
        assert p.fresh == (a.fresh or b.fresh)
        assert p.held_out == (not p.fresh and (measured.held_out(p.a) or measured.held_out(p.b)))
        assert p.measured_ranking == (p.measured_ratio - 1 > p.spread)


def test_the_band_comes_from_the_training_half_and_is_tested_on_the_other(stored):
    _, c = stored
    band = c.band()
    assert band == max(abs(p.error) for p in c.pairs if not p.held_out and not p.fresh)
    test = c.band_test()
    held = [p for p in c.pairs if p.held_out and not p.fresh]
    assert test["inside"] == sum(abs(p.error) <= band for p in held) and test["held_out_pairs"] == len(held)
    assert test["called_rankings"] == sum(abs(p.simulated_ratio - 1) > band for p in c.pairs if not p.fresh)


def test_the_fresh_pairs_move_no_grid_figure_and_meet_the_committed_band(stored):
    """The band the fresh pairs test is the committed one; adding fresh pairs, however wrong, moves no figure of the
    grid's halves (nor the seen band), and the test counts them."""
    import dataclasses

    from companion import bands

    m, c = stored
    wild = comparison.PairError("x", "y", 1.5, 3.0, False, 0.001, fresh=True)  # +100 %: outside any band
    wrong = comparison.PairError("u", "v", 1.2, 0.8, False, 0.001, fresh=True)  # ranked the other way, called
    grown = dataclasses.replace(c, pairs=c.pairs + (wild, wrong))
    for group in (comparison.TRAINING, comparison.HELD_OUT):
        assert grown.paired(group) == c.paired(group) and grown.absolute(group) == c.absolute(group)
    assert grown.band_test() == c.band_test() and grown.seen_band() == c.seen_band() and grown.band() == c.band()
    test = grown.fresh_test()
    fresh = [p for p in grown.pairs if p.fresh]
    assert test["band"] == bands.PAIRED_MODEL_ERROR and test["pairs"] == len(fresh)
    assert test["inside"] == sum(abs(p.error) <= bands.PAIRED_MODEL_ERROR for p in fresh) <= len(fresh) - 2
    assert test["called_and_wrong"] >= 1 and test["measured_rankings"] - test["rankings_agreeing"] >= 1
    assert test["chance_of_as_many_misses"] < 0.1  # two or more misses: unlikely under the band's promise


def test_a_noisy_fresh_step_moves_no_grid_pairs_noise_floor(stored):
    import dataclasses

    m, c = stored
    simulated = {s.key: s.simulated_seconds for s in c.steps}
    step = next(s for s in m.steps if s.fresh and s.runs)
    noisy = dataclasses.replace(step, key="L9-B9-S999-full", spread=0.5)  # a shape of its own, a 50 % spread
    twin = dataclasses.replace(step, key="L9-B9-S999-minimal", policy="minimal", spread=None)
    loud = dataclasses.replace(m, steps=m.steps + (noisy, twin))
    pairs = comparison.pairs_of(loud, {**simulated, noisy.key: 1.0, twin.key: 0.9})
    grid = [p for p in pairs if not p.fresh]
    assert grid == [p for p in c.pairs if not p.fresh]


def test_the_stored_summary_is_the_comparisons_own(stored):
    import json

    _, c = stored
    summary = json.loads(comparison.RESULTS.read_text())["summary"]
    assert summary["seen_band"] == c.seen_band() and summary["fresh"] == c.fresh_test()
    assert summary["band"] == c.band_test() and summary["held_out_pairs"] == c.paired(comparison.HELD_OUT)
    assert summary["goals"]["every fresh pair inside the committed band"] == (c.fresh_test()["inside"] == 55)


def test_the_fresh_steps_are_shapes_the_grid_never_ran(stored):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_measured

    shape = lambda s: (s.layers, s.batch, s.seq, s.flash_kernel)  # noqa: E731
    assert all(s.fresh for s in bench_measured.FRESH) and not any(s.fresh for s in bench_measured.GRID)
    assert {shape(s) for s in bench_measured.FRESH}.isdisjoint(shape(s) for s in bench_measured.GRID)
    assert len({s.key for s in bench_measured.FRESH}) == len(bench_measured.FRESH) >= 20
    m, _ = stored
    assert {s.key for s in m.steps if s.fresh} <= {s.key for s in bench_measured.FRESH}
