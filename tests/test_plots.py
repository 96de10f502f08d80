"""The notebooks' figures: what a reader needs to read them is on them."""

import matplotlib

matplotlib.use("Agg")

from companion import plots  # noqa: E402


def test_pareto_merges_points_at_one_place_and_keeps_labels_apart():
    points = {"save_dot_except_mlp": (1.188, 6.032), "save_dot_except_mlpwi": (1.188, 6.032),
              "save_qkv_proj": (1.212, 5.969), "save_out_proj": (1.224, 5.97), "full": (1.247, 5.735),
              "qkv_proj_offloaded": (1.2121, 5.968)}
    fig = plots.pareto(points, xlabel="x", ylabel="y")
    ax = fig.axes[0]
    texts = [t for t in ax.texts]
    assert "save_dot_except_mlp = save_dot_except_mlpwi" in [t.get_text() for t in texts]
    assert len(texts) == 5
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    for t in texts:
        t.update_positions(renderer)
    boxes = [Text.get_window_extent(t, renderer) for t in texts]  # the labels, without their leader lines
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_lines_marks_links_and_break_evens_in_the_legend_with_plain_ticks():
    fig = plots.lines([16, 32, 64, 128], {"offload": [4, 2, 1, 0.5]}, xlabel="GB/s", ylabel="ms", logx=True,
                      vlines={"H100 PCIe": 55, "break-even": 121})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["offload", "H100 PCIe", "break-even"]
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64", "128"]


def test_residual_bars_stack_each_policys_tensors_at_their_sizes():
    sizes = {"decoder_layer_input": 32 * 2**20, "query_proj": 32 * 2**20, "mlpwi_0": 112 * 2**20}
    fig = plots.residual_bars({"full": ["decoder_layer_input"], "minimal": ["decoder_layer_input", "query_proj", "mlpwi_0"]},
                              sizes)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["176", "32"]  # minimal (drawn first, top row last), full
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["decoder_layer_input", "query_proj", "mlpwi_0"]


def test_largest_batch_bars_mark_the_policies_that_fit_nothing():
    rows = [{"policy": "full", "per GPU": 9, "TFLOP/s per GPU": 519.0},
            {"policy": "minimal", "per GPU": 0, "TFLOP/s per GPU": 0.0}]
    fig = plots.largest_batch_bars(rows, title="t")
    left, right = fig.axes
    assert [t.get_text() for t in left.get_yticklabels()] == ["minimal", "full"]
    assert [t.get_text().strip() for t in left.texts] == ["does not fit"]
    assert [t.get_text().strip() for t in right.texts] == ["519"]


def test_step_bars_split_each_step_and_label_its_throughput():
    from companion.timing.schedule import StepSimulation

    def sim(step, transfers, collectives):
        return StepSimulation("h100:1x8", "pcie5_x16", step, step - transfers - collectives, transfers, collectives,
                              0.0, {}, {}, model_flops=400e12 * step, hardware_flops=400e12 * step, recompute_flops=0.0,
                              peak_flops=989e12, peak_device_bytes=0, host_bytes=0, loop_iteration_seconds={})

    fig = plots.step_bars({"full remat": sim(2.0, 0.0, 0.2), "offload": sim(2.5, 0.4, 0.1)})
    ax = fig.axes[0]
    widths = [p.get_width() for p in ax.patches]
    assert sorted(round(w, 6) for w in widths if w) == [0.1, 0.2, 0.4, 1.8, 2.0]
    assert [t.get_text().strip() for t in ax.texts] == ["400 TFLOP/s", "400 TFLOP/s"]


def test_time_by_kind_bars_stack_each_class_in_order():
    rows = {"grouped": {"matmul": 0.3, "grouped_matmul": 0.5, "collective:nvlink": 1.6, "copy": 0.0},
            "ragged_dot": {"matmul": 0.3, "grouped_matmul": 90.0, "collective:nvlink": 1.6, "mystery": 0.1}}
    fig = plots.time_by_kind_bars(rows, title="t")
    ax = fig.axes[0]
    # one bar per (step, class with time somewhere); zero-time classes everywhere are left out
    assert len(ax.patches) == 2 * 4
    widths = {(round(p.get_y() + p.get_height() / 2), round(p.get_width(), 3)) for p in ax.patches}
    assert (1, 0.5) in widths and (0, 90.0) in widths  # bars listed top-down as given
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["matmul", "grouped_matmul", "collective:nvlink", "mystery"]
    plots.plt.close(fig)
