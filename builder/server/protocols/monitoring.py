"""The Prometheus scrape route's handler: this process's metrics (`core.metrics`) in the exposition format.

With model processes the front answers this route itself, every process's metrics summed (`front/model_processes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from builder.server.core.metrics import CONTENT_TYPE_HEADERS
from builder.server.process.messages import Answer, Request

if TYPE_CHECKING:
    from builder.server.routes import Context


async def scrape(context: Context, request: Request) -> Answer:
    """The metrics of this process's models (with model processes, in the front: every process's, summed)."""
    assert context.health is not None
    return Answer(200, await context.health.exposition(), CONTENT_TYPE_HEADERS)
