"""Error bands: the absolute band's calibration term is the benchmark's, the paired band's model-error term
the TPU comparison's, and rankings are ties exactly when the sweep of the simulator's constants, widened by
that term, holds 1."""

import json
from pathlib import Path

import pytest

from companion import bands, cli, compiler, models, targets, train

ROOT = Path(__file__).resolve().parents[1]


def _sweep(nominal: float, samples: tuple[float, ...]) -> bands.Sweep:
    return bands.Sweep(nominal, samples, tokens=1000.0, generation="hopper", link="pcie5_x16")


def test_the_calibration_error_covers_the_benchmarks_worst():
    """The absolute band's error is the frozen simulator's worst on published runs when it was set (jaxlib 0.10.2's
    calibration, 0.283); on 0.12 the worst is smaller (0.234), inside it: the band stays the wider until the
    results that carry it (central, central_space, plan) are rerun with the new figure (issue 50's note)."""
    result = json.loads((ROOT / "benchmarks" / "results" / "calibration.json").read_text())
    assert result["worst_abs_error"] <= bands.ABSOLUTE_ERROR < result["worst_abs_error"] + 0.05
    errors = [abs(r["error"]) for r in result["runs"] if r["kind"] == "absolute"]
    assert round(max(errors), 3) == result["worst_abs_error"]


def test_the_paired_model_error_is_the_seen_tpu_pairs_conformal_band_and_holds_c4():
    """The term is the conformal band over every grid pair measured on the TPU (its largest |error|, rounded up,
    as the stored comparison gives it now: a reprice that moved it would fail here); C4, the one published GPU
    ratio (openxla/xla #32297, ~1.12 on GB200), falls inside the band the lab draws around its simulation (its
    constants' spread alone does not hold it by much: 1.116 of 1.12)."""
    import math

    from companion import comparison

    seen = comparison.load().seen_band()
    assert bands.PAIRED_MODEL_ERROR == math.ceil(seen["band"] * 1e4) / 1e4 >= seen["band"]
    assert seen["coverage"] == seen["grid_pairs"] / (seen["grid_pairs"] + 1) > 0.99
    c4 = next(r for r in json.loads((ROOT / "benchmarks" / "results" / "calibration.json").read_text())["relative"]
              if r["key"] == "C4-pipelined" and not r["what_if"])
    low, high = c4["paired_band"]
    r = bands.Ranking("C4-pipelined", "C4-naive", c4["simulated_ratio"], low, high)
    assert r.band_low <= c4["measured_ratio"] <= r.band_high
    assert bands.Ranking("a", "b", 1.03, 1.02, 1.04).tie  # a 3 % gain is inside the method's error
    assert not bands.Ranking("a", "b", 1.03, 1.02, 1.04, model_error=0.0).tie
    assert not bands.Ranking("a", "b", 1.10, 1.09, 1.11).tie  # a 10 % gain is not


def test_the_conformal_band_is_the_order_statistic_its_coverage_asks_for():
    errors = [0.01, -0.04, 0.02, 0.03, -0.005, 0.015, 0.025, -0.035, 0.012]  # n = 9: at most 9/10 coverage
    assert bands.conformal_band(errors) == (0.04, 0.9)  # the largest |error|, coverage n / (n + 1)
    assert bands.conformal_band(errors, 0.8) == (0.035, 0.8)  # ceil(10 x 0.8) = 8th smallest
    assert bands.conformal_band(errors, 0.5)[0] == 0.02  # 5th smallest
    assert bands.conformal_band(errors, 0.75) == (0.035, 0.8)  # ceil(7.5) = 8th: rounded up, the coverage attained
    assert bands.conformal_band(errors, 0.7) == (0.03, 0.7)  # 10 x 0.7 is 7.000000000000001 in floats: the 7th
    assert bands.conformal_band(errors, 1e-12) == (0.005, 0.1)  # never the 0th (which would wrap to the largest)
    with pytest.raises(ValueError, match="coverage 0.95: 9 errors promise at most 0.9000"):
        bands.conformal_band(errors, 0.95)
    with pytest.raises(ValueError, match="finite errors"):
        bands.conformal_band([0.01, float("nan")])
    with pytest.raises(ValueError, match="finite errors: got 0"):
        bands.conformal_band([])
    # the promise, checked: a new draw exchangeable with the errors lands inside at least that often
    import numpy as np

    rng = np.random.default_rng(0)
    hits = []
    for _ in range(4000):
        draw = rng.standard_t(3, size=10)
        hits.append(abs(draw[-1]) <= bands.conformal_band(list(draw[:-1]))[0])
    assert np.mean(hits) >= 0.9 - 0.015


