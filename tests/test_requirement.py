"""What a published gain would require: the two levers (time removed, a larger batch) read off stored steps."""

import pytest

from companion import requirement, targets

GiB = 2**30


def _step(batch, seconds, peak_gib, recompute_flops=0.0, fits=True, exposed=0.0):
    return {"batch": batch, "step_seconds": seconds, "tokens_per_second": batch * 4096 / 512 / seconds, "fits": fits,
            "recompute_flops": recompute_flops, "device_peak_bytes": int(peak_gib * GiB), "seq": 4096,
            "usable_hbm_bytes": int(156.7 * GiB), "exposed_transfer_seconds": exposed}


@pytest.fixture
def gb200():
    return targets.target("gb200:128x4", mem_fraction=0.85)


def test_a_linear_step_gives_the_asymptote_and_the_batch_a_gain_needs(gb200):
    # step = 1 s + 2 ms per sequence of the global batch; 40 GiB + 20 GiB per sequence per GPU
    remat = [_step(512, 2.024, 60.0), _step(1024, 3.048, 80.0), _step(1536, 4.072, 100.0), _step(2048, 5.096, 120.0,
                                                                                                   fits=False)]
    q = requirement.require(remat, gb200, gain=1.2)
    assert q.batch == 1536 and q.fixed_seconds == pytest.approx(1.0) and q.seconds_per_batch == pytest.approx(0.002)
    assert q.residual == pytest.approx(0.0, abs=1e-12)  # the third point lies on the line
    assert q.bytes_per_sequence == pytest.approx(20 * GiB) and q.base_bytes == pytest.approx(40 * GiB, rel=1e-9)
    # tokens/s -> S / (GPUs x 2 ms) = 4000 per GPU; the baseline has 1536 x 8 / 4.072 = 3017.7
    assert q.gain_at_any_batch == pytest.approx(4000 / (1536 * 8 / 4.072))
    batch = q.batch_needed()  # no recompute: the same line; 1.2 x 3017.7 = 3621.2 = 8 B / (1 + 0.002 B)
    assert 8 * batch / (1 + 0.002 * batch) == pytest.approx(1.2 * q.tokens_per_second)
    need = (156.7 * GiB - 40 * GiB) / (batch / 512)
    assert q.bytes_to_free_per_sequence() == pytest.approx(20 * GiB - need)
    assert requirement.require(remat, gb200, gain=1.4).batch_needed() is None  # over the asymptote: no batch


def test_recompute_bounds_the_same_batch_gain_and_naive_exposure_bounds_the_gain_over_naive(gb200):
    rate = gb200.gpu.bf16_dense_flops * requirement.schedule.MATMUL_EFFICIENCY["blackwell"]
    remat = [_step(512, 2.0, 60.0, recompute_flops=0.5 * rate), _step(1024, 3.0, 80.0, recompute_flops=1.0 * rate)]
    q = requirement.require(remat, gb200, naive=[_step(512, 2.5, 60.0, exposed=0.5)])
    assert q.recompute_seconds == pytest.approx(1.0) and q.gain_without_recompute == pytest.approx(1.5)
    assert q.removable_needed == pytest.approx(1 - 1 / 1.57) and q.worst_naive_exposed_share == pytest.approx(0.2)
    assert q.exposed_needed_over_naive == pytest.approx(1 - 1 / 1.677)
    assert any("at most 1.500x" in r["the lab's step"] for r in q.rows(gb200))


def test_one_fitting_step_is_refused(gb200):
    with pytest.raises(ValueError, match="two fitting baseline steps, got 1"):
        requirement.require([_step(512, 2.0, 60.0), _step(1024, 3.0, 170.0, fits=False)], gb200)
