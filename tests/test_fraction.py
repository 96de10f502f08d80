"""The memory fraction a run needs (companion.fraction) and the fits rule (companion.fit): the search's
logic on stand-in compiles whose peak follows the scheduler's limit, and the rule's verdicts."""

import pytest

from companion import fit, fraction, targets
from companion.hardware.targets import GiB


def _compiles(peak_at, fits_from=None):
    """point_at(f) over a made-up compiled peak (GiB) at each fraction; the list records each compile."""
    target = targets.target("h100:1x8")
    done = []

    def point_at(f):
        t = target.with_mem_fraction(f)
        device = int(peak_at(f) * GiB)
        done.append(f)
        return fraction.Point(f, device, 0, t.usable_hbm_bytes, fit.check(device, 0, t).fits, 1.0)

    memo = {}

    def memoized(f):
        if f not in memo:
            memo[f] = point_at(f)
        return memo[f]

    return memoized, done, target


def test_the_answer_is_the_smallest_fitting_fraction_with_the_one_below_compiled_and_over():
    # the scheduler fills its limit: the peak grows with the fraction, but slower than usable HBM
    point_at, done, target = _compiles(lambda f: 50 + 10 * f)
    answer = fraction.search(point_at, 0.80, target.hbm_bytes)
    usable = target.with_mem_fraction(answer).usable_hbm_bytes
    below = target.with_mem_fraction(round(answer - fraction.STEP, 2)).usable_hbm_bytes
    assert (50 + 10 * answer) * GiB <= usable and (50 + 10 * (answer - 0.01)) * GiB > below
    assert answer in done and round(answer - 0.01, 2) in done and len(done) <= 4


def test_a_far_guess_jumps_to_where_the_peak_fits_instead_of_walking():
    point_at, done, target = _compiles(lambda f: 70.0)  # the budget guessed 0.30, the peak needs ~0.89
    answer = fraction.search(point_at, 0.30, target.hbm_bytes)
    assert answer == pytest.approx(70 * GiB / target.hbm_bytes, abs=0.011) and len(done) <= 3


def test_a_peak_over_the_ceiling_fits_at_none():
    point_at, done, target = _compiles(lambda f: 90.0)  # over 0.95 of a 79 GiB card
    assert fraction.search(point_at, 0.5, target.hbm_bytes) is None and fraction.CEILING in done


def test_the_budget_s_fraction_is_the_smallest_grid_point_it_fits():
    assert fraction.smallest(lambda f: f >= 0.634) == 0.64
    assert fraction.smallest(lambda f: False) is None
    assert fraction.grid()[0] == 0.01 and fraction.grid()[-1] == fraction.CEILING


def test_the_fits_rule_checks_device_host_and_margin():
    t = targets.target("gb200:1x4", mem_fraction=0.9)
    usable = t.usable_hbm_bytes
    assert fit.check(usable, 0, t).fits and not fit.check(usable + 1, 0, t).fits
    tight = fit.check(usable - GiB, 0, t, fit.Margin(bytes=2 * GiB))
    assert not tight.fits and "after a 2.00 GiB margin" in tight.reason()
    host = fit.host_limit_bytes(t)  # 75 % of the 240 GB a Grace gives each of its two B200s
    assert host == int(0.75 * 240e9)
    over = fit.check(GiB, host + GiB, t)
    assert over.fits_device and not over.fits and "pinned host" in over.reason()
    assert fit.host_limit_bytes(t, pool_bytes=64 * GiB) == 64 * GiB
    with pytest.raises(ValueError, match="margin 1.5 of usable HBM"):
        fit.Margin(fraction=1.5)


def test_an_answer_the_compiles_do_not_show_is_labelled():
    points = (fraction.Point(0.8, 1, 0, 2, True, 1.0),)
    needed = fraction.Needed("h100:1x8", 10, 0.8, 0.8, points)
    assert not needed.confirmed and "not confirmed" in needed.summary()
    shown = fraction.Needed("h100:1x8", 10, 0.8, 0.8, (*points, fraction.Point(0.79, 3, 0, 2, False, 1.0)))
    assert shown.confirmed and "not confirmed" not in shown.summary()


@pytest.mark.parametrize("peak, guess", [
    (lambda f: 42.5 + 30 * max(0.0, f - 0.56), 0.58),  # the scheduler spends what a larger limit gives (405B-like)
    (lambda f: 64.7 + 0.6 * (f < 0.8), 0.79),  # a step down in the peak below a limit (70B-like)
    (lambda f: 61.0 - 2 * (f - 0.77), 0.95),  # a guess from the ceiling's peak (unscanned)
])
def test_every_answer_is_compiled_with_the_one_below_it(peak, guess):
    point_at, done, target = _compiles(peak)
    answer = fraction.search(point_at, guess, target.hbm_bytes)
    assert answer in done and point_at(answer).fits
    assert round(answer - fraction.STEP, 2) in done and not point_at(round(answer - fraction.STEP, 2)).fits
    assert len(done) <= fraction.MAX_COMPILES
