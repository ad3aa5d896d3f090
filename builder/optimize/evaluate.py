"""Run and time each artifact with the runtime that will serve it, on the held-out rows only.

.tflite files run through the serving backends themselves (`builder.server.backends.create_backend`: LiteRT
with XNNPACK, or OpenVINO reading the same file), called by signature with named inputs, so what is measured is
what the server runs. On runtime `tensorflow`, a SavedModel runs through the named signature (the contract's, or
`serving_xla`) called with keyword arguments (positional calls were 7x slower), and a .tflite (one that needs
Select TF ops) on TensorFlow's own `tf.lite.Interpreter` by its signature runner. Latency is timed with THE timing loop `tfsmith bench` and
`--runtime auto` use (`builder.measure.loop`: batch-1 calls in interleaved slices, warm-up excluded, cycling
through the model's own held-out rows), p50/p99 and the median's confidence interval in microseconds.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from builder.optimize import tfenv
from builder.report import Latency, TensorSpec

Arrays = Mapping[str, np.ndarray]
TF_RUNTIME = "tensorflow"  # SavedModel signatures and Select-TF-ops .tflite files, on TensorFlow itself
DEFAULT_SIGNATURE = "serving_default"


def file_sizes(path: Path) -> tuple[int, int]:
    """(raw, gzip) bytes of a file, or summed over a folder's files."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    raw = sum(p.stat().st_size for p in files)
    packed = sum(len(gzip.compress(p.read_bytes(), compresslevel=9)) for p in files)
    return raw, packed


def _shape(values: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None or int(d) < 0 else int(d) for d in values)


def _dtype_name(dtype: Any) -> str:
    """numpy's name, except that strings are the contract's `string` (TensorFlow's spelling)."""
    found = np.dtype(dtype)
    return "string" if found.kind in "SUO" else found.name


class TFInterpreter:
    """A .tflite on TensorFlow's own `tf.lite.Interpreter` (the one that can carry the Flex delegate for Select
    TF ops; ai-edge-litert cannot), called through its signature runner: named inputs, any batch size."""

    def __init__(self, path: Path, threads: int) -> None:
        import warnings

        tf = tfenv.tensorflow()
        with warnings.catch_warnings():  # it warns that LiteRT replaces it: here it is meant
            warnings.simplefilter("ignore")
            self._interpreter = tf.lite.Interpreter(model_path=str(path), num_threads=threads)
        self._interpreter.allocate_tensors()  # a missing Flex delegate fails here, with TensorFlow's own words
        keys = list(self._interpreter.get_signature_list())
        self.key = DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in keys else keys[0]
        self._runner = self._interpreter.get_signature_runner(self.key)
        self.signatures = tuple(sorted(keys))

        def side(details: Mapping[str, Any]) -> tuple[TensorSpec, ...]:
            return tuple(TensorSpec(n, _dtype_name(d["dtype"]), _shape(d["shape_signature"])) for n, d in details.items())

        self.inputs = side(self._runner.get_input_details())
        self.outputs = side(self._runner.get_output_details())

    def predict(self, x: Arrays) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self._runner(**x).items()}


