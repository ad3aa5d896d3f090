"""Structured access logs: one JSON object per answered request, on the `tfsmith.access` logger (stderr).

Opt-in (`--access-log json`): a log line per request costs more than the digits CNN's inference, so the
middleware is not even installed unless asked for. Lines are machine-readable on purpose: log shippers
(Fluent Bit, Vector, Loki) parse JSON lines without a regex per field.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

access = logging.getLogger("tfsmith.access")


def _configure() -> None:
    if not access.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        access.addHandler(handler)
        access.setLevel(logging.INFO)
        access.propagate = False


def log_request(**fields: Any) -> None:
    """Write one access record (also used by the gRPC service)."""
    _configure()
    access.info(json.dumps({"time": round(time.time(), 6), **fields}, separators=(",", ":")))


class AccessLog:
    """Pure ASGI middleware (no per-request Request object): method, path, status, bytes, duration."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        _configure()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = {"status": 0, "bytes": 0}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            elif message["type"] == "http.response.body":
                state["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            log_request(protocol="http", method=scope["method"], path=scope["path"], status=state["status"],
                        bytes_out=state["bytes"], duration_ms=round((time.perf_counter() - start) * 1e3, 3),
                        remote=f"{client[0]}:{client[1]}" if client else None)
