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
html_theme = "alabaster"
html_title = "Offload Lab"
html_theme_options = {"description": "GPU memory and step time for JAX LLM training", "show_relbars": True}
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]
html_extra_path = ["_root"]  # index.html at the site's root, pointing at docs/index.html
