"""The channel between the front and one model process: request and answer bodies in shared memory, a few
bytes of notice over a Unix socket.

Why shared memory: a 600 KB image tensor copied through a socket costs two kernel copies and, with the
socket's default buffers, several wake-ups a request. Here the front copies the body once into a slot of a
memory area both processes map (a `memfd`, so nothing is left behind in /dev/shm when either exits) and
sends a 24-byte notice over a SOCK_SEQPACKET socket pair; the model process reads the body in place
(numpy views it without a copy), answers into the same slot and sends its own notice back. A slot is the
front's to write until it sends the notice, the model process's until it answers: never both at once.

Slots hold `slot_bytes` each (the largest body the server accepts plus room for the headers), so every
request fits one; an answer larger than its slot (a very large output) travels in a memory area of its
own, created for it, whose file descriptor rides on the notice (SCM_RIGHTS). Pages of the area are only
used once written: a server that only sees 600 KB bodies holds about 600 KB a slot, not `slot_bytes`.

Notices (`NOTICE`: kind, slot, sequence number, length of the marshalled part, length of the body):
  front -> model process: HELLO (the area's descriptor), REQUEST, and the control messages DRAIN, STOP, LOAD,
                          ACTIVATE
  model process -> front: ANSWER, and the control messages READY, REFUSED, LOADED
A control message is one of `messages`' dataclasses, its fields `marshal`led after the notice (`tell`, `say`,
`control`): each end reads typed values, never tuples by position.

How a request and an answer are packed is this module's alone (`_pack_request` and the rest, beside the
pipe they cross): everything but the body `marshal`led at the head of the slot, the body as raw bytes after
it. So a request crosses with one call into the channel at each end and no hop elsewhere to pack it.
"""

from __future__ import annotations

import array
import asyncio
import marshal
import mmap
import os
import socket
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any

from builder.server.core.outcome import Unavailable, outcome
from builder.server.process.messages import (C, Activate, Answer, Body, Control, Drain, Kind, Load, Loaded, Ready,
                                             Refused, Request, Stop, refusal)

NOTICE = struct.Struct("<BBHIIQ")  # kind, flags, slot, sequence, meta length, body length


class NoticeKind(IntEnum):
    CLOSED = 0  # not sent: what the front's control queue holds once the process is gone
    HELLO = 1
    REQUEST = 2
    DRAIN = 3
    STOP = 4
    READY = 5
    REFUSED = 6
    ANSWER = 7
    LOAD = 8
    LOADED = 9
    ACTIVATE = 10


HELLO, REQUEST, ANSWER = NoticeKind.HELLO, NoticeKind.REQUEST, NoticeKind.ANSWER
#: Each control message's notice kind, and back.
CONTROL_KINDS: dict[type[Any], NoticeKind] = {Drain: NoticeKind.DRAIN, Stop: NoticeKind.STOP, Load: NoticeKind.LOAD,
                                              Activate: NoticeKind.ACTIVATE, Ready: NoticeKind.READY,
                                              Refused: NoticeKind.REFUSED, Loaded: NoticeKind.LOADED}
CONTROL_TYPES = {kind: message for message, kind in CONTROL_KINDS.items()}
#: flag: the meta and body lie in a memory area of their own whose descriptor came with the notice
OWN_AREA = 1
#: Room in each slot for the marshalled part of a request (method, path, headers) beside the body.
META_ROOM = 256 * 1024
_FD_SPACE = socket.CMSG_SPACE(array.array("i", [0]).itemsize)


# --- how messages are packed ------------------------------------------------------------------------------

_KINDS = {int(kind): kind for kind in Kind}


def _pack_request(request: Request) -> bytes:
    """Everything of `request` but its body (the kind as a plain int: `marshal` takes no enum)."""
    return marshal.dumps((int(request.kind), request.method, request.path, request.query, request.headers,
                          request.client, request.scheme))


def _unpack_request(meta: Body, body: Body) -> Request:
    kind, method, path, query, headers, client, scheme = marshal.loads(meta)
    return Request(_KINDS[kind], method, body, path, query, tuple(tuple(h) for h in headers), client, scheme)


def _pack_answer(answer: Answer) -> bytes:
    """Everything of `answer` but its body."""
    return marshal.dumps((answer.status, answer.headers, answer.message))


def _unpack_answer(meta: Body, body: Body) -> Answer:
    status, headers, message = marshal.loads(meta)
    return Answer(status, body, tuple(tuple(h) for h in headers), message)


def _pack_control(message: Control) -> bytes:
    """A control message's fields (its kind travels on the notice)."""
    return marshal.dumps(tuple(getattr(message, field.name) for field in fields(message)))


