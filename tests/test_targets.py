import pytest

from companion import compiler, targets
from companion.targets import GB, GiB


def test_catalog_has_the_four_targets_with_datasheet_facts():
    assert set(targets.GPUS) >= {"h100", "h200", "b200", "gb200"}
    for g in targets.GPUS.values():
        marketed_gb = float(g.hbm_marketing.split()[0])
        # The CUDA total is a little below the marketed GB read as GiB (80 GB card: ~79 GiB).
        assert 0.95 * marketed_gb < g.hbm_bytes / GiB <= 1.0 * marketed_gb, g.key
        assert g.bf16_dense_flops > 0.9e15 and g.fp8_dense_flops == pytest.approx(2 * g.bf16_dense_flops, rel=0.01)
        assert g.compute_capability[0] in (9, 10)
    assert targets.gpu("h100").host_link.key == "pcie5_x16"
    assert targets.gpu("gb200").host_link.key == "nvlink_c2c"


def test_host_links():
    assert targets.host_link("pcie5_x16").bidirectional_bytes_per_s == 128 * GB
    assert targets.host_link("pcie5_x16").per_direction_bytes_per_s == 64 * GB
    assert targets.host_link("nvlink_c2c").bidirectional_bytes_per_s == 900 * GB
    assert targets.host_link("nvlink_c2c_vera_rubin").bidirectional_bytes_per_s == 1800 * GB
    assert targets.host_link("pcie5_x16").transfer_seconds(64 * GB) == pytest.approx(1.0)


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


@pytest.mark.parametrize("key", sorted(targets.GPUS))
def test_rendered_target_config_builds_a_compile_only_topology(key):
    """The config text we render from datasheet facts is accepted by jaxlib's CUDA plugin."""
    target = targets.target(key, "1x2")
    placement = compiler.place(target, backend_kind="cuda")
    kinds = {d.device_kind for d in placement.mesh.devices.flat}
    assert kinds == {target.gpu.device_kind}
    assert placement.num_devices == 2
