"""More than one process: ``jax.distributed`` set up the way MaxText and SLURM jobs set it up.

A multi-host JAX job runs one process per host (or per GPU); each calls
``jax.distributed.initialize(coordinator_address, num_processes, process_id)`` before touching a
device, and then sees every process's devices in ``jax.devices()``. ``Cluster.from_env`` reads the
variables launchers set, in this order:

* JAX's own: ``JAX_COORDINATOR_ADDRESS`` (``host:port``), ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``;
* MaxText's GPU launchers (``initialize_jax_for_gpu`` in MaxText's ``max_utils.py``):
  ``JAX_COORDINATOR_IP``, ``JAX_COORDINATOR_PORT``, ``NNODES``, ``NODE_RANK``;
* SLURM (``srun``): ``SLURM_NTASKS``, ``SLURM_PROCID``, the first host of ``SLURM_STEP_NODELIST``
  (or ``SLURM_JOB_NODELIST``) and ``JAX_COORDINATOR_PORT`` (default 1234).

None of them: one process, nothing to initialize. A bad address, count or rank is a one-line
``ValueError`` before JAX sees it (JAX would otherwise wait for peers until its timeout).

On CPU devices (tests, this lab's machine) cross-process collectives need gloo
(``jax_cpu_collectives_implementation``), and each process may fake several devices
(``--xla_force_host_platform_device_count``): ``cpu_environment`` gives the variables for that.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Mapping

DEFAULT_SLURM_PORT = 1234


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where the coordinator is, how many processes there are and which one this is."""

    coordinator_address: str  # host:port
    num_processes: int
    process_id: int
    source: str = "explicit"  # which variables it came from

    def __post_init__(self):
        host, port = parse_address(self.coordinator_address)
        object.__setattr__(self, "coordinator_address", f"{host}:{port}")
        n, i = self.num_processes, self.process_id
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"number of processes must be a positive integer, got {n!r}")
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
            raise ValueError(f"process id {i!r} is not one of 0..{n - 1} (for {n} processes)")

    @property
    def is_coordinator(self) -> bool:
        return self.process_id == 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Cluster | None":
        """The cluster the environment describes (see the module docstring), or None for one process."""
        env = os.environ if environ is None else environ
        if env.get("JAX_COORDINATOR_ADDRESS"):
            return cls(env["JAX_COORDINATOR_ADDRESS"], _int(env, "JAX_NUM_PROCESSES"), _int(env, "JAX_PROCESS_ID"),
                       "JAX_*")
        if env.get("JAX_COORDINATOR_IP"):
            port = env.get("JAX_COORDINATOR_PORT") or ""
            return cls(f"{env['JAX_COORDINATOR_IP']}:{port}", _int(env, "NNODES"), _int(env, "NODE_RANK"),
                       "MaxText (JAX_COORDINATOR_IP, NNODES, NODE_RANK)")
        if env.get("SLURM_NTASKS") and int(env.get("SLURM_NTASKS", "1") or 1) > 1:
            nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
            port = env.get("JAX_COORDINATOR_PORT") or str(DEFAULT_SLURM_PORT)
            return cls(f"{first_host(nodes)}:{port}", _int(env, "SLURM_NTASKS"), _int(env, "SLURM_PROCID"), "SLURM")
        return None

    def initialize(self, **kwargs) -> None:
        """``jax.distributed.initialize`` for this process (before any other JAX call touches a device)."""
        import jax

        if jax.distributed.is_initialized():
            raise ValueError("jax.distributed is already initialized in this process")
        jax.distributed.initialize(coordinator_address=self.coordinator_address,
                                   num_processes=self.num_processes, process_id=self.process_id, **kwargs)


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); a one-line error naming what is wrong."""
    m = re.fullmatch(r"\s*(\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(\d+)\s*", str(text or ""))
    if not m:
        raise ValueError(f"bad coordinator address {text!r}: write host:port, e.g. 10.0.0.1:1234 or node001:1234")
    port = int(m.group(2))
    if not 0 < port < 65536:
        raise ValueError(f"bad coordinator port {port} in {text!r}: choose 1..65535")
    return m.group(1), port


def first_host(nodelist: str) -> str:
    """The first host of a SLURM nodelist: ``node[003-005,007],gpu01`` -> ``node003``."""
    text = (nodelist or "").strip()
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", text)
    if not m or not m.group(1):
        raise ValueError(f"bad SLURM nodelist {nodelist!r}: cannot find its first host")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name)
    if value is None or not re.fullmatch(r"\s*-?\d+\s*", value):
        raise ValueError(f"{name}={value!r}: a whole number is needed to set up jax.distributed")
    return int(value)


def cpu_environment(devices_per_process: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables for a process that runs on CPU devices only, ``devices_per_process`` of them."""
    if not isinstance(devices_per_process, int) or devices_per_process < 1:
        raise ValueError(f"devices per process must be a positive integer, got {devices_per_process!r}")
    env = dict(os.environ if base is None else base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices_per_process}"])
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    return env
