"""The chip lock's smoke leg (``make test-chip``, Python 3.11, jax 0.10.2, libtpu 0.0.42.1: the lent TPU's
stack): three steps measured on the chip recompile, with libtpu's compile-only v5e, to the bytes XLA:TPU reported
on the chip, to the byte: the peak of one that ran, the bytes needed by two it refused (all 87 stored compile-only
peaks equal the chip's). On any other jaxlib or
libtpu the stored bytes are not this compiler's: skipped there, and the benchmarks that write chip results
refuse to run (``freshness.refuse_off_lock``)."""

import json
import sys

import pytest

from companion import freshness, libtpu

sys.path.insert(0, str(freshness.ROOT / "benchmarks"))

# Full remat at S 16K, which ran (its peak bytes: ~45 s on 2 cores); and two steps XLA:TPU refused over HBM on the
# chip (the bytes it needed: under a second each): the cheapest compiles of the stored chip steps.
CHIP_STEPS = ("L4-B1-S16384-full", "L4-B29-S2048-minimal", "L4-B33-S2048-qkv_device")
LOCKED = freshness.locked_versions()
ON_CHIP_LOCK = libtpu.installed() and freshness.on_chip_lock()

pytestmark = pytest.mark.skipif(not ON_CHIP_LOCK, reason=f"the chip lock's compiler only ({freshness.CHIP_LOCK})")


def _measured() -> dict[str, dict]:
    stored = json.loads((freshness.ROOT / "benchmarks" / "results" / "measured.json").read_text())
    return {row["key"]: row for row in stored["steps"]}


@pytest.mark.parametrize("key", CHIP_STEPS)
def test_a_chip_step_recompiles_to_its_measured_bytes(key):
    import bench_measured

    from companion import compiler, targets

    step = next(s for s in bench_measured.GRID + bench_measured.FRESH if s.key == key)
    row = _measured()[key]
    try:
        report = bench_measured.compile_step(step, compiler.place(targets.target("tpu-v5e")))
    except compiler.DoesNotFit as refused:  # refused on the chip too: the bytes it needed, to the byte
        assert row["verdict"]["status"] == "does_not_fit" and refused.needed_bytes == row["verdict"]["needed_bytes"]
    else:
        assert row["verdict"]["status"] == "runs" and report.device.peak_bytes == row["compile"]["peak_bytes"]


def test_the_chip_lock_pins_what_the_chip_runs():
    machine = json.loads((freshness.ROOT / "benchmarks" / "results" / "measured.json").read_text())["sessions"]
    ran = {(s["jax"], s["jaxlib"], s["libtpu"]) for s in machine}
    assert ran == {(LOCKED["jax"], LOCKED["jaxlib"], LOCKED["libtpu"])}


def test_the_code_key_is_python_3_12_s_on_the_chip_lock_s_3_11():
    """The chip lock's Python writes the same code key as the main lock's (3.12 added ``type_params`` to every
    definition's syntax tree: ``freshness`` keys it as 3.12 writes it): a chip result is checkable on either lock."""
    for name in ("central", "plan", "decision_shapes"):
        stamp = json.loads((freshness.ROOT / "benchmarks" / "results" / f"{name}.json").read_text())["stamp"]
        assert freshness.fingerprint(stamp["producer"]) == stamp["code"], name
