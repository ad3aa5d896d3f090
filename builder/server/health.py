"""The server's health answers, written once: liveness, readiness and what a server that is not ready says.

The Open Inference Protocol's routes answer them in the front's own process (`v2`); with model processes the
front answers them itself (`model_processes`), since a process may be inside a long model call.
"""

from __future__ import annotations

from builder.server import jsoncodec

NOT_READY = "model is not ready (loading, or the server is draining)"


def live() -> tuple[int, bytes]:
    """Liveness: answering at all is the answer."""
    return 200, jsoncodec.dumps({"live": True})


def readiness(ready: bool) -> tuple[int, bytes]:
    """Readiness: 200 when ready, else 503 with the error body every failure has."""
    from builder.server.answers import error_body

    return (200, jsoncodec.dumps({"ready": True})) if ready else (503, error_body(NOT_READY))