def test_the_chance_of_misses_is_the_beta_binomial_a_conformal_band_gives():
    # the largest of n: no miss among m new ones with probability n / (n + m) (a classic of order statistics)
    assert abs((1 - bands.chance_of_misses(167, 167, 55, 1)) - 167 / (167 + 55)) < 1e-12
    assert bands.chance_of_misses(167, 167, 55, 0) == 1.0
    with pytest.raises(ValueError, match="k 0 of 167 calibration errors"):
        bands.chance_of_misses(167, 0, 55, 1)
    tail = [bands.chance_of_misses(20, 15, 10, j) for j in range(12)]
    assert all(a >= b for a, b in zip(tail, tail[1:])) and tail[11] == 0.0  # a tail: falls with the misses asked
    # against simulation: draws exchangeable with the calibration ones
    import numpy as np

    rng = np.random.default_rng(1)
    hits = []
    for _ in range(3000):
        draw = rng.standard_normal(30)
        band = np.sort(np.abs(draw[:20]))[14]  # the 15th smallest of 20
        hits.append(int((np.abs(draw[20:]) > band).sum()) >= 3)
    assert abs(np.mean(hits) - bands.chance_of_misses(20, 15, 10, 3)) < 0.03


def test_moe_steps_carry_c2s_error_not_the_dense_band():
    """C2's error as frozen with ABSOLUTE_ERROR (jaxlib 0.10.2's calibration, +318.8 %); jaxlib 0.12's is +316.9 %:
    the two are re-frozen together when the results that carry them are rerun (issue 50's note)."""
    result = json.loads((ROOT / "benchmarks" / "results" / "calibration.json").read_text())
    key, error = bands.UNCALIBRATED["moe"]
    assert next(r["error"] for r in result["runs"] if r["key"] == key) == pytest.approx(error, abs=0.05)
    assert bands.uncalibrated("deepseek-v3-671b") == "uncalibrated: C2-dsv3-256 +319%"
    assert bands.uncalibrated("llama3.1-405b") is None and bands.uncalibrated(None) is None


def test_a_ranking_that_flips_inside_the_sweep_is_a_tie():
    a = _sweep(1.00, (0.97, 1.02, 0.99))
    b = _sweep(1.01, (1.00, 1.00, 1.00))
    r = bands.rank(a, b, ("offload", "remat"))
    assert r.ratio > 1 and r.low < 1 < r.high
    assert r.tie and r.faster is None and r.summary().startswith("offload vs remat: a tie")


def test_a_ranking_that_holds_over_the_sweep_is_a_ranking():
    a = _sweep(0.70, (0.69, 0.71, 0.72))
    b = _sweep(1.00, (0.97, 1.01, 1.04))
    r = bands.rank(a, b, ("offload", "remat"))
    assert not r.tie and r.faster == "offload" and r.band_low > 1
    assert bands.rank(_sweep(0.98, (0.97, 0.99, 1.00)), b).tie  # 1.00-1.04x: inside the model error
    assert not bands.rank(_sweep(0.90, (0.88, 0.93, 0.95)), b).tie  # 1.05-1.11x: outside it
    assert r.summary().startswith("offload is 1.429x remat's tokens/s")
    assert bands.rank(b, a, ("remat", "offload")).faster == "offload"


def test_steps_swept_differently_are_not_compared():
    with pytest.raises(ValueError, match="swept the same way"):
        bands.rank(_sweep(1, (1,)), bands.Sweep(1, (1,), 1.0, "blackwell", "pcie5_x16"))


