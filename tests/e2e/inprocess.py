"""Run the `tfsmith` console-script entry point in this process (TensorFlow imported once for many calls)."""

from __future__ import annotations

import sys

import pytest


def run_cli(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `tfsmith ARGS...`, as a user would see them."""
    from builder.cli import main

    monkeypatch.setattr(sys, "argv", ["tfsmith", *map(str, args)])
    capfd.readouterr()
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    out, err = capfd.readouterr()
    return code, out, err
