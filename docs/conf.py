"""Sphinx configuration of the wflow documentation (``sphinx-build -W -b html docs docs/_build/html``).

Markdown pages through MyST, the API reference from the numpydoc docstrings (``api.rst``), the
gallery of runnable examples (``examples/plot_*.py``, run at every build by sphinx-gallery),
and the pages kept elsewhere in the repository (README, changelog, study results) through the
local extension ``_ext/wflow_pages.py``. The site reads offline: MathJax is shipped with it
(``sphinx-mathjax-offline``), and ``_ext/offline_check.py`` fails the build if a built page or
stylesheet loads anything from the network.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # wflow from this tree (it is also installed in CI)

import wflow  # noqa: E402

project = "wflow"
author = "the wflow authors"
copyright = "the wflow authors"
release = version = wflow.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 shipped in _static/mathjax/ (no CDN)
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "wflow_pages",
    "offline_check",          # the build fails if a built page loads anything from the network
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# sphinx-gallery's page of execution times loads its table scripts from a CDN: not written (and a
# copy left by an older build is not read)
exclude_patterns = ["_build", "_ext", "sg_execution_times.rst", "auto_examples/sg_execution_times.rst"]

# ------------------------------------------------------------------------------ Markdown
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 4   # the pages link to section anchors, GitHub style (#9-the-reference-...)
myst_dmath_double_inline = True

# ------------------------------------------------------------------------------ API reference
autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_typehints = "none"         # the numpydoc sections say the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()

# ------------------------------------------------------------------------------ gallery
sphinx_gallery_conf = {
    "examples_dirs": str(DOCS.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "show_memory": False,
    "write_computation_times": False,
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
}

# ------------------------------------------------------------------------------ HTML
html_theme = "pydata_sphinx_theme"
html_title = f"wflow {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_static_path = []
html_show_sourcelink = False
