"""Request bodies' content encoding: identity or gzip (limited as decoded), refused cleanly, by the front
(`framing.decoded`), the one place a body's limit is enforced; the size as sent and a gRPC message's are
limited there too (the HTTP framing is tested in test_server_http_front.py)."""

from __future__ import annotations

import gzip

from builder.server.front.framing import Refusal, decoded, message_refusal


def test_identity_bodies_are_used_as_they_are() -> None:
    assert decoded(b"abcd", b"identity", 4) == b"abcd"
    assert decoded(b"abcd", b"", 4) == b"abcd"


def test_gzip_is_decoded_and_limited_as_decoded() -> None:
    assert decoded(gzip.compress(b"hello"), b"gzip", 100) == b"hello"
    assert decoded(gzip.compress(b"hello"), b" X-Gzip ", 100) == b"hello"
    big = decoded(gzip.compress(b"x" * 100_000), b"gzip", 1000)
    assert big == Refusal(413, "decoded request body exceeds the limit of 1000 bytes")
    bad = decoded(b"not gzip", b"gzip", 100)
    assert isinstance(bad, Refusal) and bad.status == 400 and "malformed gzip body" in bad.message
    cut = decoded(gzip.compress(b"hello world")[:-6], b"gzip", 100)
    assert isinstance(cut, Refusal) and cut.status == 400 and "truncated" in cut.message


def test_unknown_encodings_are_415() -> None:
    other = decoded(b"x", b"br", 10)
    assert isinstance(other, Refusal) and other.status == 415 and "'br'" in other.message


def test_a_grpc_message_over_the_limit_is_refused_413() -> None:
    assert message_refusal(10, 10) is None
    assert message_refusal(11, 10) == Refusal(413, "request message of 11 bytes exceeds the limit of 10 bytes")
