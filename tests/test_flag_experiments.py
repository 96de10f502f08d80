"""Flag experiments, the lab's latency profile for XLA's scheduler, and exporting a flag set."""

import json
import shlex
import statistics

import pytest

from companion import bands, cli, compiler, experiments, flags, hlo, models, pgle, schedule, targets, train

STACK = models.config("llama3.1-8b", num_layers=4)
B, S = 8, 4096
LHS_OFF = "--xla_gpu_enable_latency_hiding_scheduler=false"
SOL_OFF = "--xla_gpu_enable_analytical_sol_latency_estimator=false"


@pytest.fixture(scope="module")
def placement():
    return compiler.place(targets.target("h100", "1x8"))


def _compile(placement, **kwargs):
    def compile_fn(flag_set):
        return train.compile_layer_stack(STACK, "minimal_offloaded", placement, B, S, flags=flag_set, **kwargs)
    return compile_fn


@pytest.fixture(scope="module")
def lhs_runs(placement):
    return experiments.run(_compile(placement), {"maxtext": None, "lhs flag off": LHS_OFF,
                                                 "lhs off": f"{LHS_OFF} {SOL_OFF}"})


def test_lhs_off_moves_the_host_transfers_and_the_simulator_prices_it(lhs_runs):
    base, flag_only, off = lhs_runs

    def placement_of(run):
        return [(c.name, c.kernels_between) for c in schedule.transfer_cover(run.simulator)]

    # jaxlib 0.12: the flag alone turns the scheduler off on Hopper (at 0.10.2 the speed-of-light estimator turned
    # it back on, and the flag alone changed nothing): transfers sit elsewhere, the replay prices it
    assert placement_of(flag_only) != placement_of(base)
    assert flag_only.simulation.step_seconds != pytest.approx(base.simulation.step_seconds, rel=1e-3)
    # with that estimator off too, the scheduler is off as well
    assert placement_of(off) != placement_of(base)
    assert off.simulation.step_seconds != pytest.approx(base.simulation.step_seconds, rel=1e-3)
    assert off.changed == {"xla_gpu_enable_analytical_sol_latency_estimator": False,
                           "xla_gpu_enable_latency_hiding_scheduler": False}
    row = base.row()
    assert row["changed"] == "(baseline)" and row["host GiB"] > 0 and row["step ms"] > 0
    # ranked against the baseline with the paired band: the same schedule ties (the band is the method's error
    # alone); at jaxlib 0.12 both scheduler-off steps differ by more than that error, and rank behind the baseline
    ranked = experiments.rows(lhs_runs)
    e = bands.PAIRED_MODEL_ERROR
    assert ranked[0]["vs baseline"] == "-"
    assert bands.rank(base.sweep, base.sweep).short().startswith(f"tie ({1 / (1 + e):.3f}-{1 / (1 - e):.3f})")
    for run in (flag_only, off):
        assert not bands.rank(run.sweep, base.sweep).tie and bands.rank(run.sweep, base.sweep).ratio < 1
    # the change is split by cause, and the parts add up to it
    parts = off.attribution(base)
    assert sum(parts.values()) == pytest.approx(off.simulation.step_seconds - base.simulation.step_seconds, abs=1e-12)
    assert parts["transfers"] == pytest.approx(off.simulation.exposed_transfer_seconds
                                               - base.simulation.exposed_transfer_seconds)
    assert ranked[0]["change ms: transfers / collectives / rest"] == "-"
    assert ranked[2]["change ms: transfers / collectives / rest"].count(" / ") == 2
    # steady state: a layer's forward and backward inside the loops, less than the step's share per layer
    # (the entry computation adds the layers XLA peels and the transfers it leaves outside the loops)
    per_layer = base.seconds_per_layer(STACK.num_layers)
    assert 0 < per_layer * STACK.num_layers < base.simulation.step_seconds
    assert experiments.rows(lhs_runs, layers=STACK.num_layers)[0]["ms per layer (steady)"] == round(per_layer * 1e3, 2)


