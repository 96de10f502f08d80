"""Sphinx configuration of the Offload Lab site: the notebooks as pages (their stored outputs, never
re-executed) and the companion API from its docstrings. Built from the repository root:
``sphinx-build -b html -c docs . _site`` (``make site``)."""

project = "Offload Lab"
author = "Offload Lab"
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
root_doc = "docs/index"
include_patterns = ["docs/**", "notebooks/*.ipynb"]
exclude_patterns = ["_site", ".venv", "**/.ipynb_checkpoints", "docs/_root"]
nb_execution_mode = "off"  # the committed outputs are the pages; nbval keeps them true
nb_render_markdown_format = "myst"
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "sphinx_book_theme"  # as JAX's docs: a wide content column, the page's sections on the right
html_title = "Offload Lab"
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False, "use_download_button": True,
                      "home_page_in_toc": True}
html_static_path = ["_static"]
html_css_files = ["wide.css"]
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]
html_extra_path = ["_root"]  # index.html at the site's root, pointing at docs/index.html
