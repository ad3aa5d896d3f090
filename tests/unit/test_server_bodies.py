"""Request bodies' content encoding: identity or gzip (limited as decoded), refused cleanly. The size as sent
is the front's to limit (`framing`, tested in test_server_http_front.py)."""

from __future__ import annotations

import gzip

import pytest

from builder.server.protocols.bodies import decoded, gunzip_limited
from builder.server.core.call import RequestError


def test_identity_bodies_are_used_as_they_are() -> None:
    assert decoded(b"abcd", 4) == b"abcd"
    assert decoded(b"abcd", 4, "identity") == b"abcd"


def test_gzip_is_decoded_and_limited_as_decoded() -> None:
    assert decoded(gzip.compress(b"hello"), 100, "gzip") == b"hello"
    with pytest.raises(RequestError) as big:
        decoded(gzip.compress(b"x" * 100_000), 1000, "gzip")
    assert big.value.status == 413
    with pytest.raises(RequestError) as bad:
        gunzip_limited(b"not gzip", 100)
    assert bad.value.status == 400
    with pytest.raises(RequestError) as cut:
        gunzip_limited(gzip.compress(b"hello world")[:-6], 100)
    assert cut.value.status == 400 and "truncated" in str(cut.value)


def test_unknown_encodings_are_415() -> None:
    with pytest.raises(RequestError) as other:
        decoded(b"x", 10, "br")
    assert other.value.status == 415
