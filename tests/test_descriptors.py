"""The memcpy-descriptor check (openxla/xla #46231): hand-written modules with known answers, then
real compiles of an offloading scan with and without the lab's workaround."""

import dataclasses
from pathlib import Path

import companion  # noqa: F401
import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

from companion import compiler, descriptors, hlo, targets

ROW = 256  # bytes of one f32[1,64] slice


def module(index_expr: str, config: str | None, trips: int = 4, host: bool = True) -> hlo.HloModule:
    """A while loop over ``trips`` iterations whose body reads row ``index`` of a [4,64] buffer
    through an async-wrapped dynamic-slice, the way XLA wraps host transfers.

    ``index_expr`` is the body's index instruction, in terms of ``%i`` (the induction variable),
    ``%three`` and ``%one``.
    """
    space = ":S(5)" if host else ""
    cfg = f',"dynamic_slice_config":{config}' if config else ""
    return hlo.parse_module(f"""HloModule test

%fused_index (p0: s32[], p1: s32[]) -> s32[] {{
  %p0 = s32[] parameter(0)
  %p1 = s32[] parameter(1)
  ROOT %sub = s32[] subtract(%p0, %p1)
}}

%wrapped_ds (w0: f32[4,64], w1: s32[], w2: s32[]) -> f32[1,64] {{
  %w0 = f32[4,64]{{1,0{space}}} parameter(0)
  %w1 = s32[] parameter(1)
  %w2 = s32[] parameter(2)
  ROOT %ds = f32[1,64]{{1,0}} dynamic-slice(%w0, %w1, %w2), dynamic_slice_sizes={{1,64}}, backend_config={{"operation_queue_id":"0"{cfg}}}
}}

%async_comp (a0: f32[4,64], a1: s32[], a2: s32[]) -> f32[1,64] {{
  %a0 = f32[4,64]{{1,0{space}}} parameter(0)
  %a1 = s32[] parameter(1)
  %a2 = s32[] parameter(2)
  ROOT %wrapped = f32[1,64]{{1,0}} fusion(%a0, %a1, %a2), kind=kLoop, calls=%wrapped_ds
}}

%body (state: (s32[], f32[4,64], f32[1,64])) -> (s32[], f32[4,64], f32[1,64]) {{
  %state = (s32[], f32[4,64]{{1,0{space}}}, f32[1,64]{{1,0}}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %buffer = f32[4,64]{{1,0{space}}} get-tuple-element(%state), index=1
  %three = s32[] constant(3)
  %one = s32[] constant(1)
  %zero = s32[] constant(0)
  {index_expr}
  %start = ((f32[4,64]{{1,0{space}}}, s32[], s32[]), f32[1,64]{{1,0}}, u32[]) async-start(%buffer, %index, %zero), calls=%async_comp
  %done = f32[1,64]{{1,0}} async-done(%start)
  %next = s32[] add(%i, %one)
  ROOT %out = (s32[], f32[4,64]{{1,0{space}}}, f32[1,64]{{1,0}}) tuple(%next, %buffer, %done)
}}

%cond (c: (s32[], f32[4,64], f32[1,64])) -> pred[] {{
  %c = (s32[], f32[4,64]{{1,0{space}}}, f32[1,64]{{1,0}}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %limit = s32[] constant({trips})
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}}

ENTRY %main (x: f32[4,64]) -> f32[1,64] {{
  %x = f32[4,64]{{1,0{space}}} parameter(0)
  %z = s32[] constant(0)
  %init = f32[1,64]{{1,0}} constant({{...}})
  %t = (s32[], f32[4,64]{{1,0{space}}}, f32[1,64]{{1,0}}) tuple(%z, %x, %init)
  %loop = (s32[], f32[4,64]{{1,0{space}}}, f32[1,64]{{1,0}}) while(%t), condition=%cond, body=%body, backend_config={{"known_trip_count":{{"n":"{trips}"}},"known_init_step":{{"init":"0","step":"1"}},"known_induction_variable":{{"tuple_index":"0"}}}}
  ROOT %r = f32[1,64]{{1,0}} get-tuple-element(%loop), index=2
}}
""")


REVERSED = "%index = s32[] fusion(%three, %i), kind=kLoop, calls=%fused_index"


