"""The TPU as a target: v5e's facts, libtpu's flags and refusals, and XLA:TPU's compiled program read by the lab
(libtpu's compile-only topology: no chip needed)."""

import pytest

import companion  # noqa: F401
from companion import compiler, hlo, libtpu, models, targets, train
from companion.models import flash

pytestmark = pytest.mark.skipif(not libtpu.installed(), reason="libtpu is part of the lab's install on Linux x86-64")

# a small Llama layer the Pallas kernel takes: 128-wide heads, a sequence of whole 128-row blocks
SMALL = models.config("tiny-llama").replace(name="tpu-test", d_model=256, num_heads=2, num_kv_heads=1, head_dim=128,
                                            mlp_dim=512, vocab_size=512, num_layers=3, flash_block=128)


@pytest.fixture(scope="module")
def placement():
    return compiler.place(targets.target("tpu-v5e"))


def test_v5e_target_is_one_chip_with_the_runtimes_fixed_hbm():
    t = targets.target("tpu-v5e")
    assert t.is_tpu and t.platform == "tpu" and t.num_devices == 1 and t.mem_fraction == 1.0
    assert t.usable_hbm_bytes == t.accelerator.usable_hbm_bytes < t.hbm_bytes
    with pytest.raises(ValueError, match="fixed 15.7.*no allocator share"):
        targets.target("tpu-v5e", mem_fraction=0.9)
    with pytest.raises(ValueError, match="one chip"):
        targets.target("tpu-v5e", "1x4")
    with pytest.raises(ValueError, match="unknown accelerator 'tpu-v4'.*choose one of: .*tpu-v5e"):
        targets.target("tpu-v4")


def test_libtpu_flags_are_checked_before_libtpu_sees_them():
    assert libtpu.resolve(None).flags == {} and libtpu.resolve(None).platform == "tpu"
    offload = libtpu.resolve("maxtext_host_offload")
    assert offload.flags["xla_tpu_host_transfer_overlap_limit"] == 24
    assert "--xla_tpu_host_transfer_overlap_limit=24" in offload.xla_flags()
    with pytest.raises(ValueError, match="unknown libtpu flag preset 'maxtext_gpu'"):
        libtpu.resolve("maxtext_gpu")
    with pytest.raises(ValueError, match="unknown libtpu flag 'xla_tpu_not_a_flag'"):
        libtpu.parse("--xla_tpu_not_a_flag=1")
    from companion import flags

    with pytest.raises(ValueError, match="is for XLA:GPU"):
        libtpu.resolve(flags.resolve(None))


def test_every_maxtext_host_offload_flag_is_known_to_this_libtpu():
    if not libtpu.KNOWN:
        pytest.fail("companion/hardware/data/libtpu_flags.json is empty: run scripts/refresh_libtpu_flag_names.py")
    assert libtpu.parse(libtpu.MAXTEXT_HOST_OFFLOAD) == libtpu.MAXTEXT_HOST_OFFLOAD
    with pytest.raises(ValueError, match="expected an integer"):
        libtpu.parse("--xla_tpu_host_transfer_overlap_limit=many")


def test_out_of_memory_messages_read_as_bytes():
    new = "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (96.00G) " \
          "exceeds available HBM (15.75G)."
    old = "XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 21.75G of 15.75G hbm."
    assert libtpu.out_of_memory(new) == (96 * 2**30, int(15.75 * 2**30))
    assert libtpu.out_of_memory(old) == (int(21.75 * 2**30), int(15.75 * 2**30))
    assert libtpu.out_of_memory("INVALID_ARGUMENT: something else") is None


def test_an_offloading_step_compiles_for_v5e_with_its_transfers_trips_and_pallas_attention(placement):
    report = train.compile_layer_stack(SMALL, "qkv_proj_offloaded", placement, 2, 256)
    assert report.backend == "libtpu" and report.flag_set.platform == "tpu" and not report.flag_set.workarounds
    assert not any(name.startswith("xla_gpu") for name in report.flags)
    q = 2 * 256 * 256 * 2  # bytes of one layer's Q (B S H d_h, bf16); K and V are half of it each (one kv head)
    assert report.offload.d2h_bytes_per_step == report.offload.h2d_bytes_per_step == SMALL.num_layers * 2 * q
    assert report.host.temp_bytes == SMALL.num_layers * 2 * q
    assert {loop.trips for loop in hlo.loops(report.module) if loop.carried_host_bytes} == {SMALL.num_layers}
    assert report.flops.exact  # every loop's trips read from its condition (XLA:TPU prints no known_trip_count)
    kernels = {hlo.pallas_kernel(i) for i in report.module.scheduled()} - {None}
    assert kernels == {("fwd", 128), ("bwd_dq", 128), ("bwd_dkv", 128)}
    pairs = flash.pairs_in_blocks(256, 128)
    fwd, _ = flash.flops(2, 2, 128, 128, pairs)
    per_layer = fwd * (1 + 1 + 7 / 2)  # forward, its recompute (full remat of the rest), dK/dV (4) + dQ (3) matmuls
    assert report.flops.by_class["attention"] == pytest.approx(SMALL.num_layers * per_layer)


def test_saving_the_context_spares_the_forward_kernel(placement):
    def forward_kernels(policy):
        report = train.compile_layer_stack(SMALL, policy, placement, 2, 256)
        return sum(report.module.executions(i) for i in report.module.scheduled()
                   if hlo.pallas_kernel(i) == ("fwd", 128))

    assert forward_kernels("full") == 2 * SMALL.num_layers  # the forward, and again in the backward
    assert forward_kernels("minimal_with_context") == SMALL.num_layers


def test_xla_tpu_refuses_a_step_over_hbm_with_the_bytes_it_needed(placement):
    trainer = train.trainer(SMALL.replace(num_layers=2), "minimal")
    with pytest.raises(compiler.DoesNotFit) as refused:
        train.compile_step(trainer, placement, 4096, 2048)
    err = refused.value
    assert err.needed_bytes > err.available_bytes == pytest.approx(placement.target.usable_hbm_bytes, rel=0.01)
    assert "does NOT fit tpu-v5e:1x1" in str(err) and err.to_dict()["fits"] is False


def test_convolution_flops_count_real_taps_not_padding():
    # XLA:TPU's batch dims of a dot as a padded window: each output reads one real element
    assert hlo._real_taps(16, 1, 15, 1, 1, 1, 16) == 16
    # ... or as a dilated window (size = lhs_dilate): one real element per output again
    assert hlo._real_taps(4, 3, 0, 4, 1, 4, 4) == 4
    # an ordinary valid convolution: every tap real
    assert hlo._real_taps(3, 1, 0, 1, 1, 10, 8) == 24


def test_libtpu_init_args_are_validated_before_the_backend_starts():
    import subprocess
    import sys

    env = {**__import__("os").environ, "LIBTPU_INIT_ARGS": "--xla_tpu_host_transfer_overlap_limt=24"}
    out = subprocess.run([sys.executable, "-c", "import companion; from companion import compiler; compiler.backend()"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "unknown libtpu flag 'xla_tpu_host_transfer_overlap_limt'" in out.stderr
    assert "did you mean xla_tpu_host_transfer_overlap_limit" in out.stderr
