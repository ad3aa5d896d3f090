"""How a request's body is framed, decided once from its head (RFC 9112 §6): a length (0: none) or chunked; or a
refusal, answered before any of the body is read. And the one place the body limit (`--max-body-bytes`) is
enforced, for every way a body comes: a declared length, a chunked body as it grows (`chunk_refusal`), a gzip
body as decoded (`decoded`), a gRPC call's message (`message_refusal`).

Framing is where request smuggling lives: two parties that disagree on where a body ends disagree on where
the next request starts. So what is ambiguous is refused, never guessed. `httptools` already refuses a
Content-Length beside a Transfer-Encoding, two Content-Lengths, a length that is not digits, and chunked
named twice or not last on one line; here the Transfer-Encoding lines are read as what they are, a list of
codings over any number of lines (`transfer_codings`), so "gzip" on one line and "chunked" on the next is
not taken for plain chunked. What is refused:
- a Transfer-Encoding in an HTTP/1.0 request (1.0 has no transfer codings: its framing is faulty), 400;
- chunked not the last coding, or named twice, 400;
- any coding but chunked (gzip, deflate...), 501: the server does not decode them (Content-Encoding it does);
- a declared Content-Length above the limit, 413 at once: the body is never read.

A gzip body (Content-Encoding) is decoded here, in the front, so the handlers get every body as it is meant
and a body's limit is one rule: a gzip body is limited again as decoded, so a small bomb cannot expand to
gigabytes. A gRPC message is limited here too rather than by grpcio (`grpc.max_receive_message_length`):
grpcio buffers a whole message before its own limit applies, so taking it and refusing it here costs no more
memory, and the refusal is counted and logged like any other.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Chunked:
    pass


CHUNKED = Chunked()


@dataclass(frozen=True)
class Refusal:
    """A head whose body will not be read: answered with `status` and `message`, then the connection closed."""

    status: int
    message: str


#: A declared length (0: no body), chunked, or a refusal. A length is a bare int: every request with a body
#: gets one, and no object is made for it.
Framing = int | Chunked | Refusal


def transfer_codings(values: Iterable[bytes]) -> tuple[str, ...]:
    """The codings every Transfer-Encoding line names, in order, lower-cased (a comma list; empty items skipped)."""
    return tuple(token for value in values for token in (t.strip().lower() for t in value.decode("latin-1").split(","))
                 if token)


def body_framing(content_length: bytes | None, encodings: Sequence[bytes], http_10: bool, limit: int) -> Framing:
    """How the body of a request with this head is framed, or why it is refused. `content_length` is the one
    Content-Length (httptools has refused two, or one that is not digits), `encodings` every Transfer-Encoding
    line, `http_10` whether the request is HTTP/1.0, `limit` the largest body accepted."""
    codings = transfer_codings(encodings) if encodings else ()
    if codings:
        if http_10:
            return Refusal(400, "malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request")
        if codings[-1] != "chunked" or codings.count("chunked") > 1:
            return Refusal(400, "malformed HTTP request: chunked must be the last transfer coding, and only once")
        unknown = [c for c in codings if c != "chunked"]
        if unknown:
            return Refusal(501, f"transfer coding {unknown[0]!r} is not supported; send the body compressed with "
                                "Content-Encoding instead")
        return CHUNKED
    if content_length is None:
        return 0
    size = int(content_length)
    if size > limit:
        return too_large(limit, size)
    return size


def too_large(limit: int, size: int | None = None, what: str = "request body") -> Refusal:
    """The 413 of a body over the limit (`size`: its size, when known)."""
    of = "" if size is None else f" of {size} bytes"
    return Refusal(413, f"{what}{of} exceeds the limit of {limit} bytes")


def chunk_refusal(so_far: int, size: int, limit: int) -> Refusal | None:
    """A chunked body whose next chunk (`size` bytes after `so_far`) would pass the limit: refused before the
    chunk is read; or None."""
    return too_large(limit) if so_far + size > limit else None


def message_refusal(size: int, limit: int) -> Refusal | None:
    """A gRPC call's message over the limit (answered RESOURCE_EXHAUSTED), or None."""
    return too_large(limit, size, "request message") if size > limit else None


#: The Content-Encodings a body may come in.
ENCODINGS = ("identity", "gzip", "x-gzip")


def decoded(body: bytes, content_encoding: bytes, limit: int) -> bytes | Refusal:
    """A body read whole (under the limit as sent) as its Content-Encoding says: decoded when gzip, refusing
    (413) one that decodes to more than `limit` bytes without decoding it all, (415) an encoding the server
    does not read and (400) a malformed or truncated gzip stream."""
    encoding = content_encoding.decode("latin-1").strip().lower() or "identity"
    if encoding not in ENCODINGS:
        return Refusal(415, f"unsupported Content-Encoding {content_encoding.decode('latin-1')!r}; "
                            "send identity or gzip")
    if encoding == "identity":
        return body
    decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decoder.decompress(body, limit + 1)
    except zlib.error as error:
        return Refusal(400, f"malformed gzip body: {error}")
    if len(out) > limit:
        return too_large(limit, what="decoded request body")
    if not decoder.eof:
        return Refusal(400, "malformed gzip body: truncated")
    return out
