"""CLI command `tfsmith deploy`: Kubernetes manifests that place each serving image only where it can run."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the deploy command to the tfsmith app (filled in with the deploy module)."""
