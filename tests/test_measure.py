"""companion.measure's logic without a chip (timing, spread, verdicts, the filler bisection, the A/B, a stored TPU
trace), the measure command's refusal, and the stored measurements of the lent TPU v5e (benchmarks/results/measured.json)."""

import lzma
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import companion  # noqa: F401
from companion import compiler, measure, measured, models, targets, train

import cpu  # noqa: E402  (tests/cpu.py: the numerics tests' quick CPU codegen)

DATA = Path(__file__).parent / "data"


def test_time_step_times_only_the_calls_after_the_warmup_and_threads_the_state():
    ticks = iter(range(100))
    calls = []

    def step(x):
        calls.append(x)
        return x + 1

    timing, out = measure.time_step(step, (jnp.int32(0),), steps=3, warmup=2, carry=lambda args, out: (out,),
                                    clock=lambda: next(ticks))
    assert [int(c) for c in calls] == [0, 1, 2, 3, 4] and int(out) == 5  # each call got the previous output
    assert timing.seconds == (1, 1, 1) and timing.warmup == 2 and timing.median == 1
    with pytest.raises(ValueError, match="steps must be >= 1"):
        measure.time_step(step, (0,), steps=0)


def test_spread_is_the_range_of_process_medians_over_their_median():
    assert measure.spread([1.0, 1.01, 0.99]) == pytest.approx(0.02)
    assert measure.spread([2.0]) == 0.0
    with pytest.raises(ValueError):
        measure.spread([])


def test_out_of_memory_is_a_verdict_and_anything_else_is_not():
    runtime = RuntimeError("RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 2.00G")
    assert measure.is_out_of_memory(runtime) and not measure.is_out_of_memory(ValueError("shapes do not match"))
    verdict = measure.verdict_of(runtime, "execute")
    assert verdict.status == "does_not_fit" and verdict.stage == "execute" and "2.00G" in verdict.message
    refused = compiler.DoesNotFit("does NOT fit", "tpu-v5e:1x1", 20 * 2**30, 15 * 2**30, None, 1.0)
    assert measure.is_out_of_memory(refused) and measure.verdict_of(refused, "compile").needed_bytes == 20 * 2**30


def test_peak_by_filler_bisects_to_the_largest_filler_the_step_runs_beside(monkeypatch):
    limit, footprint = 16 * 2**30, 9 * 2**30 + 300 * 2**20
    held = {"bytes": 0}

    def put(array, device):  # a fake device: allocating the filler just records its size
        held["bytes"] = array.nbytes
        return array

    monkeypatch.setattr(measure.jax, "device_put", put)
    monkeypatch.setattr(measure.np, "zeros", lambda n, dtype: type("A", (), {"nbytes": n})())

    def run():
        if held["bytes"] + footprint > limit:
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")
        return jnp.zeros(())

    peak = measure.peak_by_filler(run, limit, resolution=64 * 2**20, device=jax.devices()[0])
    assert peak.largest_filler_bytes + footprint <= limit < peak.largest_filler_bytes + 64 * 2**20 + footprint
    assert peak.footprint_bytes - footprint < 64 * 2**20 and peak.runs <= 10


def test_ab_finds_no_difference_between_an_offloading_policy_and_its_device_twin():
    cfg = models.config("tiny-llama").replace(num_layers=1)
    runs = [cpu.jit(jax.value_and_grad(train.trainer(cfg, p).loss)) for p in ("qkv_proj_offloaded", "save_qkv_proj")]
    _, params, rest, _ = train.init(cfg)
    result = measure.ab(*runs, (params, rest, train.synthetic_batch(cfg, 2, 16)))
    assert result.finite and result.loss_diff == 0.0 and result.relative < 1e-6 and result.max_grad > 0
    different = measure.ab(runs[0], lambda p, r, b: jax.tree.map(lambda x: x * 1.5, runs[1](p, r, b)),
                           (params, rest, train.synthetic_batch(cfg, 2, 16)))
    assert different.loss_diff > 0 and different.relative > 0.1  # a wrong gradient is seen


