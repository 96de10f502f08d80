"""Write README's "Architecture" layers and diagram, and the site's API page, from ``companion.layers``.

    python scripts/architecture.py          # rewrites README.md between its architecture markers, and docs/api.md
    python scripts/architecture.py --check  # exits 1 if either is stale (tests/test_layers.py runs it)

Reads the source with ``ast`` only: it needs no JAX and imports nothing of the package but ``ground/layers.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
API = ROOT / "docs" / "api.md"
MARKERS = re.compile(r"(<!-- architecture: begin.*?-->\n)(.*?)(<!-- architecture: end -->)", flags=re.S)


def _layers():
    """``companion.layers`` loaded by path: importing ``companion`` itself would start JAX's backend."""
    spec = importlib.util.spec_from_file_location("companion_layers", ROOT / "companion" / "ground" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _automodules(module: str) -> list[str]:
    """``automodule`` directives for one module: its members; for a module split into parts, the package's
    docstring and then each part with its members (a part's members are defined there, not in the package)."""
    folder = ROOT / "companion" / module.replace(".", "/")
    parts = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__") if "." in module else []
    if not parts:
        return [f".. automodule:: companion.{module}\n   :members:"]
    return [f".. automodule:: companion.{module}"] + [f".. automodule:: companion.{module}.{part}\n   :members:"
                                                     for part in parts]


def api_page(layers) -> str:
    """The site's API reference: every module's docstring and members, layer by layer from the ground up (each
    layer a folder of ``companion/``)."""
    lines = ["# The companion API", "",
             "Layer by layer from the ground up (README, \"Architecture\"): each layer a folder of `companion/`; "
             "imports only point down.", ""]
    for layer in layers.LAYERS:
        modules = [m for m in layer.modules if not m.startswith("__")]
        if modules:
            lines += [f"## {layer.name}", "", layer.role[0].upper() + layer.role[1:] + ".", "", "```{eval-rst}"]
            lines += [d for m in modules for d in _automodules(m)]
            lines += ["```", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether README's section and the API page are current")
    args = parser.parse_args()
    layers = _layers()
    text = README.read_text()
    found = MARKERS.search(text)
    if not found:
        print("README.md has no '<!-- architecture: begin -->' ... '<!-- architecture: end -->' section",
              file=sys.stderr)
        return 2
    readme = text[:found.start(2)] + layers.readme_section(layers.imports()) + text[found.end(2):]
    stale = [path for path, wanted in ((README, readme), (API, api_page(layers))) if path.read_text() != wanted]
    if not stale:
        print("README.md's architecture and docs/api.md are current")
        return 0
    names = " and ".join(p.relative_to(ROOT).as_posix() for p in stale)
    if args.check:
        print(f"{names} stale: run `python scripts/architecture.py`", file=sys.stderr)
        return 1
    README.write_text(readme)
    API.write_text(api_page(layers))
    print(f"rewrote {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
