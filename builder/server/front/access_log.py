"""Structured access logs: one JSON object per answered request, on the `tfsmith.access` logger (stderr).

Written in one place: the front wraps what answers every request (`logged`), so each request of
every protocol gets one line in either layout (the models in the front's process or in model processes).
Opt-in (`--access-log json`): a log line per request costs more than the digits CNN's inference, so nothing
is wrapped unless asked for. Lines are machine-readable on purpose: log shippers (Fluent Bit, Vector, Loki)
parse JSON lines without a regex per field. A gRPC call is logged as the HTTP/2 POST it is: its path the
method's name, its status gRPC's code (0 OK). Every record also names its outcome (`core.outcome`: OK,
INVALID_ARGUMENT, NOT_FOUND...), the label the metrics count it under; the front's own refusals (a malformed
request, a head, body or gRPC message too large) are logged too (`log_refusal`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from builder.server.core.outcome import Outcome, of_grpc, outcome
from builder.server.process.messages import GRPC, Answer, Request

access = logging.getLogger("tfsmith.access")


def _configure() -> None:
    """The access logger writes bare lines to stderr, at INFO whatever the server's log level."""
    access.setLevel(logging.INFO)
    access.propagate = False
    if not any(getattr(h, "tfsmith_access", False) for h in access.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.tfsmith_access = True  # type: ignore[attr-defined]
        access.addHandler(handler)


def log_request(**fields: Any) -> None:
    """Write one access record."""
    _configure()
    access.info(json.dumps({"time": round(time.time(), 6), **fields}, separators=(",", ":")))


Answering = Callable[[Request], Awaitable[Answer]]


def logged(answer: Answering) -> Answering:
    """`answer`, writing one access record for each request it answers."""
    _configure()

    async def logged_answer(request: Request) -> Answer:
        start = time.perf_counter()
        answered = await answer(request)
        grpc = request.kind == GRPC
        ended = of_grpc(answered.status) if grpc else outcome(answered.status)
        log_request(protocol="grpc" if grpc else "http", method="POST" if grpc else request.method,
                    path=request.method if grpc else request.path, status=answered.status, outcome=ended.label,
                    bytes_out=len(answered.body), duration_ms=round((time.perf_counter() - start) * 1e3, 3),
                    remote=request.client or None)
        return answered

    return logged_answer


def log_refusal(result: Outcome, protocol: str, method: str, path: str, client: str) -> None:
    """The record of a request the front refused before it was handed over (`http_front`, `grpc_front`); a gRPC
    call's status is its code, as in `logged`."""
    log_request(protocol=protocol, method=method or None, path=path or None,
                status=result.grpc if protocol == "grpc" else result.http, outcome=result.label,
                bytes_out=0 if protocol == "grpc" else len(result.body), duration_ms=0.0, remote=client or None,
                reason=result.reason)
