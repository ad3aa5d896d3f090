"""The option tables in docs/ are what the command line defines: regenerate them and nothing changes.

docs/gen_reference.py writes docs/reference/*.md and the generated blocks of the task pages from the Typer app
and the server's own parser. When an option is added, renamed or its help changes, this fails until
`.venv/bin/python docs/gen_reference.py` is run and its output committed.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_generator() -> ModuleType:
    """docs/gen_reference.py as a module (it is a tool of the docs, not a package of tfsmith)."""
    spec = importlib.util.spec_from_file_location("tfsmith_docs_gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_option_tables_match_the_cli() -> None:
    stale = []
    for path, text in load_generator().expected().items():
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            diff = "".join(list(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                     str(path.relative_to(ROOT)), "generated", n=0))[:12])
            stale.append(diff)
    assert not stale, ("the docs' option tables differ from the command line; run "
                       "`.venv/bin/python docs/gen_reference.py` and commit:\n" + "\n".join(stale))


def test_every_command_and_server_option_is_in_the_reference() -> None:
    generator = load_generator()
    commands = (DOCS / "reference" / "commands.md").read_text(encoding="utf-8")
    server = (DOCS / "reference" / "serve.md").read_text(encoding="utf-8")
    for name, flags in generator.command_flags().items():
        assert f"## tfsmith {name}\n" in commands, f"tfsmith {name} has no section in docs/reference/commands.md"
        page = server if name == "serve" else commands
        for flag in flags - {"--help", "-h"}:
            assert any(f"{before}{flag}" in page for before in ("`", ", ", "/ ")), f"{name} {flag} not in the reference"


def test_task_pages_embed_their_commands_tables() -> None:
    """Each task page shows its command's full option table (generated), not a hand-kept copy."""
    pages = {"serve.md": ["serve-options", "package-options"], "optimize.md": ["optimize-options"],
             "build.md": ["build-options", "matrix-options"], "bench.md": ["bench-options"],
             "deploy.md": ["deploy-options"]}
    for page, blocks in pages.items():
        text = (DOCS / page).read_text(encoding="utf-8")
        for block in blocks:
            assert f"<!-- BEGIN GENERATED: {block} -->" in text, f"docs/{page} lacks the {block} table"
