"""The front's HTTP/1.1: each request read off its connection into a buffer that connection keeps, and handed
whole to what answers it.

Why not uvicorn: its ASGI machinery costs ~75 us of CPU a request on top of parsing, and it hands a body
over as fresh `bytes` pieces that are then joined, each a new allocation whose pages the kernel must fault
in and clear. Measured on a 2-core AMD EPYC guest, one keep-alive client, a fixed answer: uvicorn with
httptools 117 us a request (a 600 KB body: 1,160 us, 359 page faults); an asyncio protocol over httptools
40 us (a 600 KB body: 890 us, 282 page faults); reading into a buffer the connection keeps, 120 us for the
600 KB body and no page faults. So the front reads with `asyncio.BufferedProtocol` straight into its
connection's buffer, parses each request head with `httptools` (the request line and headers, validated),
frames the body itself (Content-Length or chunked) and hands over a view of the buffer: the bytes
of a tensor are copied once from the kernel, and once more only into a model process's shared memory.

What it does with each connection:
- keep-alive (HTTP/1.1's default; HTTP/1.0 and `Connection: close` end after the answer), idle connections
  closed after `keepalive_s`; pipelined requests answered in order, one at a time;
- bodies framed as `framing` decides from the head (a length, chunked, or none; Transfer-Encoding read as
  a list of codings), up to `max_body_bytes`: a larger declared length is answered 413 before any of the
  body is read, a chunked body as soon as it passes the limit; `Expect: 100-continue` is answered with 100;
- a gzip body (Content-Encoding) decoded before it is handed on, limited as decoded (`framing.decoded`);
- malformed requests answered 400, header blocks over `MAX_HEADER_BYTES` 431, codings other than chunked 501;
- every refusal is answered at once and the connection closed: closed for writing at once, and what the
  client still sends is read and dropped until it closes its side (at most `LINGER_SECONDS`), so that its
  kernel does not reset the connection before it has read the answer;
- HEAD answered with the headers only; a Date header on every answer;
- on shutdown: stop accepting, close idle connections, let each busy one finish its answer, then close.
A connection's buffer grows to its largest request and is kept up to `KEEP_BUFFER_BYTES`.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import httptools

from builder.server.core.outcome import Outcome, outcome
from builder.server.process.messages import HTTP, Answer, Request, refusal
from builder.server.front.framing import CHUNKED, Refusal, body_framing, chunk_refusal, decoded

log = logging.getLogger("tfsmith.serve")

MAX_HEADER_BYTES = 64 * 1024
#: Longest time a refused connection's incoming bytes are read and dropped before it is closed outright.
LINGER_SECONDS = 10.0
#: A connection keeps a buffer up to this size between requests (larger ones are let go after use).
KEEP_BUFFER_BYTES = 4 * 1024 * 1024
READ_ROOM = 64 * 1024
#: A Content-Encoding body at least this large (as sent) is decoded on a worker thread, off the event loop.
DECODE_ON_THREAD_BYTES = 64 * 1024
REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           413: "Content Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Content",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
           503: "Service Unavailable"}

# What a connection is doing with the bytes it reads.
HEAD, BODY, CHUNK_SIZE, CHUNK_DATA, CHUNK_END, TRAILERS, ANSWERING, LINGER, CLOSED = range(9)


def _reason(status: int) -> bytes:
    return REASONS.get(status, "Unknown").encode()


class _Date:
    """The Date header's value, formatted once a second."""

    second = -1
    value = b""

    @classmethod
    def now(cls) -> bytes:
        second = int(time.time())
        if second != cls.second:
            cls.second, cls.value = second, email.utils.formatdate(second, usegmt=True).encode()
        return cls.value


class HttpFront:
    """HTTP/1.1 on a listening socket, each complete request answered by `answer`."""

    def __init__(self, answer: Any, max_body_bytes: int, scheme: str = "http", keepalive_s: float = 5.0,
                 ssl: Any = None, refused: Callable[[Outcome, str, str, str], None] | None = None) -> None:
        self.answer = answer  # async (Request) -> Answer
        #: told of every request the front refuses itself (its outcome, method, path, client): counted, logged
        self.refused = refused
        self.max_body_bytes = max_body_bytes
        self.scheme = scheme
        self.keepalive_s = keepalive_s
        self.ssl = ssl
        self.connections: set[_Connection] = set()
        self._server: Any = None
        self.closing = False

    async def start(self, sock: Any) -> None:
        """Listen on `sock` (bound, not yet listening) and serve connections on the running loop."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), sock=sock, ssl=self.ssl, backlog=2048)

    async def shutdown(self, drain_s: float) -> None:
        """Stop accepting; idle connections close now, busy ones after their answer; those still busy after
        `drain_s` are closed anyway."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close_when_idle()
        deadline = time.monotonic() + drain_s
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.abort()


