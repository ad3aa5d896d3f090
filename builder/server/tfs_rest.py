"""TensorFlow Serving's REST API: a thin adapter between its JSON and the data plane.

Routes (TF Serving's, so existing clients and probes work unchanged):
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]            model status (every served version AVAILABLE)
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata   signatures: inputs/outputs, dtypes, shapes
  POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict    row (`instances`) or columnar (`inputs`) predict
This module only translates: a predict body is read under the limit (`bodies`), decoded into numpy by one
fast path (`tensor_json`, simdjson straight into an array for one numeric input) or else the general path
once (`protocol.parse_predict` over `jsoncodec`), and the outputs are written back in the request's form.
Lookup, readiness, decoding off the event loop, batching and bookkeeping are the data plane's (`dataplane`);
errors are answered by `answers`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response

from builder.server import jsoncodec, tensor_json
from builder.server.bodies import read_limited
from builder.server.dataplane import Address, DataPlane, Provisional
from builder.server.protocol import (
    PredictCall,
    format_outputs,
    may_hold_booleans,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
)
from builder.server.served import ServedModel

ENTRYPOINT = "REST"


class JSONBody(Response):
    """Compact JSON by `jsoncodec` without FastAPI's encoder pass (our payloads are plain lists and floats)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return jsoncodec.dumps(content)


#: The three predict paths (latest, a version, a label), as the routes below match them (`segment`: no '/'
#: and no ':'). The model host (`host`) answers exactly these POSTs straight from the data plane; the routes
#: below describe them in the API document and answer them where the app alone serves (tests).
PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/([^/:]+)|/labels/([^/:]+))?:predict")


@dataclass(frozen=True)
class PredictCodec:
    """TF Serving's predict body into a call (the fast path, else the general path once) and back."""

    max_request_batch: int

    def size(self, body: bytes) -> int:
        return len(body)

    def decode(self, served: ServedModel, body: bytes) -> tuple[PredictCall, None] | Provisional[None]:
        """The fast path's call, provisional until its structure check agrees; else the general path's."""
        fast = tensor_json.read_predict_unconfirmed(body, served.signatures, self.max_request_batch,
                                                    served.default_signature)

        def general(left: tensor_json.Left = tensor_json.Left.PARSED) -> tuple[PredictCall, None]:
            return decode_general(body, left, served.signatures, self.max_request_batch,
                                  served.default_signature), None

        if isinstance(fast, tensor_json.Left):
            return general(fast)
        return Provisional((fast.value, None), fast.confirmed, general)

    def encode(self, served: ServedModel, call: PredictCall, request: None,
               outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return format_outputs(outputs, served.signatures[call.signature], call.row_format)


def decode_general(body: bytes, left: tensor_json.Left, signatures: Any, max_batch: int,
                   default: str | None) -> PredictCall:
    """The call of a predict body `tensor_json` left to the general path: decoded once by the decoder it
    names and validated by `protocol.parse_predict` (RequestError 400)."""
    document = parse_json(body, standard=left is tensor_json.Left.UNREADABLE)
    return parse_predict(document, signatures, max_batch, may_hold_booleans(body), default)


async def predict_answer(plane: DataPlane, chunks: AsyncIterator[bytes], content_length: str | None,
                         content_encoding: str | None, max_body_bytes: int, max_request_batch: int, name: str,
                         version: str | None, label: str | None) -> dict[str, Any]:
    """A predict's JSON answer: the body read under the limit, then the data plane's one inference."""
    return await plane.infer(
        ENTRYPOINT, Address(name, version, label),
        lambda: read_limited(chunks, max_body_bytes, content_length, content_encoding),
        PredictCodec(max_request_batch))


def add_routes(app: FastAPI, plane: DataPlane, max_body_bytes: int, max_request_batch: int) -> None:
    """TF Serving's status, metadata and predict routes on the app, answering through `plane`."""

    async def status_of(name: str, version: str | None = None, label: str | None = None) -> JSONBody:
        async with plane.request(ENTRYPOINT, "status", name):
            return JSONBody(model_status(plane.status(name, version, label)))

    async def metadata_of(name: str, version: str | None = None, label: str | None = None) -> JSONBody:
        async with plane.request(ENTRYPOINT, "metadata", name):
            metadata = plane.metadata(name, version, label)
            return JSONBody(model_metadata(name, metadata.version, metadata.signatures))

    async def predict(request: Request, name: str, version: str | None, label: str | None = None) -> JSONBody:
        return JSONBody(await predict_answer(plane, request.stream(), request.headers.get("content-length"),
                                             request.headers.get("content-encoding"), max_body_bytes,
                                             max_request_batch, name, version, label))

    @app.get("/v1/models/{name:segment}", summary="Model status: every served version")
    async def status(name: str) -> JSONBody:
        return await status_of(name)

    @app.get("/v1/models/{name:segment}/versions/{version:segment}", summary="Model version status")
    async def version_status(name: str, version: str) -> JSONBody:
        return await status_of(name, version)

    @app.get("/v1/models/{name:segment}/labels/{label:segment}", summary="Status of a labelled version")
    async def label_status(name: str, label: str) -> JSONBody:
        return await status_of(name, label=label)

    @app.get("/v1/models/{name:segment}/metadata", summary="Signatures: inputs, outputs, dtypes, shapes")
    async def metadata(name: str) -> JSONBody:
        return await metadata_of(name)

    @app.get("/v1/models/{name:segment}/versions/{version:segment}/metadata", summary="Signatures of a version")
    async def version_metadata(name: str, version: str) -> JSONBody:
        return await metadata_of(name, version)

    @app.get("/v1/models/{name:segment}/labels/{label:segment}/metadata", summary="Signatures of a labelled version")
    async def label_metadata(name: str, label: str) -> JSONBody:
        return await metadata_of(name, label=label)

    @app.post("/v1/models/{name:segment}:predict", summary="Predict (row or columnar)")
    async def predict_latest(name: str, request: Request) -> JSONBody:
        return await predict(request, name, None)

    @app.post("/v1/models/{name:segment}/versions/{version:segment}:predict", summary="Predict with a version")
    async def predict_version(name: str, version: str, request: Request) -> JSONBody:
        return await predict(request, name, version)

    @app.post("/v1/models/{name:segment}/labels/{label:segment}:predict", summary="Predict with a version label")
    async def predict_label(name: str, label: str, request: Request) -> JSONBody:
        return await predict(request, name, None, label)
