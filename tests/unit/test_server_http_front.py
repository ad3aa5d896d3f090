"""The front's HTTP/1.1 (`builder.server.front.http_front`, `framing`), driven byte by byte through its protocol with a
recording transport: framing (Content-Length, chunked, pipelined), refusals answered at once (413 for a declared
length before any body byte, 413 for a chunked body as it passes the limit, 501 for codings it does not
decode, 400 for every smuggling shape, 431), each closing the connection; keep-alive and close, HEAD, and a
body handed over as a view of the connection's buffer."""

from __future__ import annotations

from typing import Any

import asyncio
import re
import time
from collections.abc import Sequence

import pytest

from builder.server.process.messages import Answer, Request
from builder.server.front.framing import Chunked, Refusal, body_framing, transfer_codings
from builder.server.front.http_front import HttpFront, _Connection

OK = Answer(200, b'{"ok":true}', ((b"content-type", b"application/json"),))


class Transport:
    """What the protocol writes, and whether it paused or closed."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.eof = False  # closed for writing
        self.paused = False

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: Sequence[bytes]) -> None:
        for part in parts:
            self.out += part

    def close(self) -> None:
        self.closed = True

    abort = close

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 50000) if name == "peername" else None


def exchange(*pieces: bytes, max_body: int = 1024, answer: Answer = OK, refused: list[tuple[Any, ...]] | None = None,
             settle_s: float = 0.0) -> tuple[list[Request], bytes, bool]:
    """Feed `pieces` to one connection (each as one read); the requests the responder got (bodies copied out),
    what was written back, and whether the connection closed (for writing at least). `settle_s`: how long to
    wait at most for an answer that comes off the event loop (a body decoded on a worker thread)."""
    seen: list[Request] = []

    async def respond(request: Request) -> Answer:
        seen.append(Request(request.kind, request.method, bytes(request.body), request.path, request.query,
                            request.headers, request.client, request.scheme))
        return answer

    async def scenario() -> tuple[bytes, bool]:
        front = HttpFront(respond, max_body, refused=None if refused is None else lambda *said: refused.append(said))
        connection = _Connection(front)
        transport = Transport()
        connection.connection_made(transport)
        for piece in pieces:
            offset = 0
            while offset < len(piece):
                room = connection.get_buffer(len(piece) - offset)
                take = min(len(room), len(piece) - offset)
                room[:take] = piece[offset:offset + take]
                connection.buffer_updated(take)
                offset += take
                await asyncio.sleep(0)
            for _ in range(5):
                await asyncio.sleep(0)
        deadline = time.monotonic() + settle_s
        while not transport.out and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return bytes(transport.out), transport.closed or transport.eof

    out, closed = asyncio.run(scenario())
    return seen, out, closed


def statuses(out: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


def test_a_request_with_a_body_is_handed_over_whole_and_answered() -> None:
    seen, out, closed = exchange(b"POST /v1/models/m:predict?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                                 b"Content-Type: application/json\r\n\r\nhello")
    assert [(r.method, r.path, r.query, r.body) for r in seen] == [("POST", "/v1/models/m:predict", b"x=1", b"hello")]
    assert (b"content-type", b"application/json") in seen[0].headers and seen[0].client == "127.0.0.1:50000"
    assert out.startswith(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n") and out.endswith(b'\r\n\r\n{"ok":true}')
    assert not closed  # keep-alive


def test_a_body_split_over_many_reads_and_pipelined_requests_are_answered_in_order() -> None:
    first = b"POST /a HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"
    second = b"GET /b HTTP/1.1\r\n\r\n"
    seen, out, _ = exchange(first[:20], first[20:33] + b"", first[33:] + second)
    assert [(r.path, r.body) for r in seen] == [("/a", b"0123456789"), ("/b", b"")]
    assert statuses(out) == [200, 200]


def test_a_chunked_body_is_decoded() -> None:
    seen, out, _ = exchange(b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\n\r\n")
    assert [r.body for r in seen] == [b"abcdefg"] and statuses(out) == [200]


def test_a_declared_length_over_the_limit_is_refused_413_before_any_body_and_the_connection_closed() -> None:
    head = b"POST /big HTTP/1.1\r\nContent-Length: 50000000\r\n\r\n"
    seen, out, closed = exchange(head, max_body=1024)  # the client sent only the head, and waits
    assert statuses(out) == [413] and b"request body of 50000000 bytes exceeds the limit of 1024 bytes" in out
    assert b"connection: close" in out and closed and not seen
    # what the client sends after is dropped: neither its body nor a request hidden in it reaches the responder
    seen, out, closed = exchange(head, b"x" * 3000 + b"GET /smuggled HTTP/1.1\r\n\r\n", max_body=1024)
    assert statuses(out) == [413] and not seen and closed


def test_a_refused_connection_closes_when_the_client_does() -> None:
    async def scenario() -> tuple[bool | None, bool]:
        async def respond(request: Request) -> Answer:
            raise AssertionError("a refused request reached the responder")

        connection = _Connection(HttpFront(respond, 10))
        transport = Transport()
        connection.connection_made(transport)
        data = b"POST /big HTTP/1.1\r\nContent-Length: 11\r\n\r\n"
        room = connection.get_buffer(len(data))
        room[:len(data)] = data
        connection.buffer_updated(len(data))
        assert transport.eof and not transport.closed  # answered, closed for writing, still reading
        keep_open = connection.eof_received()  # the client closed its side: so does the transport
        connection.connection_lost(None)
        return keep_open, connection.linger_timer is None or connection.linger_timer.cancelled()

    keep_open, timer_gone = asyncio.run(scenario())
    assert not keep_open and timer_gone


def test_a_chunked_body_is_refused_413_as_soon_as_it_passes_the_limit() -> None:
    head = b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    seen, out, closed = exchange(head + b"200\r\n" + b"a" * 512 + b"\r\n", b"300\r\n", max_body=1024)
    assert statuses(out) == [413] and closed and not seen  # refused on the size line, before its data came


def test_expect_100_continue_gets_100_or_an_immediate_413() -> None:
    seen, out, _ = exchange(b"POST /e HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", b"abc")
    assert statuses(out) == [100, 200] and [r.body for r in seen] == [b"abc"]
    seen, out, closed = exchange(b"POST /e HTTP/1.1\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n",
                                 max_body=1024)
    assert statuses(out) == [413] and not seen and closed


SMUGGLING = {
    "content-length beside transfer-encoding": b"POST /s HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked"
                                               b"\r\n\r\n0\r\n\r\n",
    "two content-lengths": b"POST /s HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
    "a content-length list": b"POST /s HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\nabcd",
    "a signed content-length": b"POST /s HTTP/1.1\r\nContent-Length: +4\r\n\r\nabcd",
    "chunked not last": b"POST /s HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
    "chunked twice": b"POST /s HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
    "chunked twice over two lines": b"POST /s HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
                                    b"\r\n\r\n0\r\n\r\n",
    "a coding that only contains chunked": b"POST /s HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    "transfer-encoding in HTTP/1.0": b"POST /s HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "a space before the colon": b"POST /s HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    "a bad chunk size": b"POST /s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
    "no CRLF after a chunk": b"POST /s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n",
    "a NUL in a header": b"POST /s HTTP/1.1\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n",
    "a folded header": b"POST /s HTTP/1.1\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n",
    "not HTTP at all": b"NOT HTTP AT ALL\r\n\r\n",
}


@pytest.mark.parametrize("shape", sorted(SMUGGLING))
def test_every_ambiguous_framing_is_refused_400_and_closed(shape: str) -> None:
    seen, out, closed = exchange(SMUGGLING[shape] + b"GET /next HTTP/1.1\r\n\r\n")
    assert statuses(out) == [400] and closed, out
    assert not seen  # neither the request nor the one behind it reached the responder


def test_a_transfer_coding_the_server_does_not_decode_is_refused_501_even_over_two_lines() -> None:
    for head in (b"POST /g HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                 b"POST /g HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"):
        seen, out, closed = exchange(head + b"3\r\nabc\r\n0\r\n\r\n")
        assert statuses(out) == [501] and b"'gzip' is not supported" in out and closed and not seen


def test_huge_headers_are_refused_431_and_closed() -> None:
    _, out, closed = exchange(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    assert statuses(out) == [431] and closed


def test_every_refusal_of_the_front_is_told_with_its_one_outcome() -> None:
    """What the front refuses itself reaches no responder, so the front tells whoever counts and logs requests:
    the same outcome its answer was written from (status, gRPC twin, metric label, reason)."""
    refused: list[tuple[Any, ...]] = []
    _, out, _ = exchange(b"POST /big HTTP/1.1\r\nContent-Length: 50000000\r\n\r\n", refused=refused)
    exchange(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", refused=refused)
    exchange(b"POST /g HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", refused=refused)
    exchange(b"GET / HTTP/1.1\r\nHost: a\r\nbroken header\r\n\r\n", refused=refused)
    assert [(o.http, o.grpc, o.label) for o, *_ in refused] == [
        (413, 8, "RESOURCE_EXHAUSTED"), (431, 8, "RESOURCE_EXHAUSTED"), (501, 12, "UNIMPLEMENTED"),
        (400, 3, "INVALID_ARGUMENT")]
    first, method, path, client = refused[0]
    assert (method, path, client) == ("POST", "/big", "127.0.0.1:50000") and first.body in out


def test_transfer_codings_are_tokens_over_every_line() -> None:
    assert transfer_codings([b"gzip, Chunked", b" ,chunked "]) == ("gzip", "chunked", "chunked")
    assert transfer_codings([b"CHUNKED"]) == ("chunked",)
    assert body_framing(None, [b"chunked"], False, 10) == Chunked()
    assert body_framing(b"10", [], False, 10) == 10
    assert body_framing(b"0", [], False, 10) == 0 == body_framing(None, [], False, 10)
    assert body_framing(b"11", [], False, 10) == Refusal(413, "request body of 11 bytes exceeds the limit of 10 bytes")
    assert body_framing(None, [b"chunked", b"chunked"], False, 10).status == 400  # type: ignore[union-attr]
    assert body_framing(None, [b"deflate", b"chunked"], False, 10).status == 501  # type: ignore[union-attr]
    assert body_framing(None, [b"chunked"], True, 10).status == 400  # type: ignore[union-attr]


def test_http_1_0_and_connection_close_end_after_the_answer() -> None:
    _, out, closed = exchange(b"GET /x HTTP/1.0\r\n\r\n")
    assert b"connection: close" in out and closed
    _, out, closed = exchange(b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert b"connection: close" in out and closed


def test_head_gets_the_headers_without_the_body() -> None:
    _, out, _ = exchange(b"HEAD /x HTTP/1.1\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n") and out.endswith(b"\r\n\r\n")


def test_a_percent_encoded_path_is_decoded() -> None:
    seen, _, _ = exchange(b"GET /v1/models/my%20model HTTP/1.1\r\n\r\n")
    assert seen[0].path == "/v1/models/my model"


def test_a_gzip_body_is_handed_over_decoded_and_a_bomb_refused_413_and_told() -> None:
    import gzip

    packed = gzip.compress(b'{"instances": [1]}')
    seen, out, closed = exchange(b"POST /p HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                                 % len(packed) + packed)
    assert [r.body for r in seen] == [b'{"instances": [1]}'] and statuses(out) == [200] and not closed
    bomb = gzip.compress(b" " * 100_000)  # ~100 bytes sent, 100 KB decoded: over the 1 KiB limit
    refused: list[tuple[Any, ...]] = []
    seen, out, closed = exchange(b"POST /p HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                                 % len(bomb) + bomb, refused=refused)
    assert seen == [] and statuses(out) == [413] and closed
    assert b"decoded request body exceeds the limit of 1024 bytes" in out
    assert [(o.http, o.label) for o, *_ in refused] == [(413, "RESOURCE_EXHAUSTED")]
    _, out, _ = exchange(b"POST /p HTTP/1.1\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}")
    assert statuses(out) == [415]


def test_a_large_gzip_body_is_decoded_off_the_event_loop_and_handed_over_whole() -> None:
    import gzip
    import os

    from builder.server.front.http_front import DECODE_ON_THREAD_BYTES

    plain = os.urandom(DECODE_ON_THREAD_BYTES) * 2  # random bytes barely compress: over the threshold as sent
    packed = gzip.compress(plain)
    assert len(packed) >= DECODE_ON_THREAD_BYTES
    head = b"POST /p HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
    seen, out, closed = exchange(head + packed, max_body=1 << 20, settle_s=5.0)
    assert [r.body for r in seen] == [plain] and statuses(out) == [200] and not closed
