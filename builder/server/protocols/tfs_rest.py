"""TensorFlow Serving's REST API: a thin adapter between its JSON and the data plane.

Its routes (TF Serving's, so existing clients and probes work unchanged; declared in `routes`):
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]            model status (every served version AVAILABLE)
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata   signatures: inputs/outputs, dtypes, shapes
  POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict    row (`instances`) or columnar (`inputs`) predict
This module only translates: a predict body (decoded from gzip when so sent, `bodies`) is decoded into numpy by one
fast path (`tensor_json`, simdjson straight into an array for one numeric input) or else the general path
once (`tfs_json.parse_predict` over `jsoncodec`), and the outputs are written back in the request's form.
Lookup, readiness, decoding off the event loop, batching and bookkeeping are the data plane's (`dataplane`);
errors are raised and answered by the route table's router (`answers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from builder.server.protocols import jsoncodec, tensor_json
from builder.server.protocols.answers import JSON, json_answer
from builder.server.protocols.bodies import reader
from builder.server.core.dataplane import Address, Provisional
from builder.server.process.messages import Answer, Request
from builder.server.protocols.tfs_json import (
    TfsCall,
    format_outputs,
    may_hold_booleans,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
)
from builder.server.core.repository import ServedModel

if TYPE_CHECKING:
    from builder.server.routes import Context

ENTRYPOINT = "REST"


@dataclass(frozen=True)
class PredictCodec:
    """TF Serving's predict body into a call (the fast path, else the general path once) and back."""

    max_request_batch: int

    def size(self, body: bytes) -> int:
        return len(body)

    def decode(self, served: ServedModel, body: bytes) -> tuple[TfsCall, None] | Provisional[None]:
        """The fast path's call, provisional until its structure check agrees; else the general path's."""
        fast = tensor_json.read_predict_unconfirmed(body, served.signatures, self.max_request_batch,
                                                    served.default_signature)

        def general(left: tensor_json.Left = tensor_json.Left.PARSED) -> tuple[TfsCall, None]:
            return decode_general(body, left, served.signatures, self.max_request_batch,
                                  served.default_signature), None

        if isinstance(fast, tensor_json.Left):
            return general(fast)
        return Provisional((fast.value, None), fast.confirmed, general)

    def encode(self, served: ServedModel, call: TfsCall, request: None,
               outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return format_outputs(outputs, served.signatures[call.signature], call.row_format)


def decode_general(body: bytes, left: tensor_json.Left, signatures: Any, max_batch: int,
                   default: str | None) -> TfsCall:
    """The call of a predict body `tensor_json` left to the general path: decoded once by the decoder it
    names and validated by `tfs_json.parse_predict` (RequestError 400)."""
    document = parse_json(body, standard=left is tensor_json.Left.UNREADABLE)
    return parse_predict(document, signatures, max_batch, may_hold_booleans(body), default)


async def status(context: Context, request: Request, name: str, version: str | None = None,
                 label: str | None = None) -> Answer:
    """Model status: every served version, or the one addressed."""
    plane = context.plane
    async with plane.request(ENTRYPOINT, "status", name):
        return json_answer(model_status(plane.status(name, version, label)))


async def metadata(context: Context, request: Request, name: str, version: str | None = None,
                   label: str | None = None) -> Answer:
    """The addressed version's signatures."""
    plane = context.plane
    async with plane.request(ENTRYPOINT, "metadata", name):
        found = plane.metadata(name, version, label)
        return json_answer(model_metadata(name, found.version, found.signatures))


async def predict(context: Context, request: Request, name: str, version: str | None = None,
                  label: str | None = None) -> Answer:
    """TF Serving's predict: the body (as it lies) through `PredictCodec` into the data plane."""
    body = request.body if isinstance(request.body, bytes) else bytes(request.body)
    config = context.config
    content = await context.plane.infer(ENTRYPOINT, Address(name, version, label),
                                        reader(request, body, config.max_body_bytes),
                                        PredictCodec(config.max_request_batch))
    return Answer(200, jsoncodec.dumps(content), JSON)
