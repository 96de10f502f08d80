import os
import re
import warnings

import jax
import pytest

from companion import compiler, freshness, hlo, models, report_cache, targets, train
from companion.models import toy

STACK = toy.MlpStack(layers=4, width=256, hidden=1024)
ROWS_PER_DEVICE = 64
OFFLOAD = jax.checkpoint_policies.save_and_offload_only_these_names(
    names_which_can_be_saved=[], names_which_can_be_offloaded=[toy.HIDDEN],
    offload_src="device", offload_dst="pinned_host")
POLICIES = {"offload": OFFLOAD, "nothing": jax.checkpoint_policies.nothing_saveable,
            "everything": jax.checkpoint_policies.everything_saveable}


def compile_stack(placement, policy, rows=ROWS_PER_DEVICE, **kwargs):
    params = {k: placement.abstract(s, STACK.dtype) for k, s in STACK.param_shapes().items()}
    x = placement.abstract((rows * placement.num_devices, STACK.width), STACK.dtype,
                           (tuple(placement.mesh.axis_names),))
    return compiler.compile(toy.grad_fn(policy), params, x, placement=placement, **kwargs)


@pytest.fixture(scope="module", params=sorted(targets.GPUS))
def reports(request):
    placement = compiler.place(targets.target(request.param, "1x4"), backend_kind="cuda")
    return {name: compile_stack(placement, policy) for name, policy in POLICIES.items()}


def test_offloaded_activations_are_host_temp_with_async_transfers(reports):
    r = reports["offload"]
    assert r.backend == "cuda" and r.num_devices == 4
    assert r.host.temp_bytes == STACK.hidden_bytes(ROWS_PER_DEVICE)
    assert r.offload.count("d2h", is_async=True) >= 1 and r.offload.count("h2d", is_async=True) >= 1
    # Every layer's activation goes out once and comes back once per step.
    assert r.offload.d2h_bytes_per_step == STACK.hidden_bytes(ROWS_PER_DEVICE)
    assert r.offload.h2d_bytes_per_step == STACK.hidden_bytes(ROWS_PER_DEVICE)


def test_remat_everything_uses_less_device_memory_and_no_host(reports):
    nothing, everything = reports["nothing"], reports["everything"]
    assert nothing.device.temp_bytes < everything.device.temp_bytes
    for r in (nothing, everything):
        assert r.host.temp_bytes == 0 and r.host.argument_bytes == 0 and r.offload.transfers == ()


def test_offloading_saves_device_memory_against_saving_on_device(reports):
    saved_on_device = jax.checkpoint_policies.save_only_these_names(toy.HIDDEN)
    placement = compiler.place(targets.target(reports["offload"].target.split(":")[0], "1x4"), backend_kind="cuda")
    rows = 1024  # large enough that the saved activations, not fixed buffers, set the peak
    offloaded, on_device = compile_stack(placement, OFFLOAD, rows), compile_stack(placement, saved_on_device, rows)
    assert on_device.host.temp_bytes == 0 and offloaded.host.temp_bytes == STACK.hidden_bytes(rows)
    assert on_device.device.peak_bytes - offloaded.device.peak_bytes >= 0.9 * STACK.hidden_bytes(rows)


def test_a_name_spares_recompute_only_on_the_tensor_autodiff_reads(reports):
    """Offloading the matmul output spares one of the layer's two forward matmuls; the same name
    on tanh's output moves as many bytes and spares nothing (tanh's derivative reads its own output)."""
    placement = compiler.place(targets.target(reports["offload"].target.split(":")[0], "1x4"), backend_kind="cuda")
    params = {k: placement.abstract(s, STACK.dtype) for k, s in STACK.param_shapes().items()}
    x = placement.abstract((ROWS_PER_DEVICE * 4, STACK.width), STACK.dtype, (tuple(placement.mesh.axis_names),))
    on_tanh = compiler.compile(toy.grad_fn(OFFLOAD, name_on="tanh"), params, x, placement=placement)
    matmul = 2 * ROWS_PER_DEVICE * STACK.width * STACK.hidden * STACK.layers  # one forward matmul, all layers
    assert reports["nothing"].flops.recompute == 2 * matmul
    assert reports["offload"].flops.recompute == matmul
    assert on_tanh.flops.recompute == 2 * matmul and on_tanh.host.temp_bytes == reports["offload"].host.temp_bytes
    with pytest.raises(ValueError, match="name_on='relu'.*matmul, tanh"):
        toy.forward({}, None, name_on="relu")


