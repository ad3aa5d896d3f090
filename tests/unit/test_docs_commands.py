"""Every `tfsmith COMMAND --flag` the README and docs/ name exists in the command line as it is now.

Commands are looked for in code (inline code and code blocks), where a reader copies them from; a command line
runs to the end of its line (backslash continuations joined) or its code span, stopping at a shell comment.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_docs_reference import ROOT, load_generator

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?<![\w/.-])tfsmith ([a-z][a-z-]*|--help)\b")
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
STOP = re.compile(r"\s#\s|\s\|\s|;|&&|\$\(")
#: What may stand before a command in code: nothing, a prompt, a subshell, a shell operator, a CI step's key or item.
#: (Anything else is prose quoted in code, like an error message's "set by tfsmith itself".)
COMMAND_STARTS = ("$", "$(", "&&", "||", ";", "|", "run:", "script:", "name:", "-")


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def code_of(text: str) -> list[str]:
    """The code a page holds: each code block's lines (continuations joined) and each inline code span."""
    pieces = []
    for block in FENCE.findall(text):
        pieces += block.replace("\\\n", " ").splitlines()
    pieces += INLINE.findall(FENCE.sub("", text))
    return pieces


def named_commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, flags) for every `tfsmith COMMAND ...` in the page's code."""
    found = []
    for piece in code_of(text):
        for match in COMMAND.finditer(piece):
            before = piece[:match.start()].rstrip()
            if before and not before.endswith(COMMAND_STARTS):
                continue
            rest = piece[match.end():]
            nxt = COMMAND.search(rest)
            rest = rest[:nxt.start()] if nxt else rest
            stop = STOP.search(rest)
            rest = rest[:stop.start()] if stop else rest
            found.append((match[1], [flag.rstrip("-") for flag in FLAG.findall(rest)]))
    return found


def test_every_command_and_flag_the_docs_name_exists() -> None:
    flags = load_generator().command_flags()
    wrong = []
    for page in doc_pages():
        for command, named in named_commands(page.read_text(encoding="utf-8")):
            where = page.relative_to(ROOT)
            if command == "--help":
                continue
            if command not in flags:
                wrong.append(f"{where}: tfsmith {command}: no such command")
                continue
            wrong += [f"{where}: tfsmith {command} {flag}: no such option" for flag in named if flag not in flags[command]]
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_the_docs_name_every_command() -> None:
    """Each command appears in the README's table and in the command reference."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for command in load_generator().command_flags():
        assert f"| `tfsmith {command}` |" in readme, f"README.md's command table lacks tfsmith {command}"


def test_the_check_finds_what_it_should() -> None:
    """The extraction itself: flags after a command, continuations, comments and other commands apart."""
    text = ("run `tfsmith build --target x --dry-run` then `set by tfsmith itself` and `optimized: tfsmith recommends x`\n```bash\ntfsmith optimize m --data d \\\n  --out o  # --not-this\n"
            "echo $(tfsmith matrix --format github) && tfsmith deploy --out k8s\n```\n")
    assert named_commands(text) == [("optimize", ["--data", "--out"]), ("matrix", ["--format"]),
                                    ("deploy", ["--out"]), ("build", ["--target", "--dry-run"])]
