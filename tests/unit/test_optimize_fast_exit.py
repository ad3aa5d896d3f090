"""The fast exit after optimize's output (`builder.optimize.fast_exit`): only in the tfsmith process (told by
its main module, never by sys.argv), only once the command returned its status, with that status."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from builder.optimize import fast_exit

CONSOLE_SCRIPT = SimpleNamespace(__spec__=None, __file__="/work/.venv/bin/tfsmith")
PYTHON_M_BUILDER = SimpleNamespace(__spec__=SimpleNamespace(name="builder.__main__"),
                                   __file__="/repo/builder/__main__.py")
PYTEST = SimpleNamespace(__spec__=SimpleNamespace(name="pytest.__main__"), __file__="/site/pytest/__main__.py")


@pytest.mark.parametrize("main, expected", [
    (CONSOLE_SCRIPT, True),
    (PYTHON_M_BUILDER, True),
    (PYTEST, False),
    (SimpleNamespace(__spec__=None, __file__="/venv/bin/pytest"), False),
    (SimpleNamespace(), False),  # an interactive interpreter's __main__ has no file
])
def test_only_the_tfsmith_process_exits_fast(main: Any, expected: bool) -> None:
    assert fast_exit.is_tfsmith_process(main) is expected


def test_this_test_process_is_not_tfsmith(monkeypatch: pytest.MonkeyPatch) -> None:
    """The end-to-end tests run the command in-process with sys.argv[0] "tfsmith": pytest's exit stays its own."""
    registered: list[Any] = []
    monkeypatch.setattr(fast_exit.atexit, "register", lambda *args: registered.append(args))
    monkeypatch.setattr("sys.argv", ["tfsmith", "optimize"])
    assert fast_exit.arm()(0) == 0
    assert registered == []


def test_arm_registers_only_in_the_tfsmith_process(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[tuple[Any, ...]] = []
    monkeypatch.setattr(fast_exit.atexit, "register", lambda *args: registered.append(args))
    done = fast_exit.arm(PYTEST)
    assert registered == [] and done(3) == 3
    done = fast_exit.arm(CONSOLE_SCRIPT)
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
