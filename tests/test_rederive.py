"""The CI re-derivation (``benchmarks/rederive.py``) names a stored row that no longer reproduces, and a table
entry read outside a result's stamp."""

import copy
import json
import sys

from companion import freshness

sys.path.insert(0, str(freshness.ROOT / "benchmarks"))

import rederive  # noqa: E402


def test_a_planted_drift_and_a_read_outside_the_stamp_fail_with_the_row_named():
    data = json.loads((freshness.ROOT / "benchmarks" / "results" / "central.json").read_text())
    row = rederive.DERIVERS["central"].sample(data)[-1]  # an 8B step on 8 H100
    drifted = copy.deepcopy(row)
    drifted["step_seconds"] *= 1.001
    drifted["sweep"]["sample_seconds"][3] += 1e-9
    data["stamp"]["tables"]["MATMUL_EFFICIENCY"].pop("hopper")
    failures = rederive.check("central", data, [drifted], rederive.DERIVERS["central"])
    name = "central: llama3.1-8b h100:1x8 fsdp=8 B=8 every projection offloaded, pipelined at 0.75"
    assert [f.split(": ")[2].split(":")[0] for f in failures[:2]] == ["step_seconds", "sweep.sample_seconds[3]"]
    assert all(f.startswith(name) for f in failures)
    assert failures[2:] == [f"{name}: read MATMUL_EFFICIENCY[hopper], which its stamp does not hold"]


def test_differences_skip_only_a_rows_own_wall_clock_fields():
    stored = {"compile_seconds": 1.0, "step_seconds": 2.0, "workaround": {"seconds": {"kernel": 1.0}}}
    now = {"compile_seconds": 9.0, "step_seconds": 2.0, "workaround": {"seconds": {"kernel": 1.5}}}
    assert rederive.differences(stored, now) == ["workaround.seconds.kernel: 1.0 -> 1.5"]
    assert rederive.differences([1, 2], [1, 2, 3]) == [": [1, 2] -> [1, 2, 3]"]
