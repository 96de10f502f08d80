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
from companion import compiler, hlo, measure, measured, models, train

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
    env = m.environment
    assert env["device_kind"] == "TPU v5 lite" and env["jax"] == env["jaxlib"] == "0.10.2" and env["libtpu"]
    assert len(env["stamp"]["companion_source"]) == 16 and len(env["commit"]) == 40
    assert len(m.steps) >= 23 and all(s.runs for s in m.steps)
    for s in m.steps:
        timing = s.record["timing"]
        assert timing["min"] <= s.seconds <= timing["max"] and len(timing["seconds"]) >= 3
        assert s.compiled_peak_bytes <= s.record["compile"]["usable_hbm_bytes"]
        assert (s.host_bytes > 0) == ("offload" in s.policy or s.optimizer_offload)
    repeated = [s for s in m.steps if s.spread is not None]
    assert len(repeated) >= 3 and all(len(s.record["process_medians"]) >= 2 for s in repeated)
    assert m.spread == max(s.spread for s in repeated) < 0.01  # step times repeat across processes
    assert m.notes  # what the session could not measure is said with the result
    first = m.step("L4-B8-S2048-full")
    assert first.flash_kernel == "jax" and hlo.CUDNN_ATTENTION  # the first session's attention, as it ran


def test_compile_only_here_reproduces_the_chips_memory_analysis():
    rows = measured.compile_agreement(measured.load())
    assert len(rows) >= 23 and all(r.same_verdict for r in rows)
    assert all(r.peak_difference == 0 for r in rows)  # byte for byte: the same libtpu, the same program
