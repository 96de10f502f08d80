"""The budget's behaviour pinned: ``estimate(...).to_dict()`` for every ``bench_budget`` configuration,
compared byte for byte with ``tests/data/budget_golden.json`` (written before a refactor of
``companion/memory/budget/``, kept to prove it changed nothing). After a change that is meant to move the
budget, rewrite it with ``python tests/test_budget_golden.py --write`` and say why in the commit."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "budget_golden.json"
sys.path.insert(0, str(ROOT / "benchmarks"))


def current() -> dict[str, dict]:
    import bench_budget  # the benchmark's configurations: one list, not a copy

    from companion import budget, sharding, targets

    out = {}
    for case in bench_budget.GRID:
        target = targets.target(case.target)
        mesh = sharding.parse_mesh(case.mesh, target.num_devices)
        key = json.dumps([case.model, case.overrides, case.moe, case.policy, case.batch, case.seq, case.target,
                          case.mesh, str(case.state), case.flags], sort_keys=True, default=str)
        est = budget.estimate(case.config(), case.batch, case.seq, case.policy, mesh, target=target,
                              state=case.state, flags=case.flags)
        out[key] = est.to_dict()
    return out


def dumps(table: dict) -> str:
    return json.dumps(table, indent=1, sort_keys=True, default=str) + "\n"


def test_the_budget_matches_its_golden_file():
    assert GOLDEN.exists(), "no golden file: python tests/test_budget_golden.py --write"
    now = dumps(current())
    golden = GOLDEN.read_text()
    if now != golden:
        before, after = json.loads(golden), json.loads(now)
        changed = [k for k in after if before.get(k) != after[k]] + [k for k in before if k not in after]
        raise AssertionError(f"{len(changed)} of {len(after)} budgets changed, first: {changed[:2]}")


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.write_text(dumps(current()))
    print(f"wrote {GOLDEN.relative_to(ROOT)}")
