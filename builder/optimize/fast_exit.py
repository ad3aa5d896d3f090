"""Leave the tfsmith process as soon as optimize's output is written, without the interpreter's teardown.

Why: once the report is written and the table printed, CPython's finalization tears down every module and
object, TensorFlow's, OpenVINO's and LiteRT's native ones included. Measured on a 2-core host: 1.6-2.3 s
between the last line of output and the end of the process (digits CNN and MobileNetV2), 0.1 s with
`os._exit`; thread joins and atexit handlers took under 0.01 s of it and a gc pass 0.25 s, so the rest is
module and native teardown, which nothing the user gets depends on (every file is written and closed, the
staging and temp folders removed, before the command returns).

How: an atexit handler registered before TensorFlow is imported runs after every handler registered since
(atexit runs last in, first out); it flushes stdout, stderr and logging and calls `os._exit` with the status
the command returned. Only in the tfsmith process itself, told by its main module (the console script, or
`python -m builder`), not by `sys.argv`, which a program running the command in-process sets too (the
end-to-end tests do, inside pytest, whose own exit must stay its own); and only for a run that returned its
status: an error or an interruption exits the ordinary way.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from pathlib import PurePath
from types import ModuleType
from typing import Any


def is_tfsmith_process(main: ModuleType | Any) -> bool:
    """`main` (the process's `__main__` module) is the tfsmith command: the console script `tfsmith`, or
    `python -m builder`."""
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) in ("builder", "builder.__main__"):
        return True
    return PurePath(getattr(main, "__file__", None) or "").name == "tfsmith"


def arm(main: ModuleType | Any = None) -> Callable[[int], int]:
    """Register the fast exit where this is the tfsmith process (`main`: default the process's `__main__`);
    returns `done(status)`, which records the command's status (the exit fast happens only once a status is
    recorded) and gives it back."""
    status: list[int] = []
    if is_tfsmith_process(sys.modules.get("__main__") if main is None else main):
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
