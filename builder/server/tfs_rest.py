"""TensorFlow Serving's REST API: a thin adapter between its JSON and the data plane.

Routes (TF Serving's, so existing clients and probes work unchanged):
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]            model status (every served version AVAILABLE)
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata   signatures: inputs/outputs, dtypes, shapes
  POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict    row (`instances`) or columnar (`inputs`) predict
The body is decoded and validated into numpy arrays (`tensor_json` for one numeric input, else
`protocol.parse_predict` with JSON by `jsoncodec`) on a worker thread when large (`DataPlane.decode`);
resolving, readiness, batching and bookkeeping are the data plane's (`dataplane`); the answer is encoded by
`jsoncodec`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from builder.server import jsoncodec, tensor_json
from builder.server.bodies import read_limited
from builder.server.dataplane import DataPlane
from builder.server.protocol import (
    format_outputs,
    may_hold_booleans,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
    parse_version,
)

ENTRYPOINT = "REST"


class JSONBody(Response):
    """Compact JSON by `jsoncodec` without FastAPI's encoder pass (our payloads are plain lists and floats)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return jsoncodec.dumps(content)


def add_routes(app: FastAPI, plane: DataPlane, max_body_bytes: int, max_request_batch: int) -> None:
    """TF Serving's status, metadata and predict routes on the app, answering through `plane`."""

    def status_of(name: str, version: str | None = None, label: str | None = None) -> JSONBody:
        if version is None and label is None:
            return JSONBody(model_status(plane.versions(name)))
        return JSONBody(model_status([plane.models.get(name, _version(version), label).version]))

    def metadata_of(name: str, version: str | None = None, label: str | None = None) -> JSONBody:
        served = plane.models.get(name, _version(version), label)
        return JSONBody(model_metadata(name, served.version, served.signatures))

    async def predict(request: Request, name: str, version: str | None, label: str | None = None) -> JSONBody:
        async with plane.request(ENTRYPOINT, "predict", name):
            # read first: an unread body resets the socket
            raw = await read_limited(request.stream(), max_body_bytes, request.headers.get("content-length"),
                                     request.headers.get("content-encoding"))
            served = plane.resolve_path(name, version, label)
            call = await plane.decode(len(raw), lambda: tensor_json.parse_predict(
                raw, served.signatures, max_request_batch, served.default_signature) or parse_predict(
                parse_json(raw), served.signatures, max_request_batch, may_hold_booleans(raw),
                served.default_signature))
            outputs = await plane.predict(served, call)
            return JSONBody(format_outputs(outputs, served.signatures[call.signature], call.row_format))

    @app.get("/v1/models/{name:segment}", summary="Model status: every served version")
    async def status(name: str) -> JSONBody:
        return status_of(name)

    @app.get("/v1/models/{name:segment}/versions/{version:segment}", summary="Model version status")
    async def version_status(name: str, version: str) -> JSONBody:
        return status_of(name, version)

    @app.get("/v1/models/{name:segment}/labels/{label:segment}", summary="Status of a labelled version")
    async def label_status(name: str, label: str) -> JSONBody:
        return status_of(name, label=label)

    @app.get("/v1/models/{name:segment}/metadata", summary="Signatures: inputs, outputs, dtypes, shapes")
    async def metadata(name: str) -> JSONBody:
        return metadata_of(name)

    @app.get("/v1/models/{name:segment}/versions/{version:segment}/metadata", summary="Signatures of a version")
    async def version_metadata(name: str, version: str) -> JSONBody:
        return metadata_of(name, version)

    @app.get("/v1/models/{name:segment}/labels/{label:segment}/metadata", summary="Signatures of a labelled version")
    async def label_metadata(name: str, label: str) -> JSONBody:
        return metadata_of(name, label=label)

    @app.post("/v1/models/{name:segment}:predict", summary="Predict (row or columnar)")
    async def predict_latest(name: str, request: Request) -> JSONBody:
        return await predict(request, name, None)

    @app.post("/v1/models/{name:segment}/versions/{version:segment}:predict", summary="Predict with a version")
    async def predict_version(name: str, version: str, request: Request) -> JSONBody:
        return await predict(request, name, version)

    @app.post("/v1/models/{name:segment}/labels/{label:segment}:predict", summary="Predict with a version label")
    async def predict_label(name: str, label: str, request: Request) -> JSONBody:
        return await predict(request, name, None, label)


def _version(text: str | None) -> int | None:
    return None if text is None else parse_version(text)
