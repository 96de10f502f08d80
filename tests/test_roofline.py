"""One layer's roofline time (``roofline.layer_seconds``) whatever XLA does to the scanned loop.

While-loop double buffering (on in MaxText's flags, the lab's default) unrolls each scanned loop by
two and may peel an iteration into the parent computation (MaxText's other loop flags peel
iterations too): one loop body is then not one layer. These compile the same four Llama 3.1 8B
layers with different loop transformations and check that the per-layer seconds do not move.
"""

import functools

import pytest

from companion import compiler, models, roofline, targets, train

H100 = targets.target("h100")
LAYERS = 4
DOUBLE_BUFFERING = "--xla_gpu_enable_while_loop_double_buffering=true"


@functools.cache
def stack(policy: str, flags: str | None = None):
    placement = compiler.place(H100)
    return train.compile_layer_stack(models.config("llama3.1-8b", num_layers=LAYERS), policy, placement, 8, 4096,
                                     flags=flags)


def test_double_buffering_changes_the_loop_but_not_one_layers_time():
    plain, doubled = stack("full", "none"), stack("full", f"none {DOUBLE_BUFFERING}")
    # the trap: XLA's plain loop runs one layer per iteration, the double-buffered one two
    plain_bodies = sorted(roofline.loop_body_seconds(plain, H100).values())
    doubled_bodies = sorted(roofline.loop_body_seconds(doubled, H100).values())
    assert [trips for trips, _ in plain_bodies] == [LAYERS, LAYERS]
    assert [trips for trips, _ in doubled_bodies] == [LAYERS // 2, LAYERS // 2]
    for (_, one), (_, two) in zip(plain_bodies, doubled_bodies):
        assert two == pytest.approx(2 * one, rel=0.02)
    a, b = roofline.layer_seconds(plain, H100, LAYERS), roofline.layer_seconds(doubled, H100, LAYERS)
    assert a.recompute_seconds > 0.2 * a.forward_seconds  # "full" recomputes most of the forward
    for field in ("forward_seconds", "backward_seconds", "recompute_seconds"):
        assert getattr(b, field) == pytest.approx(getattr(a, field), rel=1e-3), field
    # and it is the loop body's time when a body is one layer
    assert a.forward_seconds == pytest.approx(plain_bodies[0][1], rel=0.02)
    assert a.backward_with_recompute_seconds == pytest.approx(plain_bodies[1][1], rel=0.02)


def test_maxtext_flags_peel_layers_out_of_the_loop_and_the_layer_time_stays():
    maxtext, plain = stack("full"), stack("full", "none")
    loops = [i for i in maxtext.module.scheduled() if i.opcode == "while"]
    assert loops and all(i.trip_count < LAYERS for i in loops)  # unrolled and peeled: no layer-per-trip loop
    a, b = roofline.layer_seconds(plain, H100, LAYERS), roofline.layer_seconds(maxtext, H100, LAYERS)
    # other flags (cuBLAS instead of Triton gemms, collective pipeliners) change kernels a little
    assert b.forward_seconds == pytest.approx(a.forward_seconds, rel=0.03)
    assert b.backward_with_recompute_seconds == pytest.approx(a.backward_with_recompute_seconds, rel=0.03)
    # counting only the loop bodies would miss the peeled layers
    body_forward = min(seconds * trips for trips, seconds in roofline.loop_body_seconds(maxtext, H100).values())
    assert body_forward < 0.75 * LAYERS * b.forward_seconds


def test_layer_time_is_at_least_its_matmuls_at_peak():
    r = stack("full")
    layer = roofline.layer_seconds(r, H100, LAYERS)
    peak = H100.gpu.bf16_dense_flops
    assert layer.forward_seconds * LAYERS >= r.flops.by_phase["forward"] / peak * 0.999
    assert layer.recompute_seconds * LAYERS >= r.flops.by_phase["recompute"] / peak * 0.999
    assert layer.total_seconds == pytest.approx(layer.forward_seconds + layer.backward_with_recompute_seconds)


def test_bad_layer_counts_and_unscanned_programs_are_refused():
    r = stack("full")
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="num_layers"):
            roofline.layer_seconds(r, H100, bad)
    placement = compiler.place(targets.target("h100", "1"), backend_kind="cuda")
    a = placement.abstract((256, 256), "bfloat16")
    plain = compiler.compile(lambda x: x @ x, a, placement=placement)
    with pytest.raises(ValueError, match="no forward op of a scanned layer"):
        roofline.layer_seconds(plain, H100, 1)


def test_offload_is_priced_with_each_gpus_own_link_and_peak():
    nbytes, flops = 2 * 4096 * 14336 * 1024, 2 * 4096 * 4096 * 14336 * 1024  # an 8B mlpwi_0 of 4096 tokens
    h100, gh200, gb200 = (targets.target(g) for g in ("h100", "gh200", "gb200"))
    pcie = roofline.offload_vs_recompute(nbytes, flops, h100)
    assert (pcie.gpu, pcie.link, pcie.what_if) == ("h100", "pcie5_x16", False)
    assert pcie.offload_seconds == pytest.approx(nbytes / 55.2e9 + nbytes / 55.4e9)  # measured, not the nominal 64
    assert pcie.recompute_seconds == pytest.approx(flops / 989.4e12)
    c2c = roofline.offload_vs_recompute(nbytes, flops, gh200)
    assert c2c.link == "nvlink_c2c_gh200" and c2c.concurrent_gpus == 1
    assert c2c.link_bytes_per_s == pytest.approx(2 / (1 / 296e9 + 1 / 380e9))
    shared = roofline.offload_vs_recompute(nbytes, flops, gb200)
    alone = roofline.offload_vs_recompute(nbytes, flops, gb200, concurrent_gpus=1)
    assert shared.link == "nvlink_c2c_gb200" and shared.concurrent_gpus == 2
    assert shared.offload_seconds == pytest.approx(2 * alone.offload_seconds)  # the stated sharing assumption
    assert shared.recompute_seconds == pytest.approx(flops / 2.5e15)  # GB200's peak, not an H100's
    assert shared.break_even_bytes_per_s == pytest.approx(2 * 2.5e15 / 4096)
    for price in (pcie, c2c, shared, alone):  # the verdict and the break-even bandwidth agree
        assert price.offload_wins == (price.link_bytes_per_s > price.break_even_bytes_per_s)
    assert roofline.offload_vs_recompute(nbytes, flops, h100.with_link("nvlink_c2c_gb200")).what_if
