import pytest

from companion import hlo

# A hand-written scheduled module: a 6-trip forward loop writing each layer's activation to
# host memory (async dynamic-update-slice), a 6-trip backward loop reading it back (async
# dynamic-slice), one whole-array copy to host and one all-gather.
MODULE = """HloModule jit_step, is_scheduled=true

%wrapped_dus (p0: bf16[6,128,256], p1: bf16[1,128,256], p2: s32[]) -> bf16[6,128,256] {
  %p0 = bf16[6,128,256]{2,1,0:S(5)} parameter(0)
  %p1 = bf16[1,128,256]{2,1,0} parameter(1)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %dus = bf16[6,128,256]{2,1,0:S(5)} dynamic-update-slice(%p0, %p1, %p2, %z, %z)
}

%wrapped_ds (q0: bf16[6,128,256], q1: s32[]) -> bf16[1,128,256] {
  %q0 = bf16[6,128,256]{2,1,0:S(5)} parameter(0)
  %q1 = s32[] parameter(1)
  %z1 = s32[] constant(0)
  %ds = bf16[1,128,256]{2,1,0} dynamic-slice(%q0, %q1, %z1, %z1), dynamic_slice_sizes={1,128,256}
  ROOT %c = bf16[1,128,256]{2,1,0} copy(%ds)
}

%fwd_body (s: (s32[], bf16[6,128,256])) -> (s32[], bf16[6,128,256]) {
  %s = (s32[], bf16[6,128,256]{2,1,0:S(5)}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %buf = bf16[6,128,256]{2,1,0:S(5)} get-tuple-element(%s), index=1
  %act = bf16[1,128,256]{2,1,0} constant({...})
  %start = ((bf16[6,128,256]{2,1,0:S(5)}, bf16[1,128,256]{2,1,0}, s32[]), bf16[6,128,256]{2,1,0:S(5)}, u32[]) fusion-start(%buf, %act, %i), kind=kCustom, calls=%wrapped_dus
  %done = bf16[6,128,256]{2,1,0:S(5)} fusion-done(%start)
  ROOT %t = (s32[], bf16[6,128,256]{2,1,0:S(5)}) tuple(%i, %done)
}

%fwd_cond (s.1: (s32[], bf16[6,128,256])) -> pred[] {
  %s.1 = (s32[], bf16[6,128,256]{2,1,0:S(5)}) parameter(0)
  ROOT %p = pred[] constant(true)
}

%bwd_body (r: (s32[], bf16[6,128,256])) -> (s32[], bf16[6,128,256]) {
  %r = (s32[], bf16[6,128,256]{2,1,0:S(5)}) parameter(0)
  %j = s32[] get-tuple-element(%r), index=0
  %hb = bf16[6,128,256]{2,1,0:S(5)} get-tuple-element(%r), index=1
  %ds-start = ((bf16[6,128,256]{2,1,0:S(5)}, s32[]), bf16[1,128,256]{2,1,0}, u32[]) fusion-start(%hb, %j), kind=kCustom, calls=%wrapped_ds
  %ds-done = bf16[1,128,256]{2,1,0} fusion-done(%ds-start)
  %w = bf16[256,256]{1,0} constant({...})
  %ag-start = (bf16[32,256]{1,0}, bf16[256,256]{1,0}) all-gather-start(%w), dimensions={0}
  %ag-done = bf16[256,256]{1,0} all-gather-done(%ag-start)
  ROOT %t2 = (s32[], bf16[6,128,256]{2,1,0:S(5)}) tuple(%j, %hb)
}

%bwd_cond (r.1: (s32[], bf16[6,128,256])) -> pred[] {
  %r.1 = (s32[], bf16[6,128,256]{2,1,0:S(5)}) parameter(0)
  ROOT %p.1 = pred[] constant(true)
}

ENTRY %main (x: f32[64,64]) -> f32[64,64] {
  %x = f32[64,64]{1,0} parameter(0)
  %alloc = bf16[6,128,256]{2,1,0:S(5)} custom-call(), custom_call_target="AllocateBuffer"
  %zero = s32[] constant(0)
  %init = (s32[], bf16[6,128,256]{2,1,0:S(5)}) tuple(%zero, %alloc)
  %fwd = (s32[], bf16[6,128,256]{2,1,0:S(5)}) while(%init), condition=%fwd_cond, body=%fwd_body, backend_config={"known_trip_count":{"n":"6"}}
  %bwd = (s32[], bf16[6,128,256]{2,1,0:S(5)}) while(%fwd), condition=%bwd_cond, body=%bwd_body, backend_config={"known_trip_count":{"n":"6"}}
  %cs = (f32[64,64]{1,0:S(5)}, f32[64,64]{1,0}, u32[]) copy-start(%x)
  %cd = f32[64,64]{1,0:S(5)} copy-done(%cs)
  ROOT %y = f32[64,64]{1,0} copy(%x)
}
"""

