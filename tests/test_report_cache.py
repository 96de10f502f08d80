"""The compile-report cache a test run shares (``companion.report_cache``): a second compile of the same step
is the first one's report; anything that could change the report is another entry."""

import pytest

from companion import compiler, models, report_cache, targets, train

CFG = models.config("tiny-llama")


def _step(fraction=None, flags=None, **kwargs):
    target = targets.target("h100", "1x8")
    placement = compiler.place(target.with_mem_fraction(fraction) if fraction else target)
    return train.compile_step(train.trainer(CFG, "minimal_offloaded"), placement, 8, 256, flags=flags, **kwargs)


def _entries(root):
    return sorted(p.name for p in root.rglob("*.pkl"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(report_cache.ENV, str(tmp_path))
    return tmp_path


def test_the_same_step_is_compiled_once_and_served_whole(cache):
    first = _step()
    assert len(_entries(cache)) == 1
    again = _step()
    assert len(_entries(cache)) == 1
    # the first compile's report, its compile seconds included (a second compile would take other seconds)
    assert again.to_dict() == first.to_dict() and again.hlo_text == first.hlo_text
    assert again.workload == first.workload and again.compiler_log == first.compiler_log
    assert again.module.entry == first.module.entry  # re-parsed from the stored text


def test_flags_fraction_and_log_level_are_other_entries(cache, monkeypatch):
    base = _step()
    pipelined = _step(flags="--xla_gpu_enable_pipelined_host_offloading=true")
    tighter = _step(fraction=0.5)
    assert len(_entries(cache)) == 3
    assert pipelined.flags != base.flags and tighter.usable_hbm_bytes < base.usable_hbm_bytes
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")  # what XLA logs is part of the report
    _step()
    assert len(_entries(cache)) == 4


def test_a_dump_is_never_served_from_the_cache(cache):
    _step()
    dumped = _step(dump=True)
    assert dumped.dump is not None and dumped.dump.schedule is not None
    assert len(_entries(cache)) == 1


def test_an_unreadable_entry_is_compiled_again(cache):
    first = _step()
    (entry,) = cache.rglob("*.pkl")
    entry.write_bytes(b"not a pickle")
    again = _step()
    assert again.device == first.device and entry.stat().st_size > len(b"not a pickle")


def test_another_source_replaces_the_old_entries(cache, monkeypatch):
    _step()
    (old,) = [p for p in cache.iterdir() if p.is_dir()]
    monkeypatch.setattr(report_cache, "_source", lambda: "another-source")
    _step()
    folders = [p.name for p in cache.iterdir() if p.is_dir()]
    assert folders == [f"jaxlib-{old.name.split('-')[1]}-another-source"] and not old.exists()


@pytest.mark.parametrize("value", ["", "off", "OFF"])
def test_off_unless_a_folder_is_named(value, monkeypatch):
    monkeypatch.setenv(report_cache.ENV, value)
    assert report_cache.folder() is None and report_cache.load("anything") is None
    report_cache.store("anything", object())  # a no-op, not an error


def test_a_folder_that_cannot_be_written_only_costs_the_next_compile(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(report_cache.ENV, str(blocked))
    assert _step().device.peak_bytes > 0 and _step().device.peak_bytes > 0
