"""Write README's "Architecture" layers and diagram from ``companion.layers`` and the imports the source has.

    python scripts/architecture.py          # rewrites the part of README.md between the architecture markers
    python scripts/architecture.py --check  # exits 1 if README's part is stale (tests/test_layers.py checks it too)

Reads the source with ``ast`` only: it needs no JAX and imports nothing of the package but ``layers``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKERS = re.compile(r"(<!-- architecture: begin.*?-->\n)(.*?)(<!-- architecture: end -->)", flags=re.S)


def _layers():
    """``companion.layers`` loaded by path: importing ``companion`` itself would start JAX's backend."""
    spec = importlib.util.spec_from_file_location("companion_layers", ROOT / "companion" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether README's section is current")
    args = parser.parse_args()
    layers = _layers()
    text = README.read_text()
    found = MARKERS.search(text)
    if not found:
        print("README.md has no '<!-- architecture: begin -->' ... '<!-- architecture: end -->' section",
              file=sys.stderr)
        return 2
    section = layers.readme_section(layers.imports())
    if found.group(2) == section:
        print("README.md's architecture is current")
        return 0
    if args.check:
        print("README.md's architecture is stale: run `python scripts/architecture.py`", file=sys.stderr)
        return 1
    README.write_text(text[:found.start(2)] + section + text[found.end(2):])
    print("README.md: architecture rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