def test_layers_per_iteration_are_read_off_the_loop_body_not_the_trips(placement):
    """16 layers: MaxText's double buffering puts two layers in each loop iteration, and pipelined host offload
    peels a second backward iteration into the entry, so that loop runs 6 trips of 2 layers (4 outside it) —
    16 / 6 rounds to 3. The layers an iteration holds come from its matmuls; XLA's own clone names agree."""
    deep = models.config("llama3.1-8b", num_layers=16)
    runs = experiments.run(lambda fs: train.compile_layer_stack(deep, "minimal_offloaded", placement, B, S, flags=fs),
                           {"maxtext": None, "pipelined": "--xla_gpu_enable_pipelined_host_offloading=true",
                            "no double buffering": "--xla_gpu_enable_while_loop_double_buffering=false"})
    naive, pipelined, single = runs
    assert [lp.trips for lp in hlo.loops(pipelined.report.module)] == [7, 6]
    for run, held in ((naive, 2), (pipelined, 2), (single, 1)):
        module = run.report.module
        for loop, layers in run.loop_layers(deep.num_layers):
            assert layers == held and loop.trips * layers <= deep.num_layers
            # the double-buffered body is the layer and XLA's clone of it: half its matmul kernels are clones
            matmuls = [i for i in module.computations[loop.body].instructions if hlo.dot_flops(module, i)]
            clones = sum(".double_buffer_clone" in i.name for i in matmuls)
            assert matmuls and clones * held == len(matmuls) * (held - 1)
        steady = sum(run.simulation.loop_iteration_seconds[lp.body] / held for lp in hlo.loops(module))
        assert run.seconds_per_layer(deep.num_layers) == pytest.approx(steady, rel=1e-12)
    rows = experiments.rows(runs, layers=deep.num_layers)
    assert [r["loops: trips x layers"] for r in rows] == ["7x2, 7x2", "7x2, 6x2", "15x1, 14x1"]
    # per layer, the pipelined loops' gain over MaxText's is what their iterations say, two layers each
    gain = naive.seconds_per_layer(16) / pipelined.seconds_per_layer(16)
    assert gain == pytest.approx(sum(naive.simulation.loop_iteration_seconds.values())
                                 / sum(pipelined.simulation.loop_iteration_seconds.values()))


def test_experiments_validate_every_flag_set_before_compiling():
    calls = []
    with pytest.raises(ValueError, match="xla_gpu_enable_latency_hidng"):
        experiments.run(lambda fs: calls.append(fs), {"ok": None, "typo": "--xla_gpu_enable_latency_hidng_scheduler=true"})
    assert calls == []
    with pytest.raises(ValueError, match="no flag sets"):
        experiments.run(lambda fs: None, {})


def test_a_profile_from_the_link_model_is_read_by_xlas_scheduler(placement, tmp_path):
    first = _compile(placement, dump=True)(flags.resolve("--xla_gpu_enable_pipelined_host_offloading=true"))
    sim = schedule.prepare(first)
    profile = pgle.write(sim, tmp_path / "profile.pbtxt")
    assert profile.transfers == first.offload.d2h_ops + first.offload.h2d_ops and profile.kernels > 100
    assert pgle.read(profile.path) == pytest.approx(profile.costs_us, abs=1e-3)
    transfers = {c.name for c in schedule.transfer_cover(sim)}
    before = pgle.scheduler_transfer_costs(first.dump.schedule, transfers)
    # at least XLA's constant 5000 µs, whatever the bytes (more where it placed the done later than needed)
    assert before and min(before.values()) > 4999 and statistics.median(before.values()) < 5100
    spec = f"--xla_gpu_enable_pipelined_host_offloading=true {profile.flag_string()}"
    second = _compile(placement, dump=True)(flags.resolve(spec))
    after = pgle.scheduler_transfer_costs(second.dump.schedule, transfers)
    ours = {c.name: c.transfer_seconds * 1e6 for c in schedule.transfer_cover(sim)}
    # with the profile XLA's own timeline charges each transfer the link's time (at least the profile's cost, more
    # where it placed the done later than needed) instead of its constant: the profile names every op the second
    # compile's scheduler asks for, jaxlib 0.12's renamed ones and async device copies included (none missing)
    assert set(after) == set(before) and all(after[n] >= 0.98 * ours[n] for n in after)
    assert min(after.values()) < 4999 and statistics.median(after.values()) < statistics.median(before.values())
    assert profile.async_copies > 0 and not [w for w in second.compiler_warnings if "Missing" in w]
    # its accuracy checker reads the file: drop the entries of the transfers' waits and it lists them
    partial = tmp_path / "partial.pbtxt"
    partial.write_text("".join(f'costs {{ name: "{n}" cost_us: {us} }}\n' for n, us in profile.costs_us.items()
                               if "-done" not in n))
    third = _compile(placement)(flags.resolve(f"--xla_gpu_enable_pipelined_host_offloading=true "
                                              f"--xla_gpu_pgle_profile_file_or_directory_path={partial} "
                                              "--xla_gpu_pgle_accuracy_checker=PGLE_STRICTNESS_LEVEL_WARN"))
    log = "\n".join(third.compiler_warnings)
    assert "Found" in log and "Missing" in log and "dynamic-slice-done" in log
    resimulated = schedule.prepare(second).run()
    moved = [(c.name, c.kernels_between) for c in schedule.transfer_cover(schedule.prepare(second))] != \
            [(c.name, c.kernels_between) for c in schedule.transfer_cover(sim)]
    assert moved or resimulated.step_seconds != pytest.approx(sim.run().step_seconds, rel=1e-3)


