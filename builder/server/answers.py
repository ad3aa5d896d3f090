"""What a failed request answers, written once for every protocol.

A `RequestError` answers its own status and message; a model that refused what the request carried while
computing (`builder.model.failures.ModelInputError`: an id beyond the vocabulary, a waveform shorter than one
frame) answers 400 with the runtime's own message, cleaned, as TF Serving answers a graph's
`InvalidArgumentError` (gRPC: INVALID_ARGUMENT); a client that went away (`dataplane.ClientGone`)
answers nothing; anything else is the server's own failure: logged with its traceback and answered 500
with `protocol.internal_error_message`, and the server keeps serving. REST writes the answer as
`{"error": "..."}` (TF Serving's shape, `error_body`), gRPC as a status code (`grpc_service`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from builder.model.failures import ModelInputError
from builder.server import jsoncodec
from builder.server.contract import allowed_methods
from builder.server.dataplane import CLIENT_GONE, ClientGone
from builder.server.protocol import RequestError, internal_error_message

log = logging.getLogger("tfsmith.serve")


@dataclass(frozen=True)
class Failure:
    """A failed request's HTTP status and message."""

    status: int
    message: str


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


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(error_body(message), status_code=status, headers=headers, media_type="application/json")


def add_error_answers(app: FastAPI) -> None:
    """The app's routes answer every failure as the model host does (`failure`, `error_body`); a route not
    found is a 404 and a wrong method a 405 naming every method served at that path (`Allow`)."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        headers = dict(error.headers or {})
        if error.status_code == 405:  # every method served at this path, not just the first route's
            headers["Allow"] = ", ".join(allowed_methods(app.router.routes, request.url.path))
        return error_response(error.status_code, str(error.detail), headers)

    @app.exception_handler(Exception)
    async def any_error(_: Request, error: Exception) -> Response:
        answer = failure(error)
        return error_response(answer.status, answer.message)

    app.add_exception_handler(RequestError, any_error)  # type: ignore[arg-type]