def test_the_absolute_band_holds_the_calibration_error_and_the_sweep():
    band = _sweep(1.0, (0.5, 1.1)).error_band_abs()
    assert band["low_seconds"] == 0.5 and band["high_seconds"] == pytest.approx(1 + bands.ABSOLUTE_ERROR)
    narrow = _sweep(1.0, (0.99, 1.01)).error_band_abs()
    assert narrow["low_seconds"] == pytest.approx(1 - bands.ABSOLUTE_ERROR)


def test_the_sweep_samples_stay_inside_the_measured_spreads():
    samples = bands.sample_models(targets.target("h100", "1x8"))
    assert len(samples) == bands.SAMPLES
    effs = [m.matmul_efficiency for m, _ in samples]
    spread = bands.SWEEP["matmul_efficiency"]["hopper"]
    assert all(spread.low <= e <= spread.high for e in effs) and max(effs) - min(effs) > 0.5 * (spread.high - spread.low)
    links = [link.achievable_d2h for _, link in samples]
    assert min(links) >= bands.LINK_SWEEP["pcie5_x16"][0].low and len(set(links)) == bands.SAMPLES
    assert samples == bands.sample_models(targets.target("h100", "1x8"))  # a fixed seed: the same points


@pytest.fixture(scope="module")
def tiny_steps():
    placement = compiler.place(targets.target("h100", "1x2"))
    cfg = models.config("tiny-llama")
    steps = {p: train.compile_step(train.trainer(cfg, p), placement, 4, 256) for p in ("full", "minimal",
                                                                                       "minimal_offloaded")}
    # the #46231 workaround as a flag (the lab adds it only on a jaxlib with the bug): its transfers are SM kernels
    steps["kernels"] = train.compile_step(train.trainer(cfg, "minimal_offloaded"), placement, 4, 256,
                                          flags="--xla_disable_hlo_passes=rematerialization,dynamic-slice-annotator")
    return steps


def test_a_step_against_itself_is_a_tie_and_different_steps_rank(tiny_steps):
    full = bands.sweep(tiny_steps["full"])
    assert bands.rank(full, bands.sweep(tiny_steps["full"])).tie
    r = bands.rank(full, bands.sweep(tiny_steps["minimal"]), ("full", "minimal"), model_error=0.0)
    assert not r.tie and r.faster == "minimal"  # the constants alone rank them ...
    within = bands.rank(full, bands.sweep(tiny_steps["minimal"]), ("full", "minimal"))
    # ... and so does the method's error on ratios where they are further apart than it (jaxlib 0.12: ~10 %)
    assert within.tie == (within.band_low <= 1 <= within.band_high) and within.band_low < r.low
    copy_engines = bands.rank(full, bands.sweep(tiny_steps["minimal_offloaded"]), ("full", "minimal_offloaded"))
    # the #46231 workaround's transfer kernels: their unknown rate and SM share widen the same pair's band
    kernels = bands.rank(full, bands.sweep(tiny_steps["kernels"]), ("full", "minimal_offloaded"))
    assert tiny_steps["kernels"].offload.kernel_transfers > tiny_steps["minimal_offloaded"].offload.kernel_transfers
    assert kernels.ratio != copy_engines.ratio and kernels.low < kernels.high  # priced apart, each over a spread


def test_cli_simulate_prints_a_tie_or_a_ranking(capsys):
    args = ["simulate", "--model", "tiny-llama", "--target", "h100:1x2", "--batch", "4", "--seq", "256"]
    assert cli.main(args + ["--policy", "full", "--against", "full"]) == 0
    assert "full vs full: a tie" in capsys.readouterr().out
    assert cli.main(args + ["--policy", "full", "--against", "minimal", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ranking = out["ranking"]  # jaxlib 0.12: ~10 % apart, ranked by the constants' spread and the model error both
    assert ranking["low"] > 1 or ranking["high"] < 1
    assert ranking["tie"] is False and not ranking["band"][0] < 1 < ranking["band"][1] and ranking["faster"] == "minimal"
    band = out["error_band_abs"]
    assert band["low_seconds"] < out["step_seconds"] < band["high_seconds"]
    assert len(out["error_band_paired"]["sample_seconds"]) == bands.SAMPLES
    assert set(out["exposed_transfer_split"]) == {"d2h", "h2d"}
