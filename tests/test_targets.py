import dataclasses

import pytest

from companion import compiler, targets
from companion.hardware.targets import GB, GiB


def test_catalog_has_the_five_targets_with_datasheet_facts():
    assert set(targets.GPUS) >= {"h100", "h200", "gh200", "b200", "gb200"}
    for g in targets.GPUS.values():
        marketed_gb = float(g.hbm_marketing.split()[0])
        # The CUDA total is a little below the marketed GB read as GiB (80 GB card: ~79 GiB).
        assert 0.95 * marketed_gb < g.hbm_bytes / GiB <= 1.0 * marketed_gb, g.key
        assert g.bf16_dense_flops > 0.9e15 and g.fp8_dense_flops == pytest.approx(2 * g.bf16_dense_flops, rel=0.01)
        assert g.compute_capability[0] in (9, 10)
    assert targets.gpu("h100").host_link.key == "pcie5_x16"
    assert targets.gpu("gb200").host_link.key == "nvlink_c2c_gb200"
    assert targets.gpu("gh200").host_link.key == "nvlink_c2c_gh200"


def test_host_links_nominal_and_achievable():
    pcie = targets.host_link("pcie5_x16")
    assert pcie.bidirectional_bytes_per_s == 128 * GB and pcie.per_direction_bytes_per_s == 64 * GB
    assert 50 * GB < pcie.achievable_h2d < pcie.nominal_per_direction  # ~55 GB/s measured
    assert targets.host_link("nvlink_c2c_gb200").bidirectional_bytes_per_s == 900 * GB
    assert targets.host_link("nvlink_c2c_gh200").bidirectional_bytes_per_s == 900 * GB
    assert targets.host_link("nvlink_c2c_vera_rubin").bidirectional_bytes_per_s == 1800 * GB
    for link in targets.HOST_LINKS.values():
        for d in ("d2h", "h2d"):
            assert link.bandwidth_per_gpu(d, 1) <= link.nominal_per_direction
            assert link.bandwidth_per_gpu(d) <= link.bandwidth_per_gpu(d, 1)


def test_shared_links_divide_between_the_gpus_that_share_them():
    gb200 = targets.host_link("nvlink_c2c_gb200")  # one Grace, one C2C, two B200
    assert gb200.gpus_per_link == 2 and gb200.assumption  # the split is not public: stated
    alone, shared = gb200.bandwidth_per_gpu("h2d", 1), gb200.bandwidth_per_gpu("h2d")
    assert shared == pytest.approx(alone / 2)
    assert gb200.transfer_seconds(190 * GB, "h2d") == pytest.approx(190 / (380 / 2))
    gh200 = targets.host_link("nvlink_c2c_gh200")  # one GPU per Grace: nothing to share
    assert gh200.bandwidth_per_gpu("d2h") == gh200.bandwidth_per_gpu("d2h", 1)
    # HGX: a PCIe link each, host DRAM per socket shared by 4 GPUs; the link is the limit
    pcie = targets.host_link("pcie5_x16")
    assert pcie.gpus_per_link == 1 and pcie.gpus_per_host_memory == 4 and pcie.carries_nic_traffic
    assert pcie.bandwidth_per_gpu("d2h", 4) == pcie.achievable_d2h
    assert pcie.host_memory_bytes_per_s / 4 > pcie.achievable_d2h
    # the host memory caps a link once enough GPUs share it
    tight = dataclasses.replace(pcie, host_memory_bytes_per_s=100 * GB)
    assert tight.bandwidth_per_gpu("d2h", 4) == pytest.approx(25 * GB)
    with pytest.raises(ValueError, match="direction 'up'"):
        pcie.bandwidth_per_gpu("up")
    with pytest.raises(ValueError, match="concurrent_gpus"):
        pcie.transfer_seconds(1, "d2h", 0)


def test_a_target_shares_its_link_only_with_the_devices_it_has_on_a_host():
    # an SPMD step on a full board offloads on every GPU at once: the sharing group divides the link
    assert targets.target("gb200").transferring_together() == 2
    assert targets.target("h100", "1x8").transferring_together() == 4  # PCIe: 4 GPUs per socket's memory
    # one chip alone on its host (the lent v5e VM) gets the link's own measured rate, not an eighth of an
    # 8-chip host's memory (100 GB/s / 8 = 12.5 GB/s, below the 14.75 GB/s measured)
    v5e = targets.target("tpu-v5e")
    assert v5e.transferring_together() == 1
    assert v5e.link.bandwidth_per_gpu("d2h", v5e.transferring_together()) == v5e.link.achievable_d2h
    assert v5e.link.bandwidth_per_gpu("d2h") < v5e.link.achievable_d2h  # eight chips at once would be capped
    # a what-if link is counted by its own sharing group
    assert targets.target("gb200", "1x8").transferring_together(targets.host_link("pcie5_x16")) == 4