def test_a_stored_tpu_trace_reduces_to_leaf_ops_and_their_classes():
    trace = measure.read_trace(lzma.decompress((DATA / "tpu_v5e_tiny_llama.xplane.pb.xz").read_bytes()))
    assert trace.plane == "/device:TPU:0" and trace.steps == 1
    assert 0 < trace.busy_seconds < trace.span_seconds  # leaf ops only: loops' own events span their bodies
    assert not any(name.startswith("%while") for name in trace.op_seconds)
    assert trace.class_seconds["fusion:kOutput"] > 0 and "unknown" not in trace.class_seconds
    assert trace.transfer_seconds == {} and trace.overlap == 1.0  # full remat moves nothing to the host
    waits = sum(v for k, v in trace.class_seconds.items() if measure.is_wait(k.split(":")[0]))
    assert 0 <= trace.wait_seconds <= waits  # *-done events are the cores waiting, not busy
    assert measure.is_wait("async-done") and measure.is_wait("copy-done") and not measure.is_wait("copy-start")


def test_host_transfers_are_read_from_the_event_text_by_memory_space_5():
    d2h = ("%dynamic-update-slice-start = ((bf16[4,4,2048,16,128]{2,4,3,1,0:T(8,128)(2,1)S(5)}, "
           "bf16[1,4,2048,16,128]{2,4,3,1,0:T(8,128)(2,1)}, s32[]{:T(128)}), bf16[4,4,2048,16,128]{2,4,3,1,0:T(8,128)"
           "(2,1)S(5)}, u32[]{:S(2)}) dynamic-update-slice-start(%a, %b, %c)")
    h2d = ("%dynamic-slice-start = ((bf16[4,4,2048,16,128]{2,4,3,1,0:T(8,128)(2,1)S(5)}, s32[]{:T(128)}), "
           "bf16[1,4,2048,16,128]{2,4,3,1,0:T(8,128)(2,1)}, u32[]{:S(2)}) dynamic-slice-start(%a, %b)")
    prefetch = ("%copy-start.1 = (f32[2,64]{1,0:T(2,128)S(1)}, f32[2,64]{1,0:T(2,128)}, u32[]{:S(2)}) "
                "copy-start(f32[2,64]{1,0:T(2,128)} %p)")
    layer = 4 * 2048 * 16 * 128 * 2
    assert (measure._event(d2h, 0, 1000).direction, measure._event(d2h, 0, 1000).host_bytes) == ("d2h", layer)
    assert (measure._event(h2d, 0, 1000).direction, measure._event(h2d, 0, 1000).host_bytes) == ("h2d", layer)
    assert measure._event(prefetch, 0, 10).direction == ""  # into VMEM (S(1)), not the host


def test_measure_refuses_in_one_line_without_an_accelerator():
    out = subprocess.run([sys.executable, "-m", "companion", "measure", "--model", "tiny-llama"],
                         capture_output=True, text=True)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert "measure runs a step on a local TPU or GPU" in out.stderr