LAYER_BYTES = 128 * 256 * 2


def test_shapes_and_memory_spaces():
    s = hlo.parse_shape("bf16[6,128,256]{2,1,0:S(5)}")
    assert s == hlo.ArrayShape("bf16", (6, 128, 256), 5) and s.on_host and s.bytes == 6 * LAYER_BYTES
    t = hlo.parse_shape("(f32[2]{0}, (s32[], pred[3]{0:S(5)}))")
    assert t.bytes == 8 + 4 + 3 and [a.memory_space for a in t.arrays()] == [0, 0, 5]
    assert hlo.parse_shape("f8e4m3fn[16]{0}").bytes == 16 and hlo.parse_shape("s4[3]").bytes == 2
    with pytest.raises(ValueError):
        hlo.parse_shape("not a shape")


def test_execution_counts_follow_trip_counts():
    module = hlo.parse_module(MODULE)
    counts = module.execution_counts
    assert module.entry == "main"
    assert counts["main"] == 1 and counts["fwd_body"] == 6 and counts["fwd_cond"] == 7
    assert counts["wrapped_dus"] == 6 and counts["bwd_body"] == 6
    assert module.scheduled_computations == {"main", "fwd_body", "fwd_cond", "bwd_body", "bwd_cond"}
    assert module.unknown_trip_count_loops == []


def test_offload_summary_finds_each_transfer_with_bytes_per_step():
    summary = hlo.offload_summary(hlo.parse_module(MODULE))
    kinds = {(t.direction, t.kind, t.is_async): t for t in summary.transfers}
    assert set(kinds) == {("d2h", "dynamic-update-slice", True), ("h2d", "dynamic-slice", True), ("d2h", "copy", True)}
    assert kinds["d2h", "dynamic-update-slice", True].bytes_per_step == 6 * LAYER_BYTES
    assert kinds["h2d", "dynamic-slice", True].bytes_per_step == 6 * LAYER_BYTES
    assert kinds["d2h", "copy", True].bytes_per_step == 64 * 64 * 4
    assert summary.d2h_ops == 2 and summary.h2d_ops == 1 and summary.async_pairs == 3
    assert summary.d2h_bytes_per_step == 6 * LAYER_BYTES + 64 * 64 * 4
    assert summary.host_buffers == 2  # the allocated [6, 128, 256] buffer and the copy of x


def test_collectives_counted_once_per_start_with_loop_bytes():
    summary = hlo.collective_summary(hlo.parse_module(MODULE))
    assert summary.counts == {"all-gather": 1}
    assert summary.bytes_per_step == {"all-gather": 6 * 256 * 256 * 2}


def test_a_module_without_offload_has_no_transfers():
    text = "HloModule m\n\nENTRY %e (a: f32[4]) -> f32[4] {\n  %a = f32[4]{0} parameter(0)\n  ROOT %n = f32[4]{0} negate(%a)\n}\n"
    module = hlo.parse_module(text)
    assert hlo.offload_summary(module).transfers == () and module.computations["e"].root.opcode == "negate"


