"""Request bodies under a limit: plain, chunked, gzip (limited as sent and as decoded), refused cleanly."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import pytest

from builder.server.bodies import gunzip_limited, read_limited
from builder.server.protocol import RequestError


def _stream(*chunks: bytes) -> tuple[AsyncIterator[bytes], list[int]]:
    seen: list[int] = []

    async def gen() -> AsyncIterator[bytes]:
        for chunk in chunks:
            seen.append(len(chunk))
            yield chunk

    return gen(), seen


def _read(chunks: tuple[bytes, ...], limit: int, length: str | None = None, encoding: str | None = None) -> bytes:
    stream, _ = _stream(*chunks)
    return asyncio.run(read_limited(stream, limit, length, encoding))


def test_plain_and_chunked_bodies_under_the_limit() -> None:
    assert _read((b"ab", b"cd"), 4) == b"abcd"
    assert _read((b"abcd",), 4, "4") == b"abcd"


@pytest.mark.parametrize(("chunks", "length"), [((b"x" * 5,), "5"), ((b"xx", b"xx", b"xx"), None)])
def test_oversized_bodies_are_413_after_the_rest_is_drained(chunks: tuple[bytes, ...], length: str | None) -> None:
    stream, seen = _stream(*chunks, b"tail")
    with pytest.raises(RequestError) as error:
        asyncio.run(read_limited(stream, 4, length))
    assert error.value.status == 413
    assert len(seen) == len(chunks) + 1  # every chunk was read, so the answer is not lost to a reset


def test_gzip_is_decoded_and_limited_as_decoded() -> None:
    assert _read((gzip.compress(b"hello"),), 100, encoding="gzip") == b"hello"
    with pytest.raises(RequestError) as big:
        _read((gzip.compress(b"x" * 100_000),), 1000, encoding="gzip")
    assert big.value.status == 413
    with pytest.raises(RequestError) as bad:
        gunzip_limited(b"not gzip", 100)
    assert bad.value.status == 400
    with pytest.raises(RequestError) as cut:
        gunzip_limited(gzip.compress(b"hello world")[:-6], 100)
    assert cut.value.status == 400 and "truncated" in str(cut.value)


def test_unknown_encodings_and_bad_lengths() -> None:
    with pytest.raises(RequestError) as other:
        _read((b"x",), 10, encoding="br")
    assert other.value.status == 415
    with pytest.raises(RequestError) as length:
        _read((b"x",), 10, "1x")
    assert length.value.status == 400