def test_the_stored_chip_measurements_hold_together():
    m = measured.load()
    for env in m.sessions:
        assert env["device_kind"] == "TPU v5 lite" and env["jax"] == env["jaxlib"] == "0.10.2" and env["libtpu"]
        assert len(env["stamp"]["companion_source"]) == 16 and len(env["commit"]) == 40
    assert len(m.sessions) == 6 and m.environment == m.sessions[0]
    assert sum(s.fresh for s in m.steps) == 23  # the sixth session: bench_measured.FRESH, every step of it ran
    ran = [s for s in m.steps if s.runs]
    assert len(ran) >= 24 and len(m.steps) > len(ran)
    for s in ran:
        timing, usable = s.record["timing"], s.record["compile"]["usable_hbm_bytes"]
        assert timing["min"] <= s.seconds <= timing["max"] and len(timing["seconds"]) >= 3
        assert s.compiled_peak_bytes <= usable
        assert (s.host_bytes > 0) == ("offload" in s.policy or s.optimizer_offload)
        # XLA:TPU recomputed on its own (``.remat`` clones) only where its plan met the limit: the S 32K steps and
        # full remat with optimizer offload at its largest batch (B 37: 99.7 % of usable HBM)
        near_limit = s.compiled_peak_bytes > 0.99 * usable
        assert (s.record["compile"]["xla_rematerialized"] > 0) == (s.seq == 32768 or near_limit)
    for s in m.steps:  # refused at compile, or compiled over usable HBM and (rightly) not run
        if not s.runs:
            assert s.record["verdict"] == {**s.record["verdict"], "status": "does_not_fit", "stage": "compile"}
            assert (s.compiled_peak_bytes or s.needed_bytes) > s.record["compile"].get("usable_hbm_bytes", 15 * 2**30)
    repeated = [s for s in m.steps if s.spread is not None]
    assert len(repeated) >= 10 and all(len(s.record["process_medians"]) >= 2 for s in repeated)
    assert m.spread == max(s.spread for s in repeated) < 0.01  # step times repeat across processes and sessions
    assert m.notes  # what the sessions could not measure is said with the result
    # the fourth session traced the long sequences per op: every op's seconds per step, the small ones summed,
    # add up to the leaf ops' time in the trace (its per-class seconds less the host transfers in flight)
    traced = [s for s in ran if s.op_seconds]
    assert {s.key for s in traced} == {"L4-B2-S8192-full", "L4-B2-S8192-full+pallas", "L4-B1-S16384-full",
                                       "L2-B1-S32768-qkv_offload"}
    for s in traced:
        ops, classes = s.record["trace_ops"], s.record["trace"]["class_seconds"]
        leaves = sum(v for k, v in classes.items() if not k.startswith("host_")) / s.record["trace"]["steps"]
        assert sum(s.op_seconds.values()) + ops["other_seconds"] == pytest.approx(leaves, rel=1e-6)
        assert all(not name.startswith("%") for name in s.op_seconds)  # HLO names, as the compile prints them
    first = m.step("L4-B8-S2048-full")
    assert first.flash_kernel == "jax" and m.step("L4-B8-S2048-full+pallas").flash_kernel == "fused"


def _limit_share(s) -> float:
    return (s.compiled_peak_bytes or s.needed_bytes) / s.record["compile"].get("usable_hbm_bytes", measured.USABLE_HBM_BYTES)


def test_the_grid_meets_its_counts_near_the_limit_and_across_it():
    m = measured.load()
    near = [s for s in m.steps if abs(_limit_share(s) - 1) <= 0.05]
    assert sum(s.runs for s in near) >= 5 and len(near) >= 6
    by_shape = {}
    for s in m.steps:
        by_shape.setdefault((s.layers, s.batch, s.seq, s.flash_kernel, s.flags, s.optimizer_offload), {})[s.policy] = s
    pairs = [(device, offload) for device, offload in (("minimal", "minimal_offloaded"), ("qkv_device", "qkv_offload"),
                                                        ("mlp_device", "mlp_offload"), ("context_device", "context_offload"))
             for shape in by_shape.values() if device in shape and offload in shape
             and not shape[device].runs and shape[offload].runs]
    assert len(pairs) >= 4  # the device-saving policy does not fit where offloading the same tensors does
    largest = [(p, b) for (layers, b, seq, kernel, flags, opt), shape in by_shape.items() for p, s in shape.items()
               if (layers, seq, kernel, flags) == (4, 2048, "jax", None) and s.runs
               and p in by_shape.get((4, b + 1, 2048, "jax", None, opt), {}) and not by_shape[(4, b + 1, 2048, "jax", None, opt)][p].runs]
    assert len(largest) >= 6 and all(b >= 11 for _, b in largest)  # each policy's largest batch, and one beyond refused
    assert {s.seq for s in m.steps if s.runs} >= {2048, 4096, 8192, 16384, 32768}
    assert {s.layers for s in m.steps if s.runs} >= {2, 4, 8}
    assert sum(s.flags == "maxtext_host_offload" and s.runs for s in m.steps) >= 5
    assert sum("trace" in s.record for s in m.steps) >= 9


