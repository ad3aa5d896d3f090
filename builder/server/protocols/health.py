"""The server's health answers, written once: liveness, readiness, what a server that is not ready says, and
`/healthz` (liveness and what is served).

The route table's handlers (`live`, `ready`, `healthz`, and the metrics scrape) answer from the
context's `Health`: in a model server, `routes.ModelHealth` (its data plane); with model processes the front's own
router answers the same routes with the same handlers (`Route.front`) from the front's view of its processes
(`front/model_processes`), since a process may be inside a long model call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from builder.server.core.outcome import outcome
from builder.server.process.messages import HTTP, JSON, Answer, Request, refusal
from builder.server.protocols import jsoncodec
from builder.server.protocols.answers import json_answer

if TYPE_CHECKING:
    from builder.server.routes import Context

NOT_READY = "model is not ready (loading, or the server is draining)"
LIVE = jsoncodec.dumps({"live": True})
READY = jsoncodec.dumps({"ready": True})


def not_ready() -> Answer:
    """What a server or model that is not ready answers: 503 with the error body every failure has."""
    return refusal(outcome(503, NOT_READY), HTTP)


async def live(context: Context, request: Request) -> Answer:
    """Liveness (the Open Inference Protocol's `/v2/health/live`): answering at all is the answer."""
    return Answer(200, LIVE, JSON)


async def ready(context: Context, request: Request) -> Answer:
    """Readiness (`/v2/health/ready`): loaded and warmed, not draining; else 503."""
    assert context.health is not None
    return Answer(200, READY, JSON) if context.health.ready else not_ready()


async def healthz(context: Context, request: Request) -> Answer:
    """Liveness and what is served."""
    assert context.health is not None
    return json_answer(context.health.served())
