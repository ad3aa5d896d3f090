"""What a request ended as, said once: one `Outcome` carries its HTTP status, its gRPC code, the status label the
metrics count it under (TF Serving's `tensorflow.error.Code` names), a one-line reason and the error body.

Every place that ends a request takes its outcome from here: the front's own refusals (a malformed request,
a body or head too large, an unknown path or method), the route table's router (a handler's failure), the
channel's and the balancer's fallbacks (a model process that could not answer), the metrics and the access
log. So a status means the same in every protocol, counter and log line, and the mapping between HTTP
statuses and gRPC codes is written once (`_CODES`, as TF Serving maps them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from builder.model.failures import ModelInputError
from builder.server.core.call import RequestError

#: The status a request is counted with when its client went away before its answer (nginx's 499; CANCELLED
#: as gRPC names it): not the server's failure, and no one receives an answer.
CLIENT_GONE = 499

#: HTTP status -> (gRPC status code number, the metric's status label). A status not listed is the client's
#: (INVALID_ARGUMENT) below 500 and the server's (INTERNAL) from 500 on.
_CODES: dict[int, tuple[int, str]] = {
    200: (0, "OK"),
    400: (3, "INVALID_ARGUMENT"),
    404: (5, "NOT_FOUND"),
    405: (12, "UNIMPLEMENTED"),
    413: (8, "RESOURCE_EXHAUSTED"),
    415: (3, "INVALID_ARGUMENT"),
    431: (8, "RESOURCE_EXHAUSTED"),
    CLIENT_GONE: (1, "CANCELLED"),
    500: (13, "INTERNAL"),
    501: (12, "UNIMPLEMENTED"),
    503: (14, "UNAVAILABLE"),
}
_CLIENTS, _SERVERS = _CODES[400], _CODES[500]
#: gRPC status code number -> HTTP status (the first listed for each code).
_HTTP_OF_GRPC = {code: status for status, (code, _) in reversed(list(_CODES.items()))}


class ClientGone(Exception):
    """The client disconnected before its answer: nobody is left to answer."""


class Unavailable(Exception):
    """Nothing can answer the request now (503 / UNAVAILABLE): its message is the reason a client is given."""


@dataclass(frozen=True)
class Outcome:
    """How one request ended: `http` status, `grpc` code, metric `label`, one-line `reason` ("" when answered)."""

    http: int
    grpc: int
    label: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.http < 400

    @property
    def body(self) -> bytes:
        """The error body every protocol's HTTP answers carry: TF Serving's `{"error": "..."}` (the Open
        Inference Protocol's is the same shape)."""
        return json.dumps({"error": self.reason}, ensure_ascii=False, separators=(",", ":")).encode()


OK = Outcome(200, 0, "OK")


def outcome(http: int, reason: str = "") -> Outcome:
    """The outcome of an HTTP status (its gRPC code and label from the one table)."""
    code, label = _CODES.get(http) or (_SERVERS if http >= 500 else _CLIENTS)
    return Outcome(http, code, label, reason)


def of_grpc(code: int, reason: str = "") -> Outcome:
    """The outcome of a gRPC status code (a call answered by a model process: its HTTP twin for the log)."""
    if not code:
        return OK
    http = _HTTP_OF_GRPC.get(code, 500)
    return Outcome(http, code, _CODES.get(http, _SERVERS)[1], reason)


GONE = outcome(CLIENT_GONE, "client disconnected")


def internal_error_message(error: BaseException) -> str:
    """What every protocol answers for a failure of the server's own (HTTP 500, gRPC INTERNAL)."""
    return f"internal error: {type(error).__name__}: {error}"


def outcome_of(error: BaseException) -> Outcome:
    """What `error` ends a request as: a request error its own status; a model that refused what the request
    carried (`ModelInputError`: an id beyond the vocabulary) 400, as TF Serving answers a graph's
    InvalidArgumentError; a client gone 499; nothing able to answer now 503; anything else the server's own failure, 500."""
    if isinstance(error, RequestError):
        return outcome(error.status, str(error))
    if isinstance(error, ModelInputError):
        return outcome(400, str(error))
    if isinstance(error, ClientGone):
        return GONE
    if isinstance(error, Unavailable):
        return outcome(503, str(error))
    return outcome(500, internal_error_message(error))
