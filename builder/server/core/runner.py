"""How a served version's calls run: on its interpreters (`BackendPool`: one per worker thread, checked out for
one call each), and where and with whom each call runs: alone on a worker thread, on the event loop itself, on
the loop one call per turn (`dispatch_mode`), or merged with concurrent calls into one batch.

Dynamic batching: a small model spends most of a request in Python and HTTP, not in the interpreter, so batching
pays only under concurrency. The policy (TF Serving's, simplified): requests with the same signature and
per-example shapes queue together; a batch leaves when it holds `max_batch_size` examples, when `timeout_us` has
passed since its first request, or — with timeout 0 — as soon as a worker is free ("natural" batching: no added
latency at low load, bigger batches exactly when workers are busy). The decisions are pure functions;
`DynamicBatcher` is the asyncio shell around them.
"""

from __future__ import annotations

import asyncio
import queue
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from builder.model.backend import Backend
from builder.model.create import create_backends
from builder.model.failures import ModelInputError
from builder.server.core.call import Call

BatchKey = tuple[object, ...]


class BackendPool:
    """N backend instances for N worker threads; a call checks one out, so none is ever shared."""

    def __init__(self, backends: list[Backend]) -> None:
        if not backends:
            raise ValueError("a pool needs at least one backend")
        self.size = len(backends)
        self.runtime = backends[0].runtime
        self.platform = backends[0].platform or f"{self.runtime}_tflite"
        self.signatures = backends[0].signatures
        self._free: queue.SimpleQueue[Backend] = queue.SimpleQueue()
        for backend in backends:
            self._free.put(backend)
        #: Told the CPU seconds of each call (the calling thread's: with intra-op threads, theirs are not in
        #: it), so the server can say what it spends beyond the model (`metrics`).
        self.on_model_cpu: Callable[[float], None] | None = None

    @classmethod
    def create(cls, runtime: str, model_path: Path, workers: int = 1, threads: int = 1) -> BackendPool:
        return cls(create_backends(runtime, model_path, workers, threads))

    @contextmanager
    def checkout(self) -> Iterator[Backend]:
        backend = self._free.get()
        try:
            yield backend
        finally:
            self._free.put(backend)

    def predict(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Blocking; safe from any number of threads: the call checks a backend out and puts it back (as
        `checkout` does, without a context manager's calls on every request)."""
        backend = self._free.get()
        try:
            if self.on_model_cpu is None:
                return backend.answer(signature, inputs)
            start = time.thread_time()
            try:
                return backend.answer(signature, inputs)
            finally:
                self.on_model_cpu(time.thread_time() - start)
        finally:
            self._free.put(backend)


@dataclass(frozen=True)
class BatchingConfig:
    """`max_batch_size` 1 turns batching off; `timeout_us` is how long a partial batch may wait for company."""

    max_batch_size: int = 1
    timeout_us: int = 0

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError("max batch size must be at least 1")
        if self.timeout_us < 0:
            raise ValueError("batch timeout must not be negative")

    @property
    def enabled(self) -> bool:
        return self.max_batch_size > 1


def batch_key(call: Call) -> BatchKey:
    """Calls can share a batch only with the same signature and the same per-example shapes and dtypes."""
    return (call.signature, *sorted((k, v.shape[1:], v.dtype.str) for k, v in call.inputs.items()))


def take_count(sizes: Sequence[int], max_batch_size: int) -> int:
    """How many queued calls (their batch sizes, oldest first) go into the next batch: at least one."""
    total, count = 0, 0
    for size in sizes:
        if count and total + size > max_batch_size:
            break
        total += size
        count += 1
    return count


def merge_inputs(calls: Sequence[Call]) -> dict[str, np.ndarray]:
    """One batched input per name, the calls' examples in order."""
    if len(calls) == 1:
        return dict(calls[0].inputs)
    return {name: np.concatenate([c.inputs[name] for c in calls]) for name in calls[0].inputs}


def split_outputs(outputs: Mapping[str, np.ndarray], sizes: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """The batched outputs cut back into one dict per call."""
    bounds = np.cumsum([0, *sizes])
    return [{name: value[bounds[i] : bounds[i + 1]] for name, value in outputs.items()} for i in range(len(sizes))]


INLINE_BELOW_US = 150.0
#: The longest model call the event loop makes itself in `TURNS` dispatch: a health probe, a new connection
#: or another request's reading waits at most about this long behind it.
TURN_LIMIT_US = 50_000.0

#: Where model calls run: on the event loop, every one (`INLINE`); on the event loop, one call per turn of
#: the loop (`TURNS`); on worker threads (`THREADS`).
INLINE, TURNS, THREADS = "inline", "turns", "threads"


def run_inline(model_p50_us: float | None, batching: BatchingConfig) -> bool:
    """Whether to call the model on the event loop itself instead of a worker thread.

    Handing a call to a thread and back costs ~100 us here (GIL hand-offs, loop wake-up); a model faster
    than that (the digits CNN takes ~10 us) is served faster inline, and the loop is blocked no longer
    than a thread hop would take. Batching needs the threads (a batch runs while the next one fills), and a
    model whose speed is unknown (its start-up self-test failed) runs on them too.
    """
    return not batching.enabled and model_p50_us is not None and model_p50_us < INLINE_BELOW_US


def dispatch_mode(model_p50_us: float | None, batching: BatchingConfig, interpreters: int, cores: int) -> str:
    """`--dispatch auto`: where model calls run (`INLINE`, `TURNS` or `THREADS`).

    A model faster than a thread hop runs inline (`run_inline`). A slower one with a single interpreter on a
    single core runs on the loop one call per turn (`TURNS`): nothing could run beside it, and the hop to a
    thread and back cost ~300 us of CPU a call (MobileNetV2, 7 ms, the server on one core of a 2-core guest,
    v2 binary, 4 connections, 3 interleaved rounds: 701-729 against 885-976 us beyond the model, the same
    121-123 req/s), while between two calls the loop reads, accepts and answers probes. Only up to
    `TURN_LIMIT_US` a call, since a probe may wait a few calls. With a second core the thread earns its hop:
    the loop reads and decodes the next request while the model runs (124-129 against 117-124 req/s on 2
    cores), and several interpreters need threads to run at once.
    """
    if run_inline(model_p50_us, batching):
        return INLINE
    if (not batching.enabled and model_p50_us is not None and interpreters == 1 and cores == 1
            and model_p50_us <= TURN_LIMIT_US):
        return TURNS
    return THREADS


class Queued(NamedTuple):
    """A call waiting for a batch."""

    call: Call
    answer: asyncio.Future[dict[str, np.ndarray]]
    since: float  # perf_counter when it queued


class DynamicBatcher:
    """Queues calls per batch key and runs merged batches on the pool, at most `pool.size` at a time."""

    def __init__(
        self, pool: BackendPool, config: BatchingConfig, executor: Executor, batchable: bool, inline: bool = False,
        turns: bool = False,
    ) -> None:
        self._pool = pool
        self.inline = inline  # run on the event loop: for models faster than a thread hop (~100 us)
        self.turns = turns and not inline  # on the event loop, one call per turn of it (`dispatch_mode`)
        self._turn_taken = False
        self._turn_waiters: deque[asyncio.Future[None]] = deque()
        self._config = config
        self._executor = executor
        self._batchable = batchable  # False when the model's batch dimension is fixed
        self._queues: dict[BatchKey, deque[Queued]] = {}
        #: Told the examples of each merged batch, and how long its oldest request queued in microseconds
        #: (the metrics' histograms: `Metrics.batch_sizes`, `Metrics.queuing_us`).
        self.observe_batch: Callable[[float], None] | None = None
        self.observe_queued_us: Callable[[float], None] | None = None
        self._draining: set[BatchKey] = set()
        #: Set when a partial batch waiting for company (`timeout_us`) fills up: it leaves then, not at the timeout.
        self._filled: dict[BatchKey, asyncio.Event] = {}
        self._slots: asyncio.Semaphore | None = None
        self.batches = 0
        self.examples = 0

    @property
    def mode(self) -> str:
        """Where this batcher's calls run: `INLINE`, `TURNS` or `THREADS`."""
        return INLINE if self.inline else TURNS if self.turns else THREADS

    async def predict(self, call: Call) -> dict[str, np.ndarray]:
        """The call's outputs."""
        loop = asyncio.get_running_loop()
        if not (self._config.enabled and self._batchable):
            if self.inline:
                return self._pool.predict(call.signature, call.inputs)
            if self.turns:
                return await self._on_a_turn(call)
            return await self._alone(call)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._pool.size)
        key = batch_key(call)
        future: asyncio.Future[dict[str, np.ndarray]] = loop.create_future()
        queue = self._queues.setdefault(key, deque())
        queue.append(Queued(call, future, time.perf_counter()))
        filled = self._filled.get(key)
        if filled is not None and sum(q.call.batch for q in queue) >= self._config.max_batch_size:
            filled.set()
        if key not in self._draining:
            self._draining.add(key)
            loop.create_task(self._drain(key))
        return await future

    async def _drain(self, key: BatchKey) -> None:
        queue = self._queues[key]
        assert self._slots is not None
        try:
            while queue:
                await self._slots.acquire()
                if self._config.timeout_us and sum(q.call.batch for q in queue) < self._config.max_batch_size:
                    filled = self._filled[key] = asyncio.Event()
                    try:
                        await asyncio.wait_for(filled.wait(), self._config.timeout_us / 1e6)
                    except asyncio.TimeoutError:
                        pass  # the timeout: the batch leaves as it is
                    finally:
                        del self._filled[key]
                count = take_count([q.call.batch for q in queue], self._config.max_batch_size)
                taken = [queue.popleft() for _ in range(count)]
                asyncio.get_running_loop().create_task(self._run(taken))
        finally:
            self._draining.discard(key)

    async def _run(self, taken: list[Queued]) -> None:
        assert self._slots is not None
        calls = [q.call for q in taken]
        if self.observe_batch is not None and self.observe_queued_us is not None:
            self.observe_batch(sum(c.batch for c in calls))
            self.observe_queued_us((time.perf_counter() - taken[0].since) * 1e6)
        try:
            merged = merge_inputs(calls)
            outputs = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._pool.predict, calls[0].signature, merged
            )
            self.batches += 1
            self.examples += sum(c.batch for c in calls)
            for queued, part in zip(taken, split_outputs(outputs, [c.batch for c in calls])):
                if not queued.answer.done():
                    queued.answer.set_result(part)
        except ModelInputError as error:
            if len(taken) == 1:
                _fail(taken, error)
            else:
                await self._one_by_one(taken)
        except Exception as error:  # noqa: BLE001 - every waiting request gets the failure, the server lives on
            _fail(taken, error)
        finally:
            self._slots.release()

    async def _on_a_turn(self, call: Call) -> dict[str, np.ndarray]:
        """One call on the event loop, once no other has run in this turn of the loop: calls take turns in the
        order they came, and the loop polls its sockets between any two."""
        loop = asyncio.get_running_loop()
        if self._turn_taken:
            waiter: asyncio.Future[None] = loop.create_future()
            self._turn_waiters.append(waiter)
            try:
                await waiter  # handed the turn by `_pass_turn`
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    loop.call_soon(self._pass_turn)  # handed it, then cancelled: the next one takes it
                raise
        else:
            self._turn_taken = True
        try:
            return self._pool.predict(call.signature, call.inputs)
        finally:
            loop.call_soon(self._pass_turn)  # in the loop's next turn, after it has polled

    def _pass_turn(self) -> None:
        while self._turn_waiters:
            waiter = self._turn_waiters.popleft()
            if not waiter.done():  # a cancelled one (its client gone) is passed over
                waiter.set_result(None)
                return
        self._turn_taken = False

    async def _alone(self, call: Call) -> dict[str, np.ndarray]:
        """One call, unmerged, on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._pool.predict, call.signature,
                                                                dict(call.inputs))

    async def _one_by_one(self, taken: list[Queued]) -> None:
        """A merged batch the model refused (one request's values: a token id out of range, say): every
        request run again alone, so only the request that holds the bad values gets the refusal and the
        others that happened to share its batch are answered."""
        for queued in taken:
            if queued.answer.done():  # the client is gone
                continue
            try:
                outputs = await self._alone(queued.call)
            except Exception as error:  # noqa: BLE001 - this request's own failure, answered to it alone
                _fail([queued], error)
            else:
                self.batches += 1
                self.examples += queued.call.batch
                if not queued.answer.done():
                    queued.answer.set_result(outputs)


def _fail(taken: Sequence[Queued], error: BaseException) -> None:
    for queued in taken:
        if not queued.answer.done():
            queued.answer.set_exception(error)
