"""The ASGI app: TensorFlow Serving's REST API, the Open Inference Protocol and metrics over the loaded
models (FastAPI).

Routes:
  /v1/models/...                                 TensorFlow Serving's REST API (`tfs_rest`)
  /v2/...                                        the Open Inference Protocol (`v2`)
  GET  /monitoring/prometheus/metrics            Prometheus metrics (`metrics`)
  GET  /healthz                                  liveness + what is served
  GET  /openapi.json, /docs                      the API described, exactly (`contract`)
A model host (`host`) serves it: the front (`front`) speaks HTTP and gRPC to clients and hands each request
over; the host answers the hot paths straight from the data plane and everything else through this app.
The protocols only translate; what a request does once translated (resolve, readiness, batching, metrics,
in-flight) is `dataplane`'s. Every error is `{"error": "..."}` with a 4xx status for what the client got
wrong (400 malformed body or wrong shape/dtype, 404 unknown model/version/label/route, 405 wrong method with
`Allow`, 413 body too large, 415 unknown Content-Encoding, 503 not ready) and 500 for our own failures; no
request, however malformed, stops the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

from builder.server import reload, tfs_rest, v2
from builder.server.answers import add_error_answers
from builder.server.config import ServerConfig
from builder.server.contract import finish_document
from builder.server.dataplane import DataPlane
from builder.server.loading import load_models, load_version
from builder.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from builder.server.metrics import PATH as METRICS_PATH
from builder.server.metrics import Metrics
from builder.server.pool import BackendPool
from builder.server.served import ServedModel
from builder.server.tfs_rest import JSONBody


def create_app(config: ServerConfig, pool: BackendPool | None = None) -> FastAPI:
    """The app serving the configured models over REST (and gRPC, started with the app); the pool is created
    here unless given (tests share one). Every protocol is an adapter over one `DataPlane`."""
    metrics = Metrics()
    models = load_models(config, pool, metrics)
    first_name = next(iter(models.models))  # only the name: holding a version would keep it in memory
    plane = DataPlane(models, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        poller = None
        if config.sources and config.poll_seconds > 0:
            def changed() -> None:
                app.openapi_schema = None  # versions are path parameter values in the document

            bring = reload.in_this_process(models, lambda s, v, f: load_version(config, s, v, f, metrics),
                                           config.drain_seconds, changed)
            poller = asyncio.get_running_loop().create_task(reload.poll(
                config.sources, config.poll_seconds, lambda name: list(models.models.get(name, {})), bring))
        plane.set_ready(True)
        yield
        plane.set_ready(False)
        if poller is not None:
            poller.cancel()
        plane.close()

    app = FastAPI(
        title="tfsmith model server",
        version="1",
        description="TensorFlow Serving-compatible REST API (and the Open Inference Protocol) serving "
        + ", ".join(f"`{name}`" for name in models.models) + ".",
        lifespan=lifespan,
    )
    app.state.models = models
    app.state.plane = plane
    app.state.metrics = metrics
    app.state.grpc_port = config.grpc_port  # gRPC is the front's (`front`); 0 when it serves none
    app.state.config = config

    add_error_answers(app)

    @app.get("/healthz", summary="Liveness and what is served")
    async def healthz() -> JSONBody:
        async with plane.request("REST", "health"):
            return JSONBody(_health(plane.lookup(first_name)))

    def _health(primary: ServedModel) -> dict[str, Any]:
        p50 = primary.model_p50_us
        return (
            {
                "status": "ok",
                "model": primary.name,
                "version": str(primary.version),
                "runtime": primary.runtime,
                "runtime_reason": config.runtime_reason,
                "workers": None if primary.pool is None else primary.pool.size,
                "max_batch_size": config.batching.max_batch_size,
                "inline": primary.batcher.inline,
                "dispatch": primary.batcher.mode,
                "model_p50_us": None if p50 is None else round(p50, 1),
                "ready": models.ready,
                "grpc_port": app.state.grpc_port or None,
                "models": {name: [str(v) for v in sorted(versions)] for name, versions in models.models.items()},
            }
        )

    @app.get(METRICS_PATH, summary="Prometheus metrics (TensorFlow Serving's names and ours)")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=METRICS_CONTENT_TYPE)

    tfs_rest.add_routes(app, plane, config.max_body_bytes, config.max_request_batch)
    v2.add_routes(app, plane, config.max_body_bytes)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            document = get_openapi(title=app.title, version=app.version, description=app.description,
                                   routes=app.routes)
            app.openapi_schema = finish_document(document, models, config.max_request_batch, v2.DATATYPE_OF)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
