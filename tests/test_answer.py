"""The generated answer: rows of the searched space ranked with the paired band, drops printed before ranking."""

from companion import answer, bands

GiB = 2**30


def _row(label, batch, seconds, host_gib=0.0, fits=True, factor=2.0, mesh="fsdp=8,expert=64"):
    sweep = bands.Sweep(seconds, tuple(seconds * (1 + 0.01 * (i - 6) / 6) for i in range(bands.SAMPLES)),
                        batch * 4096 / 512, "blackwell", "nvlink_c2c_gb200")
    return {"label": label, "model": "deepseek-v3-671b", "target": "gb200:128x4", "mem_fraction": 0.9, "mesh": mesh,
            "seq": 4096, "batch": batch, "ragged_buffer_factor": factor, "fits": fits, "step_seconds": seconds,
            "tokens_per_second": batch * 4096 / 512 / seconds, "device_peak_bytes": int((100 if fits else 170) * GiB),
            "usable_hbm_bytes": int(165.9 * GiB), "host_bytes": int(host_gib * GiB), "sweep": sweep.error_band_paired()}


def test_the_headline_ranks_the_fastest_offload_against_the_fastest_on_device_step():
    rows = [_row("full remat", 512, 2.0), _row("full remat", 1024, 3.0), _row("full remat", 1536, 5.0, fits=False),
            _row("offloaded, pipelined", 1536, 3.0, host_gib=40)]
    line = answer.headline(rows)
    # 1536 x 8 / 3.0 = 4096 against 1024 x 8 / 3.0 = 2731 tokens/s: 1.5x, outside the model error
    assert "offload faster" in line and "offloaded, pipelined at B = 1536" in line and "1.500x" in line
    close = rows[:2] + [_row("offloaded, pipelined", 1024, 3.05, host_gib=40)]
    assert "a tie" in answer.headline(close)  # 0.98x: inside the model error
    slower = rows[:2] + [_row("offloaded, pipelined", 1024, 3.3, host_gib=40)]
    assert "no offload faster" in answer.headline(slower)  # 0.91x: outside it
    table = answer.table(rows)
    assert [t["vs fastest full remat"] for t in table if t["B"] == 1536 and t["policy"] == "full remat"] == [
        "not ranked: does not fit"]
    assert answer.coverage(rows)["ragged_buffer_factors"] == [2.0]


def test_a_finite_buffer_prints_its_drops_and_the_worst_case_none():
    finite, worst = _row("a", 512, 2.0), _row("b", 512, 2.0, factor=-1.0)
    assert answer.dropped_share(finite, 1.0) == 0.0 < answer.dropped_share(finite, answer.BUSIEST)
    assert answer.dropped_share(worst, answer.BUSIEST) == 0.0
