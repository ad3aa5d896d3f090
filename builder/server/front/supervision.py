"""When a model process that died is replaced, and when the server stops instead.

One process can die alone: a runtime kernel that crashes on one input, or the OOM killer where the cgroup does
not kill its whole group. The front then replaces it with the same models loaded, and only the requests it
held fail (as MLServer, TorchServe and LitServe do). A process that keeps dying is another matter: the next
one would die the same way, and a server that restarts forever answers slower with nobody told. So several
deaths within a minute (`CrashLoop`) stop the server with the cause, and its orchestrator takes over.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class CrashLoop:
    """`deaths` deaths within `window_s` seconds are a crash loop."""

    deaths: int = 3
    window_s: float = 60.0

    def record(self, earlier: tuple[float, ...], now: float) -> tuple[tuple[float, ...], bool]:
        """The deaths to remember after one at `now` (those older than the window forgotten), and whether they
        make a crash loop."""
        recent = tuple(t for t in earlier if now - t < self.window_s) + (now,)
        return recent, len(recent) >= self.deaths


def exit_reason(exitcode: int | None) -> str:
    """How a process ended, as a log line says it ("was killed by SIGKILL", "exited with status 1")."""
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"
