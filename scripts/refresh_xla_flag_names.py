"""Regenerate the installed jaxlib's entry of companion/hardware/flags/data/xla_flags.json: every XLA flag it accepts, with
its type (the other jaxlibs' entries stay: the lab supports a range, and ``companion.hardware.flags.changes`` compares them).

Run after adding a jaxlib to the supported range:  .venv/bin/python scripts/refresh_xla_flag_names.py

How: candidate names are the ``xla_*`` words in the CUDA plugin's shared library; each one is
confirmed by a real compile-only compile that sets it to a sentinel value. XLA answers
"No such compile option" for names it does not know, and "'...' is not a valid <type> value"
for known ones, which also tells the flag's type (a string flag accepts the sentinel).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402

from companion import stderr, targets  # noqa: E402
from companion.hardware.flags import CATALOG  # noqa: E402

SENTINEL = "%%not-a-value%%"
TYPE_WORDS = {"bool": "bool", "int32": "int", "int64": "int", "float": "float", "double": "float",
              "enum": "enum", "message": "message"}


def candidate_names() -> set[str]:
    import jax_plugins.xla_cuda12 as plugin

    names = set(CATALOG)
    for library in Path(plugin.__file__).parent.glob("*.so"):
        names |= {m.decode() for m in re.findall(rb"xla_[a-z0-9_]{3,}", library.read_bytes())}
    return names


def main() -> None:
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    config = targets.gpu("h100").target_config_text()
    device = topologies.get_topology_desc(platform="cuda", target_config=config, topology="1x1x1").devices[0]
    arg = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=SingleDeviceSharding(device))
    lowered = jax.jit(lambda a: a + 1).lower(arg)
    found: dict[str, str] = {}
    out = ROOT / "companion" / "hardware" / "flags" / "data" / "xla_flags.json"
    # Path flags (xla_dump_to, ...) take the sentinel as a folder: let them write into a scratch dir.
    os.chdir(tempfile.mkdtemp(prefix="xla_flag_probe_"))
    with stderr.capture():
        for name in sorted(candidate_names()):
            try:
                lowered.compile(compiler_options={name: SENTINEL})
                found[name] = "string"
            except Exception as err:  # noqa: BLE001 - XLA's answer is the data
                message = str(err)
                if "No such compile option" in message:
                    continue
                m = re.search(r"is not a valid (\w+) value", message)
                found[name] = TYPE_WORDS.get(m.group(1), m.group(1)) if m else "string"
    table = json.loads(out.read_text())
    table["jaxlibs"][jaxlib.__version__] = found
    out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{len(found)} flags known to jaxlib {jaxlib.__version__} -> {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
