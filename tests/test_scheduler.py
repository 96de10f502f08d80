"""XLA's latency-hiding scheduler as the lab sees it: its estimated schedule (the dump), its memory
limit (equal to a GPU run's), and reports that do not depend on the user's log settings."""

import json
import os
import subprocess
import sys

import pytest

from companion import compiler, dump, hlo, models, roofline, schedule, targets, train

STACK = models.config("llama3.1-8b", num_layers=2)


@pytest.fixture(scope="module", params=["h100", "b200"])
def compiled(request):
    target = targets.target(request.param, "1x8")
    report = train.compile_layer_stack(STACK, "minimal_offloaded", compiler.place(target), 8, 4096, dump=True)
    return target, report


def test_the_schedule_dump_is_read_per_computation(compiled):
    _, r = compiled
    schedule = r.dump.schedule
    assert isinstance(schedule, dump.LhsSchedule) and schedule.computations
    for comp in schedule.computations.values():
        assert comp.ops and comp.total_us > 0 and "total_cycles" in comp.statistics
        assert all(op.end >= op.start >= 0 for op in comp.ops)
    names = {i.name for i in hlo.parse_module(r.dump.module_text).instructions()}
    scheduled = [op.name for op in schedule.ops()]
    # the scheduler's names are the module's (jaxlib 0.12: 75 % of them; passes after scheduling rename the rest)
    assert sum(n in names for n in scheduled) >= 0.7 * len(scheduled)


def test_a_large_matmul_is_priced_within_2x_of_its_roofline(compiled):
    """With the matrix-unit rate table in the target config, XLA's cost model sees tensor-core FLOP/s."""
    target, r = compiled
    costs = {c.name: c for c in hlo.op_costs(hlo.parse_module(r.dump.module_text))}
    ops = {op.name: op for op in r.dump.schedule.ops()}
    matmuls = [c for name, c in costs.items() if name in ops and c.dtype == "bf16" and c.flops > 1e11]
    assert matmuls
    biggest = max(matmuls, key=lambda c: c.flops)
    ratio = ops[biggest.name].cost / (roofline.op_seconds(biggest, target.gpu) * 1e6)
    assert 0.5 <= ratio <= 2.0, (biggest.name, ratio)


def test_host_transfers_get_a_fixed_latency_not_bytes_over_bandwidth(compiled):
    _, r = compiled
    transfers = {t.name: t for t in r.offload.transfers}
    spans: dict[int, list[float]] = {}
    for comp in r.dump.schedule.computations.values():
        for start, done in comp.async_spans():
            if start.name in transfers:
                spans.setdefault(transfers[start.name].bytes_per_execution, []).append(done.end - start.start)
    assert len(spans) >= 2  # transfers of different sizes...
    assert min(min(s) for s in spans.values()) == pytest.approx(5000, abs=1)  # ...never shorter than 5 ms
    sizes_at_latency = [size for size, s in spans.items() if min(s) == pytest.approx(5000, abs=1)]
    assert len(sizes_at_latency) >= 2  # the same 5000 us whatever the bytes


_LIMIT_SCRIPT = """
import json, companion
from companion import compiler, models, targets, train
out = []
for fraction in (0.75, 0.9):
    t = targets.target("h100", "1x2", mem_fraction=fraction)
    r = train.compile_layer_stack(models.config("tiny-llama"), "minimal_offloaded", compiler.place(t), 16, 512)
    out.append({"fraction": fraction, "formula": r.scheduler_limit_bytes, "logged": r.logged_scheduler_limit_bytes,
                "usable": r.usable_hbm_bytes, "args": r.device.argument_bytes, "outputs": r.device.output_bytes,
                "alias": r.device.alias_bytes, "summary": r.summary()})
print(json.dumps(out))
"""


def _run(script: str, **env) -> list:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compile_only_scheduler_limit_equals_the_on_gpu_formula_and_xlas_log():
    """(mem_fraction x HBM - arguments - outputs) x 95 %: what the scheduler logs ("Current limit")."""
    rows = _run(_LIMIT_SCRIPT, TF_CPP_MIN_LOG_LEVEL="0")
    for row in rows:
        io = row["args"] + row["outputs"] - row["alias"]
        assert row["usable"] == targets.allocator_limit_bytes(targets.gpu("h100").hbm_bytes, row["fraction"])
        assert row["formula"] == (row["usable"] - io) * 95 // 100
        assert row["logged"] == row["formula"]
    assert rows[1]["logged"] > rows[0]["logged"]


def test_reports_do_not_depend_on_the_users_log_level():
    quiet = _run(_LIMIT_SCRIPT, TF_CPP_MIN_LOG_LEVEL="3")
    loud = _run(_LIMIT_SCRIPT, TF_CPP_MIN_LOG_LEVEL="0")
    assert [r["summary"] for r in quiet] == [r["summary"] for r in loud]
    assert [r["formula"] for r in quiet] == [r["formula"] for r in loud]
    assert all(r["logged"] is None for r in quiet)  # XLA's INFO line is simply absent there


def test_xla_whole_step_is_the_entry_plus_each_loop_body_times_its_trips():
    """XLA's dump totals the entry with every ``while`` at ~0: the step row counts the bodies by their trips."""
    target = targets.target("h100", "1x8")
    r = train.compile_layer_stack(models.config("llama3.1-8b", num_layers=8), "minimal_offloaded",
                                  compiler.place(target), 8, 4096, dump=True)
    sim = schedule.prepare(r, target)
    rows = schedule.compare_with_xla(sim, sim.run(max_events=0), r.dump.schedule)
    step, entry = rows[0], next(x for x in rows if x.role.startswith("entry"))
    bodies = {x.computation: x.xla_us for x in rows if x.role.startswith("loop")}
    loops = [(op.called[0], op.trips) for op in sim.program[sim.module.entry] if op.action == "while"]
    assert loops and max(trips for _, trips in loops) > 1
    assert not any(op.action == "while" for body, _ in loops for op in sim.program[body])  # one level deep
    assert step.xla_us == pytest.approx(entry.xla_us + sum(trips * bodies[body] for body, trips in loops))
    assert step.xla_us > entry.xla_us * 1.5 and entry.simulated_us is None
    assert step.simulated_us == pytest.approx(sim.run(max_events=0).step_seconds * 1e6)