def test_usable_hbm_is_the_allocator_limit():
    t = targets.target("h100", "1x8")
    assert t.mem_fraction == 0.75
    assert t.usable_hbm_bytes == pytest.approx(0.75 * t.hbm_bytes, abs=2 * 2**20)
    assert t.usable_hbm_bytes % (2 * 2**20) == 0  # the BFC allocator rounds to 2 MiB
    assert t.with_mem_fraction(0.9).usable_hbm_bytes > t.usable_hbm_bytes
    for bad in (0, 1.2, -0.5, "lots"):
        with pytest.raises(ValueError, match="outside \\(0, 1\\]"):
            targets.target("h100", mem_fraction=bad)


def test_pinned_host_pool_is_in_gib():
    assert targets.pinned_host_pool_bytes({}) == 64 * GiB
    assert targets.pinned_host_pool_bytes({"XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE": "true"}) == 16 * GiB
    assert targets.pinned_host_pool_bytes({"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "180"}) == 180 * GiB
    with pytest.raises(ValueError, match="whole number of GiB"):
        targets.pinned_host_pool_bytes({"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "1.5"})


@pytest.mark.parametrize("spec, devices, text", [
    ("8x8", 64, "1x8x8"), ("1x8x8", 64, "1x8x8"), ("2x18x4", 144, "2x18x4"),
    ("nvl72", 72, "1x18x4"), (64, 64, "1x8x8"), (4, 4, "1x1x4"), ("1", 1, "1x1x1"),
])
def test_topology_parsing(spec, devices, text):
    topo = targets.topology(spec)
    assert topo.num_devices == devices and topo.spec == text


@pytest.mark.parametrize("bad", ["8by8", "0x8", "", 12, 0, "x8"])
def test_bad_topology_is_a_clear_error(bad):
    with pytest.raises(ValueError):
        targets.topology(bad)


def test_unknown_names_list_the_choices():
    with pytest.raises(ValueError, match="h100.*h200.*b200.*gb200"):
        targets.gpu("h1000")
    with pytest.raises(ValueError, match="pcie5_x16"):
        targets.host_link("pcie4")


def test_target_spelling_and_what_ifs():
    t = targets.target("h100:8x8")
    assert t.num_devices == 64 and t.name == "h100:8x8" and t.link.key == "pcie5_x16"
    assert targets.target("gb200").num_devices == 72
    assert t.with_link("nvlink_c2c_vera_rubin").link.per_direction_bytes_per_s == 900 * GB
    assert t.with_link("nvlink_c2c_vera_rubin").link_is_what_if and not t.link_is_what_if


@pytest.mark.parametrize("key", sorted(targets.GPUS))
def test_rendered_config_has_the_field_set_of_xlas_spec_files(key):
    g = targets.gpu(key)
    text = g.target_config_text()
    for field in ("scalar_unit_description", "matrix_unit_description", "pcie_bandwidth", "model_str",
                  "platform_version", "thread_dim_limit_x", "device_vendor", "runtime_version",
                  "device_interconnect_info"):
        assert field in text, field
    # XLA's dot cost model: flops = clock x ops_per_clock x 2 x SMs x units, from the bf16 (key 16) entry
    units, ops = g.architecture.matrix_units[16]
    assert g.tensor_clock_ghz * 1e9 * ops * 2 * g.sm_count * units == pytest.approx(g.bf16_dense_flops)
    assert f"device_memory_size: {g.hbm_bytes}" in text


def test_target_config_makes_the_compile_only_memory_base_the_allocator_limit():
    t = targets.target("h100", "1x8", mem_fraction=0.9)
    size = int(t.target_config_text().split("device_memory_size: ")[1].split()[0])
    assert size * 80 // 100 == t.usable_hbm_bytes  # XLA's compile-only base is 80 % of it


@pytest.mark.parametrize("key", sorted(targets.GPUS))
def test_rendered_target_config_builds_a_compile_only_topology(key):
    """The config text we render from datasheet facts is accepted by jaxlib's CUDA plugin."""
    target = targets.target(key, "1x2")
    placement = compiler.place(target, backend_kind="cuda")
    kinds = {d.device_kind for d in placement.mesh.devices.flat}
    assert kinds == {target.gpu.device_kind}
    assert placement.num_devices == 2
