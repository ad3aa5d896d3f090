"""Reading a request body under a size limit: plain, chunked or gzip-encoded, refusals as clean 413s.

A body over the limit must be refused without holding it in memory, and the refusal must reach the
client: answering while the client is still sending and then closing the socket makes the kernel reset
the connection, so the client sees a reset instead of the 413. The rest of an oversized body is therefore
read and thrown away (bounded in time) before the answer goes out, as HTTP servers' "lingering close"
does. A gzip body is limited twice: as sent and as decoded (a small bomb must not expand to gigabytes).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect

from builder.server.dataplane import ClientGone
from builder.server.protocol import RequestError

#: Longest time spent reading and discarding the rest of a refused body before answering anyway.
DRAIN_SECONDS = 10.0
ENCODINGS = ("identity", "gzip", "x-gzip")


async def read_limited(stream: AsyncIterator[bytes], limit: int, content_length: str | None = None,
                       content_encoding: str | None = None) -> bytes:
    """The decoded body; RequestError 413 when it (sent or decoded) exceeds `limit` bytes, 400/415 when the
    framing or encoding is wrong, `dataplane.ClientGone` when the client disconnects first. `stream` is the
    ASGI body stream (Starlette's `request.stream()`)."""
    encoding = (content_encoding or "identity").strip().lower() or "identity"
    if encoding not in ENCODINGS:
        await _drain(stream)
        raise RequestError(f"unsupported Content-Encoding {content_encoding!r}; send identity or gzip", status=415)
    if content_length is not None:
        if not content_length.strip().isdigit():
            await _drain(stream)
            raise RequestError("malformed Content-Length header")
        if int(content_length) > limit:
            await _drain(stream)
            raise RequestError(f"request body of {int(content_length)} bytes exceeds the limit of {limit} bytes",
                               status=413)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                await _drain(stream)
                raise RequestError(f"request body exceeds the limit of {limit} bytes", status=413)
            chunks.append(chunk)
    except ClientDisconnect:  # Starlette's word for it: the data plane counts it as a hang-up, not a failure
        raise ClientGone() from None
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return body if encoding == "identity" else gunzip_limited(body, limit)


def decoded(body: bytes, limit: int, content_encoding: str | None = None) -> bytes:
    """A body already read whole (the front read it under the limit as sent): decoded when gzip, refusing
    (413) one that decodes to more than `limit` bytes and (415) an encoding the server does not read."""
    encoding = (content_encoding or "identity").strip().lower() or "identity"
    if encoding not in ENCODINGS:
        raise RequestError(f"unsupported Content-Encoding {content_encoding!r}; send identity or gzip", status=415)
    if len(body) > limit:
        raise RequestError(f"request body of {len(body)} bytes exceeds the limit of {limit} bytes", status=413)
    return body if encoding == "identity" else gunzip_limited(body, limit)


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


async def _drain(stream: AsyncIterator[bytes]) -> None:
    """Read and discard what is left of the body (so the answer is not lost to a connection reset)."""

    async def discard() -> None:
        async for _ in stream:
            pass

    try:  # wait_for, not asyncio.timeout: images built for Python 3.10 run this server too
        await asyncio.wait_for(discard(), DRAIN_SECONDS)
    except Exception:  # noqa: BLE001 - timed out, or a client gone mid-body: it needs no answer
        return
