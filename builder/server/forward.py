"""A request as the front hands it to a model host, and the host's answer: plain values, protocol-neutral.

The front (`front`) speaks HTTP and gRPC to clients; model hosts (`host`) hold the models. Between them a
request is only what the host needs to answer it (method, path, headers, body; or a gRPC method and its
serialized message) and an answer is a status, headers and a body. A host in the front's own process gets
these objects as they are; a host in a model process gets them through shared memory (`channel`), where
`pack_request`/`pack_answer` write the small part (everything but the body) with `marshal` and the body
travels as raw bytes beside it.
"""

from __future__ import annotations

import marshal
from dataclasses import dataclass

#: Request kinds.
HTTP = 1
GRPC = 2

Headers = tuple[tuple[bytes, bytes], ...]
Body = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Request:
    """One client request. HTTP: `method`, `path` (percent-decoded), `query` (raw), `headers` (lower-case
    names), `body` (as sent; a gzip body is decoded by the host). gRPC: `method` is the full RPC name
    ("/tensorflow.serving.PredictionService/Predict"), `body` the serialized message, `client` the peer."""

    kind: int
    method: str
    body: Body
    path: str = ""
    query: bytes = b""
    headers: Headers = ()
    client: str = ""  # "host:port" (HTTP) or gRPC's peer string
    scheme: str = "http"

    def header(self, name: bytes) -> bytes | None:
        """The first value of a (lower-case) header, or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Answer:
    """A host's answer. HTTP: `status` and `headers` as sent (content-length is the front's to write).
    gRPC: `status` is the status code's number (0 OK) and `body` the serialized reply; a failure's message
    is `message`."""

    status: int
    body: Body = b""
    headers: Headers = ()
    message: str = ""


def pack_request(request: Request) -> bytes:
    """Everything of `request` but its body, for the channel."""
    return marshal.dumps((request.kind, request.method, request.path, request.query, request.headers,
                          request.client, request.scheme))


def unpack_request(meta: Body, body: Body) -> Request:
    kind, method, path, query, headers, client, scheme = marshal.loads(meta)
    return Request(kind, method, body, path, query, tuple(tuple(h) for h in headers), client, scheme)


def pack_answer(answer: Answer) -> bytes:
    """Everything of `answer` but its body, for the channel."""
    return marshal.dumps((answer.status, answer.headers, answer.message))


def unpack_answer(meta: Body, body: Body) -> Answer:
    status, headers, message = marshal.loads(meta)
    return Answer(status, body, tuple(tuple(h) for h in headers), message)
