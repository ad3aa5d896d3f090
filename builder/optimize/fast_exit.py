"""Leave the tfsmith process as soon as optimize's output is written, without the interpreter's teardown.

Why: once the report is written and the table printed, CPython's finalization tears down every module and
object, TensorFlow's, OpenVINO's and LiteRT's native ones included. Measured on a 2-core host: 1.6-2.3 s
between the last line of output and the end of the process (digits CNN and MobileNetV2), 0.1 s with
`os._exit`; thread joins and atexit handlers took under 0.01 s of it and a gc pass 0.25 s, so the rest is
module and native teardown, which nothing the user gets depends on (every file is written and closed, the
staging and temp folders removed, before the command returns).

How: an atexit handler registered before TensorFlow is imported runs after every handler registered since
(atexit runs last in, first out); it flushes stdout, stderr and logging and calls `os._exit` with the status
the command returned. Only in the tfsmith process itself (pytest's CliRunner running the command inside
another program leaves that program's exit alone), and only for a run that returned its status: an error or
an interruption exits the ordinary way.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from pathlib import PurePath


def is_tfsmith_process(argv0: str) -> bool:
    """The process is the tfsmith command itself: the console script, or `python -m builder`."""
    path = PurePath(argv0)
    return path.name == "tfsmith" or path.parts[-2:] == ("builder", "__main__.py")


def arm(argv0: str | None = None) -> Callable[[int], int]:
    """Register the fast exit where this is the tfsmith process; returns `done(status)`, which records the
    command's status (the exit fast happens only once a status is recorded) and gives it back."""
    status: list[int] = []
    if is_tfsmith_process(sys.argv[0] if argv0 is None else argv0):
        atexit.register(_leave, status)

    def done(code: int) -> int:
        status.append(code)
        return code

    return done


def _leave(status: list[int]) -> None:
    if not status:
        return
    import logging

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more to write anyway
            pass
    logging.shutdown()
    os._exit(status[-1])
