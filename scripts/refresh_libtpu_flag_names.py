"""Regenerate companion/hardware/data/libtpu_flags.json: every flag the installed libtpu accepts, with its type.

Run after changing the libtpu pin:  .venv/bin/python scripts/refresh_libtpu_flag_names.py   (~1 h on 2 cores)

How (as ``refresh_xla_flag_names.py`` does for the CUDA plugin): candidate names are the ``xla_*``
words in ``libtpu.so``; each one is set to a sentinel in a compile-only v5e compile of a scalar
program. libtpu answers "No such compile option" for a name it does not know and "Failed to parse"
for a known one the sentinel is no value of; a name that takes the sentinel is a string flag. The
type of the others comes from which of ``true``, ``7`` and ``0.5`` they take; a flag that takes both ``true``
and ``ENABLED`` is a tri-state (``ENABLED``/``DISABLED``, or true/false).

Some names abort the whole process when set (a CHECK in libtpu, not an error): the probes run in
worker processes over chunks of names; when a worker dies, the name it was probing is recorded as
``aborts`` (known to libtpu, unsafe to set) and a new worker carries on after it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "companion" / "hardware" / "data" / "libtpu_flags.json"
SENTINEL = "%%not-a-value%%"


def candidate_names() -> list[str]:
    import libtpu as package

    library = Path(package.get_library_path())
    return sorted({m.decode() for m in re.findall(rb"xla_[a-z0-9_]{3,}", library.read_bytes())})


def worker(names: list[str]) -> None:
    """Probe ``names`` in order, printing one JSON line per name as soon as it is known."""
    sys.path.insert(0, str(ROOT))
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    from companion import libtpu, stderr, targets

    device = libtpu.topology(targets.tpu("tpu-v5e")).devices[0]
    lowered = jax.jit(lambda x: x + 1).lower(jax.ShapeDtypeStruct((), jnp.float32, sharding=SingleDeviceSharding(device)))
    scratch = tempfile.mkdtemp()  # string flags that name folders (dumps) write there, not into the checkout

    def accepts(name: str, value: str) -> bool | None:
        try:
            with stderr.capture():
                lowered.compile(compiler_options={name: value if value != SENTINEL else f"{scratch}/{SENTINEL}"})
            return True
        except Exception as err:  # noqa: BLE001 - libtpu's refusals are runtime errors
            return None if "No such compile option" in str(err) else False

    for name in names:
        print(json.dumps({"name": name, "probing": True}), flush=True)
        first = accepts(name, SENTINEL)
        if first is None:
            kind = None
        elif first:
            kind = "string"
        else:
            kind = next((k for k, v in (("bool", "true"), ("int", "7"), ("float", "0.5")) if accepts(name, v)), "enum")
            if kind == "bool" and accepts(name, "ENABLED"):  # a tri-state (MaxText writes ENABLED) that takes true too
                kind = "tristate"
        print(json.dumps({"name": name, "kind": kind}), flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(json.loads(sys.argv[2]))
        return
    names = candidate_names()
    known: dict[str, str] = {}
    todo = list(names)
    while todo:
        chunk, todo = todo[:400], todo[400:]
        done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(chunk)], capture_output=True, text=True)
        probing = None
        finished = set()
        for line in done.stdout.splitlines():
            row = json.loads(line)
            if row.get("probing"):
                probing = row["name"]
                continue
            finished.add(row["name"])
            if row["kind"]:
                known[row["name"]] = row["kind"]
        if done.returncode and probing and probing not in finished:  # the probe of this name killed the worker
            known[probing] = "aborts"
            todo = chunk[chunk.index(probing) + 1:] + todo
        print(f"{len(names) - len(todo)}/{len(names)}: {len(known)} known", file=sys.stderr)
    import libtpu

    from importlib.metadata import version

    OUT.write_text(json.dumps({"libtpu": version("libtpu"), "flags": dict(sorted(known.items()))}, indent=0) + "\n")
    print(f"{len(known)} flags of {len(names)} candidates -> {OUT}")


if __name__ == "__main__":
    main()
