"""The long sequences one TPU v5e trains (issue 54, ``bench_measured.py --part long``): the stored result is the
chip's parts merged, its table of the longest sequence per policy follows from the verdicts, and it says what the
chip said — offloading the context, the projections or the layer input trains a longer sequence than full remat,
and where both train, full remat is the faster."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_measured  # noqa: E402
from companion import results  # noqa: E402

STORED, PARTS = ROOT / "benchmarks" / "results" / "measured_long.json", sorted(
    (ROOT / "benchmarks" / "results" / "parts").glob("measured_long-*.json"))


def _stored() -> dict:
    data, fresh = results.load(STORED)
    assert fresh.fresh, fresh.line()
    return data


def test_every_long_step_has_the_chips_verdict_and_the_table_follows_from_the_parts():
    data = _stored()
    assert {r["key"] for r in data["steps"]} == {s.key for s in bench_measured.LONG}
    parts = [json.loads(p.read_text()) for p in PARTS]
    assert data["longest"] == bench_measured.longest(parts)
    status = {r["key"]: r["verdict"]["status"] for r in data["steps"]}
    for policy, row in data["longest"].items():  # a policy trains every sequence up to its longest, none beyond
        seqs = sorted(s.seq for s in bench_measured.LONG if s.policy == policy)
        ran = [status[bench_measured.Step(2, 1, q, policy).key] == "runs" for q in seqs]
        assert ran == [q <= row["longest_trained"] for q in seqs], policy
        assert row["shortest_not"] == min(q for q in seqs if q > row["longest_trained"])


def test_offload_trains_a_longer_sequence_than_full_remat_which_is_faster_where_both_train():
    data = _stored()
    longest = {p: row["longest_trained"] for p, row in data["longest"].items()}
    assert all(longest[p] > longest["full"] for p in ("context_offload", "qkv_offload", "input_offload"))
    median = {r["key"]: r["timing"]["median"] for r in data["steps"] if "timing" in r}
    for seq in (24576, 28672):
        full = median[f"L2-B1-S{seq}-full"]
        others = [t for k, t in median.items() if k.startswith(f"L2-B1-S{seq}-") and not k.endswith("-full")]
        assert others and full < min(others), seq
    # the run-to-run spread of the repeated steps (two processes) is far below the gaps between policies
    assert max(r["spread"] for r in data["steps"] if r.get("spread") is not None) < 0.002
