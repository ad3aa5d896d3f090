"""Which model process answers the next request: the least busy one, per request, never per connection.

Each model process has a window: how many requests it may hold at once (one running on each interpreter,
plus one decoded and waiting so the interpreter never idles between requests; with batching, enough to
fill a batch). A request goes to the process with the fewest requests out, ties taken in turn, so an idle
server spreads even a single client's requests over every process. When every window is full the request
waits here, in arrival order, and takes the first window that frees: one queue in front of all processes,
so no request waits behind a busy process while another idles, whatever the clients' connections look like.
A process that died is paused (its window 0: nothing new goes to it) until its replacement takes its place.
The choice (`choose`) is a pure function; `Balancer` is the asyncio shell around it. (How a model's calls
then run inside a process, on its event loop or on worker threads, is `--dispatch`: `runner.dispatch_mode`.)
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

H = TypeVar("H")  # what answers on a process's behalf (the front's end of its channel)
T = TypeVar("T")


def choose(out: Sequence[int], windows: Sequence[int], start: int) -> int | None:
    """The index of the process with the fewest requests out among those below their window, looking from
    `start` round so that ties go to each in turn; None when every window is full."""
    best: int | None = None
    count = len(out)
    for step in range(count):
        index = (start + step) % count
        if out[index] < windows[index] and (best is None or out[index] < out[best]):
            best = index
    return best


def window(interpreters: int, max_batch: int) -> int:
    """Requests one model process may hold: a batch's worth for each interpreter, plus one decoded ahead."""
    return interpreters * max(1, max_batch) + 1


class Balancer(Generic[H]):
    """Hands each call to the least busy of `ends` (`choose`), or queues it until a window frees."""

    def __init__(self, ends: Sequence[H], windows: Sequence[int]) -> None:
        self.ends = list(ends)
        self.windows = list(windows)
        self._full = list(windows)  # each window while its end is live
        self.out = [0] * len(ends)
        self.answered = [0] * len(ends)  # requests each end has answered (metrics, balance checks)
        self._next = 0
        self._queue: deque[asyncio.Future[int]] = deque()

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def live(self) -> int:
        """Ends that take requests now (not paused)."""
        return sum(1 for size in self.windows if size > 0)

    def is_live(self, index: int) -> bool:
        return self.windows[index] > 0

    def pause(self, index: int) -> None:
        """Nothing new goes to end `index` (it died); what it holds fails on its own."""
        self.windows[index] = 0

    def resume(self, index: int, end: H) -> None:
        """`end` takes the place of the paused end `index`, and requests waiting for room go to it."""
        self.ends[index] = end
        self.windows[index] = self._full[index]
        self._wake()

    def abandon(self, error: BaseException) -> None:
        """Every request waiting for room fails with `error` (no end will take it: the server stops)."""
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    async def run(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`call(end, *args)` on the least busy end, once one has room (a request handed over in one call:
        `run(FrontEnd.answer, request)`)."""
        index = await self.acquire()
        try:
            return await call(self.ends[index], *args)
        finally:
            self.release(index)

    async def run_on(self, index: int, call: Callable[[H], Awaitable[T]]) -> T:
        """`call` on one named end, counted in its window but not waiting for room (metrics, control)."""
        self.out[index] += 1
        try:
            return await call(self.ends[index])
        finally:
            self.out[index] -= 1

    async def acquire(self) -> int:
        """The index of the end to take the next request (waiting for room when every window is full);
        `release` it once answered."""
        index = choose(self.out, self.windows, self._next) if not self._queue else None
        if index is None:
            waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._queue.append(waiter)
            try:
                index = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # handed a window just as it was cancelled
                    self.release(waiter.result())
                raise
            return index
        self._take(index)
        return index

    def _take(self, index: int) -> None:
        self.out[index] += 1
        self._next = (index + 1) % len(self.ends)

    def release(self, index: int) -> None:
        self.out[index] -= 1
        self.answered[index] += 1
        self._wake()

    def _wake(self) -> None:
        """Hand waiting requests, in arrival order, the windows that have room."""
        while self._queue:
            waiter = self._queue.popleft()
            if waiter.done():  # its caller was cancelled while it waited
                continue
            chosen = choose(self.out, self.windows, self._next)
            if chosen is None:
                self._queue.appendleft(waiter)
                return
            self._take(chosen)
            waiter.set_result(chosen)