def test_the_bug_is_flagged_reversed_index_with_a_forward_descriptor():
    checks = descriptors.check(module(REVERSED, '{"loop_index":"0","byte_offset":"0","byte_stride":"256"}'))
    (c,) = checks.checks
    assert c.direction == "h2d" and c.trips == 4 and c.expected == (3 * ROW, 2 * ROW, ROW, 0)
    assert c.ok is False and c.expected_descriptor == (3 * ROW, -ROW)
    assert checks.verdict == "wrong" and "46231" in checks.warning() and "46308" in checks.warning()
    assert "needs offset 768 stride -256" in c.describe()


def test_a_right_descriptor_passes():
    checks = descriptors.check(module(REVERSED, '{"loop_index":"0","byte_offset":"768","byte_stride":"-256"}'))
    assert checks.verdict == "ok" and checks.checks[0].ok and checks.warning() is None


def test_forward_index_with_a_forward_descriptor_passes():
    checks = descriptors.check(module("%index = s32[] copy(%i)", '{"loop_index":"0","byte_offset":"0","byte_stride":"256"}'))
    assert checks.verdict == "ok" and checks.checks[0].expected == (0, ROW, 2 * ROW, 3 * ROW)


def test_no_descriptor_means_the_index_is_read_at_run_time():
    checks = descriptors.check(module(REVERSED, None))
    (c,) = checks.checks
    assert c.descriptor is None and c.ok is True and checks.verdict == "ok" and checks.runtime_indexed == (c,)


def test_device_slices_do_not_decide_the_verdict():
    checks = descriptors.check(module(REVERSED, '{"loop_index":"0","byte_offset":"0","byte_stride":"256"}', host=False))
    assert checks.verdict == "none" and checks.checks[0].direction == "device" and checks.checks[0].ok is False


def test_indices_are_clamped_like_dynamic_slice():
    # index 3 - i + 2 runs past the 4-row buffer for the first iterations: dynamic-slice clamps it to 3
    expr = "%raw = s32[] fusion(%three, %i), kind=kLoop, calls=%fused_index\n  %two = s32[] constant(2)\n" \
           "  %index = s32[] add(%raw, %two)"
    (c,) = descriptors.check(module(expr, '{"loop_index":"0","byte_offset":"768","byte_stride":"0"}')).checks
    assert c.expected == (3 * ROW, 3 * ROW, 3 * ROW, 2 * ROW) and c.ok is False


def test_an_index_the_checker_cannot_read_is_reported_unchecked():
    expr = "%index = s32[] custom-call(%i), custom_call_target=\"opaque\""
    checks = descriptors.check(module(expr, '{"loop_index":"0","byte_offset":"0","byte_stride":"256"}'))
    assert checks.verdict == "unchecked" and checks.checks[0].ok is None and "custom-call" in checks.checks[0].reason


# ----------------------------------------------------------------------------- real compiles

POLICY = jax.checkpoint_policies.save_and_offload_only_these_names(
    names_which_can_be_saved=[], names_which_can_be_offloaded=["h"], offload_src="device", offload_dst="pinned_host")


def _layer(x, w):
    h = checkpoint_name(x @ w["w_in"], "h")
    return x + jnp.tanh(jnp.tanh(h) @ w["w_out"]), None


def _grad(params, x):
    def loss(p, x):
        y, _ = jax.lax.scan(jax.checkpoint(_layer, policy=POLICY), x, p)
        return jnp.mean(jnp.square(y.astype(jnp.float32)))
    return jax.grad(loss)(params, x)


@pytest.fixture(scope="module")
def placement():
    return compiler.place(targets.target("h100", "1x2"), backend_kind="cuda")


def _compile(placement, **kwargs):
    params = {"w_in": placement.abstract((4, 256, 1024), "bfloat16"),
              "w_out": placement.abstract((4, 1024, 256), "bfloat16")}
    x = placement.abstract((128, 256), "bfloat16", ("fsdp",))
    return compiler.compile(_grad, params, x, placement=placement, **kwargs)


# ----------------------------------------------------------------------------- stored HLOs of both jaxlibs

