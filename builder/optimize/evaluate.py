"""Measure each artifact with the runtime that will serve it, on the held-out rows only.

.tflite runs in `ai_edge_litert.interpreter.Interpreter` (XNNPACK on, `threads` recorded); the SavedModel runs
through its `serving_default` signature called with a keyword argument (positional calls were 7x slower,
FACTS §4). Latency is per batch-1 call including input/output copies (and int8 (de)quantization for int8 I/O),
p50/p99 over many calls; throughput is rows per second at a larger batch.
"""

from __future__ import annotations

import gzip
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.optimize import tfenv


@dataclass(frozen=True)
class Measure:
    """How much timing to do: the benchmark uses more runs than the tests."""

    latency_runs: int = 300
    warmup: int = 20
    throughput_batch: int = 32
    throughput_seconds: float = 0.5
    threads: int = 2


@dataclass
class Metrics:
    kind: str
    path: str
    runtime: str
    size_bytes: int
    gzip_bytes: int
    accuracy: float | None
    agreement: float
    latency_us: dict[str, float]
    throughput: dict[str, float]
    threads: int
    input: dict[str, Any]
    output: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    accepted: bool = True
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "extra"}
        data.update(self.extra)
        return data


def file_sizes(path: Path) -> tuple[int, int]:
    """(raw, gzip) bytes of a file, or summed over a folder's files."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    raw = sum(p.stat().st_size for p in files)
    packed = sum(len(gzip.compress(p.read_bytes(), compresslevel=9)) for p in files)
    return raw, packed


def _percentiles(samples: list[float]) -> dict[str, float]:
    arr = np.asarray(samples) * 1e6
    return {"p50": round(float(np.percentile(arr, 50)), 2), "p99": round(float(np.percentile(arr, 99)), 2),
            "runs": len(samples)}


def _time_calls(call: Callable[[np.ndarray], np.ndarray], rows: np.ndarray, measure: Measure) -> dict[str, float]:
    for i in range(measure.warmup):
        call(rows[i % len(rows)][None, ...])
    samples = []
    for i in range(measure.latency_runs):
        row = rows[i % len(rows)][None, ...]
        start = time.perf_counter()
        call(row)
        samples.append(time.perf_counter() - start)
    return _percentiles(samples)


def _throughput(call: Callable[[np.ndarray], np.ndarray], rows: np.ndarray, measure: Measure) -> dict[str, float]:
    batch = min(measure.throughput_batch, len(rows))
    chunk = rows[:batch]
    call(chunk)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < measure.throughput_seconds or done == 0:
        call(chunk)
        done += batch
    return {"batch": batch, "samples_per_s": round(done / (time.perf_counter() - start), 1)}


def _scores(outputs: np.ndarray, reference: np.ndarray, labels: np.ndarray | None) -> tuple[float | None, float]:
    predicted = np.argmax(outputs.reshape(len(outputs), -1), axis=1)
    expected = np.argmax(reference.reshape(len(reference), -1), axis=1)
    agreement = float(np.mean(predicted == expected))
    accuracy = float(np.mean(predicted == labels)) if labels is not None else None
    return accuracy, agreement


class TfliteRunner:
    """One LiteRT interpreter (not thread-safe: one per worker) with float in, float out."""

    def __init__(self, path: Path, threads: int) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        self.input = self.interpreter.get_input_details()[0]
        self.output = self.interpreter.get_output_details()[0]
        self._batch = -1

    def _resize(self, batch: int) -> None:
        if batch != self._batch:
            shape = list(self.input["shape"])
            shape[0] = batch
            self.interpreter.resize_tensor_input(self.input["index"], shape)
            self.interpreter.allocate_tensors()
            self.input = self.interpreter.get_input_details()[0]
            self.output = self.interpreter.get_output_details()[0]
            self._batch = batch

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self._resize(len(x))
        scale, zero = self.input["quantization"]
        if self.input["dtype"] != np.float32 and scale:
            info = np.iinfo(self.input["dtype"])
            x = np.clip(np.round(x / scale + zero), info.min, info.max).astype(self.input["dtype"])
        self.interpreter.set_tensor(self.input["index"], x)
        self.interpreter.invoke()
        y = self.interpreter.get_tensor(self.output["index"])
        scale, zero = self.output["quantization"]
        if self.output["dtype"] != np.float32 and scale:
            y = (y.astype(np.float32) - zero) * scale
        return y

    @staticmethod
    def spec(detail: dict[str, Any]) -> dict[str, Any]:
        scale, zero = detail["quantization"]
        return {"name": detail["name"], "shape": [int(d) for d in detail["shape_signature"]],
                "dtype": np.dtype(detail["dtype"]).name, "quantization": [float(scale), int(zero)]}


def _batched(call: Callable[[np.ndarray], np.ndarray], x: np.ndarray, batch: int) -> np.ndarray:
    return np.concatenate([call(x[i : i + batch]) for i in range(0, len(x), batch)], axis=0)


def evaluate_tflite(path: Path, kind: str, rel: str, x: np.ndarray, labels: np.ndarray | None,
                    reference: np.ndarray, measure: Measure) -> Metrics:
    runner = TfliteRunner(path, measure.threads)
    in_spec, out_spec = TfliteRunner.spec(runner.input), TfliteRunner.spec(runner.output)
    outputs = _batched(runner, x, measure.throughput_batch)
    accuracy, agreement = _scores(outputs, reference, labels)
    latency = _time_calls(runner, x, measure)
    throughput = _throughput(runner, x, measure)
    raw, packed = file_sizes(path)
    return Metrics(kind=kind, path=rel, runtime="ai_edge_litert.Interpreter (XNNPACK)", size_bytes=raw,
                   gzip_bytes=packed, accuracy=accuracy, agreement=agreement, latency_us=latency,
                   throughput=throughput, threads=measure.threads, input=in_spec, output=out_spec)


class SignatureRunner:
    """A SavedModel's serving_default, called with its keyword argument (positional is 7x slower)."""

    def __init__(self, directory: Path) -> None:
        tf = tfenv.tensorflow()
        self.tf = tf
        self.loaded = tf.saved_model.load(str(directory))
        self.fn = self.loaded.signatures["serving_default"]
        inputs = self.fn.structured_input_signature[1]
        self.in_name, self.in_spec = next(iter(inputs.items()))
        self.out_name, self.out_spec = next(iter(self.fn.structured_outputs.items()))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.fn(**{self.in_name: self.tf.constant(x)})[self.out_name].numpy()

    def specs(self) -> tuple[dict[str, Any], dict[str, Any]]:
        def spec(name: str, s: Any) -> dict[str, Any]:
            return {"name": name, "shape": [None if d is None else int(d) for d in s.shape], "dtype": s.dtype.name}

        return spec(self.in_name, self.in_spec), spec(self.out_name, self.out_spec)


def evaluate_saved_model(directory: Path, kind: str, rel: str, x: np.ndarray, labels: np.ndarray | None,
                         reference: np.ndarray, measure: Measure) -> Metrics:
    runner = SignatureRunner(directory)
    outputs = _batched(runner, x, measure.throughput_batch)
    accuracy, agreement = _scores(outputs, reference, labels)
    latency = _time_calls(runner, x, measure)
    throughput = _throughput(runner, x, measure)
    raw, packed = file_sizes(directory)
    var_raw, var_gzip = file_sizes(directory / "variables") if (directory / "variables").is_dir() else (0, 0)
    in_spec, out_spec = runner.specs()
    return Metrics(kind=kind, path=rel, runtime="tf.saved_model serving_default (keyword call)",
                   size_bytes=raw, gzip_bytes=packed, accuracy=accuracy, agreement=agreement, latency_us=latency,
                   throughput=throughput, threads=measure.threads, input=in_spec, output=out_spec,
                   extra={"variables_bytes": var_raw, "variables_gzip_bytes": var_gzip})
