"""TensorFlow Serving's REST API: a thin adapter between its JSON and the data plane.

Its routes (TF Serving's, so existing clients and probes work unchanged; declared in `routes`):
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]            model status (every served version AVAILABLE)
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata   signatures: inputs/outputs, dtypes, shapes
  POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict    row (`instances`) or columnar (`inputs`) predict
This module only translates: a predict body (as the front handed it, gzip already decoded) is read into numpy by one
fast path (`tensor_json`, simdjson straight into an array for one numeric input) or else the general path
once (`tfs_json.parse_predict` over `jsoncodec`), and the outputs are written back in the request's form.
Lookup, readiness and decoding off the event loop are the data plane's (`dataplane.read`), the call and its rules
`core/call`'s; errors are raised, and answered and counted by the route table's router (`core.outcome`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from builder.server.process.messages import JSON, Answer, Request
from builder.server.protocols import jsoncodec, tensor_json
from builder.server.protocols.answers import json_answer
from builder.server.protocols.tfs_json import (
    TfsCall,
    format_outputs,
    may_hold_booleans,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
)

if TYPE_CHECKING:
    from builder.server.routes import Context


def decode_predict(body: bytes, signatures: Mapping[str, Any], max_batch: int, default: str | None) -> TfsCall:
    """The call of a predict body: the fast path's (`tensor_json`, its structure check passed), else the general
    path's, read once."""
    fast = tensor_json.read_predict(body, signatures, max_batch, default)
    if not isinstance(fast, tensor_json.Left):
        return fast
    return decode_general(body, fast, signatures, max_batch, default)


def decode_general(body: bytes, left: tensor_json.Left, signatures: Any, max_batch: int,
                   default: str | None) -> TfsCall:
    """The call of a predict body `tensor_json` left to the general path: decoded once by the decoder it
    names and validated by `tfs_json.parse_predict` (RequestError 400)."""
    document = parse_json(body, standard=left is tensor_json.Left.UNREADABLE)
    return parse_predict(document, signatures, max_batch, may_hold_booleans(body), default)


async def status(context: Context, request: Request, name: str, version: str | None = None,
                 label: str | None = None) -> Answer:
    """Model status: every served version, or the one addressed."""
    return json_answer(model_status(context.plane.status(name, version, label)))


async def metadata(context: Context, request: Request, name: str, version: str | None = None,
                   label: str | None = None) -> Answer:
    """The addressed version's signatures."""
    found = context.plane.metadata(name, version, label)
    return json_answer(model_metadata(name, found.version, found.signatures))


async def predict(context: Context, request: Request, name: str, version: str | None = None,
                  label: str | None = None) -> Answer:
    """TF Serving's predict: the body (as it lies, or gunzipped) decoded into a call against the addressed
    version's signatures, the call run, the outputs written in the request's form (rows or columns)."""
    plane, config = context.plane, context.config
    body = request.body if isinstance(request.body, bytes) else bytes(request.body)
    served, call = await plane.read(name, version, label, len(body), lambda served: decode_predict(
        body, served.signatures, config.max_request_batch, served.default_signature))
    outputs = await served.predict(call)
    return Answer(200, jsoncodec.dumps(format_outputs(outputs, served.signatures[call.signature], call.row_format)),
                  JSON)