DATA = Path(__file__).parent / "data"
STORED = {"0.10.2": DATA / "jax-0.10.2" / "descriptors_scan4_h100x2_jax0.10.2_{}.hlo.txt",
          "0.12.0.1": DATA / "jax-0.12" / "descriptors_scan4_h100x2_jax0.12.0.1_{}.hlo.txt"}


def stored(jaxlib: str, tag: str = "plain") -> hlo.HloModule:
    """The scan below compiled for h100:1x2 with ``flags="none"``, no workaround, on ``jaxlib`` (``plain``, or
    ``pipelined``: with --xla_gpu_enable_pipelined_host_offloading=true); the files' header says how."""
    text = STORED[jaxlib].with_name(STORED[jaxlib].name.format(tag)).read_text()
    return hlo.parse_module("\n".join(line for line in text.splitlines() if not line.startswith("//")))


def test_jaxlib_0_10_2s_flat_descriptor_is_read_and_still_flags_46231():
    checks = descriptors.check(stored("0.10.2"))
    assert checks.verdict == "wrong" and {c.direction for c in checks.wrong} == {"h2d"}
    (wrong,) = checks.wrong  # the backward read of layers 3, 2, 1, 0 described as 0, 1, 2, 3: #46231
    assert wrong.descriptor == (0, 131072) and wrong.expected == (393216, 262144, 131072, 0)
    device = [c for c in checks.checks if not c.host]  # XLA annotates device-memory slices right
    assert device and all(c.ok for c in device) and any(c.descriptor[1] < 0 for c in device)


def test_jaxlib_0_12s_nested_linear_descriptor_is_read_and_is_right():
    module = stored("0.12.0.1")
    checks = descriptors.check(module)
    assert checks.verdict == "ok" and not checks.wrong
    reads = [c for c in checks.checks if c.host and c.direction == "h2d"]
    # the backward read at layer 3, stepping back one layer slice per trip: {"linear":{"byte_offset":"393216",
    # "byte_stride":"-131072"}} beside a zeroed top-level pair (the reader must not take the zeros)
    assert reads and all(c.ok for c in reads)
    assert any(c.descriptor == (393216, -131072) and c.expected == (393216, 262144, 131072, 0) for c in reads)


def test_each_jaxlibs_host_transfers_run_on_the_copy_engine_where_xla_emits_a_memcpy():
    for jaxlib in STORED:
        transfers = hlo.offload_summary(stored(jaxlib)).transfers
        assert transfers and {t.engine for t in transfers} == {"copy_engine"}, jaxlib
    # 0.12 with pipelining: the write peeled out of the loop carries no descriptor -> a generated kernel
    pipelined = hlo.offload_summary(stored("0.12.0.1", "pipelined")).transfers
    assert {t.engine for t in pipelined} == {"copy_engine", "kernel"}


def test_the_installed_jaxlibs_descriptor_verdict_is_its_entry_in_the_lab_table(placement):
    from companion import flags

    r = _compile(placement, flags="none", workarounds=False)
    checks = r.offload.checks
    assert (checks.verdict == "wrong") == flags.DESCRIPTOR_BUG[flags.INSTALLED_JAXLIB]
    assert (r.flag_set.workarounds == ()) and (
        _compile(placement, flags="none").flag_set.workarounds
        == (("offload_descriptors",) if flags.has_descriptor_bug(flags.INSTALLED_JAXLIB) else ()))
    if checks.verdict == "wrong":
        assert "descriptors: wrong" in r.summary() and "46231" in r.summary()


# the workaround as a flag (the lab adds it by itself only on a jaxlib with the bug: flags.DESCRIPTOR_BUG)
WORKAROUND = "none --xla_disable_hlo_passes=dynamic-slice-annotator"


def test_the_workaround_leaves_no_wrong_descriptor_and_the_same_memory_where_the_bug_is(placement):
    from companion import flags

    broken = _compile(placement, flags="none", workarounds=False)
    fixed = _compile(placement, flags=WORKAROUND)
    assert "dynamic-slice-annotator" in fixed.flags["xla_disable_hlo_passes"]
    assert fixed.offload.checks.verdict == "ok" and fixed.offload.checks.runtime_indexed
    assert fixed.host.temp_bytes == broken.host.temp_bytes
    if flags.DESCRIPTOR_BUG[flags.INSTALLED_JAXLIB]:  # 0.10.2: the same device memory
        assert fixed.device.peak_bytes == broken.device.peak_bytes
    else:  # 0.12: the annotator-less program keeps 0.47 MiB more scratch (the lab never applies it there)
        assert fixed.device.peak_bytes > broken.device.peak_bytes
    # still asynchronous: every host transfer keeps its start/done pair
    assert all(t.is_async for t in fixed.offload.transfers) and fixed.offload.d2h_ops and fixed.offload.h2d_ops


