import json
import subprocess
import sys


def companion(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "companion", *args], capture_output=True, text=True, timeout=120)


def test_targets_json_lists_the_catalog_with_memory_and_links():
    out = companion("targets", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    gpus = {g["key"]: g for g in data["gpus"]}
    assert set(gpus) >= {"h100", "h200", "b200", "gb200"}
    for g in gpus.values():
        assert g["hbm_bytes"] > 70 * 2**30
        assert g["host_link_bidirectional_bytes_per_s"] == 2 * g["host_link_per_direction_bytes_per_s"]
    assert gpus["gb200"]["host_link_bidirectional_bytes_per_s"] == 900e9
    assert gpus["h100"]["host_link_bidirectional_bytes_per_s"] == 128e9
    assert data["host_links"]["nvlink_c2c_vera_rubin"]["bidirectional_bytes_per_s"] == 1800e9
    assert out.stderr == ""


def test_targets_table_and_flag_listing():
    table = companion("targets")
    assert table.returncode == 0 and "gb200" in table.stdout and "NVLink-C2C" in table.stdout
    listing = companion("flags")
    assert listing.returncode == 0 and "--xla_gpu_enable_pipelined_host_offloading=false" in listing.stdout


def test_unknown_subcommand_fails():
    assert companion("nonsense").returncode != 0
