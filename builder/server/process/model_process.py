"""One model process of `--model-processes N`: the models loaded here, requests taken from the front's channel.

Started by the front (spawned: a fresh interpreter, nothing inherited but the channel's socket), it loads
and warms the models (`model_server.ModelServer`), says `Ready` (or `Refused` with the one-line reason a user should
read) and answers requests until the front says `Stop` or goes away (`messages`). It holds no listening
socket: clients only ever reach the front. If it dies, the front starts another in its place
(`model_processes`). Its own process group keeps a terminal's Ctrl-C for the front, which passes the
stop on once; pinned to its share of the cores when the front asks (`cpus`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence

from builder.errors import TfsmithError

log = logging.getLogger("tfsmith.serve")

#: How often a model process checks that the front is still there.
ORPHAN_CHECK_SECONDS = 1.0


def run(config_json: str, sock: socket.socket, index: int, front_pid: int, log_level: str,
        cpus: Sequence[int] | None = None) -> None:
    """The process's whole life; the target the front spawns (module-level, so it pickles)."""
    os.setpgrp()
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s: %(message)s")
    threading.Thread(target=_stop_when_orphaned, args=(front_pid,), daemon=True).start()
    if cpus:
        os.sched_setaffinity(0, cpus)
    yield_to_the_front()
    from builder.measure.cores import keep_request_memory

    keep_request_memory()
    from builder.server.process.channel import ModelEnd
    from builder.server.config import config_from_json
    from builder.server.process.messages import Ready, Refused

    end = ModelEnd(sock)
    end.hello()
    config = config_from_json(config_json)
    try:
        from builder.server.model_server import ModelServer

        server = ModelServer(config)
    except TfsmithError as error:
        end.say(Refused(str(error), error.exit_code))
        sys.exit(error.exit_code)
    except Exception as error:  # noqa: BLE001 - a model that fails to load: the front says why, in one line
        log.debug("model process %d could not load the model", index, exc_info=True)
        end.say(Refused(f"{config.model_name} v{config.version} could not be served: {type(error).__name__}: "
                        f"{error}", 1))
        sys.exit(1)
    end.say(Ready(os.getpid(), **server.info))
    import uvloop

    uvloop.run(_serve(server, end))


async def _serve(server: object, end: object) -> None:
    from builder.server.process.channel import ModelEnd
    from builder.server.model_server import ModelServer

    assert isinstance(server, ModelServer) and isinstance(end, ModelEnd)
    await server.start()
    end.on_drain = server.drain
    end.on_load = server.stage
    end.on_activate = server.activate
    try:
        await end.serve(server.answer)
    finally:
        await server.stop()


def yield_to_the_front() -> None:
    """Run as SCHED_BATCH, Linux's policy for CPU-bound work: the front (waiting on sockets) is preferred when it
    wakes up, so it forwards an answer and takes the next request at once instead of waiting for a time slice
    behind the model processes that keep every core busy (gRPC, pools of 4 and 16 connections on 2 cores:
    0.91x and 0.94x of two one-process servers without it, 0.99x with it, one run each). Needs no privileges;
    a no-op where unsupported."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def _stop_when_orphaned(front_pid: int) -> None:
    while os.getppid() == front_pid:
        time.sleep(ORPHAN_CHECK_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)
