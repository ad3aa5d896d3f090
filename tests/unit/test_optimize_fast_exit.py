"""The fast exit after optimize's output (`builder.optimize.fast_exit`): only in the tfsmith process, only
once the command returned its status, with that status."""

from __future__ import annotations

from typing import Any

import pytest

from builder.optimize import fast_exit


@pytest.mark.parametrize("argv0, expected", [
    ("/work/.venv/bin/tfsmith", True),
    ("tfsmith", True),
    ("/repo/builder/__main__.py", True),
    ("/usr/lib/python3/site-packages/pytest/__main__.py", False),
    ("/work/.venv/bin/pytest", False),
    ("/repo/builder/cli.py", False),
    ("", False),
])
def test_only_the_tfsmith_process_exits_fast(argv0: str, expected: bool) -> None:
    assert fast_exit.is_tfsmith_process(argv0) is expected


def test_arm_registers_only_in_the_tfsmith_process(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[tuple[Any, ...]] = []
    monkeypatch.setattr(fast_exit.atexit, "register", lambda *args: registered.append(args))
    done = fast_exit.arm("/usr/bin/pytest")
    assert registered == [] and done(3) == 3
    done = fast_exit.arm("/venv/bin/tfsmith")
    assert len(registered) == 1 and registered[0][0] is fast_exit._leave
    assert registered[0][1] == []  # nothing recorded yet: an error would exit the ordinary way
    assert done(3) == 3 and registered[0][1] == [3]


def test_leave_exits_with_the_recorded_status_only(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(fast_exit.os, "_exit", exits.append)
    monkeypatch.setattr("logging.shutdown", lambda: None)  # pytest's own log handlers stay open
    fast_exit._leave([])
    assert exits == []
    fast_exit._leave([3])
    assert exits == [3]
