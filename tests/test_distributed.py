"""More than one process: jax.distributed from the environment, a 2-process train step, Orbax resume."""

import json
import socket
import subprocess
import sys
import time

import pytest

from companion import cli, distributed


@pytest.mark.parametrize("env, expected", [
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"},
     ("10.0.0.1:1234", 4, 3)),
    ({"JAX_COORDINATOR_IP": "node001", "JAX_COORDINATOR_PORT": "12345", "NNODES": "2", "NODE_RANK": "1"},
     ("node001:12345", 2, 1)),
    ({"SLURM_NTASKS": "16", "SLURM_PROCID": "5", "SLURM_STEP_NODELIST": "gpu[003-006,010]"}, ("gpu003:1234", 16, 5)),
    ({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}, None),
    ({}, None),
])
def test_cluster_from_the_environment(env, expected):
    cluster = distributed.Cluster.from_env(env)
    assert (cluster.coordinator_address, cluster.num_processes, cluster.process_id) == expected if expected \
        else cluster is None


@pytest.mark.parametrize("env, message", [
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "host:port"),
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:99999", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "1..65535"),
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"}, "0..1"),
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"}, "whole number"),
    ({"JAX_COORDINATOR_IP": "node1", "NNODES": "2", "NODE_RANK": "0"}, "host:port"),
])
def test_bad_cluster_settings_are_one_line(env, message):
    with pytest.raises(ValueError, match=message) as err:
        distributed.Cluster.from_env(env)
    assert "\n" not in str(err.value)


def test_first_host_of_a_slurm_nodelist():
    assert distributed.first_host("node[003-005,007],gpu01") == "node003"
    assert distributed.first_host("gpu01,gpu02") == "gpu01"
    with pytest.raises(ValueError, match="nodelist"):
        distributed.first_host("")


def test_cli_train_refuses_a_bad_coordinator_before_waiting(monkeypatch, capsys):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "localhost:0")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "0")
    assert cli.main(["train", "--steps", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "localhost:0" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(args, processes: int, devices_per_process: int, timeout: float) -> list[dict]:
    """Run ``python -m companion train`` as ``processes`` processes on CPU devices; their JSON lines."""
    port = _free_port()
    procs = []
    for i in range(processes):
        env = distributed.cpu_environment(devices_per_process)
        env["XLA_FLAGS"] += " --xla_backend_optimization_level=0"  # the same math, half the CPU compile (tests/cpu.py)
        for key in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_IP",
                    "SLURM_NTASKS"):
            env.pop(key, None)
        if processes > 1:
            env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(processes),
                       JAX_PROCESS_ID=str(i))
        procs.append(subprocess.Popen([sys.executable, "-m", "companion", "train", *args, "--json"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline, outs = time.monotonic() + timeout, []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert p.returncode == 0, err[-2000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            p.kill()
    return outs


def test_two_processes_train_like_one_and_resume_from_an_orbax_checkpoint(tmp_path):
    common = ["--model", "tiny-llama", "--batch", "8", "--seq", "32"]
    (single,) = _train([*common, "--steps", "6"], processes=1, devices_per_process=8, timeout=100)
    assert single["num_devices"] == 8 and len(single["losses"]) == 6
    first = _train([*common, "--steps", "4", "--checkpoint-dir", str(tmp_path), "--save-every", "2"],
                   processes=2, devices_per_process=4, timeout=100)
    assert [o["process_id"] for o in first] == [0, 1]
    assert all(o["num_processes"] == 2 and o["num_devices"] == 8 and o["saved"] == [2, 4] for o in first)
    for o in first:  # the batch and the FSDP-sharded parameters spread over both processes: the same losses
        assert o["losses"] == pytest.approx({k: single["losses"][k] for k in ("1", "2", "3", "4")}, rel=1e-5)
    resumed = _train([*common, "--steps", "6", "--checkpoint-dir", str(tmp_path)], processes=2,
                     devices_per_process=4, timeout=100)
    for o in resumed:  # restored into the same sharding (async save), and the run continues where it stopped
        assert o["resumed_from"] == 4 and set(o["losses"]) == {"5", "6"}
        assert o["losses"] == pytest.approx({k: single["losses"][k] for k in ("5", "6")}, rel=1e-5)
