"""Unit tests are pure: they cannot start processes or open network connections by accident.

Any attempt fails the test loudly (after cibuildwheel's unit-test guard). Tests that need the real thing
live in tests/engine or tests/e2e.
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest


class ShellOutInUnitTest(AssertionError):
    pass


def _refuse(*args: object, **kwargs: object) -> None:
    raise ShellOutInUnitTest(f"unit tests may not start processes or connect: {args[:1]!r}")


@pytest.fixture(autouse=True)
def no_processes_or_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse)
    monkeypatch.setattr(os, "system", _refuse)
    monkeypatch.setattr(os, "execv", _refuse)
    monkeypatch.setattr(os, "execvp", _refuse)
    monkeypatch.setattr(socket.socket, "connect", _refuse)
