"""The series as a website: `make site` builds every notebook page from its stored outputs, with its
figures, the API reference, and no broken internal link."""

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    sphinx = Path(sys.executable).with_name("sphinx-build")
    run = subprocess.run([str(sphinx), "-q", "-b", "html", "-c", "docs", ".", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_every_notebook_has_a_page_with_its_figures(site):
    assert NOTEBOOKS, "no notebooks found"
    for name in NOTEBOOKS:
        page = site / "notebooks" / f"{name}.html"
        assert page.exists(), f"no page for {name}"
        html = page.read_text()
        stored_figures = sum('"image/png"' in line for line in (ROOT / "notebooks" / f"{name}.ipynb").read_text().splitlines())
        assert html.count("<img") >= min(stored_figures, 1), f"{name}: figures missing"
        assert "Objectives" in html and "Takeaways" in html


def test_the_index_links_every_notebook_and_the_api(site):
    index = (site / "docs" / "index.html").read_text()
    for name in NOTEBOOKS:
        assert f"notebooks/{name}.html" in index
    api = (site / "docs" / "api.html").read_text()
    assert "companion.timing.schedule.replay.simulate" in api and "companion.hardware.targets.links.HostLink" in api
    assert (site / "index.html").exists()


def test_no_broken_internal_links(site):
    broken = []
    for page in site.rglob("*.html"):
        if page.relative_to(site).parts[0] == "_static":  # the theme's Jinja macro files, not pages
            continue
        for ref in re.findall(r'(?:href|src)="([^"]+)"', page.read_text()):
            parsed = urlparse(ref)
            if parsed.scheme or ref.startswith(("#", "mailto:", "//", "data:")):
                continue
            target = (page.parent / unquote(parsed.path)).resolve()
            if parsed.path and not target.exists():
                broken.append(f"{page.relative_to(site)} -> {ref}")
    assert not broken, broken[:10]


def test_pages_read_like_the_jax_docs(site):
    """JAX's docs' theme (sphinx-book-theme) with the lab's wide content column: tables scroll inside their cell,
    not the page."""
    html = (site / "notebooks" / "06_405b_at_scale.html").read_text()
    assert "sphinx-book-theme" in html and "_static/wide.css" in html
    css = (site / "_static" / "wide.css").read_text()
    assert "max-width: 100rem" in css and "overflow-x: auto" in css
