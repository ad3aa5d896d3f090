"""CLI commands of the bench room (filled in by its issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this room's commands to the tfsmith app."""
