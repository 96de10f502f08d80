"""Stored benchmark results: the rule-1 source hash (the report cache's key), and ``load``'s freshness."""

import json

from companion import results


def test_source_hash_follows_every_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    before = results.source_hash(tmp_path)
    assert results.source_hash(tmp_path) == before  # deterministic
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert results.source_hash(tmp_path) != before
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "sub" / "b.py").rename(tmp_path / "b2.py")  # same bytes, another path
    assert results.source_hash(tmp_path) != before


def test_load_says_fresh_or_stale(tmp_path):
    from companion import freshness

    path = tmp_path / "r.json"
    stamp = freshness.stamp("benchmarks/bench_central.py", {"rows": [{"model": "llama3.1-8b", "target": "h100:1x8"}]})
    path.write_text(json.dumps({"stamp": stamp, "x": 1}))
    data, found = results.load(path)
    assert data["x"] == 1 and found.fresh and found.line().endswith("fresh (the code, tables and versions it ran are "
                                                                      "this checkout's)")
    path.write_text(json.dumps({"stamp": {**stamp, "code": "0" * 16}}))
    _, stale = results.load(path)
    assert not stale.fresh and "STALE" in stale.line() and "the code it ran" in stale.line()


def test_compared_steps_rank_stored_rows_with_the_paired_band():
    from companion import bands, tables

    def stored(label, seconds, fits=True, spread=0.0):
        sweep = bands.Sweep(seconds, tuple(seconds * (1 + spread * (i - 6) / 6) for i in range(bands.SAMPLES)),
                            4096.0, "blackwell", "nvlink_c2c_gb200")
        row = {"label": label, "batch": 512, "fits": fits, "device_peak_bytes": (100 if fits else 170) * 2**30,
               "usable_hbm_bytes": 156 * 2**30, "host_bytes": 0, "step_seconds": seconds, "tokens_per_second": 4096 / seconds,
               "recompute_flops": 3e14, "exposed_transfer_seconds": 0.1, "exposed_collective_seconds": 1.0}
        if fits:
            row.update(sweep=sweep.error_band_paired(), band=sweep.error_band_abs())
        return row

    rows = [stored("full", 3.0), stored("same", 3.0), stored("slower", 4.0), stored("big", 5.0, fits=False)]
    table = tables.compared_steps(rows, against="full").splitlines()
    assert "vs full" in table[0]
    e = bands.PAIRED_MODEL_ERROR
    low, high = 1 / (1 + e), 1 / (1 - e)  # the model error alone: measured = simulated / (1 + error)
    assert "| same | 512 | yes |" in table[3] and f"tie ({low:.3f}-{high:.3f})" in table[3]
    assert f"0.750x ({0.75 * low:.3f}-{0.75 * high:.3f})" in table[4]  # 3.0 / 4.0 at every sample, within the model error
    assert "no: over by 14.0 GiB" in table[5] and "not ranked: does not fit" in table[5] and "would take" in table[5]
    stale = {**rows[1]["sweep"], "seed": 1}
    try:
        bands.Sweep.from_paired(stale)
    except ValueError as err:
        assert "seed 1" in str(err)
    else:
        raise AssertionError("a sweep drawn with another seed was accepted")


def test_a_step_record_keeps_what_the_tables_rank():
    from companion import compiler, models, steps, tables, targets, train

    cfg = models.config("tiny-llama")
    placement = compiler.place(targets.target("h100", "1x8"))
    naive = train.compile_step(train.trainer(cfg, "minimal_offloaded"), placement, 8, 256)
    full = train.compile_step(train.trainer(cfg, "full"), placement, 8, 256)
    rows = [steps.record(full, "full", layers=cfg.num_layers, model=cfg.name, target="h100:1x8", batch=8, seq=256),
            steps.record(naive, "offloaded, naive", layers=cfg.num_layers, model=cfg.name, target="h100:1x8",
                         batch=8, seq=256)]
    assert all(r["fits"] and "sweep" in r and r["mem_fraction"] == 0.75 for r in rows)
    assert "conditions" in rows[1] and "conditions" not in rows[0]  # only a naive offload step gets them
    assert rows[1]["host_bytes"] == naive.host.total_bytes > 0
    assert rows[0]["step_seconds"] == schedule_step(full)
    table = tables.compared_steps(rows, against="full")
    assert "| offloaded, naive | 8 | yes |" in table
    verdicts = tables.pipelining_verdicts(rows)
    assert "tiny-llama on h100:1x8, B=8, S=256, fraction 0.75: offloaded" in verdicts
    assert verdicts.splitlines()[-1].endswith("| - |")  # no pipelined twin was compiled


def schedule_step(report):
    from companion import schedule

    return schedule.simulate(report).step_seconds
