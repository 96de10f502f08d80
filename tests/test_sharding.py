import pytest
from jax.sharding import PartitionSpec as P

from companion import sharding

MESH = {"data": 1, "fsdp": 8, "tensor": 4, "expert": 2}


def test_logical_axes_map_to_mesh_axes():
    rules = sharding.AxisRules()
    assert rules.spec(("embed", "heads", "head_dim"), MESH) == P(("fsdp", "expert"), "tensor")
    assert rules.spec(("exp", "embed_moe", "mlp_moe"), MESH) == P("expert", "fsdp", "tensor")
    assert rules.spec(("activation_batch", "activation_length", "activation_embed"), MESH) == P(("fsdp", "expert"))
    # size-1 mesh axes are dropped; a mesh axis is used at most once per array
    assert rules.spec(("activation_group", "activation_exp"), {"fsdp": 4, "expert": 1}) == P("fsdp")


def test_shapes_must_divide_their_mesh_axes():
    rules = sharding.AxisRules()
    with pytest.raises(ValueError, match=r"dimension 0 \(embed, size 7168\) does not divide mesh axes "
                                         r"fsdp=9 \(9 ways\)"):
        rules.spec(("embed", "mlp"), {"fsdp": 9}, (7168, 18432), what="parameter w")
    assert rules.shard_shape((16384, 53248), ("embed", "mlp"), {"fsdp": 8, "tensor": 8}) == (2048, 6656)


def test_unknown_logical_axis():
    with pytest.raises(ValueError, match="no sharding rule for logical axis 'embedd'"):
        sharding.AxisRules().spec(("embedd",), MESH)


@pytest.mark.parametrize("text, devices, expected", [
    (None, 64, {"data": 1, "fsdp": 64, "tensor": 1, "expert": 1}),
    ("fsdp=8,tensor=8", 64, {"data": 1, "fsdp": 8, "tensor": 8, "expert": 1}),
    ("tensor=8,fsdp=-1", 64, {"data": 1, "fsdp": 8, "tensor": 8, "expert": 1}),
    ({"expert": 8, "fsdp": -1}, 64, {"data": 1, "fsdp": 8, "tensor": 1, "expert": 8}),
])
def test_parse_mesh(text, devices, expected):
    assert sharding.parse_mesh(text, devices) == expected


@pytest.mark.parametrize("text, message", [
    ("fsdp=8,tensor=4", "has 32 devices but the target has 64"),
    ("fsdp=-1,tensor=-1", "only one mesh axis may be -1"),
    ("pipeline=8", "unknown mesh axis 'pipeline'"),
    ("fsdp", "write AXIS=SIZE"),
    ("fsdp=x", "bad mesh size 'x'"),
    ("fsdp=0,tensor=-1", "must be positive"),
    ("tensor=3,fsdp=-1", "cannot fill 64 devices"),
    ("fsdp=2,fsdp=32", "given twice"),
    ({"fsdp": "64"}, "bad mesh size '64'"),
    ({"fsdp": 64.0}, "bad mesh size 64.0"),
    ({"fsdp": True}, "bad mesh size True"),
])
def test_bad_meshes(text, message):
    with pytest.raises(ValueError, match=message):
        sharding.parse_mesh(text, 64)
