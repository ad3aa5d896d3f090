"""A small HTTP load generator for the server: N concurrent clients, keep-alive, every answer checked.

Used by the e2e load test and by `floors.py`; it reports latencies and throughput, the callers decide what
they assert (correctness) and what they only print (times).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


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


async def _client(
    http: Any, url: str, bodies: Sequence[bytes], check: Callable[[int, Any], bool], count: int, offset: int,
    latencies: list[float], failures: list[str], wrong: list[int],
) -> None:
    for n in range(count):
        index = (offset + n) % len(bodies)
        start = time.perf_counter()
        try:
            response = await http.post(url, content=bodies[index], headers={"content-type": "application/json"})
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200:
                failures.append(f"HTTP {response.status_code}: {response.text[:200]}")
            elif not check(index, response.json()):
                wrong.append(index)
        except Exception as error:  # noqa: BLE001 - counted and reported, never hidden
            failures.append(f"{type(error).__name__}: {error}")


async def run_load_async(
    url: str, bodies: Sequence[bytes], check: Callable[[int, Any], bool], total: int, concurrency: int
) -> LoadResult:
    import httpx

    latencies: list[float] = []
    failures: list[str] = []
    wrong: list[int] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as http:
        per, extra = divmod(total, concurrency)
        start = time.perf_counter()
        await asyncio.gather(
            *[
                _client(http, url, bodies, check, per + (1 if i < extra else 0), i * 7, latencies, failures, wrong)
                for i in range(concurrency)
            ]
        )
        seconds = time.perf_counter() - start
    return LoadResult(total, len(failures), len(wrong), seconds, tuple(latencies), failures[0] if failures else "")


def run_load(
    url: str, bodies: Sequence[bytes], check: Callable[[int, Any], bool], total: int, concurrency: int
) -> LoadResult:
    """`total` POSTs of `bodies` (cycled) from `concurrency` keep-alive clients; `check` judges each answer."""
    return asyncio.run(run_load_async(url, bodies, check, total, concurrency))
