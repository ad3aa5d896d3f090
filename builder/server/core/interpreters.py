"""The server's backends for its worker threads, and its start-up self-test.

Interpreters are not thread-safe, so each worker thread owns exactly one backend instance, checked out of a
`BackendPool` for the length of one call (TensorFlow's SavedModel is shared: it is thread-safe).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from builder.measure import loop, stats
from builder.model.backend import Backend
from builder.model.create import create_backends
from builder.model.inputs import example_inputs
from builder.model.signature import DEFAULT_SIGNATURE


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


#: The start-up self-test's time budget: it stops earlier once the median is pinned down (`measure.stats`).
SELF_TEST_BUDGET_S = 2.0
SELF_TEST_MIN_SAMPLES = 30


def measure_pool(pool: BackendPool, samples_path: Path | None, budget_s: float = SELF_TEST_BUDGET_S,
                 signature_name: str | None = None) -> float | None:
    """Warm every backend and time batch-1 calls of the default signature on the model's example inputs,
    with the timing loop and median every tfsmith measurement uses (`builder.measure`).

    Returns the median in microseconds, or None when the model could not be run on them (then it is still
    served, and requests say what is wrong): start-up never fails on its own self-test. A model with string
    inputs and no samples is not run at all (said in the log): made-up text proves nothing about it.
    """
    signature = pool.signatures.get(signature_name or DEFAULT_SIGNATURE) or next(iter(pool.signatures.values()))
    try:
        inputs = example_inputs(signature, samples_path)
    except ValueError as note:
        logging.getLogger("tfsmith.serve").info("start-up self-test skipped: %s and the model came without "
                                                "samples", note)
        return None
    try:
        for _ in range(pool.size):
            with pool.checkout() as backend:
                backend.answer(signature.name, inputs)
        times = loop.interleave({"model": lambda: pool.predict(signature.name, inputs)}, budget_s, warmup=0,
                                min_samples=SELF_TEST_MIN_SAMPLES)[0]["model"]
    except Exception as error:  # noqa: BLE001 - a model that cannot be timed is still served
        logging.getLogger("tfsmith.serve").warning("start-up self-test could not run the model (%s: %s); "
                                                   "serving without it", type(error).__name__, error)
        return None
    return stats.median(times) * 1e6
