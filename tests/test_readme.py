"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_compile_example_reports_the_offload():
    blocks = python_blocks()
    assert blocks, "README has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    report = namespace["report"]
    assert report.backend == "cuda" and report.num_devices == 8
    assert report.host.temp_bytes == 8 * 1024 * 8192 * 2 == 2**27
    assert round(report.flops.recompute / 1e12, 2) == 0.27  # one of the layer's two matmuls, as the comment says


def test_readme_own_module_example_offloads_its_named_activation():
    namespace: dict = {}
    exec(compile(python_blocks()[1], "README.md", "exec"), namespace)
    report, policy = namespace["report"], namespace["policy"]
    assert namespace["emitted"] == {"mlpwi_0", "mlpwo"}
    assert policy.touched(namespace["emitted"]) == {"mlpwi_0": "offload", "mlpwo": "offload"}
    # four blocks, each offloading its [256, 4096] float32 up-projection once and reading it back once
    assert report.offload.d2h_bytes_per_step == report.offload.h2d_bytes_per_step == 4 * 256 * 4096 * 4
    assert report.host.temp_bytes > 0