# As --xla_dump_to writes it: the transfer is an async-start of a computation wrapping the fusion.
DUMPED = """HloModule dumped

%fused_dus (a: bf16[4,64]{1,0:S(5)}, b: bf16[1,64], i: s32[]) -> bf16[4,64] {
  %a = bf16[4,64]{1,0:S(5)} parameter(0)
  %b = bf16[1,64]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %d = bf16[4,64]{1,0:S(5)} dynamic-update-slice(%a, %b, %i, %z)
}

%async_computation (p: bf16[4,64], q: bf16[1,64], r: s32[]) -> bf16[4,64] {
  %p = bf16[4,64]{1,0:S(5)} parameter(0)
  %q = bf16[1,64]{1,0} parameter(1)
  %r = s32[] parameter(2)
  ROOT %f = bf16[4,64]{1,0:S(5)} fusion(%p, %q, %r), kind=kLoop, calls=%fused_dus
}

%branch_a (x: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8]{1,0} parameter(0)
  ROOT %m = f32[8,8]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%branch_b (y: f32[8,8]) -> f32[8,8] {
  ROOT %y = f32[8,8]{1,0} parameter(0)
}

ENTRY %main (h: bf16[4,64], u: bf16[1,64], k: s32[], c: s32[], w: f32[8,8]) -> bf16[4,64] {
  %h = bf16[4,64]{1,0:S(5)} parameter(0)
  %u = bf16[1,64]{1,0} parameter(1)
  %k = s32[] parameter(2)
  %c = s32[] parameter(3)
  %w = f32[8,8]{1,0} parameter(4)
  %pick = f32[8,8]{1,0} conditional(%c, %w, %w), branch_computations={%branch_a, %branch_b}
  %s = ((bf16[4,64]{1,0:S(5)}, bf16[1,64]{1,0}, s32[]), bf16[4,64]{1,0:S(5)}, s32[]) async-start(%h, %u, %k), calls=%async_computation
  ROOT %e = bf16[4,64]{1,0:S(5)} async-done(%s)
}
"""


def test_transfers_in_dumped_modules_are_classified_through_nested_calls():
    summary = hlo.offload_summary(hlo.parse_module(DUMPED))
    (t,) = summary.transfers
    assert (t.kind, t.direction, t.is_async, t.bytes_per_execution) == ("dynamic-update-slice", "d2h", True, 128)
    assert summary.host_buffers == 1  # the host-resident entry parameter


def test_conditionals_make_the_flop_count_an_upper_bound():
    module = hlo.parse_module(DUMPED)
    assert module.conditionals == ["pick"]
    flops = hlo.flop_summary(module)
    assert flops.total == 2 * 8 * 8 * 8 and not flops.exact
    assert hlo.flop_summary(hlo.parse_module(MODULE)).exact


FUSED = """HloModule fused, is_scheduled=true

%fused_recompute (p0: bf16[64,128], p1: bf16[128,256], p2: bf16[64,256]) -> bf16[64,256] {
  %p0 = bf16[64,128]{1,0} parameter(0)
  %p1 = bf16[128,256]{1,0} parameter(1)
  %p2 = bf16[64,256]{1,0} parameter(2)
  %dot.1 = bf16[64,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/transpose(jvp())/checkpoint/rematted_computation/dot_general"}
  ROOT %mul.1 = bf16[64,256]{1,0} multiply(%dot.1, %p2), metadata={op_name="jit(f)/transpose(jvp())/checkpoint/mul"}
}

ENTRY %main (a: bf16[64,128], b: bf16[128,256], c: bf16[64,256]) -> bf16[64,256] {
  %a = bf16[64,128]{1,0} parameter(0)
  %b = bf16[128,256]{1,0} parameter(1)
  %c = bf16[64,256]{1,0} parameter(2)
  %negate.1 = bf16[64,256]{1,0} negate(%c), metadata={op_name="jit(f)/transpose(jvp())/neg"}
  ROOT %fusion.1 = bf16[64,256]{1,0} fusion(%a, %b, %negate.1), kind=kOutput, calls=%fused_recompute, metadata={op_name="jit(f)/transpose(jvp())/checkpoint/mul"}
}
"""


