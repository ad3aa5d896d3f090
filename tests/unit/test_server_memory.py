"""The server keeps large request buffers in its heap where the C library lets it (glibc's mallopt)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from builder.server import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_both_thresholds() -> None:
    assert memory.keep_large_buffers() is True


def test_a_c_library_without_mallopt_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoMallopt:
        def __init__(self, name: object) -> None:
            pass

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert memory.keep_large_buffers() is False


def test_the_threshold_stays_within_what_glibc_accepts_and_above_the_default_body_limit() -> None:
    from builder.server.options import DEFAULT_MAX_BODY_BYTES

    assert DEFAULT_MAX_BODY_BYTES <= memory.MMAP_THRESHOLD_BYTES <= 32 * 1024 * 1024
