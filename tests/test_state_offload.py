"""The budget where the training state lives on the host (issue 52's set, committed before the budget's fix):
stored whole, host bytes exact, device bytes against the 3 % goal."""

import dataclasses
import sys
from pathlib import Path

import pytest

from companion.ground import results

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_state_offload  # noqa: E402  (the committed set: one list, not a copy)

DATA, FOUND = results.load(ROOT / "benchmarks" / "results" / "state_offload.json")


def test_the_state_offload_set_is_stored_whole_and_its_host_bytes_are_exact():
    assert FOUND.fresh, FOUND.line()
    stored = [(r["model"], r["target"], r["batch"], r["seq"], r["state"]) for r in DATA["results"]]
    committed = [(c.model, c.target, c.batch, c.seq, dataclasses.asdict(c.state)) for c in bench_state_offload.CASES]
    assert stored == committed
    assert all(abs(r["host_error_pct"]) < 1e-4 for r in DATA["results"])


@pytest.mark.xfail(strict=True, reason="issue 52: before the fix the budget of state offload is 3 to 13 % off on 7 of "
                                       "the 10 configurations (8B with both on the host: 13 % under)")
def test_the_budget_is_within_3_percent_where_the_state_lives_on_the_host():
    assert all(abs(r["device_error_pct"]) <= DATA["goal_pct"] for r in DATA["results"])