def test_report_serialises_and_summarises(reports):
    r = reports["offload"]
    d = r.to_dict()
    assert d["device"]["peak_bytes"] == r.device.peak_bytes and d["host"]["temp_bytes"] == r.host.temp_bytes
    assert d["offload"]["d2h_ops"] >= 1 and d["num_devices"] == 4 and d["fits"] is True
    assert "device->host" in r.summary() and r.compile_seconds > 0


def test_cpu_backend_drops_the_offload_and_says_so():
    placement = compiler.place(targets.target("h100", "1"), backend_kind="cpu")
    r = compile_stack(placement, OFFLOAD)
    assert r.backend == "cpu" and not r.offload_modelled
    assert r.host.temp_bytes == 0 and r.offload.transfers == ()
    assert "not modelled" in r.summary()


def test_missing_plugin_falls_back_to_cpu_with_one_warning(monkeypatch):
    info = compiler.backend()
    no_plugin = compiler.BackendInfo("cpu", info.local_devices, False, info.xla_flags_at_start, "")
    monkeypatch.setattr(compiler.placement, "backend", lambda: no_plugin)  # where `place` looks it up
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        placement = compiler.place(targets.target("h100", "1"))
    assert placement.backend == "cpu" and not placement.offload_modelled
    assert len(caught) == 1 and "CUDA PJRT plugin" in str(caught[0].message)
    with pytest.raises(ValueError, match="needs the CUDA PJRT plugin"):
        compiler.place(targets.target("h100", "1"), backend_kind="cuda")


def test_jit_arguments_go_to_jax_jit_not_compile():
    placement = compiler.place(targets.target("h100", "1"), backend_kind="cuda")
    with pytest.raises(ValueError, match="already jitted"):
        compiler.compile(jax.jit(lambda a: a), placement.abstract((4,)), placement=placement, donate_argnums=(0,))


def test_mesh_must_match_the_target():
    with pytest.raises(ValueError, match="multiply to 8"):
        compiler.place(targets.target("h100", "1x8"), {"fsdp": 4, "tensor": 4})
    with pytest.raises(ValueError, match="positive"):
        compiler.place(targets.target("h100", "1x8"), {"fsdp": 0})
    with pytest.raises(ValueError, match="unknown backend"):
        compiler.place(targets.target("h100", "1x8"), backend_kind="rocm")
    with pytest.raises(ValueError, match="compiles for TPU targets; h100:1x8 is a GPU"):
        compiler.place(targets.target("h100", "1x8"), backend_kind="tpu")
    placement = compiler.place(targets.target("h100", "1x8"), {"fsdp": 4, "tensor": 2})
    assert dict(placement.mesh.shape) == {"fsdp": 4, "tensor": 2}


def test_dump_gives_buffer_assignment_and_live_ranges():
    placement = compiler.place(targets.target("h100", "1x4"), backend_kind="cuda")
    r = compile_stack(placement, OFFLOAD, dump=True)
    assert r.dump is not None
    host_allocated = r.dump.allocated_bytes(memory_space=5)
    assert host_allocated == r.host.temp_bytes
    assert r.dump.sequence and r.dump.live_ranges and r.dump.peak_step is not None
    timeline = r.dump.temp_timeline()
    assert len(timeline) == len(r.dump.sequence)
    # values that share bytes count once: the busiest step fills the temp arena (XLA packs tightly)
    assert 0.99 * r.device.temp_bytes <= max(timeline) <= r.device.temp_bytes
    peak_step = timeline.index(max(timeline))
    ranges = {lr.buffer: (lr.start, lr.end) for lr in r.dump.live_ranges}
    names = {i.name for i in hlo.parse_module(r.dump.module_text).instructions()}
    for buffer, size, _ in r.dump.live_at(peak_step):
        assert ranges[buffer][0] <= peak_step <= ranges[buffer][1]  # alive then, by XLA's live ranges
        assert buffer.split("{")[0] in names  # an instruction of the compiled module
    # the offloaded activations are in the host arena, not in the device list
    assert r.dump.temp_timeline(memory_space=5)[peak_step] <= r.host.temp_bytes


