"""The server's health answers, written once: liveness, readiness, what a server that is not ready says, and
`/healthz` (liveness and what is served).

In the front's own process the route table's handlers answer them (`v2.live`, `v2.ready`, `healthz`); with
model processes the front answers the same routes itself (`Route.front`, `model_processes`) from these same
functions, since a process may be inside a long model call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from builder.server.protocols import jsoncodec
from builder.server.process.messages import Answer, Request

if TYPE_CHECKING:
    from builder.server.routes import Context

NOT_READY = "model is not ready (loading, or the server is draining)"


def live() -> tuple[int, bytes]:
    """Liveness: answering at all is the answer."""
    return 200, jsoncodec.dumps({"live": True})


def readiness(ready: bool) -> tuple[int, bytes]:
    """Readiness: 200 when ready, else 503 with the error body every failure has."""
    from builder.server.protocols.answers import error_body

    return (200, jsoncodec.dumps({"ready": True})) if ready else (503, error_body(NOT_READY))


def served(context: Context) -> dict[str, Any]:
    """What `/healthz` says of the models served here."""
    plane, config = context.plane, context.config
    models = plane.models
    primary = plane.lookup(next(iter(models.models)))
    p50 = primary.model_p50_us
    interpreters = None if primary.pool is None else primary.pool.size
    return {
        "status": "ok",
        "model": primary.name,
        "version": str(primary.version),
        "runtime": primary.runtime,
        "runtime_reason": config.runtime_reason,
        "interpreters": interpreters,
        "workers": interpreters,  # the same count under its first name, for readers written before
        "max_batch_size": config.batching.max_batch_size,
        "inline": primary.batcher.inline,
        "dispatch": primary.batcher.mode,
        "model_p50_us": None if p50 is None else round(p50, 1),
        "ready": models.ready,
        "grpc_port": config.grpc_port or None,
        "models": {name: [str(v) for v in sorted(versions)] for name, versions in models.models.items()},
    }


async def healthz(context: Context, request: Request) -> Answer:
    """Liveness and what is served."""
    from builder.server.protocols.answers import json_answer

    async with context.plane.request("REST", "health"):
        return json_answer(served(context))