def test_profile_path_must_be_text(placement, tmp_path):
    sim = schedule.prepare("HloModule m\n\nENTRY %e (a: f32[4]) -> f32[4] {\n  ROOT %a = f32[4]{0} parameter(0)\n}\n",
                           "h100:1x8")
    with pytest.raises(ValueError, match=".pbtxt"):
        pgle.write(sim, tmp_path / "profile.pb")


def test_export_gives_flags_options_and_environment():
    flag_set = flags.resolve("--xla_gpu_enable_pipelined_host_offloading=true")
    out = flags.export(flag_set, mem_fraction=0.9, host_pool_gib=128, optimization_level="O1")
    assert flags.parse(out["XLA_FLAGS"]) == flag_set.flags
    assert out["compiler_options"]["xla_gpu_enable_pipelined_host_offloading"] is True
    assert out["env"] == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9", "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "128",
                          "JAX_OPTIMIZATION_LEVEL": "O1"}
    assert shlex.split(out["shell"])[-1] == f"XLA_FLAGS={out['XLA_FLAGS']}"


@pytest.mark.parametrize("kwargs, message", [({"mem_fraction": 1.5}, "outside"), ({"host_pool_gib": 1.5}, "whole"),
                                             ({"optimization_level": "O9"}, "O0, O1")])
def test_export_refuses_bad_environment(kwargs, message):
    with pytest.raises(ValueError, match=message):
        flags.export(flags.resolve(), **kwargs)


def test_differences_name_what_changed():
    base, other = flags.resolve(), flags.resolve("--xla_gpu_memory_limit_slop_factor=80")
    assert flags.differences(base, other) == {"xla_gpu_memory_limit_slop_factor": 80}
    assert flags.differences(base, base) == {}


def test_cli_compare(capsys):
    argv = ["flags", "--compare", "maxtext_gpu", "--xla_gpu_experimental_parallel_async_compute_limit=4",
            "--model", "tiny-llama", "--target", "h100:1x2", "--batch", "4", "--seq", "128",
            "--policy", "minimal_offloaded", "--json"]
    assert cli.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["flag set"] for r in rows] == ["maxtext_gpu", "--xla_gpu_experimental_parallel_async_compute_limit=4"]
    assert rows[1]["changed"] == "xla_gpu_experimental_parallel_async_compute_limit=4"
    assert all(r["simulation"]["step_seconds"] > 0 for r in rows)


