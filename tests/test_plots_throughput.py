"""Tokens/s per GPU against the batch (notebook 07's figure of the published space): what it draws is what the
stored rows and the paired band say."""

import matplotlib

matplotlib.use("Agg")

from companion import bands, plots  # noqa: E402

GiB = 2**30


def _row(label, batch, seconds, fits=True, target="gb200:128x4", mesh_name="EP 64"):
    sweep = bands.Sweep(seconds, tuple(seconds * (1 + 0.01 * (i - 6) / 6) for i in range(bands.SAMPLES)),
                        batch * 4096 / 512, "blackwell", "nvlink_c2c_gb200")
    return {"label": label, "target": target, "mesh_name": mesh_name, "batch": batch, "fits": fits,
            "tokens_per_second": batch * 4096 / 512 / seconds, "sweep": sweep.error_band_paired()}


def test_one_line_per_policy_through_the_batches_that_fit_with_each_steps_band_against_the_fastest_full_remat():
    rows = [_row("full remat", 1024, 3.0), _row("full remat", 512, 2.0), _row("full remat", 1536, 5.0, fits=False),
            _row("offloaded, pipelined", 1536, 4.4), _row("QKV kept on device (EP 8)", 512, 2.5, mesh_name="EP 8")]
    fig = plots.throughput_vs_batch({"512 GB200": rows, "256 GB200": [_row("full remat", 256, 1.0, target="gb200:64x4")]})
    drawn = fig.drawn["512 GB200"]
    # one line per policy (and mesh, unless the label names it), the batch per GPU on x, a step that does not fit left out
    assert set(drawn) == {"full remat (EP 64)", "offloaded, pipelined (EP 64)", "QKV kept on device (EP 8)"}
    assert [(x, round(y)) for x, y, _, _ in drawn["full remat (EP 64)"]] == [(1.0, 2048), (2.0, 2731)]
    assert [x for x, *_ in fig.drawn["256 GB200"]["full remat (EP 64)"]] == [1.0]  # 256 GPUs: B 256 is one per GPU
    # the band is the ratio's paired band times the fastest full remat's tokens/s: each step sits inside its own
    base = 1024 * 8 / 3.0
    for line in drawn.values():
        for x, y, low, high in line:
            assert low <= y <= high
    (x, y, low, high), = drawn["offloaded, pipelined (EP 64)"]
    band = bands.rank_records(rows[3], rows[0]).to_dict()["band"]
    assert (round(low, 6), round(high, 6)) == (round(band[0] * base, 6), round(band[1] * base, 6))
    # two panels, each titled; the legend names each line once and marks the fastest full remat
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ["512 GB200", "256 GB200"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sorted(labels) == sorted(set(labels)) and "fastest full remat" in labels


def test_without_a_full_remat_step_a_point_has_no_band_to_draw():
    drawn = plots.throughput_points({"p": [_row("offloaded, pipelined", 1024, 4.0), _row("full remat", 512, 1.0, fits=False)]})
    ((x, y, low, high),) = drawn["p"]["offloaded, pipelined (EP 64)"]
    assert x == 2.0 and low == high == y  # the full-remat step does not fit: nothing to pair against
