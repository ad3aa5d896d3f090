"""A JSON answer, written once for every protocol's REST routes (compact, by `jsoncodec`).

Failures are not answered here: a handler raises, and the route table's router answers with the failure's
outcome (`core.outcome`, `messages.refusal`).
"""

from __future__ import annotations

from typing import Any

from builder.server.process.messages import JSON, Answer
from builder.server.protocols import jsoncodec

__all__ = ["JSON", "json_answer"]


def json_answer(content: Any, status: int = 200) -> Answer:
    """A JSON answer (compact, by `jsoncodec`)."""
    return Answer(status, jsoncodec.dumps(content), JSON)
