"""The ASGI app: TensorFlow Serving's REST API over a pool of .tflite backends (FastAPI + uvicorn).

Routes (TF Serving's, so existing clients and probes work unchanged):
  GET  /v1/models/<name>[/versions/<v>]            model status (AVAILABLE)
  GET  /v1/models/<name>[/versions/<v>]/metadata   signatures: inputs/outputs, dtypes, shapes
  POST /v1/models/<name>[/versions/<v>]:predict    row (`instances`) or columnar (`inputs`) predict
  GET  /healthz                                    liveness + what is served (for HEALTHCHECK and probes)
  GET  /openapi.json, /docs                        the API described
Every error is `{"error": "..."}` with a 4xx status for what the client got wrong (400 malformed body or
wrong shape/dtype, 404 unknown model/version/route, 405 wrong method, 413 body too large) and 500 for our
own failures; no request, however malformed, stops the server.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from builder.server.backends import BackendPool, measure_pool
from builder.server.bodies import read_limited
from builder.server.batching import BatchingConfig, DynamicBatcher, run_inline
from builder.server.options import DEFAULT_MAX_BODY_BYTES
from builder.server.protocol import (
    RequestError,
    format_outputs,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
    parse_version,
)

log = logging.getLogger("tfsmith.serve")

@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to know; built by the CLI (or the container's entry point)."""

    model_path: Path
    model_name: str
    version: int = 1
    runtime: str = "litert"
    runtime_reason: str = "requested"
    workers: int = 2
    threads: int = 1
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_request_batch: int = 4096
    dispatch: str = "auto"  # auto (inline for models faster than a thread hop) | inline | threads
    samples_path: Path | None = None  # the model's own example inputs (optimize's samples.npz), for warm-up


class JSONBody(Response):
    """Compact JSON without FastAPI's encoder pass (our payloads are plain lists and floats already)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode()


def _error(status: int, message: str) -> JSONBody:
    return JSONBody({"error": message}, status_code=status)


PREDICT_BODY_SCHEMA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "TF Serving predict request: exactly one of `instances` (row) or `inputs` "
                    "(columnar).",
                    "properties": {
                        "signature_name": {"type": "string", "default": "serving_default"},
                        "instances": {"type": "array", "description": "one entry per example"},
                        "inputs": {"description": "a batched tensor, or an object of them by input name"},
                    },
                },
                "example": {"instances": [[0.0, 0.5, 1.0]]},
            }
        },
    },
    "responses": {
        "200": {"description": "`predictions` (row form) or `outputs` (columnar form)"},
        "400": {"description": "malformed JSON, wrong shape or dtype: `{\"error\": ...}`"},
        "404": {"description": "unknown model or version"},
        "413": {"description": "body larger than the server's limit"},
    },
}


async def _read_body(request: Request, limit: int) -> bytes:
    """The body under the server's limit (plain, chunked or gzip); see `bodies.read_limited`."""
    return await read_limited(request.stream(), limit, request.headers.get("content-length"),
                              request.headers.get("content-encoding"))


def create_app(config: ServerConfig, pool: BackendPool | None = None) -> FastAPI:
    """The app serving one model; the pool is created here unless given (tests share one)."""
    pool = pool or BackendPool.create(config.runtime, config.model_path, config.workers, config.threads)
    executor = ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="tfsmith-infer")
    batchable = all(s.inputs and s.inputs[0].batched for s in pool.signatures.values())
    model_p50_us = measure_pool(pool, config.samples_path)
    inline = run_inline(model_p50_us, config.batching) if config.dispatch == "auto" else config.dispatch == "inline"
    batcher = DynamicBatcher(pool, config.batching, executor, batchable, inline)
    signatures = pool.signatures
    app = FastAPI(
        title="tfsmith model server",
        version="1",
        description=(
            f"TensorFlow Serving-compatible REST API serving `{config.model_name}` "
            f"({config.model_path.name}, runtime {pool.runtime})."
        ),
    )
    app.state.batcher = batcher
    app.state.pool = pool

    def check_model(name: str, version: str | None) -> int:
        if name != config.model_name:
            raise RequestError(f"Servable not found for request: Latest({name})", status=404)
        if version is None:
            return config.version
        number = parse_version(version)
        if number != config.version:
            raise RequestError(f"Servable not found for request: Specific({name}, {number})", status=404)
        return number

    @app.exception_handler(RequestError)
    async def request_error(_: Request, error: RequestError) -> JSONBody:
        return _error(error.status, str(error))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONBody:
        return _error(error.status_code, str(error.detail))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, error: Exception) -> JSONBody:
        log.exception("predict failed")
        return _error(500, f"internal error: {type(error).__name__}: {error}")

    @app.get("/healthz", summary="Liveness and what is served")
    async def healthz() -> JSONBody:
        return JSONBody(
            {
                "status": "ok",
                "model": config.model_name,
                "version": str(config.version),
                "runtime": pool.runtime,
                "runtime_reason": config.runtime_reason,
                "workers": pool.size,
                "max_batch_size": config.batching.max_batch_size,
                "inline": batcher.inline,
                "model_p50_us": None if model_p50_us is None else round(model_p50_us, 1),
            }
        )

    @app.get("/v1/models/{name}", summary="Model status")
    async def status(name: str) -> JSONBody:
        return JSONBody(model_status([check_model(name, None)]))

    @app.get("/v1/models/{name}/versions/{version}", summary="Model version status")
    async def version_status(name: str, version: str) -> JSONBody:
        return JSONBody(model_status([check_model(name, version)]))

    @app.get("/v1/models/{name}/metadata", summary="Signatures: inputs, outputs, dtypes, shapes")
    async def metadata(name: str) -> JSONBody:
        return JSONBody(model_metadata(name, check_model(name, None), signatures))

    @app.get("/v1/models/{name}/versions/{version}/metadata", summary="Signatures of a version")
    async def version_metadata(name: str, version: str) -> JSONBody:
        return JSONBody(model_metadata(name, check_model(name, version), signatures))

    async def predict(request: Request, name: str, version: str | None) -> JSONBody:
        check_model(name, version)
        body = parse_json(await _read_body(request, config.max_body_bytes))
        call = parse_predict(body, signatures, config.max_request_batch)
        outputs = await batcher.predict(call)
        return JSONBody(format_outputs(outputs, signatures[call.signature], call.row_format))

    @app.post("/v1/models/{name}:predict", summary="Predict (row or columnar)", openapi_extra=PREDICT_BODY_SCHEMA)
    async def predict_latest(name: str, request: Request) -> JSONBody:
        return await predict(request, name, None)

    @app.post(
        "/v1/models/{name}/versions/{version}:predict",
        summary="Predict with a version",
        openapi_extra=PREDICT_BODY_SCHEMA,
    )
    async def predict_version(name: str, version: str, request: Request) -> JSONBody:
        return await predict(request, name, version)

    return app


