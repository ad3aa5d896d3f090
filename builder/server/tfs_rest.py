"""TensorFlow Serving's REST API: a thin adapter between its JSON and the data plane.

Routes (TF Serving's, so existing clients and probes work unchanged):
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]            model status (every served version AVAILABLE)
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata   signatures: inputs/outputs, dtypes, shapes
  POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict    row (`instances`) or columnar (`inputs`) predict
A large body's first part is handed to the decoding helper while the rest arrives (`tensor_json.ReadAhead`).
The body is decoded and validated into numpy arrays (`tensor_json` for one numeric input, else
`protocol.parse_predict` with JSON by `jsoncodec`) on a worker thread when large (`DataPlane.decode`);
resolving, readiness, batching and bookkeeping are the data plane's (`dataplane`); the answer is encoded by
`jsoncodec`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from builder.server import jsoncodec, tensor_json
from builder.server.bodies import read_limited
from builder.server.dataplane import DataPlane
from builder.server.protocol import (
    RequestError,
    format_outputs,
    internal_error_message,
    may_hold_booleans,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
    parse_version,
)

ENTRYPOINT = "REST"
log = logging.getLogger("tfsmith.serve")


class JSONBody(Response):
    """Compact JSON by `jsoncodec` without FastAPI's encoder pass (our payloads are plain lists and floats)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return jsoncodec.dumps(content)


#: The three predict paths (latest, a version, a label), as the routes below match them (`segment`: no '/'
#: and no ':'). The lane answers exactly these POSTs; everything else goes through the routes.
PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/([^/:]+)|/labels/([^/:]+))?:predict")


class ClientGone(Exception):
    """The client disconnected before its body was read: nobody is left to answer."""


async def predict_answer(plane: DataPlane, chunks: AsyncIterator[bytes], content_length: str | None,
                         content_encoding: str | None, max_body_bytes: int, max_request_batch: int, name: str,
                         version: str | None, label: str | None) -> dict[str, Any]:
    """A predict's JSON answer: the body read under the limit, decoded, batched and formatted."""
    async with plane.request(ENTRYPOINT, "predict", name):
        ahead = plane.read_ahead(name, version, label, content_length, content_encoding)
        try:
            # read first: an unread body resets the socket
            raw = await read_limited(chunks, max_body_bytes, content_length, content_encoding,
                                     None if ahead is None else ahead.feed)
            served = plane.resolve_path(name, version, label)
            call = await plane.decode(len(raw), lambda: (ahead is not None and ahead.finish(
                raw, served.signatures, max_request_batch, served.default_signature)) or tensor_json.parse_predict(
                raw, served.signatures, max_request_batch, served.default_signature, plane.halves) or parse_predict(
                parse_json(raw), served.signatures, max_request_batch, may_hold_booleans(raw),
                served.default_signature))
        finally:
            if ahead is not None:
                plane.dismiss(ahead)
        outputs = await plane.predict(served, call)
        return format_outputs(outputs, served.signatures[call.signature], call.row_format)


class PredictLane:
    """Plain ASGI in front of the app for TF Serving's predict POSTs, the hot path.

    The framework's routing, request objects and middleware cost ~0.1 ms of CPU a request, a third of a
    small model's whole request here (digits CNN: 0.37 ms with it); this answers the three predict paths
    directly, with the same body limits, answers and error bodies as the routes (which stay, for the API
    document and for every other method on these paths)."""

    def __init__(self, app: ASGIApp, plane: DataPlane, max_body_bytes: int, max_request_batch: int) -> None:
        self.app, self.plane = app, plane
        self.max_body_bytes, self.max_request_batch = max_body_bytes, max_request_batch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (PREDICT_PATH.fullmatch(scope["path"])
                 if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path") else None)
        if match is None:
            await self.app(scope, receive, send)
            return
        headers = {key: value for key, value in scope["headers"] if key in (b"content-length", b"content-encoding")}
        length, encoding = headers.get(b"content-length"), headers.get(b"content-encoding")
        try:
            answer = await predict_answer(self.plane, _chunks(receive), None if length is None else length.decode(
                "latin-1"), None if encoding is None else encoding.decode("latin-1"), self.max_body_bytes,
                self.max_request_batch, *match.groups())
            status, body = 200, jsoncodec.dumps(answer)
        except ClientGone:
            return
        except RequestError as error:
            status, body = error.status, jsoncodec.dumps({"error": str(error)})
        except Exception as error:  # noqa: BLE001 - the routes' 500 answer, the server keeps serving
            log.exception("request failed")
            status, body = 500, jsoncodec.dumps({"error": internal_error_message(error)})
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's chunks as the ASGI server delivers them."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


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
        return JSONBody(await predict_answer(plane, request.stream(), request.headers.get("content-length"),
                                             request.headers.get("content-encoding"), max_body_bytes,
                                             max_request_batch, name, version, label))

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
