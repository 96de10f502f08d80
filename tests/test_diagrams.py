"""The series' drawn concepts (``companion.surfaces.diagrams``): their numbers, and the committed SVGs current."""

import subprocess
import sys
from pathlib import Path

import pytest

from companion.hardware import targets
from companion.memory import budget
from companion.surfaces import diagrams

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("compute, transfer", [(2.0, 3.0), (3.0, 2.0)])
def test_naive_offload_adds_every_transfer_and_pipelining_hides_what_the_compute_lasts(compute, transfer):
    layers = 4
    _, naive = diagrams.offload_schedule(compute, transfer, layers, pipelined=False)
    segments, pipelined = diagrams.offload_schedule(compute, transfer, layers, pipelined=True)
    assert naive == layers * (compute + transfer)
    # link-bound: the first layer's compute, then the transfers back to back; compute-bound: the last transfer trails
    assert pipelined == (compute + layers * transfer if transfer >= compute else layers * compute + transfer)
    link = [s for s in segments if s.lane == "link"]
    assert all(a.end <= b.start for a, b in zip(link, link[1:]))  # one transfer at a time
    assert all(s.start >= next(c.end for c in segments if c.lane == "compute" and c.layer == s.layer) for s in link)


def test_the_break_even_is_where_offloading_costs_what_recomputing_does():
    h100 = targets.target("h100:1x8").gpu
    offload, recompute, meet = diagrams.break_even_curve(117440512, 481036337152, h100, [1e10, 1e11])
    assert offload == [2 * 117440512 / 1e10, 2 * 117440512 / 1e11] and recompute == 481036337152 / h100.bf16_dense_flops
    at_meet, _, _ = diagrams.break_even_curve(117440512, 481036337152, h100, [meet])
    assert at_meet[0] == pytest.approx(recompute)


def test_the_hbm_stack_draws_the_budget_at_its_peak():
    target = targets.target("h100:1x8")
    step = budget.estimate("llama3.1-8b", 8, 4096, "qkv_proj_offloaded", "fsdp=8", 8, target=target)
    fig = diagrams.hbm_stack(step)
    device = [p for p in fig.axes[0].patches if abs(p.get_x() + p.get_width() / 2) < 1e-9]
    drawn = sum(p.get_height() for p in device)
    thin = sum(v for v in step.by_category("device").values() if v / 2**30 < 0.01 * fig.axes[0].get_ylim()[1])
    assert drawn == pytest.approx((step.device_bytes - thin) / 2**30)
    assert f"{step.device_bytes / 2**30:.1f} GiB at the peak" in fig.axes[0].get_title()


def test_the_committed_figures_are_what_the_script_writes(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts" / "diagrams.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    for written in sorted(tmp_path.glob("*.svg")):
        committed = ROOT / "docs" / "figures" / written.name
        assert committed.exists() and committed.read_bytes() == written.read_bytes(), (
            f"{committed.name} is stale: run scripts/diagrams.py")
