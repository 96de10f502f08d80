"""The flag explorer's pure function (notebook 05), without a frontend."""

import pytest

from companion import flags, widgets


class _Run:
    """Enough of an ``experiments.FlagRun`` for ``flag_view``."""

    def __init__(self, label, spec):
        self.label, self.flag_set = label, flags.resolve(spec)

    def row(self, baseline=None):
        return {"step ms": 1.0, "exposed transfers ms": 0.5, "exposed collectives ms": 0.1, "device peak GiB": 2.0,
                "host transfers (covered)": "4 (2)", "vs baseline": "-" if baseline in (None, self) else "tie (0.99-1.01)"}


def test_flag_spec_joins_the_chosen_toggles():
    assert widgets.flag_spec() == ""
    assert widgets.flag_spec(pipelined_offload=True, async_limit_4=False) == widgets.FLAG_TOGGLES["pipelined_offload"]
    with pytest.raises(ValueError, match="unknown flag toggle"):
        widgets.flag_spec(turbo=True)


def test_flag_view_finds_the_run_with_exactly_those_flags():
    runs = [_Run("MaxText's flags", None), _Run("pipelined", widgets.FLAG_TOGGLES["pipelined_offload"])]
    assert widgets.flag_view(runs).run is runs[0]
    view = widgets.flag_view(runs, pipelined_offload=True)
    assert view.ok and view.run is runs[1] and view.message.startswith("pipelined: step 1.0 ms")
    assert view.message.endswith("tokens/s vs MaxText's flags: tie (0.99-1.01)")
    assert "tokens/s vs" not in widgets.flag_view(runs).message
    missing = widgets.flag_view(runs, pipelined_offload=True, async_limit_4=True)
    assert not missing.ok and "not compiled yet" in missing.message and "parallel_async_compute_limit=4" in missing.spec
    bad = widgets.flag_view(runs, turbo=True)
    assert not bad.ok and "turbo" in bad.message



def test_a_preset_switch_is_described_as_such():
    from companion import experiments

    run = experiments.FlagRun("O1", flags.resolve("none --jax_optimization_level=O1"), {}, "maxtext_gpu", None, None, None, None)
    assert run.describe_change() == "preset none --jax_optimization_level=O1"
    same = experiments.FlagRun("limit", flags.resolve("--xla_gpu_memory_limit_slop_factor=80"),
                               {"xla_gpu_memory_limit_slop_factor": 80}, "maxtext_gpu", None, None, None, None)
    assert same.describe_change() == "xla_gpu_memory_limit_slop_factor=80"