class _Head:
    """httptools' callbacks for one request head: the URL and the headers, lower-cased."""

    __slots__ = ("url", "headers", "size", "complete", "overflow", "parser", "keep_alive")

    def __init__(self) -> None:
        self.parser: Any = None
        self.keep_alive = True
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.size = 0
        self.complete = False  # the head says there is no body
        self.overflow = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # read now: a complete message resets the parser

    def on_message_complete(self) -> None:
        self.complete = True


class _Connection(asyncio.BufferedProtocol):
    """One client connection: read into `buffer`, parse, answer each request in order."""

    def __init__(self, front: HttpFront) -> None:
        self.front = front
        self.loop = asyncio.get_running_loop()
        self.transport: Any = None
        self.client = ""
        self.buffer = bytearray(READ_ROOM)
        self.start = 0  # first byte not yet parsed
        self.end = 0  # end of the bytes read
        self.state = HEAD
        self.paused = False
        self.keep_alive = True
        self.idle_timer: asyncio.TimerHandle | None = None
        self.linger_timer: asyncio.TimerHandle | None = None
        self._new_request()

    def _new_request(self) -> None:
        self.method = ""
        self.url = b""
        self.headers: tuple[tuple[bytes, bytes], ...] = ()
        self.remaining = 0  # body bytes still to come (Content-Length), or of the current chunk
        self.chunks: bytearray | None = None
        self.encoding: bytes | None = None  # the body's Content-Encoding, if the head names one

    # --- connection events ------------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""
        self.front.connections.add(self)
        if self.front.closing:
            self.abort()
            return
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.connections.discard(self)
        self.state = CLOSED
        for timer in (self.idle_timer, self.linger_timer):
            if timer is not None:
                timer.cancel()
        self.transport = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.state == LINGER:
            self.start = self.end = 0  # nothing kept: read over what was dropped
        wanted = max(READ_ROOM, self.remaining if self.state == BODY else 0)
        if len(self.buffer) - self.end < wanted:
            self._make_room(wanted)
        return memoryview(self.buffer)[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        if self.state == ANSWERING:
            if self.end - self.start > READ_ROOM and not self.paused and self.transport is not None:
                self.transport.pause_reading()  # enough queued behind the request being answered
                self.paused = True
            return
        self._parse()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def _make_room(self, wanted: int) -> None:
        """At least `wanted` free bytes after the unparsed ones: moved to the front of the buffer, or into a
        larger one (never resizing one a request's body may still be viewed through)."""
        kept = self.end - self.start
        size = len(self.buffer)
        if size - kept < wanted:
            size = max(size * 2, kept + wanted)
        # while a request is answered its body may be read through a view of this buffer: never write over it
        fresh = bytearray(size) if size != len(self.buffer) or self.state == ANSWERING else self.buffer
        fresh[:kept] = self.buffer[self.start:self.end]
        self.buffer, self.start, self.end = fresh, 0, kept

    # --- parsing ----------------------------------------------------------------------------------------

    def _parse(self) -> None:
        while self.state not in (ANSWERING, CLOSED):
            if self.state == HEAD:
                if not self._parse_head():
                    return
            elif self.state == BODY:
                if self.end - self.start < self.remaining:
                    return
                body = memoryview(self.buffer)[self.start:self.start + self.remaining]
                self.start += self.remaining
                self.remaining = 0
                self._complete(body)
            elif self.state == LINGER:
                self.start = self.end  # a refused connection: what still comes is dropped
                return
            elif not self._parse_chunked():
                return

    def _parse_head(self) -> bool:
        if self.start == self.end:
            return False
        found = self.buffer.find(b"\r\n\r\n", self.start, self.end)
        if found < 0:
            if self.end - self.start > MAX_HEADER_BYTES:
                self._fail(431, f"request headers exceed {MAX_HEADER_BYTES} bytes")
            return False
        if found - self.start > MAX_HEADER_BYTES:
            self._fail(431, f"request headers exceed {MAX_HEADER_BYTES} bytes")
            return False
        head = bytes(self.buffer[self.start:found + 4])
        self.start = found + 4
        parsed = _Head()
        parser = parsed.parser = httptools.HttpRequestParser(parsed)
        try:
            parser.feed_data(head)
        except httptools.HttpParserUpgrade:
            pass  # an upgrade we do not take (h2c, websocket): answered as the HTTP/1.1 request it also is
        except httptools.HttpParserError as error:
            self._fail(400, f"malformed HTTP request: {error}")
            return False
        self._new_request()
        self.method = parser.get_method().decode("latin-1")
        self.url, self.headers = parsed.url, tuple(parsed.headers)
        self.keep_alive = parsed.keep_alive
        length = expect = None
        encodings = []
        for name, value in parsed.headers:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                encodings.append(value)
            elif name == b"expect":
                expect = value
            elif name == b"content-encoding":
                self.encoding = value
        framing = body_framing(length, encodings, bool(encodings) and parser.get_http_version() == "1.0",
                               self.front.max_body_bytes)
        if type(framing) is int:
            if not framing:
                self._complete(b"")
                return True
            self.remaining, self.state = framing, BODY
        elif framing is CHUNKED:
            self.chunks = bytearray()
            self.state = CHUNK_SIZE
        else:
            assert isinstance(framing, Refusal)
            self._refuse(framing.status, framing.message)
            return False
        if expect is not None and expect.lower() == b"100-continue" and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _parse_chunked(self) -> bool:
        """One step of a chunked body (size line, data, its CRLF, trailers); False when more bytes are needed."""
        assert self.chunks is not None
        if self.state == CHUNK_DATA:
            taken = min(self.remaining, self.end - self.start)
            self.chunks += self.buffer[self.start:self.start + taken]
            self.start += taken
            self.remaining -= taken
            if self.remaining:
                return False
            self.state = CHUNK_END
            return True
        line_end = self.buffer.find(b"\r\n", self.start, self.end)
        if line_end < 0:
            if self.end - self.start > MAX_HEADER_BYTES:
                self._fail(400, "malformed chunked body: a line too long")
            return False
        line = bytes(self.buffer[self.start:line_end])
        self.start = line_end + 2
        if self.state == CHUNK_END:
            if line:
                self._fail(400, "malformed chunked body: no CRLF after a chunk")
                return False
            self.state = CHUNK_SIZE
        elif self.state == CHUNK_SIZE:
            text = line.split(b";", 1)[0].strip()
            try:
                size = int(text, 16)
            except ValueError:
                self._fail(400, f"malformed chunked body: chunk size {text[:20]!r}")
                return False
            if size == 0:
                self.state = TRAILERS
            else:
                too_big = chunk_refusal(len(self.chunks), size, self.front.max_body_bytes)
                if too_big is not None:  # refused before this chunk is read
                    self._refuse(too_big.status, too_big.message)
                    return False
                self.remaining, self.state = size, CHUNK_DATA
        elif self.state == TRAILERS and not line:
            body, self.chunks = self.chunks, None
            self._complete(body)
        return True

    # --- answering --------------------------------------------------------------------------------------

    def _complete(self, body: Any) -> None:
        """A whole request: stop reading until it is answered."""
        parsed = httptools.parse_url(self.url)
        path = parsed.path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        request = Request(HTTP, self.method, body, path, parsed.query or b"", self.headers, self.client,
                          self.front.scheme)
        self.state = ANSWERING  # bytes that come meanwhile (a pipelined request) wait in the buffer
        if self.encoding is not None and body:
            self.loop.create_task(self._decode_and_answer(request, self.encoding))
        else:
            self.loop.create_task(self._answer(request))

    async def _decode_and_answer(self, request: Request, encoding: bytes) -> None:
        """A body sent with a Content-Encoding, decoded (`framing.decoded`: gzip, limited as decoded) and then
        answered, or refused. A large one is decoded on a worker thread (zlib lets go of the interpreter lock),
        so other connections are read and answered meanwhile: a 3 MB JSON image takes ~15 ms to gunzip."""
        sent = bytes(request.body)
        if isinstance(request.body, memoryview):
            request.body.release()
        if len(sent) < DECODE_ON_THREAD_BYTES:
            body = decoded(sent, encoding, self.front.max_body_bytes)
        else:
            body = await self.loop.run_in_executor(None, decoded, sent, encoding, self.front.max_body_bytes)
        if isinstance(body, Refusal):
            self._refuse(body.status, body.message)
            return
        await self._answer(Request(request.kind, request.method, body, request.path, request.query, request.headers,
                                   request.client, request.scheme))

    async def _answer(self, request: Request) -> None:
        try:
            answer = await self.front.answer(request)
        except Exception as error:  # noqa: BLE001 - what answers answers its own failures; this is the last resort
            log.error("answering %s %s failed", request.method, request.path, exc_info=error)
            answer = refusal(outcome(500, "internal error"), HTTP)
        if isinstance(request.body, memoryview):
            try:
                request.body.release()
            except BufferError:  # an array still views it: harmless, the next request only writes over it
                pass
        self._send(answer, request.method == "HEAD", close=not self.keep_alive or self.front.closing)
        self._next()

    def _fail(self, status: int, message: str) -> None:
        """A request that cannot be read on (malformed, or its head too large)."""
        self._refuse(status, message)

    def _refuse(self, status: int, message: str) -> None:
        """A request refused by the front (before its body is read, or a gzip body as decoded): answered at once
        with `connection: close`, the connection closed for writing, and what the client still sends dropped
        until it closes its side (or `LINGER_SECONDS` pass): closing outright with its bytes unread would have
        the kernel reset the connection, and a client still sending could lose the answer."""
        self.state = LINGER
        self.start = self.end
        result = outcome(status, message)
        if self.front.refused is not None:
            self.front.refused(result, self.method, self.url.decode("latin-1"), self.client)
        if self.transport is None:
            return
        self._send(refusal(result, HTTP), False, close=True, linger=True)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.linger_timer = self.loop.call_later(LINGER_SECONDS, self._close)

    def _next(self) -> None:
        """After an answer: the next pipelined request, or wait for one."""
        if self.state == CLOSED or self.transport is None:
            return
        self.state = HEAD
        self._new_request()
        if len(self.buffer) > KEEP_BUFFER_BYTES and self.end - self.start < READ_ROOM:
            kept = bytes(self.buffer[self.start:self.end])
            self.buffer = bytearray(READ_ROOM)
            self.buffer[:len(kept)] = kept
            self.start, self.end = 0, len(kept)
        self._parse()
        if self.state == HEAD and self.transport is not None:
            if self.paused:
                self.transport.resume_reading()
                self.paused = False
            if self.start == self.end:
                self.start = self.end = 0
                self._arm_idle_timer()

    def _send(self, answer: Answer, head_only: bool, close: bool, linger: bool = False) -> None:
        """The answer on the wire; `close`: with `connection: close`, then the connection closed (unless it is to
        `linger`: its caller closes it)."""
        if self.transport is None:
            return
        body = answer.body
        lines = [b"HTTP/1.1 %d %s\r\ncontent-length: %d\r\ndate: %s\r\n"
                 % (answer.status, _reason(answer.status), len(body), _Date.now())]
        for name, value in answer.headers:
            if name not in (b"content-length", b"transfer-encoding", b"connection", b"date"):
                lines.append(b"%s: %s\r\n" % (name, value))
        if close:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        head = b"".join(lines)
        if head_only or not body:
            self.transport.write(head)
        elif len(body) < 16384:
            self.transport.write(head + bytes(body))
        else:
            self.transport.writelines([head, body])
        if close and not linger:
            self._close()

    def _arm_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = self.loop.call_later(self.front.keepalive_s, self._idle)

    def _idle(self) -> None:
        if self.state == HEAD and self.start == self.end:
            self._close()

    def close_when_idle(self) -> None:
        self.keep_alive = False
        if self.state == HEAD and self.start == self.end:
            self._close()

    def _close(self) -> None:
        self.state = CLOSED
        if self.transport is not None:
            self.transport.close()
            self.transport = None
        self.front.connections.discard(self)

    def abort(self) -> None:
        self.state = CLOSED
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
        self.front.connections.discard(self)
