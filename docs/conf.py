"""Sphinx configuration of tfsmith's documentation (`make docs`; MyST reads the Markdown pages).

The navigation is NAV, one list: it becomes a hidden toctree added to index.md while Sphinx reads it, so the
pages stay plain Markdown that reads well on GitHub too. A page missing from NAV is a warning ("document isn't
included in any toctree"), and `make docs` turns every warning into a failure (-W), broken links included.
"""

from __future__ import annotations

project = "tfsmith"
author = "tfsmith developers"
copyright = "tfsmith developers"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Links between pages are plain Markdown links ([GPU hosts](gpu.md#anchor)); anchors are the headings' slugs.
myst_heading_anchors = 4
myst_enable_extensions = ["deflist"]
suppress_warnings: list[str] = []  # nothing is hidden: a missing page or anchor fails the build

html_theme = "furo"
html_title = "tfsmith"
html_show_sourcelink = False
pygments_style = "friendly"

#: Every page, in the order the site lists them: (caption, [pages]).
NAV = [
    ("Guide", ["build", "gpu", "optimize", "serve", "lattice", "bench", "deploy", "arm64", "troubleshooting", "limits",
               "development"]),
    ("Reference", ["reference/commands", "reference/serve"]),
    ("Design", ["design/server", "design/optimize"]),
]


def _add_navigation(app, docname: str, source: list[str]) -> None:
    if docname != root_doc:
        return
    for caption, pages in NAV:
        source[0] += "\n\n```{toctree}\n:hidden:\n:caption: " + caption + "\n\n" + "\n".join(pages) + "\n```\n"


def setup(app):
    app.connect("source-read", _add_navigation)
