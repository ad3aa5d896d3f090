"""How long work reports progress: one line at a time, to whatever the caller chose (typer.echo, print, a log).

Every step that takes long is given a `Say` instead of printing, so the CLI decides where lines go and tests can
collect them; `quiet` says nothing.
"""

from __future__ import annotations

from collections.abc import Callable

Say = Callable[[str], None]


def quiet(_line: str) -> None:
    """Say nothing."""