def test_double_buffering_broke_the_forward_writes_too_where_the_reads_were_broken(placement):
    """jaxlib 0.10.2: both directions wrong under double buffering; 0.12 (#46308 and #47218): none."""
    from companion import flags

    r = _compile(placement, flags="none --xla_gpu_enable_while_loop_double_buffering=true", workarounds=False)
    broken = flags.DESCRIPTOR_BUG[flags.INSTALLED_JAXLIB]
    assert {c.direction for c in r.offload.checks.wrong} == ({"d2h", "h2d"} if broken else set())


def test_the_workaround_turns_copy_engine_transfers_into_sm_kernels_and_only_those_cost_sm_time(placement):
    from companion import schedule

    broken = _compile(placement, flags="none", workarounds=False)
    fixed = _compile(placement, flags=WORKAROUND)
    assert {t.engine for t in broken.offload.transfers} == {"copy_engine"}  # a memcpy on a copy engine
    assert {t.engine for t in fixed.offload.transfers} == {"kernel"}  # no descriptor: a generated kernel on the SMs
    assert broken.offload.bytes_by_engine()["copy_engine"] == fixed.offload.bytes_by_engine()["kernel"]
    assert "SM kernel" in fixed.summary() and "run as SM kernels, not copy engines" in fixed.summary()
    assert schedule.simulate(broken).transfer_kernel_sm_seconds == 0
    busy = schedule.simulate(fixed).transfer_kernel_sm_seconds
    assert busy > 0  # compute beside the transfer kernels lost SM time
    idle = schedule.simulate(fixed, cost_model=schedule.CostModel(transfer_kernel_sm_share=0.0))
    assert idle.transfer_kernel_sm_seconds == 0 and idle.step_seconds < schedule.simulate(fixed).step_seconds


def test_the_workarounds_price_is_a_range_and_a_ranking_inside_it_is_unknown(placement):
    from companion import flags, workaround

    fixed = workaround.price(_compile(placement, flags=WORKAROUND), "offloaded, workaround")
    broken = workaround.price(_compile(placement, flags="none", workarounds=False), "offloaded, copy engines")
    assert fixed.kernel_transfers and not broken.kernel_transfers
    assert len(set(broken.seconds.values())) == 1  # nothing to reprice without transfer kernels
    # priced as copy engines, the workaround's program is the broken one's: the same where only the engines differ
    # (0.10.2); at 0.12 the annotator-less program also schedules differently (3.7 % here)
    same_program = flags.DESCRIPTOR_BUG[flags.INSTALLED_JAXLIB]
    assert fixed.seconds[workaround.COPY_ENGINE] == pytest.approx(broken.seconds[workaround.NOMINAL],
                                                                  rel=1e-3 if same_program else 0.05)
    low, high = fixed.cost_range
    assert 0 <= fixed.cost and low <= fixed.cost <= high and high > low  # the kernels cost something, by how much unknown
    same = workaround.compare(fixed, fixed)
    assert same.verdict == workaround.UNKNOWN and same.ratios[workaround.NOMINAL] == 1
    slower = dataclasses.replace(broken, label="twice", seconds={k: 2 * v for k, v in broken.seconds.items()})
    assert workaround.compare(fixed, slower).verdict == "offloaded, workaround"
    close = dataclasses.replace(slower, seconds={k: 1.02 * v for k, v in fixed.seconds.items()})
    assert workaround.compare(fixed, close).verdict == workaround.TIE  # 2 %: every corner agrees, inside the model error
    apart = dataclasses.replace(slower, seconds={k: 1.05 * v for k, v in fixed.seconds.items()})
    assert workaround.compare(fixed, apart).verdict == "offloaded, workaround"  # 5 %: outside it
