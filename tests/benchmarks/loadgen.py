"""A small HTTP load generator for the server: N concurrent clients, keep-alive, every answer checked.

Used by the e2e load test and by `floors.py`; it reports latencies and throughput, the callers decide what
they assert (correctness) and what they only print (times).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class LoadResult:
    requests: int
    errors: int
    wrong: int
    seconds: float
    latencies_s: tuple[float, ...]
    first_error: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_s) * 1e3 if self.latencies_s else float("nan")

    @property
    def p99_ms(self) -> float:
        return self.percentile(0.99) * 1e3

    def line(self, label: str = "") -> str:
        return (
            f"{label}{self.requests} requests, {self.errors} errors, {self.wrong} wrong answers, "
            f"p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms, {self.rps:.0f} req/s"
        )


class _Connection:
    """One keep-alive HTTP/1.1 connection on asyncio streams.

    A load generator must cost the machine far less than the server it measures: a general-purpose client
    (httpx) spends ~1 ms of CPU per request here, more than the server itself, and on a 2-core machine that
    would measure the client. This speaks just enough HTTP/1.1 for POSTing JSON and reading a
    Content-Length answer (what uvicorn sends).
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, extra: str = "") -> tuple[int, bytes]:
        """POST `body`; `extra` is more header lines, each ending in CRLF."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        length, close = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
            elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                close = True
        payload = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def _client(
    url: str, bodies: Sequence[bytes], check: Callable[[int, Any], bool], count: int, offset: int,
    latencies: list[float], failures: list[str], wrong: list[int], headers: Sequence[str] | None = None,
    raw: bool = False,
) -> None:
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    connection = _Connection(parts.hostname or "127.0.0.1", parts.port or 80)
    try:
        for n in range(count):
            index = (offset + n) % len(bodies)
            start = time.perf_counter()
            try:
                status, payload = await connection.post(path, bodies[index], headers[index] if headers else "")
                latencies.append(time.perf_counter() - start)
                if status != 200:
                    failures.append(f"HTTP {status}: {payload[:200]!r}")
                elif not check(index, payload if raw else json.loads(payload)):
                    wrong.append(index)
            except Exception as error:  # noqa: BLE001 - counted and reported, never hidden
                failures.append(f"{type(error).__name__}: {error}")
                await connection.close()
    finally:
        await connection.close()


async def run_load_async(
    url: str, bodies: Sequence[bytes], check: Callable[[int, Any], bool], total: int, concurrency: int,
    headers: Sequence[Mapping[str, str]] | None = None, raw: bool = False,
) -> LoadResult:
    latencies: list[float] = []
    failures: list[str] = []
    wrong: list[int] = []
    lines = [("".join(f"{k}: {v}\r\n" for k, v in h.items())) for h in headers] if headers else None
    per, extra = divmod(total, concurrency)
    start = time.perf_counter()
    await asyncio.gather(
        *[
            _client(url, bodies, check, per + (1 if i < extra else 0), i * 7, latencies, failures, wrong, lines, raw)
            for i in range(concurrency)
        ]
    )
    seconds = time.perf_counter() - start
    return LoadResult(total, len(failures), len(wrong), seconds, tuple(latencies), failures[0] if failures else "")


def run_load(
    url: str, bodies: Sequence[bytes], check: Callable[[int, Any], bool], total: int, concurrency: int,
    headers: Sequence[Mapping[str, str]] | None = None, raw: bool = False,
) -> LoadResult:
    """`total` POSTs of `bodies` (cycled) from `concurrency` keep-alive clients; `check` judges each answer
    (decoded JSON, or the raw bytes with `raw`); `headers[i]` are extra request headers for `bodies[i]`."""
    return asyncio.run(run_load_async(url, bodies, check, total, concurrency, headers, raw))



class _Window:
    """When a timed load ends: set once every connection of the pool is open."""

    def __init__(self) -> None:
        self.start = asyncio.Event()
        self.deadline = 0.0


async def _timed_client(url: str, bodies: Sequence[bytes], window: _Window, offset: int, latencies: list[float],
                        failures: list[str], headers: Sequence[str] | None, opened: list[int]) -> None:
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    connection = _Connection(parts.hostname or "127.0.0.1", parts.port or 80)
    connection.reader, connection.writer = await asyncio.open_connection(connection.host, connection.port)
    opened.append(1)
    await window.start.wait()  # every connection is open before any request: a proxy's pool, opened together
    n = 0
    try:
        while time.perf_counter() < window.deadline:
            index = (offset + n) % len(bodies)
            n += 1
            began = time.perf_counter()
            try:
                status, payload = await connection.post(path, bodies[index], headers[index] if headers else "")
                latencies.append(time.perf_counter() - began)
                if status != 200:
                    failures.append(f"HTTP {status}: {payload[:200]!r}")
            except Exception as error:  # noqa: BLE001 - counted and reported, never hidden
                failures.append(f"{type(error).__name__}: {error}")
                await connection.close()
    finally:
        await connection.close()


def run_pool_for(url: str, bodies: Sequence[bytes], seconds: float, connections: int,
                 headers: Sequence[Mapping[str, str]] | None = None) -> LoadResult:
    """Requests for `seconds` from a pool of `connections` keep-alive connections opened together (as a
    proxy's pool is), one request in flight on each; only the status is checked (throughput runs)."""
    lines = [("".join(f"{k}: {v}\r\n" for k, v in h.items())) for h in headers] if headers else None

    async def run() -> LoadResult:
        latencies: list[float] = []
        failures: list[str] = []
        window, opened = _Window(), []
        tasks = [asyncio.ensure_future(_timed_client(url, bodies, window, i * 7, latencies, failures, lines, opened))
                 for i in range(connections)]
        while len(opened) < connections and not any(t.done() for t in tasks):
            await asyncio.sleep(0.001)
        began = time.perf_counter()
        window.deadline = began + seconds
        window.start.set()
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - began
        return LoadResult(len(latencies) + len(failures), len(failures), 0, elapsed, tuple(latencies),
                          failures[0] if failures else "")

    return asyncio.run(run())