def test_a_fusion_with_a_recomputed_matmul_counts_as_recompute():
    """A fusion's metadata is its root's (here a backward multiply); its time belongs to the phase of
    the matmul it runs (recompute), as the FLOP summary already counts it."""
    module = hlo.parse_module(FUSED)
    costs = {c.name: c for c in hlo.op_costs(module)}
    assert costs["fusion.1"].phase == "recompute" and costs["fusion.1"].flops == 2 * 64 * 128 * 256
    assert costs["negate.1"].phase == "backward"  # no matmul: its own phase
    assert hlo.flop_summary(module).by_phase == {"recompute": 2 * 64 * 128 * 256}


def test_async_window_lists_what_runs_between_a_start_and_its_done():
    module = hlo.parse_module(MODULE)
    assert hlo.async_window(module, "start") == []  # back to back: nothing overlaps this write
    assert hlo.async_window(module, "ds-start") == []
    text = MODULE.replace("  %ds-done = bf16[1,128,256]{2,1,0} fusion-done(%ds-start)\n", "").replace(
        "  %ag-done = bf16[256,256]{1,0} all-gather-done(%ag-start)\n",
        "  %ag-done = bf16[256,256]{1,0} all-gather-done(%ag-start)\n"
        "  %ds-done = bf16[1,128,256]{2,1,0} fusion-done(%ds-start)\n")
    moved = hlo.parse_module(text)
    assert [i.name for i in hlo.async_window(moved, "ds-start")] == ["w", "ag-start", "ag-done"]  # the read overlaps
    with pytest.raises(ValueError, match="no instruction 'nope'"):
        hlo.async_window(module, "nope")


def test_a_scatter_into_a_buffer_costs_the_rows_it_touches():
    """XLA's GPU scatter updates its operand in the output buffer: 8 rows added into 4096 cost 8 rows."""
    text = """HloModule s

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%fused (p0: f32[4096,256], p1: s32[8,1], p2: f32[8,256]) -> f32[4096,256] {
  %p0 = f32[4096,256]{1,0} parameter(0)
  %p1 = s32[8,1]{1,0} parameter(1)
  %p2 = f32[8,256]{1,0} parameter(2)
  ROOT %sc = f32[4096,256]{1,0} scatter(%p0, %p1, %p2), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

ENTRY %main (a: f32[4096,256], i: s32[8,1], u: f32[8,256]) -> f32[4096,256] {
  %a = f32[4096,256]{1,0} parameter(0)
  %i = s32[8,1]{1,0} parameter(1)
  %u = f32[8,256]{1,0} parameter(2)
  ROOT %f = f32[4096,256]{1,0} fusion(%a, %i, %u), kind=kInput, calls=%fused
}
"""
    module = hlo.parse_module(text)
    (cost,) = [c for c in hlo.op_costs(module) if c.name == "f"]
    rows = 8 * 256 * 4
    assert cost.bytes == 3 * rows + 8 * 4  # the rows read and written, the updates, the indices