def test_cli_compare_needs_a_step_and_valid_flags(capsys):
    assert cli.main(["flags", "--compare", "none"]) == 1
    assert "--model" in capsys.readouterr().err
    assert cli.main(["flags", "--compare", "--xla_bogus=1", "--model", "tiny-llama", "--batch", "4", "--seq", "8"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "xla_bogus" in err


def test_jax_optimization_level_travels_as_a_build_option():
    flag_set = flags.resolve("--jax_optimization_level=O1")
    assert flag_set.compiler_options()["optimization_level"] == 19
    assert "jax_optimization_level" not in flag_set.xla_flags()
    assert flags.export(flag_set)["env"]["JAX_OPTIMIZATION_LEVEL"] == "O1"
    with pytest.raises(ValueError, match="O0, O1"):
        flags.resolve("--jax_optimization_level=fast")


def test_o1_turns_on_loop_and_collective_passes_and_pipelined_offload(placement):
    """O1 on XLA's defaults changes the loops and the collectives (unrolling, pipelined collectives); at jaxlib
    0.12 it also runs pipelined host offload (openxla/xla #45393, after 0.10.2, where it stayed opt-in after
    #37979): adding its flag to O1 changes neither the loops nor the reads."""
    none, o1, o1_pipelined = experiments.run(_compile(placement), {
        "xla defaults": "none", "O1": "none --jax_optimization_level=O1",
        "O1 + pipelined offload": "none --jax_optimization_level=O1 --xla_gpu_enable_pipelined_host_offloading=true"})
    assert o1.changed == {"jax_optimization_level": "O1"}
    assert sum(o1.report.collectives.counts.values()) > sum(none.report.collectives.counts.values())
    assert [lp.trips for lp in hlo.loops(o1.report.module)] != [lp.trips for lp in hlo.loops(none.report.module)]
    assert [lp.carried for lp in hlo.loops(o1_pipelined.report.module)] == [lp.carried for lp in hlo.loops(o1.report.module)]
    assert o1_pipelined.report.offload.h2d_ops == o1.report.offload.h2d_ops
    assert o1.report.offload.h2d_ops != none.report.offload.h2d_ops  # ... and O1 pipelines what none does not


def test_the_analytical_estimator_is_refused_not_an_abort():
    """XLA would abort the process (a CHECK failure): the lab says why instead, before compiling — at jaxlib
    0.12 on every step, at 0.10.2 on a step that offloads (``compiler.ANALYTICAL_ESTIMATOR_ABORTS``)."""
    placement = compiler.place(targets.target("h100", "1x2"))
    spec = "--xla_gpu_enable_analytical_latency_estimator=true"
    with pytest.raises(ValueError, match="aborts XLA"):
        train.compile_layer_stack("tiny-llama", "minimal_offloaded", placement, 4, 64, flags=spec)
    with pytest.raises(ValueError, match=r"aborts XLA \(jaxlib 0.12.0.1\) on every step"):
        train.compile_layer_stack("tiny-llama", "full", placement, 4, 64, flags=spec)
    assert compiler.ANALYTICAL_ESTIMATOR_ABORTS == {"0.10.2": "offloading", "0.12.0.1": "every"}


def test_pipelining_conditions_read_off_the_naive_compile(lhs_runs, placement):
    """The four conditions: a 4-layer stack's loops run once (no gain expected); at 16 layers they hold
    for the reads (the naive schedule exposes more of them than the link forces) and the headroom, and the
    pipelined compile is faster, as the conditions say."""
    from companion import pipelining

    base = lhs_runs[0]
    short = pipelining.conditions(base.report, base.simulator, base.simulation, STACK.num_layers)
    assert short.trips.measured == "1 trips" and not short.trips.holds and not short.expect_gain
    deep = models.config("llama3.1-8b", num_layers=16)
    naive, pipelined = (train.compile_layer_stack(deep, "minimal_offloaded", placement, B, S, flags=f)
                        for f in (None, "--xla_gpu_enable_pipelined_host_offloading=true"))
    sim = schedule.prepare(naive)
    found = pipelining.conditions(naive, sim, sim.run(), deep.num_layers)
    assert found.exposed.holds and found.trips.holds and found.reads.holds and found.headroom.holds and found.expect_gain
    # the writes' link time: one forward iteration's bytes over the link's per-GPU bandwidth at each transfer's
    # engine's rate (jaxlib 0.12: copy-engine memcpys in the loop; 0.10.2's workaround made them kernels)
    fwd, link = hlo.loops(naive.module)[0], sim.target.link
    written = [t for t in naive.offload.transfers if t.computation == fwd.body and t.direction == "d2h"]
    assert written and {t.engine for t in written} == {"copy_engine"}
    seconds = sum(t.bytes_per_execution / link.bandwidth_per_gpu("d2h", engine=t.engine) for t in written)
    assert found.writes.measured.startswith(f"{seconds * 1e3:.1f} ms on the link")
    assert seconds == pytest.approx(sum(t.bytes_per_execution for t in written) / link.bandwidth_per_gpu("d2h"))
    # the naive schedule exposes more of the reads than the link forces: the excess is what pipelining wins, and
    # the pipelined compile is faster
    replay = sim.run()
    assert found.reads.measured.startswith(f"{replay.exposed_transfer_excess['h2d'] * 1e3:,.0f} ms exposed beyond")
    assert schedule.simulate(pipelined).step_seconds < sim.run(max_events=0).step_seconds
    assert set(found.row()) == {"transfers to win", "enough loop trips", "reads a schedule could hide", "writes < forward compute",
                                "headroom for a carried layer", "expect a gain"}
    with pytest.raises(ValueError, match="no host transfers"):
        pipelining.conditions(train.compile_layer_stack(STACK, "full", placement, B, S), sim, sim.run(), 4)