def test_memory_timeline_draws_device_and_host_in_use():
    from companion import plots
    placement = compiler.place(targets.target("h100", "1x4"), backend_kind="cuda")
    offload = compile_stack(placement, OFFLOAD, dump=True)
    full = compile_stack(placement, POLICIES["nothing"], dump=True)
    assert max(offload.dump.temp_timeline(5)) == offload.host.temp_bytes == STACK.hidden_bytes(ROWS_PER_DEVICE)
    assert max(full.dump.temp_timeline(5), default=0) == 0
    fig = plots.memory_timeline({"offload": offload.dump, "full": full.dump})
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels[0].startswith("offload: device") and labels[1].startswith("offload: pinned host")
    assert len(labels) == 3  # full remat has no host line


def test_one_kernel_cache_per_gpu_shared_by_flag_sets_and_a_failing_cache_is_bypassed(tmp_path, monkeypatch):
    """Flag sets share the kernel cache (peaks unchanged); a cache file XLA cannot read is retried without."""
    monkeypatch.setenv(compiler.KERNEL_CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(report_cache.ENV, "off")  # every compile here must reach XLA
    placement = compiler.place(targets.target("h100", "1x8"))
    path = compiler.kernel_cache_file(placement)
    assert path == str(tmp_path / f"jaxlib-{jax.__version__}-h100.bin")
    cfg = models.config("tiny-llama")
    first = train.compile_step(train.trainer(cfg, "minimal_offloaded"), placement, 8, 256)
    size = os.path.getsize(path)
    again = train.compile_step(train.trainer(cfg, "minimal_offloaded"), placement, 8, 256,
                               flags="--xla_gpu_enable_pipelined_host_offloading=true")
    assert os.path.getsize(path) >= size and again.device.peak_bytes > 0
    (tmp_path / os.path.basename(path)).write_bytes(b"not a CompilationCacheProto")
    retried = []
    bypass = compiler._compile_without_cache
    monkeypatch.setattr(compiler.compilation, "_compile_without_cache", lambda *a: retried.append(1) or bypass(*a))
    third = train.compile_step(train.trainer(cfg, "minimal_offloaded"), placement, 8, 256)
    assert retried == [1] and third.device.peak_bytes == first.device.peak_bytes
    monkeypatch.setenv(compiler.KERNEL_CACHE_ENV, "off")
    assert compiler.kernel_cache_file(placement) is None


_EMPTY_AUTOTUNER_CONFIG = re.compile(r', backend_config=\{"operation_queue_id":"0","force_earliest_schedule":false,'
                                     r'"reification_cost":\[\],"device_type":"DEVICE_TYPE_INVALID",'
                                     r'"native_emitter_backend_config":\{[^}]*\}\}')


def test_deviceless_gpu_compiles_skip_autotuning_and_it_changes_no_byte_of_the_step(monkeypatch):
    """No GPU to time candidates: the autotuner is off (``DEVICELESS_GPU_OPTIONS``) unless the flags set it, and
    with it on the step is the same program but for empty backend configs, to the byte."""
    monkeypatch.setenv(report_cache.ENV, "off")
    gpu = compiler.place(targets.target("h100", "1x8"))
    assert compiler.deviceless_options(gpu, {}) == {"xla_gpu_autotune_level": 0}
    assert compiler.deviceless_options(gpu, {"xla_gpu_autotune_level": 4}) == {}
    assert compiler.deviceless_options(compiler.place(targets.target("tpu-v5e")), {}) == {}
    trainer = train.trainer(models.config("tiny-llama"), "minimal_offloaded")
    off = train.compile_step(trainer, gpu, 8, 256)
    on = train.compile_step(trainer, gpu, 8, 256, flags="--xla_gpu_autotune_level=4")
    assert (off.device, off.host, off.offload.d2h_bytes_per_step) == (on.device, on.host, on.offload.d2h_bytes_per_step)

    def body(report):  # the scheduled program less its module line (its fingerprint) and the empty configs
        return freshness.program_hash(_EMPTY_AUTOTUNER_CONFIG.sub("", report.hlo_text).split("\n", 1)[1])

    assert body(off) == body(on)