TPU_FUSIONS = """HloModule tpu_bytes, is_scheduled=true

%slicer (n0: bf16[16,256,128]) -> bf16[1,256,128] {
  %n0 = bf16[16,256,128]{2,1,0} parameter(0)
  %zero = s32[] constant(0)
  ROOT %ds = bf16[1,256,128]{2,1,0} dynamic-slice(%n0, %zero, %zero, %zero), dynamic_slice_sizes={1,256,128}
}

%relayout (r0: pred[16,256,256]) -> pred[16,256,256] {
  %r0 = pred[16,256,256]{2,1,0} parameter(0)
  ROOT %cp = pred[16,256,256]{1,2,0} copy(%r0)
}

%reads_a_slice (p0: bf16[16,256,128], p1: f32[256,128]) -> f32[256,128] {
  %p0 = bf16[16,256,128]{2,1,0} parameter(0)
  %p1 = f32[256,128]{1,0:S(1)} parameter(1)
  %f = bf16[1,256,128]{2,1,0} fusion(%p0), kind=kLoop, calls=%slicer
  %b = bf16[256,128]{1,0} bitcast(%f)
  %c = f32[256,128]{1,0} convert(%b)
  ROOT %a = f32[256,128]{1,0} add(%c, %p1)
}

%updates_in_place (u0: pred[16,256,256], u1: pred[1,256,256], u2: s32[]) -> pred[16,256,256] {
  %u0 = pred[16,256,256]{2,1,0} parameter(0)
  %u1 = pred[1,256,256]{2,1,0} parameter(1)
  %u2 = s32[] parameter(2)
  %g = pred[16,256,256]{1,2,0} fusion(%u0), kind=kLoop, calls=%relayout
  %z = s32[] constant(0)
  ROOT %dus = pred[16,256,256]{1,2,0} dynamic-update-slice(%g, %u1, %u2, %z, %z)
}

ENTRY %main (x: bf16[16,256,128], v: f32[256,128], m: pred[16,256,256], w: pred[1,256,256], i: s32[]) -> (f32[256,128], pred[16,256,256], bf16[4,256,128]) {
  %x = bf16[16,256,128]{2,1,0} parameter(0)
  %v = f32[256,128]{1,0:S(1)} parameter(1)
  %m = pred[16,256,256]{2,1,0} parameter(2)
  %w = pred[1,256,256]{2,1,0} parameter(3)
  %i = s32[] parameter(4)
  %read = f32[256,128]{1,0} fusion(%x, %v), kind=kLoop, calls=%reads_a_slice
  %mask = pred[16,256,256]{1,2,0} fusion(%m, %w, %i), kind=kLoop, calls=%updates_in_place
  %ss = ((bf16[16,256,128]{2,1,0}), bf16[4,256,128]{2,1,0:S(1)}, s32[]) slice-start(%x), slice={[0:4], [0:256], [0:128]}
  %sd = bf16[4,256,128]{2,1,0:S(1)} slice-done(%ss)
  ROOT %t = (f32[256,128]{1,0}, pred[16,256,256]{1,2,0}, bf16[4,256,128]{2,1,0:S(1)}) tuple(%read, %mask, %sd)
}
"""


def test_tpu_byte_rules_read_slices_inside_nested_fusions_and_skip_vmem():
    """On a TPU: a parameter read only through a nested fusion that slices it costs the slice, a VMEM (S(1))
    operand costs nothing, a nested layout change updated in place moves only the update, and an async slice
    reads its slice. On a GPU the same ops are priced whole (the rules are not applied there)."""
    module = hlo.parse_module(TPU_FUSIONS)
    by = {i.name: i for i in module.instructions()}
    slice_bytes, result = 256 * 128 * 2, 256 * 128 * 4
    assert hlo._hbm_bytes(module, by["read"], "tpu") == slice_bytes + result
    assert hlo._hbm_bytes(module, by["read"], "gpu") == 16 * slice_bytes + result + result  # x whole, v in HBM
    index = 4  # the update's s32 offset
    assert hlo._hbm_bytes(module, by["mask"], "tpu") == 256 * 256 + 256 * 256 + index  # the update read, then written
    assert hlo._hbm_bytes(module, by["mask"], "gpu") == 2 * 16 * 256 * 256 + 256 * 256 + index
    assert hlo._hbm_bytes(module, by["ss"], "tpu") == 4 * slice_bytes  # the slice it makes, not its operand