def _unpack_control(kind: type[C], data: bytes) -> C:
    values: list[Any] = list(marshal.loads(data)) if data else []
    for index, field in enumerate(fields(kind)):  # a sender may have given lists where the fields hold tuples
        if field.name in ("versions", "model_p50_us"):
            values[index] = tuple(values[index])
    return kind(*values)


#: What a request is told when the model process holding it, or the last one that could take it, is gone.
LOST = "the model process answering this request stopped; the server is starting another"


class ChannelClosed(Unavailable):
    """The other end of the channel is gone (its process exited): a request it held or would take is answered
    503 / UNAVAILABLE with `LOST`."""

    def __init__(self, message: str = LOST) -> None:
        super().__init__(message)


def new_area(size: int, name: str = "tfsmith-slots") -> int:
    """A shared memory area of `size` bytes as a file descriptor (memfd: anonymous, freed with its last user)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, max(size, 1))
    return fd


@dataclass(frozen=True)
class Notice:
    kind: int
    slot: int = 0
    sequence: int = 0
    meta_length: int = 0
    body_length: int = 0
    flags: int = 0
    fd: int | None = None  # a descriptor that came with the notice (HELLO's area, or an answer's own area)

    def pack(self) -> bytes:
        return NOTICE.pack(self.kind, self.flags, self.slot, self.sequence, self.meta_length, self.body_length)


def send_notice(sock: socket.socket, notice: Notice, extra: bytes = b"") -> None:
    """Send one notice (and `extra`, small marshalled values for the control kinds), with its descriptor if
    it has one. Blocking sockets only: the async ends use `_AsyncEnd.send`."""
    data = notice.pack() + extra
    if notice.fd is None:
        sock.send(data)
    else:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [notice.fd]))])


def receive_notice(sock: socket.socket) -> tuple[Notice, bytes]:
    """One notice and what came after it in the same message; ChannelClosed at end of stream;
    BlockingIOError when a non-blocking socket has none now."""
    data, ancillary, _flags, _address = sock.recvmsg(META_ROOM, _FD_SPACE)
    if not data:
        raise ChannelClosed()
    fd = None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
            fd = fds[0]
    kind, flags, slot, sequence, meta_length, body_length = NOTICE.unpack_from(data)
    return Notice(kind, slot, sequence, meta_length, body_length, flags, fd), data[NOTICE.size:]


class Slots:
    """The shared area seen as `count` slots of `size` bytes."""

    def __init__(self, fd: int, count: int, size: int) -> None:
        self.count, self.size = count, size
        self.map = mmap.mmap(fd, count * size)
        self.view = memoryview(self.map)

    def write(self, slot: int, meta: bytes, body: Any) -> None:
        start = slot * self.size
        self.view[start:start + len(meta)] = meta
        self.view[start + len(meta):start + len(meta) + len(body)] = body

    def read(self, slot: int, meta_length: int, body_length: int) -> tuple[memoryview, memoryview]:
        start = slot * self.size
        return (self.view[start:start + meta_length],
                self.view[start + meta_length:start + meta_length + body_length])

    def close(self) -> None:
        self.view.release()
        self.map.close()


def write_own_area(meta: bytes, body: Any) -> int:
    """A memory area holding `meta` then `body`, for a message larger than a slot; its descriptor."""
    fd = new_area(len(meta) + len(body), "tfsmith-large")
    with mmap.mmap(fd, len(meta) + len(body)) as area:
        area[:len(meta)] = meta
        area[len(meta):len(meta) + len(body)] = body
    return fd


def read_own_area(notice: Notice) -> tuple[bytes, bytes]:
    """The meta and body of a message that came in an area of its own (then closed)."""
    assert notice.fd is not None
    try:
        size = notice.meta_length + notice.body_length
        with mmap.mmap(notice.fd, size, access=mmap.ACCESS_READ) as area:
            return area[:notice.meta_length], area[notice.meta_length:size]
    finally:
        os.close(notice.fd)


class _AsyncEnd:
    """A non-blocking end of the socket pair on the running loop: notices are read as they come and handed
    to `on_notice`; sends that find the socket full wait until it drains."""

    def __init__(self, sock: socket.socket, on_notice: Callable[[Notice, bytes], None],
                 on_closed: Callable[[], None]) -> None:
        self.sock = sock
        sock.setblocking(False)
        self.loop = asyncio.get_running_loop()
        self._on_notice, self._on_closed = on_notice, on_closed
        self.closed = False
        self.loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        while True:
            try:
                notice, extra = receive_notice(self.sock)
            except BlockingIOError:
                return
            except (ChannelClosed, OSError):
                self.close()
                self._on_closed()
                return
            self._on_notice(notice, extra)

    async def send(self, notice: Notice, extra: bytes = b"") -> None:
        while True:
            try:
                send_notice(self.sock, notice, extra)
                return
            except BlockingIOError:
                writable = self.loop.create_future()
                self.loop.add_writer(self.sock.fileno(), lambda: writable.done() or writable.set_result(None))
                try:
                    await writable
                finally:
                    self.loop.remove_writer(self.sock.fileno())
            except OSError as error:
                raise ChannelClosed() from error

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.sock.fileno())


# --- the front's end ---------------------------------------------------------------------------------------


class FrontEnd:
    """The front's end of one model process's channel: `answer` sends a request into a free slot and
    returns the answer. The balancer (`balancer.Balancer`) keeps its requests within the slots; a call beside
    it (a metrics scrape, `Balancer.run_on`) that finds none free waits for one, never takes one a request
    was promised."""

    def __init__(self, sock: socket.socket, slots: int, slot_bytes: int) -> None:
        self.sock = sock
        self.slot_count, self.slot_bytes = slots, slot_bytes
        self.area_fd = new_area(slots * slot_bytes)
        self.slots = Slots(self.area_fd, slots, slot_bytes)
        self._free = list(range(slots))
        self._slot_waiters: deque[asyncio.Future[None]] = deque()  # requests waiting for a free slot
        self._waiting: dict[int, asyncio.Future[Answer]] = {}
        self._sequence = 0
        self._end: _AsyncEnd | None = None
        self._control: asyncio.Queue[tuple[Notice, bytes]] | None = None  # READY, REFUSED, LOADED
        self.on_closed: Callable[[], None] = lambda: None

    async def start(self) -> None:
        """Hand the model process the shared area (HELLO), then listen for its notices."""
        self._control = asyncio.Queue()
        self._end = _AsyncEnd(self.sock, self._notice, self._closed)
        await self._end.send(Notice(HELLO, fd=self.area_fd), marshal.dumps((self.slot_count, self.slot_bytes)))

    async def control(self) -> Control:
        """The next control message from the process (ChannelClosed when the process ended first)."""
        assert self._control is not None
        notice, extra = await self._control.get()
        if notice.kind == NoticeKind.CLOSED:
            raise ChannelClosed()
        return _unpack_control(CONTROL_TYPES[NoticeKind(notice.kind)], extra)

    async def answer(self, request: Request) -> Answer:
        assert self._end is not None
        if self._end.closed:
            raise ChannelClosed()
        meta = _pack_request(request)
        body = request.body
        while not self._free:
            await self._slot_freed()
            if self._end.closed:
                raise ChannelClosed()
        slot = self._free.pop()
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        sequence = self._sequence
        answer: asyncio.Future[Answer] = self._end.loop.create_future()
        self._waiting[sequence] = answer
        try:
            if len(meta) + len(body) <= self.slot_bytes:
                self.slots.write(slot, meta, body)
                notice = Notice(REQUEST, slot, sequence, len(meta), len(body))
                await self._end.send(notice)
            else:
                fd = write_own_area(meta, body)
                try:
                    await self._end.send(Notice(REQUEST, slot, sequence, len(meta), len(body), OWN_AREA, fd))
                finally:
                    os.close(fd)
            return await answer
        finally:
            self._waiting.pop(sequence, None)
            self._free.append(slot)
            while self._slot_waiters:
                waiter = self._slot_waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    break

    async def _slot_freed(self) -> None:
        """Until a slot is given back (or the channel closes)."""
        assert self._end is not None
        freed: asyncio.Future[None] = self._end.loop.create_future()
        self._slot_waiters.append(freed)
        await freed

    async def tell(self, message: Drain | Stop | Load | Activate) -> None:
        """A control message to the process (none, once it is gone)."""
        if self._end is not None and not self._end.closed:
            try:
                await self._end.send(Notice(CONTROL_KINDS[type(message)]), _pack_control(message))
            except ChannelClosed:
                pass

    def _notice(self, notice: Notice, extra: bytes) -> None:
        if notice.kind != ANSWER:
            assert self._control is not None
            self._control.put_nowait((notice, extra))
            return
        waiting = self._waiting.get(notice.sequence)
        if notice.flags & OWN_AREA:
            meta, body = read_own_area(notice)
        else:
            meta_view, body_view = self.slots.read(notice.slot, notice.meta_length, notice.body_length)
            meta, body = bytes(meta_view), bytes(body_view)  # the slot is reused once this returns
        if waiting is not None and not waiting.done():
            waiting.set_result(_unpack_answer(meta, body))

    def _closed(self) -> None:
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(ChannelClosed())
        for freed in self._slot_waiters:
            if not freed.done():
                freed.set_result(None)  # it finds the channel closed
        if self._control is not None:
            self._control.put_nowait((Notice(NoticeKind.CLOSED), b""))
        self.on_closed()

    @property
    def closed(self) -> bool:
        return self._end is not None and self._end.closed

    def close(self) -> None:
        if self.area_fd < 0:
            return
        if self._end is not None:
            self._end.close()
        self.sock.close()
        self.slots.close()
        os.close(self.area_fd)
        self.area_fd = -1


# --- the model process's end -----------------------------------------------------------------------------


class ModelEnd:
    """The model process's end: requests are answered by `answer` as tasks on the running loop (several at
    once: the front keeps up to its window in flight), each answer written into its request's slot."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.slots: Slots | None = None
        self._end: _AsyncEnd | None = None
        self.on_drain: Callable[[], None] = lambda: None
        #: Load -> (ok, error text), answered as Loaded; Activate
        self.on_load: Callable[[str, tuple[int, ...]], Awaitable[tuple[bool, str]]] | None = None
        self.on_activate: Callable[[str, tuple[int, ...], bool], None] | None = None
        self.stopped: asyncio.Event | None = None
        self._answer: Callable[[Request], Any] | None = None
        self.in_flight = 0

    def hello(self) -> None:
        """Wait (blocking) for the front's HELLO and map the shared area it brings."""
        self.sock.setblocking(True)
        notice, extra = receive_notice(self.sock)
        if notice.kind != HELLO or notice.fd is None:
            raise ChannelClosed()
        count, size = marshal.loads(extra)
        self.slots = Slots(notice.fd, count, size)
        os.close(notice.fd)

    def say(self, message: Ready | Refused) -> None:
        """Ready or Refused, before serving (blocking)."""
        self.sock.setblocking(True)
        send_notice(self.sock, Notice(CONTROL_KINDS[type(message)]), _pack_control(message))

    async def serve(self, answer: Callable[[Request], Any]) -> None:
        """Answer requests until STOP (then the requests in flight finish first) or until the front is gone."""
        self._answer = answer
        self.stopped = asyncio.Event()
        self._end = _AsyncEnd(self.sock, self._notice, self.stopped.set)
        self._tasks: set[asyncio.Task[None]] = set()
        await self.stopped.wait()
        while self._tasks:
            await asyncio.wait(set(self._tasks))
        self._end.close()

    def _notice(self, notice: Notice, extra: bytes) -> None:
        assert self.stopped is not None
        if notice.kind == REQUEST:
            task = asyncio.ensure_future(self._request(notice))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif notice.kind == NoticeKind.DRAIN:
            self.on_drain()
        elif notice.kind == NoticeKind.STOP:
            self.stopped.set()
        elif notice.kind == NoticeKind.LOAD and self.on_load is not None:
            task = asyncio.ensure_future(self._load(_unpack_control(Load, extra)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif notice.kind == NoticeKind.ACTIVATE and self.on_activate is not None:
            activate = _unpack_control(Activate, extra)
            self.on_activate(activate.name, activate.versions, activate.commit)

    async def _load(self, load: Load) -> None:
        assert self.on_load is not None and self._end is not None
        ok, error = await self.on_load(load.name, load.versions)
        loaded = Loaded(load.name, load.versions, ok, error)
        await self._end.send(Notice(NoticeKind.LOADED), _pack_control(loaded))

    async def _request(self, notice: Notice) -> None:
        assert self.slots is not None and self._end is not None and self._answer is not None
        if notice.flags & OWN_AREA:
            meta, body = read_own_area(notice)
            request = _unpack_request(meta, body)
        else:
            meta_view, body_view = self.slots.read(notice.slot, notice.meta_length, notice.body_length)
            request = _unpack_request(meta_view, body_view)
        self.in_flight += 1
        try:
            answer: Answer = await self._answer(request)
        except Exception:  # noqa: BLE001 - a model server answers its own failures; never leave the front waiting
            answer = refusal(outcome(500, "internal error"), request.kind)
        finally:
            self.in_flight -= 1
        meta, body = _pack_answer(answer), answer.body
        if len(meta) + len(body) <= self.slots.size:
            self.slots.write(notice.slot, meta, body)
            reply = Notice(ANSWER, notice.slot, notice.sequence, len(meta), len(body))
            await self._end.send(reply)
        else:
            fd = write_own_area(meta, body)
            try:
                await self._end.send(Notice(ANSWER, notice.slot, notice.sequence, len(meta), len(body), OWN_AREA, fd))
            finally:
                os.close(fd)