def test_the_runtime_reservation_is_the_programs_temporaries_and_bounds_each_step():
    probe = measured.load().memory_probe
    for row in probe["programs"]:  # a known temporary kept alive by an optimization barrier
        assert row["temp_bytes"] == row["known_temp_bytes"] == row["stats_after"]["bytes_reserved"]
        assert row["stats_after"]["peak_bytes_in_use"] < row["known_temp_bytes"] + 2 * probe["argument_resident_bytes"]
    for s in measured.load().steps:
        if s.runs:  # the footprint the runtime holds: over the arguments, never over XLA's compiled peak
            assert s.record["compile"]["argument_bytes"] < s.footprint_bytes <= s.compiled_peak_bytes


def test_the_host_link_and_the_ab_checks_as_measured():
    m = measured.load()
    for row in m.kernels["link"].values():
        rates = row["trace"]["transfer_rates"]
        assert 13e9 < rates["d2h"] < 16e9 and 13e9 < rates["h2d"] < 16e9
        assert row["trace"]["transfer_bytes"]["d2h"] == 3 * row["bytes"]  # three traced calls, each moved once out
    v5e = targets.TPUS["tpu-v5e"].host_link
    assert v5e.achievable_d2h == pytest.approx(m.kernels["link"]["1024"]["trace"]["transfer_rates"]["d2h"], rel=0.01)
    assert v5e.achievable_h2d == pytest.approx(m.kernels["link"]["1024"]["trace"]["transfer_rates"]["h2d"], rel=0.01)
    assert len(m.ab) >= 4
    for row in m.ab:  # offloading changes where tensors live, not the math: the loss to within a few bf16 ulps of the
        # fused forward (minimal_offloaded's program fuses differently from minimal's: 3e-6 relative), gradients to noise
        assert row["finite"] and row["loss_diff"] <= 1e-5 * abs(row["loss_a"]) and row["relative"] < 0.01
    assert sum(row["loss_diff"] == 0 for row in m.ab) == 3


def test_compile_only_here_reproduces_the_chips_memory_analysis():
    m = measured.load()
    rows = measured.compile_agreement(m)
    assert len(rows) == len(m.steps) and all(r.same_verdict for r in rows)
    assert all(r.peak_difference == 0 for r in rows)  # byte for byte: the same libtpu, the same program


def test_the_runtime_footprint_is_buffers_in_use_plus_the_programs_reservation():
    assert measure.runtime_footprint({"bytes_in_use": 4 * 2**30, "bytes_reserved": 3 * 2**30}) == 7 * 2**30
    assert measure.runtime_footprint({"bytes_in_use": 1}) is None and measure.runtime_footprint({}) is None


def test_measure_takes_a_model_of_any_width_maxtexts_way_and_refuses_a_mix(tmp_path):
    """``measure --maxtext-config FILE KEY=VALUE ...``: the run's model (``override_model_config`` and ``base_*``
    keys), batch, sequence, policy and state, read before any chip is asked for."""
    from companion.surfaces.cli import build_parser
    from companion.surfaces.cli.measure import _measured_step

    config = Path(__file__).parent / "data" / "maxtext" / "configs" / "gpu" / "models" / "llama3_8b.yml"
    args = build_parser().parse_args([
        "measure", "--maxtext-config", str(config), "override_model_config=true", "base_emb_dim=2048",
        "base_num_decoder_layers=4", "base_mlp_dim=8192", "per_device_batch_size=2", "max_target_length=4096",
        "remat_policy=minimal", "optimizer_memory_host_offload=true"])
    cfg, state = _measured_step(args)
    assert (cfg.d_model, cfg.num_layers, cfg.mlp_dim) == (2048, 4, 8192)
    assert (args.batch, args.seq, args.policy, state.optimizer_memory_host_offload) == (2, 4096, "minimal", True)
    assert args.model_dims == {"d_model": 2048, "num_layers": 4, "mlp_dim": 8192}  # the record names them
    mixed = build_parser().parse_args(["measure", "--maxtext-config", str(config), "--seq", "2048"])
    with pytest.raises(ValueError, match="--seq and --maxtext-config both set the run"):
        _measured_step(mixed)
    loose = build_parser().parse_args(["measure", "--model", "tiny-llama", "base_emb_dim=2048"])
    with pytest.raises(ValueError, match="need --maxtext-config"):
        _measured_step(loose)
