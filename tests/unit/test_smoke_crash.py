"""The smoke test stops at once when a serving container exits or crashes while starting, with its last lines.

The container is a recorded one (state, health and log as the engine reports them), not a running engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from builder.packaging.smoke import SmokeFailed, stopped_or_crashed, wait_healthy

QEMU_CRASH = ("INFO: loading digits v1 (model.tflite, runtime litert: requested)\n"
              "qemu: uncaught target signal 11 (Segmentation fault) - core dumped\n")


@dataclass
class Recorded:
    """A container as the engine describes it: exited (its one-line reason) or not, its health and log."""

    log: str
    health_now: str = "starting"
    exit_line: str | None = None

    def exited(self, lines: int = 3) -> str | None:
        return self.exit_line

    def logs(self, *, tail: int | None = None) -> str:
        return self.log

    def health(self) -> str:
        return self.health_now


def test_a_running_container_still_starting_is_waited_on() -> None:
    assert stopped_or_crashed(Recorded("INFO: loading digits v1\n")) is None
    # a crash line while the healthcheck is still in its start period: the image may yet come up
    assert stopped_or_crashed(Recorded(QEMU_CRASH, health_now="starting")) is None


@pytest.mark.parametrize("health", ["unhealthy", "none"])
def test_a_crashed_server_that_stays_up_is_reported_with_its_last_lines(health: str) -> None:
    why = stopped_or_crashed(Recorded(QEMU_CRASH, health_now=health))
    assert why is not None and why.startswith(f"crashed while starting ({health}): ")
    assert "uncaught target signal 11" in why and "loading digits" in why


def test_an_exited_container_is_reported_as_the_engine_says() -> None:
    line = "exit 139: tfsmith-guard: /opt/venv/bin/python died of signal 11 (SIGSEGV)"
    assert stopped_or_crashed(Recorded(QEMU_CRASH, exit_line=line)) == line


def test_wait_healthy_stops_at_once_instead_of_waiting_for_the_deadline() -> None:
    start = time.monotonic()
    container = Recorded(QEMU_CRASH, health_now="unhealthy")
    with pytest.raises(SmokeFailed, match=r"crashed before answering: while starting \(unhealthy\): .*signal 11"):
        wait_healthy("http://127.0.0.1:9", lambda: stopped_or_crashed(container), timeout_s=900.0)
    assert time.monotonic() - start < 5.0
    with pytest.raises(SmokeFailed, match=r"exited before answering: exit 1: bad model"):
        wait_healthy("http://127.0.0.1:9", lambda: "exit 1: bad model", timeout_s=900.0)
