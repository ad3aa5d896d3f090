"""The documentation as a whole: a short README whose links land, the route table the server declares, and the
site built strict (Sphinx + MyST, every warning an error: a broken link or anchor, a page outside the navigation).
"""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests.unit.test_docs_reference import DOCS, ROOT

README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_short_and_names_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "make build" in text and "make test" in text


@pytest.mark.parametrize("page", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda p: str(p.relative_to(ROOT)))
def test_links_land_on_github_too(page: Path) -> None:
    """Every relative link and anchor resolves as GitHub renders the Markdown (Sphinx checks its own ids)."""
    missing = []
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.is_file():
            missing.append(f"{target}: no such file")
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.MULTILINE)
            if anchor not in {slug(h) for h in headings}:
                missing.append(f"{target}: no such heading")
    assert not missing, "\n".join(missing)


def slug(heading: str) -> str:
    """The anchor GitHub and MyST give a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_top_level_holds_no_docs_files_outside_docs() -> None:
    assert not (ROOT / "mkdocs.yml").exists() and not (ROOT / "conf.py").exists()


def test_every_route_the_server_declares_is_on_the_serve_page() -> None:
    """The serve page's route table against the routes the server's source declares (and gRPC's methods)."""
    from builder.server.routes import ROUTES, UNDOCUMENTED

    declared = {route.path for route in ROUTES if route.path not in UNDOCUMENTED}
    page = (DOCS / "serve.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| (?:GET|POST) \| `([^`]+)`", page, re.MULTILINE))
    assert declared <= listed, f"routes the server declares but docs/serve.md does not list: {sorted(declared - listed)}"
    from builder.server.front.grpc_front import RPCS

    for service, methods in RPCS.items():
        for method in methods:
            assert f"`{service}/{method}`" in page, f"gRPC {service}/{method} is not on docs/serve.md"


def test_every_page_is_in_the_navigation() -> None:
    """docs/conf.py's NAV lists every page once (the strict build also fails on a page outside it)."""
    import runpy

    nav = [page for _, pages in runpy.run_path(str(DOCS / "conf.py"))["NAV"] for page in pages]
    pages = sorted(str(p.relative_to(DOCS).with_suffix("")) for p in DOCS.rglob("*.md") if p.name != "index.md")
    assert sorted(nav) == pages


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_the_site_builds_strict(tmp_path: Path) -> None:
    """`make docs` without regenerating: Sphinx with -W over docs/, into a temporary folder."""
    pytest.importorskip("myst_parser", reason="the docs extra is not installed (make venv installs it)")
    from sphinx.cmd.build import build_main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = build_main(["-W", "--keep-going", "-E", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"),
                           str(DOCS), str(tmp_path / "html")])
    assert code == 0, err.getvalue()[-4000:]
    assert (tmp_path / "html" / "index.html").is_file()
