"""Where tfsmith's own files are: the one way every module finds the Jinja2 templates.

The templates live in the repository's top-level `templates/` folder and are shipped inside the wheel as the
package `builder.templates` (pyproject.toml maps the folder there at build time). `importlib.resources`
finds them the same way in a source checkout, an editable install and an installed wheel, so no module
computes a path from `__file__` (which breaks as soon as tfsmith is installed).
"""

from __future__ import annotations

import importlib.resources
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from builder.errors import TfsmithError

if TYPE_CHECKING:
    import jinja2

TEMPLATES_PACKAGE = "builder.templates"


@lru_cache(maxsize=1)
def templates_dir() -> Path:
    """The folder holding the templates (`image/`, `serve/`, ...), as a real directory on disk."""
    try:
        root = importlib.resources.files(TEMPLATES_PACKAGE)
    except ModuleNotFoundError:
        raise TfsmithError(
            "tfsmith's templates are missing from this installation (reinstall tfsmith; in a source checkout "
            "run `pip install -e .` again)"
        ) from None
    path = Path(str(root))
    if not path.is_dir():  # a zip import: the only install form where resources are not plain files
        raise TfsmithError(f"tfsmith's templates are not a folder on disk ({root}); install tfsmith unzipped")
    return path


def template_environment(subdir: str, *, compact: bool = True) -> jinja2.Environment:
    """A fresh Jinja2 environment over `templates/<subdir>` (e.g. "image", "serve").

    StrictUndefined: a template naming a field the plan lacks fails loudly instead of rendering an empty
    string into a Dockerfile. No autoescape (Dockerfiles and shell, not HTML); the trailing newline is kept.
    `compact` turns on `trim_blocks`/`lstrip_blocks`, so `{% if %}` lines leave no blank lines (templates
    written without them pass compact=False). Callers add their own filters.
    """
    import jinja2

    folder = templates_dir() / subdir
    if not folder.is_dir():
        raise TfsmithError(f"tfsmith's templates have no {subdir!r} folder ({folder}); reinstall tfsmith")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=compact,
        lstrip_blocks=compact,
        keep_trailing_newline=True,
        autoescape=False,
    )
