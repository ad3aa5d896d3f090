"""Run and time each artifact with the runtime that will serve it, on the held-out rows only.

.tflite files run through the serving backends themselves (`builder.server.backends.create_backend`: LiteRT
with XNNPACK, or OpenVINO reading the same file), called by signature with named inputs, so what is measured is
what the server runs. The SavedModel runs through its `serving_default` called with keyword arguments
(positional calls were 7x slower). Latency is timed with THE timing loop `tfsmith bench` and the server's
`--runtime auto` use (`builder.bench.recommend.time_interleaved`: batch-1 calls in interleaved slices, warm-up
excluded, cycling through the model's own held-out rows), p50/p99 in microseconds.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from builder.optimize import tfenv
from builder.report import Latency, TensorSpec

Arrays = Mapping[str, np.ndarray]
TF_RUNTIME = "tensorflow"  # the SavedModel's serving_default (TensorFlow; GPU targets serve it)


def file_sizes(path: Path) -> tuple[int, int]:
    """(raw, gzip) bytes of a file, or summed over a folder's files."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    raw = sum(p.stat().st_size for p in files)
    packed = sum(len(gzip.compress(p.read_bytes(), compresslevel=9)) for p in files)
    return raw, packed


def _shape(values: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None or int(d) < 0 else int(d) for d in values)


class Runner:
    """One artifact on one runtime: `predict(named arrays) -> named arrays`, any batch size."""

    def __init__(self, runtime: str, path: Path, threads: int) -> None:
        self.runtime, self.path = runtime, Path(path)
        if runtime == TF_RUNTIME:
            tf = tfenv.tensorflow()
            self._tf = tf
            self._loaded = tf.saved_model.load(str(path))
            self._fn = self._loaded.signatures["serving_default"]
            from builder.optimize.model_io import saved_model_contract

            self.inputs, self.outputs = saved_model_contract(self._fn)
            self.signatures = tuple(sorted(self._loaded.signatures))
        else:
            from builder.server.backends import create_backend
            from builder.server.protocol import DEFAULT_SIGNATURE

            self._backend = create_backend(runtime, Path(path), threads)
            sigs = self._backend.signatures
            self._key = DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in sigs else next(iter(sigs))
            sig = sigs[self._key]
            self.inputs = tuple(TensorSpec(s.name, s.dtype, _shape(s.shape)) for s in sig.inputs)
            self.outputs = tuple(TensorSpec(s.name, s.dtype, _shape(s.shape)) for s in sig.outputs)
            self.signatures = tuple(sorted(sigs))

    def predict(self, x: Arrays) -> dict[str, np.ndarray]:
        if self.runtime == TF_RUNTIME:
            feed = {s.name: self._tf.constant(x[s.name], dtype=s.dtype) for s in self.inputs}
            return {k: np.asarray(v) for k, v in self._fn(**feed).items()}
        return self._backend.predict(self._key, {s.name: np.asarray(x[s.name], dtype=s.dtype) for s in self.inputs})

    def predict_all(self, x: Arrays, batch: int = 64) -> dict[str, np.ndarray]:
        fixed = self.inputs[0].shape[0] if self.inputs and self.inputs[0].shape else None
        step = fixed or batch
        rows = len(next(iter(x.values())))
        parts = [self.predict({k: v[i : i + step] for k, v in x.items()}) for i in range(0, rows, step)]
        return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}

    def row_caller(self, x: Arrays, rows: int = 32) -> Callable[[], Any]:
        """A zero-argument batch-1 call cycling through the first `rows` held-out rows (for the timing loop)."""
        n = min(rows, len(next(iter(x.values()))))
        feeds = [{k: np.ascontiguousarray(v[i : i + 1]) for k, v in x.items()} for i in range(n)]
        state = {"i": 0}

        def call() -> Any:
            state["i"] = (state["i"] + 1) % n
            return self.predict(feeds[state["i"]])

        return call


def time_runners(calls: Mapping[str, Callable[[], Any]], budget_s: float) -> dict[str, Latency]:
    """THE timing loop (bench's `time_interleaved`) over named zero-argument calls -> p50/p99 in microseconds."""
    from builder.bench.recommend import time_interleaved

    samples = time_interleaved(dict(calls), budget_s, warmup=3)
    return {name: latency_from(s) for name, s in samples.items()}


def latency_from(samples_s: list[float]) -> Latency:
    arr = np.asarray(samples_s) * 1e6
    return Latency(round(float(np.percentile(arr, 50)), 2), round(float(np.percentile(arr, 99)), 2), len(arr))


def throughput(runner: Runner, x: Arrays, batch: int = 32, seconds: float = 0.3) -> dict[str, float]:
    """Rows per second at `batch` (or the model's fixed batch), at least 3 calls."""
    fixed = runner.inputs[0].shape[0] if runner.inputs and runner.inputs[0].shape else None
    rows = len(next(iter(x.values())))
    batch = min(fixed or batch, rows)
    chunk = {k: v[:batch] for k, v in x.items()}
    runner.predict(chunk)
    done, calls, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds or calls < 3:
        runner.predict(chunk)
        done, calls = done + batch, calls + 1
    return {"batch": batch, "samples_per_s": round(done / (time.perf_counter() - start), 1)}
