"""What crosses between the front and a model server: a request, its answer, and the control messages of a model
process's life. Plain typed values, protocol-neutral.

The front (`front`) speaks HTTP and gRPC to clients; model servers (`model_server`) hold the models. Between them a
request is only what the model server needs to answer it (method, path, headers, body; or a gRPC method and its
serialized message) and an answer is a status, headers and a body. A model server in the front's own process gets
these objects as they are; one in a model process gets them through shared memory (`channel`, which alone
knows how they are packed: the small part with `marshal`, the body as raw bytes beside it).

A request and an answer are named tuples, not dataclasses: every request makes two of them, and a tuple is
built in C without running any of the server's code (about a third of a frozen dataclass's cost, measured:
0.27 us against 0.86 us for a request's eight fields), and the channel packs and unpacks them as the tuples
they are.

A model process's life is told in control messages, one dataclass each (`Control`): the front says `Drain`,
`Stop`, `Load` (stage these versions) and `Activate` (serve them, or drop them); the process says `Ready`,
`Refused` (a one-line reason and an exit code) and `Loaded` (staged, or why not).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, NamedTuple, TypeVar

if TYPE_CHECKING:
    from builder.server.core.outcome import Outcome


class Kind(IntEnum):
    """Which protocol a request came in by."""

    HTTP = 1
    GRPC = 2


HTTP = Kind.HTTP
GRPC = Kind.GRPC

Headers = tuple[tuple[bytes, bytes], ...]
Body = bytes | bytearray | memoryview


class Request(NamedTuple):
    """One client request. HTTP: `method`, `path` (percent-decoded), `query` (raw), `headers` (lower-case
    names), `body` (a gzip body already decoded by the front). gRPC: `method` is the full RPC name
    ("/tensorflow.serving.PredictionService/Predict"), `body` the serialized message, `client` the peer."""

    kind: Kind
    method: str
    body: Body
    path: str = ""
    query: bytes = b""
    headers: Headers = ()
    client: str = ""  # "address:port" (HTTP) or gRPC's peer string
    scheme: str = "http"


class Answer(NamedTuple):
    """A model server's answer. HTTP: `status` and `headers` as sent (content-length is the front's to write).
    gRPC: `status` is the status code's number (0 OK) and `body` the serialized reply; a failure's message
    is `message`."""

    status: int
    body: Body = b""
    headers: Headers = ()
    message: str = ""


JSON: Headers = ((b"content-type", b"application/json"),)


def refusal(outcome: Outcome, kind: Kind, headers: Headers = ()) -> Answer:
    """The answer to a request that failed (`core.outcome`): its error body and HTTP status, or its gRPC code and
    reason; the one way a failure is written, wherever it happened (the front, a router, the channel)."""
    if kind == GRPC:
        return Answer(outcome.grpc, message=outcome.reason)
    return Answer(outcome.http, outcome.body, JSON + headers)


# --- a model process's life ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drain:
    """Front -> process: report not ready from now on (requests are still answered)."""


@dataclass(frozen=True)
class Stop:
    """Front -> process: finish the requests held, then exit."""


@dataclass(frozen=True)
class Load:
    """Front -> process: load and warm these versions of model `name`, to serve them once told (`Activate`)."""

    name: str
    versions: tuple[int, ...]


@dataclass(frozen=True)
class Activate:
    """Front -> process: serve the staged `versions` of `name` (`commit`), or let them go."""

    name: str
    versions: tuple[int, ...]
    commit: bool


@dataclass(frozen=True)
class Ready:
    """Process -> front: the models are loaded and warmed; what was loaded, for the front's start-up line."""

    pid: int
    models: dict[str, int]
    model_p50_us: tuple[float | None, ...]


@dataclass(frozen=True)
class Refused:
    """Process -> front: the model cannot be served here, said in one line, and the exit code to report."""

    message: str
    exit_code: int


@dataclass(frozen=True)
class Loaded:
    """Process -> front: the versions a `Load` named are staged (`ok`), or why not."""

    name: str
    versions: tuple[int, ...]
    ok: bool
    error: str = ""


Control = Drain | Stop | Load | Activate | Ready | Refused | Loaded
C = TypeVar("C", Drain, Stop, Load, Activate, Ready, Refused, Loaded)

