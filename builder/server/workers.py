"""Several server processes on one listening socket, stopped the way one process stops.

`--processes N` is for throughput beyond one core (one Python process handles HTTP on about one core). Each
worker is a whole one-process server: on SIGTERM it reports not-ready, waits the shutdown delay so load
balancers see it, then finishes the requests in flight. This supervisor only starts the workers, passes a
SIGTERM or SIGINT on to each of them once, and waits:

- Workers run in their own process group, so a Ctrl-C in a terminal reaches them once (through this
  process), not twice (a second signal means "stop now, skip the delay").
- A worker whose supervisor is gone (killed with SIGKILL) stops itself instead of serving unsupervised.
- A worker that exits unasked stops the others and the server exits 1: an orchestrator then restarts the
  whole server, where a half-size server would answer slower with nobody told.
- A worker that refuses what it was given (a model that does not load: a `TfsmithError`) hands the error to
  the supervisor, which raises it: the user reads one line, as from one process, not a traceback per worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from builder.errors import TfsmithError

log = logging.getLogger("tfsmith.serve")

#: How often a worker checks that its supervisor is still there.
ORPHAN_CHECK_SECONDS = 1.0


def run_workers(processes: int, serve: Callable[[socket.socket], None], sock: socket.socket) -> int:
    """Run `serve(sock)` in `processes` spawned processes until they stop; the exit status for the server
    (0 when they stopped because they were asked to); the `TfsmithError` a worker refused to start with is
    raised. `serve` must be picklable (a module-level function, or a functools.partial of one)."""
    context = multiprocessing.get_context("spawn")
    refusals = context.SimpleQueue()
    workers = [context.Process(target=_worker, args=(serve, sock, os.getpid(), refusals), name=f"tfsmith-worker-{n}")
               for n in range(processes)]
    asked = threading.Event()

    def stop(signum: int, _frame: Any = None) -> None:
        if asked.is_set():
            return
        asked.set()
        for worker in workers:
            if worker.pid is not None and worker.exitcode is None:
                os.kill(worker.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for worker in workers:
            worker.start()
        status = 0
        while any(worker.exitcode is None for worker in workers):
            for worker in workers:
                worker.join(timeout=0.2)
                if worker.exitcode is not None and not asked.is_set():
                    if refusals.empty():
                            log.error("worker %s exited with status %s unasked; stopping the others", worker.pid,
                                  worker.exitcode)
                    status = 1
                    stop(signal.SIGTERM)
        if not refusals.empty():
            raise refusals.get()
        return status
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _worker(serve: Callable[[socket.socket], None], sock: socket.socket, supervisor: int, refusals: Any) -> None:
    os.setpgrp()  # a terminal's Ctrl-C reaches the supervisor only, which passes it on once
    threading.Thread(target=_stop_when_orphaned, args=(supervisor,), daemon=True).start()
    try:
        serve(sock)
    except TfsmithError as error:
        refusals.put(error)
        raise SystemExit(error.exit_code) from None


def _stop_when_orphaned(supervisor: int) -> None:
    while os.getppid() == supervisor:
        time.sleep(ORPHAN_CHECK_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)
