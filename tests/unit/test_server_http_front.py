"""The front's HTTP/1.1 (`builder.server.http_front`), driven byte by byte through its protocol with a
recording transport: framing (Content-Length, chunked, pipelined), refusals (413 after the body, 413 at once
for Expect, 431, 400), keep-alive and close, HEAD, and a body handed over as a view of the connection's buffer."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from builder.server.forward import Answer, Request
from builder.server.http_front import HttpFront, _Connection

OK = Answer(200, b'{"ok":true}', ((b"content-type", b"application/json"),))


class Transport:
    """What the protocol writes, and whether it paused or closed."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: Sequence[bytes]) -> None:
        for part in parts:
            self.out += part

    def close(self) -> None:
        self.closed = True

    abort = close

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 50000) if name == "peername" else None


def exchange(*pieces: bytes, max_body: int = 1024, answer: Answer = OK) -> tuple[list[Request], bytes, bool]:
    """Feed `pieces` to one connection (each as one read); the requests the responder got (bodies copied out),
    what was written back, and whether the connection closed."""
    seen: list[Request] = []

    async def respond(request: Request) -> Answer:
        seen.append(Request(request.kind, request.method, bytes(request.body), request.path, request.query,
                            request.headers, request.client, request.scheme))
        return answer

    async def scenario() -> tuple[bytes, bool]:
        front = HttpFront(respond, max_body)
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
        return bytes(transport.out), transport.closed

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


def test_a_body_over_the_limit_is_read_then_refused_413_and_the_connection_kept() -> None:
    seen, out, closed = exchange(b"POST /big HTTP/1.1\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000,
                                 b"GET /next HTTP/1.1\r\n\r\n", max_body=1024)
    assert [r.path for r in seen] == ["/next"]  # the refused body never reached the responder
    assert statuses(out) == [413, 200] and b"exceeds the limit of 1024 bytes" in out and not closed


def test_expect_100_continue_gets_100_or_an_immediate_413() -> None:
    seen, out, _ = exchange(b"POST /e HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", b"abc")
    assert statuses(out) == [100, 200] and [r.body for r in seen] == [b"abc"]
    seen, out, closed = exchange(b"POST /e HTTP/1.1\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n",
                                 max_body=1024)
    assert statuses(out) == [413] and not seen and closed


def test_malformed_requests_and_huge_headers_are_refused_and_closed() -> None:
    _, out, closed = exchange(b"NOT HTTP AT ALL\r\n\r\n")
    assert statuses(out) == [400] and closed
    _, out, closed = exchange(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    assert statuses(out) == [431] and closed


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
