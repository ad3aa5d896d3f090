"""A request body's content encoding: identity or gzip, the decoded size limited, refusals as clean 4xx.

The body's size as sent is limited once, by the front, before any of it is read (`framing`, `http_front`: a
declared length over `--max-body-bytes` is answered 413 at once, a chunked body as soon as it passes the
limit; gRPC's own limit for a call's message). What is left for the handlers is the encoding: a gzip body is
limited again as decoded, so that a small bomb cannot expand to gigabytes.
"""

from __future__ import annotations

import zlib
from typing import Any

from builder.server.process.messages import Request
from builder.server.core.call import RequestError

ENCODINGS = ("identity", "gzip", "x-gzip")


def decoded(body: bytes, limit: int, content_encoding: str | None = None) -> bytes:
    """A body read whole (the front read it under the limit as sent): decoded when gzip, refusing (413) one
    that decodes to more than `limit` bytes and (415) an encoding the server does not read."""
    encoding = (content_encoding or "identity").strip().lower() or "identity"
    if encoding not in ENCODINGS:
        raise RequestError(f"unsupported Content-Encoding {content_encoding!r}; send identity or gzip", status=415)
    return body if encoding == "identity" else gunzip_limited(body, limit)


def content(request: Request, body: Any, limit: int) -> Any:
    """A request's body as the handler reads it: as it lies, or decoded from its Content-Encoding."""
    encoding = request.header(b"content-encoding")
    if encoding is None:
        return body
    return decoded(bytes(body), limit, encoding.decode("latin-1"))


def gunzip_limited(data: bytes, limit: int) -> bytes:
    """A gzip body decoded, refusing (413) one that decodes to more than `limit` bytes without decoding it all."""
    decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decoder.decompress(data, limit + 1)
        if len(out) > limit:
            raise RequestError(f"decoded request body exceeds the limit of {limit} bytes", status=413)
        if not decoder.eof:
            raise RequestError("malformed gzip body: truncated")
    except zlib.error as error:
        raise RequestError(f"malformed gzip body: {error}") from None
    return out
