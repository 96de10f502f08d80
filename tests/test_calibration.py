"""The GPU harness up to where it needs a GPU, and the simulator's calibration against a harness file."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from companion import calibration, compiler, models, schedule, targets, train

ROOT = Path(__file__).resolve().parents[1]


def test_the_harness_plans_then_says_it_needs_a_gpu():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "harness.py"), "--layers", "2"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert "plan: llama3.1-8b x 2 layers" in run.stdout and "minimal_offloaded (pipelined)" in run.stdout
    err = run.stderr.strip().splitlines()[-1]
    assert err.startswith("error: no NVIDIA GPU") and "GPU machine" in err


@pytest.mark.parametrize("kind, key", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                       ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA B200", "b200"),
                                       ("NVIDIA GB200", "gb200")])
def test_device_kinds_map_to_targets(kind, key):
    assert calibration.gpu_key(kind) == key


def test_an_unknown_gpu_or_file_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="A100"):
        calibration.gpu_key("NVIDIA A100-SXM4-80GB")
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a GPU harness file"):
        calibration.load(bad)


def test_calibration_reports_the_simulators_error_per_configuration(tmp_path):
    """A harness file whose 'measurements' are the simulation scaled by known factors: calibrate must
    recover those factors as its errors, and compare the compiled peak with the recorded one."""
    target = targets.target("h100", 2)
    cfg = models.config("tiny-llama")
    steps, factors = [], {"full": 1.25, "minimal_offloaded": 0.8}
    for policy, factor in factors.items():
        report = train.compile_layer_stack(cfg, policy, compiler.place(target), 4, 128)
        simulated = schedule.simulate(report, target).step_seconds
        steps.append({"model": "tiny-llama", "layers": cfg.num_layers, "batch": 4, "seq": 128, "policy": policy,
                      "flags": "", "gpus": 2, "step_seconds": simulated * factor, "peak_bytes": report.device.peak_bytes})
    path = tmp_path / "gpu_h100.json"
    link = {d: {"one_gpu_bytes_per_s": 5e10, "all_gpus_per_gpu_bytes_per_s": 4e10, "gpus": 2} for d in ("d2h", "h2d")}
    path.write_text(json.dumps({"format": calibration.FORMAT, "device_kind": "NVIDIA H100 80GB HBM3", "gpu": "h100",
                                "gpus": 2, "bandwidth": link, "steps": steps}))
    result = calibration.calibrate(path)
    assert result.gpu == "h100" and result.link_measured_bytes_per_s == {"d2h": 4e10, "h2d": 4e10}
    errors = {c.label.split()[-1]: c.error for c in result.comparisons}
    assert errors == pytest.approx({p: 1 / f - 1 for p, f in factors.items()}, rel=1e-6)
    assert all(c.compiled_peak_bytes == c.measured_peak_bytes for c in result.comparisons)
    assert result.median_abs_error == pytest.approx(sorted(abs(e) for e in errors.values())[0] / 2
                                                    + sorted(abs(e) for e in errors.values())[1] / 2)
    assert [r["error"] for r in result.rows()] == [f"{1 / f - 1:+.1%}" for f in factors.values()]
