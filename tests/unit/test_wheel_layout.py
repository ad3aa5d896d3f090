"""What the wheel ships: every package folder, and the top-level templates/ as builder.templates.

The packages are listed in pyproject.toml (discovery cannot map templates/ into the package), so a new
package folder that nobody adds there would be missing from `pip install tfsmith` — this test says so.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import jinja2
import pytest

from builder import staging, template_files

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_in_the_wheel() -> None:
    on_disk = {
        ".".join(folder.relative_to(REPO).parts)
        for folder in [REPO / "builder", *(REPO / "builder").rglob("*")]
        if folder.is_dir() and folder.name != "__pycache__" and any(p.is_file() for p in folder.iterdir())
    }
    listed = set(SETUPTOOLS["packages"])
    assert on_disk | {"builder.templates"} == listed, "pyproject.toml [tool.setuptools] packages is out of date"


def test_templates_ship_as_builder_templates() -> None:
    assert SETUPTOOLS["package-dir"] == {"builder.templates": "templates"}
    assert "**/*.j2" in SETUPTOOLS["package-data"]["builder.templates"]
    assert template_files.templates_dir().resolve() == (REPO / "templates").resolve()


def test_template_environment_is_strict_and_scoped() -> None:
    env = template_files.template_environment("image")
    assert env.get_template("Dockerfile.j2") is not None
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()
    with pytest.raises(Exception, match="no 'nope' folder"):
        template_files.template_environment("nope")


def test_staged_file_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    dest = tmp_path / "out" / "report.json"
    staging.write_text_atomic(dest, "one")
    with pytest.raises(RuntimeError), staging.staged_file(dest) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert dest.read_text() == "one" and sorted(p.name for p in dest.parent.iterdir()) == ["report.json"]
    assert oct(dest.stat().st_mode & 0o777) == oct(0o644)


def test_staged_dir_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    dest = tmp_path / "model"
    with staging.staged_dir(dest) as tmp:
        (tmp / "a").write_text("old")
    with pytest.raises(RuntimeError), staging.staged_dir(dest) as tmp:
        (tmp / "b").write_text("half")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and sorted(p.name for p in dest.iterdir()) == ["a"]
    with staging.staged_dir(dest) as tmp:
        (tmp / "b").write_text("new")
    assert sorted(p.name for p in dest.iterdir()) == ["b"] and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    with pytest.raises(FileExistsError), staging.staged_dir(dest, replace=False):
        pass
