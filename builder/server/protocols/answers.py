"""What a request is answered with, written once for every protocol: JSON answers, error bodies, gRPC codes.

A `RequestError` answers its own status and message; a model that refused what the request carried while
computing (`builder.model.failures.ModelInputError`: an id beyond the vocabulary, a waveform shorter than one
frame) answers 400 with the runtime's own message, cleaned, as TF Serving answers a graph's
`InvalidArgumentError` (gRPC: INVALID_ARGUMENT); a client that went away (`dataplane.ClientGone`)
answers nothing; anything else is the server's own failure: logged with its traceback and answered 500
with `internal_error_message`, and the server keeps serving. REST writes the answer as
`{"error": "..."}` (TF Serving's shape, `error_body`), gRPC as a status code (`GRPC_CODE_OF_HTTP`). The route
table's router (`routes.Router`) is the one caller of `error_answer`: handlers only raise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from builder.model.failures import ModelInputError
from builder.server.protocols import jsoncodec
from builder.server.core.dataplane import CLIENT_GONE, ClientGone
from builder.server.process.messages import GRPC, Answer, Headers, Kind
from builder.server.core.call import RequestError

log = logging.getLogger("tfsmith.serve")

JSON: Headers = ((b"content-type", b"application/json"),)
#: HTTP status -> gRPC status number, as TF Serving maps them (anything else a client got wrong: INVALID_ARGUMENT).
GRPC_CODE_OF_HTTP = {400: 3, 404: 5, 413: 8, 503: 14, CLIENT_GONE: 1, 500: 13}
INVALID_ARGUMENT = 3


@dataclass(frozen=True)
class Failure:
    """A failed request's HTTP status and message."""

    status: int
    message: str


def internal_error_message(error: BaseException) -> str:
    """What every protocol answers for a failure of the server's own (HTTP 500, gRPC INTERNAL)."""
    return f"internal error: {type(error).__name__}: {error}"


def failure(error: BaseException) -> Failure:
    """The answer to `error`; a failure of the server's own is logged here, once."""
    if isinstance(error, RequestError):
        return Failure(error.status, str(error))
    if isinstance(error, ModelInputError):  # the model refused what the request carried: the client's to fix
        return Failure(400, str(error))
    if isinstance(error, ClientGone):
        return Failure(CLIENT_GONE, "client disconnected")
    log.error("request failed", exc_info=error)
    return Failure(500, internal_error_message(error))


def error_body(message: str) -> bytes:
    """TF Serving's error body (the Open Inference Protocol's is the same shape)."""
    return jsoncodec.dumps({"error": message})


def json_answer(content: Any, status: int = 200) -> Answer:
    """A JSON answer (compact, by `jsoncodec`)."""
    return Answer(status, jsoncodec.dumps(content), JSON)


def json_error(status: int, message: str, headers: Headers = ()) -> Answer:
    """An HTTP error answer in the server's one error shape."""
    return Answer(status, error_body(message), JSON + headers)


def error_answer(error: BaseException, kind: Kind) -> Answer:
    """What `error` is answered with: `{"error": ...}` and its status, or its gRPC status code and message."""
    answer = failure(error)
    if kind == GRPC:
        return Answer(GRPC_CODE_OF_HTTP.get(answer.status, INVALID_ARGUMENT), message=answer.message)
    return json_error(answer.status, answer.message)