def run_server(
    config: ServerConfig, host: str = "127.0.0.1", port: int = 8501, log_level: str = "info", processes: int = 1
) -> None:
    """Serve until interrupted. One process by default (concurrency from the interpreter pool's threads);
    `processes` > 1 runs that many uvicorn worker processes on the same socket, each with its own pool,
    for throughput beyond one core (Python's GIL caps one process at about one core of HTTP handling)."""
    import os

    import uvicorn

    common = {"host": host, "port": port, "log_level": log_level, "access_log": False, "timeout_graceful_shutdown": 5}
    if processes <= 1:
        app = create_app(config)
        log.info("serving %s v%s from %s on http://%s:%d", config.model_name, config.version, config.model_path,
                 host, port)
        uvicorn.run(app, **common)
        return
    os.environ[CONFIG_ENV] = config_to_json(config)
    uvicorn.run("builder.server.app:app_from_env", factory=True, workers=processes, **common)


CONFIG_ENV = "TFSMITH_SERVE_CONFIG"


def config_to_json(config: ServerConfig) -> str:
    """The config for worker processes (they start fresh and read it from the environment)."""
    return json.dumps({
        **{k: getattr(config, k) for k in ("model_name", "version", "runtime", "runtime_reason", "workers",
                                            "threads", "max_body_bytes", "max_request_batch", "dispatch")},
        "model_path": str(config.model_path),
        "samples_path": None if config.samples_path is None else str(config.samples_path),
        "batching": [config.batching.max_batch_size, config.batching.timeout_us],
    })


def config_from_json(text: str) -> ServerConfig:
    data = json.loads(text)
    data["model_path"] = Path(data["model_path"])
    data["samples_path"] = None if data["samples_path"] is None else Path(data["samples_path"])
    data["batching"] = BatchingConfig(*data["batching"])
    return ServerConfig(**data)


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes."""
    import os

    return create_app(config_from_json(os.environ[CONFIG_ENV]))


def configure(
    artifact: Path,
    *,
    model_name: str | None = None,
    version: int = 1,
    runtime: str = "litert",
    runtime_reason: str = "requested",
    workers: int = 2,
    threads: int = 1,
    max_batch: int = 1,
    batch_timeout_us: int = 0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    dispatch: str = "auto",
) -> ServerConfig:
    """A validated ServerConfig from user-facing options; the runtime is named (auto is resolved by the caller)."""
    from builder.errors import InputError
    from builder.server.artifacts import resolve_artifact
    from builder.server.backends import RUNTIMES, model_for_runtime, nncf_inputs

    if workers < 1 or threads < 1:
        raise InputError("--workers and --threads must be at least 1")
    if version < 0:
        raise InputError("--model-version must be a non-negative integer")
    if dispatch not in ("auto", "inline", "threads"):
        raise InputError(f"unknown --dispatch {dispatch!r}; choose auto, inline or threads")
    if max_body_bytes < 1024:
        raise InputError("--max-body-bytes must be at least 1024")
    if runtime not in RUNTIMES:
        raise InputError(f"unknown runtime {runtime!r}; choose one of: {', '.join(RUNTIMES)}")
    try:
        batching = BatchingConfig(max_batch, batch_timeout_us)
    except ValueError as error:
        raise InputError(str(error)) from None
    resolved = resolve_artifact(artifact, model_name)
    if runtime == "openvino-nncf":
        nncf_inputs(resolved.model_path)  # refused up front without calibration samples
    return ServerConfig(
        model_path=model_for_runtime(runtime, resolved.model_path),
        model_name=resolved.name,
        version=version,
        runtime=runtime,
        runtime_reason=runtime_reason,
        workers=workers,
        threads=threads,
        batching=batching,
        max_body_bytes=max_body_bytes,
        dispatch=dispatch,
        samples_path=resolved.samples_path,
    )