class Runner:
    """One artifact on one runtime: `predict(named arrays) -> named arrays`, any batch size.

    `signature`: which SavedModel signature runtime `tensorflow` calls (default serving_default)."""

    def __init__(self, runtime: str, path: Path, threads: int, signature: str | None = None) -> None:
        self.runtime, self.path = runtime, Path(path)
        self._interpreter: TFInterpreter | None = None
        if runtime == TF_RUNTIME and self.path.is_dir():
            tf = tfenv.tensorflow()
            self._tf = tf
            self._loaded = tf.saved_model.load(str(path))
            self.signature = signature or DEFAULT_SIGNATURE
            self._fn = self._loaded.signatures[self.signature]
            from builder.optimize.model_io import saved_model_contract

            self.inputs, self.outputs = saved_model_contract(self._fn)
            self.signatures = tuple(sorted(self._loaded.signatures))
        elif runtime == TF_RUNTIME:
            self._interpreter = TFInterpreter(self.path, threads)
            self.inputs, self.outputs = self._interpreter.inputs, self._interpreter.outputs
            self.signatures, self.signature = self._interpreter.signatures, self._interpreter.key
        else:
            from builder.model.create import create_backend

            self._backend = create_backend(runtime, Path(path), threads)
            sigs = self._backend.signatures
            self._key = DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in sigs else next(iter(sigs))
            self.signature = self._key
            sig = sigs[self._key]
            self.inputs = tuple(TensorSpec(s.name, s.dtype, _shape(s.shape)) for s in sig.inputs)
            self.outputs = tuple(TensorSpec(s.name, s.dtype, _shape(s.shape)) for s in sig.outputs)
            self.signatures = tuple(sorted(sigs))

    def predict(self, x: Arrays) -> dict[str, np.ndarray]:
        if self._interpreter is not None:
            return self._interpreter.predict({s.name: np.asarray(x[s.name]) for s in self.inputs})
        if self.runtime == TF_RUNTIME:
            tf = self._tf
            feed = {s.name: tf.constant(x[s.name], dtype=tf.as_dtype(s.dtype)) for s in self.inputs}
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


def time_runners(calls: Mapping[str, Callable[[], Any]], budget_s: float, warmup: int = 3) -> dict[str, Latency]:
    """THE timing loop (`builder.measure.loop`) over named zero-argument calls -> p50/p99 and the median's
    95% confidence interval, in microseconds."""
    from builder.measure.loop import time_interleaved

    samples = time_interleaved(dict(calls), budget_s, warmup=warmup)
    return {name: latency_from(s) for name, s in samples.items()}


def latency_from(samples_s: list[float]) -> Latency:
    from builder.measure.stats import summarize

    found = summarize(samples_s, min_samples=1)
    return Latency(round(found.p50 * 1e6, 2), round(found.p99 * 1e6, 2), found.n, round(found.ci_low * 1e6, 2),
                   round(found.ci_high * 1e6, 2))


#: Rows per call behind the rows/s column (the model's fixed batch size when it has one).
THROUGHPUT_BATCH = 32
#: At most this long per batch call at the batch-1 pace: a big model on a small host gets a smaller batch
#: (ResNet50 at ~140 ms a row on 2 busy cores would spend minutes on warm-up calls of 32 rows alone).
BATCH_CALL_S = 0.25


def batch_for(runner: Runner, x: Arrays, row_p50_us: float | None = None, batch: int = THROUGHPUT_BATCH) -> int:
    """The batch size rows/s is measured at: `batch`, fewer when one call would take over BATCH_CALL_S at the
    batch-1 pace `row_p50_us`, all rows when fewer; the model's fixed batch when it has one."""
    fixed = runner.inputs[0].shape[0] if runner.inputs and runner.inputs[0].shape else None
    if fixed:
        return int(fixed)
    if row_p50_us:
        batch = max(1, min(batch, int(BATCH_CALL_S * 1e6 / row_p50_us)))
    return min(batch, len(next(iter(x.values()))))


def batch_caller(runner: Runner, x: Arrays, batch: int) -> Callable[[], Any]:
    """A zero-argument call predicting the first `batch` held-out rows at once (for the timing loop)."""
    chunk = {k: np.ascontiguousarray(v[:batch]) for k, v in x.items()}
    return lambda: runner.predict(chunk)


def throughput_from(batch: int, per_call: Latency) -> dict[str, float]:
    """rows/s at `batch`: batch / the median time of one batch-`batch` call (timed in the interleaved loop)."""
    return {"batch": batch, "batch_p50_us": per_call.p50,
            "samples_per_s": round(batch * 1e6 / per_call.p50, 1) if per_call.p50 > 0 else 0.0}
