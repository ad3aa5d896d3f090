"""Measure each artifact with the runtime that will serve it, on the held-out rows only.

.tflite runs in `ai_edge_litert.interpreter.Interpreter` (XNNPACK on, `threads` recorded); the SavedModel runs
through its `serving_default` signature called with a keyword argument (positional calls were 7x slower,
FACTS §4). Latency is per batch-1 call including input/output copies (set_tensor, invoke, get_tensor for
.tflite; tensor creation and the signature call for SavedModel), p50/p99 over many calls; the numpy
(de)quantization of int8 I/O is done before timing (it is the caller's cost, a few microseconds). Throughput is
rows per second at a larger batch.
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
    throughput_seconds: float = 0.5  # at most this long, and at least 3 batches
    threads: int = 2

    @classmethod
    def for_runs(cls, runs: int, threads: int) -> "Measure":
        """Timing effort scaled by the number of timed batch-1 calls (`--latency-runs`)."""
        return cls(latency_runs=runs, warmup=min(20, max(2, runs // 10)), threads=threads,
                   throughput_seconds=min(0.5, runs / 600))


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
    for i in range(max(measure.warmup, measure.latency_runs // 10)):
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
    while time.perf_counter() - start < measure.throughput_seconds or done < 3 * batch:
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
    """A LiteRT interpreter for one fixed batch size, float in, float out (int8 I/O (de)quantized here).

    One interpreter per batch size: resizing an interpreter that XNNPACK already prepared made batch-1
    calls ~20x slower on this stack, and serving keeps a fixed shape anyway. Not thread-safe: one per worker.
    """

    def __init__(self, path: Path, threads: int, batch: int = 1) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        detail = self.interpreter.get_input_details()[0]
        if int(detail["shape"][0]) != batch:
            shape = list(detail["shape"])
            shape[0] = batch
            self.interpreter.resize_tensor_input(detail["index"], shape)
        self.interpreter.allocate_tensors()
        self.batch = batch
        self.input = self.interpreter.get_input_details()[0]
        self.output = self.interpreter.get_output_details()[0]
        self._in_index, self._out_index = self.input["index"], self.output["index"]
        self._in_q = self._quant(self.input)
        self._out_q = self._quant(self.output)

    @staticmethod
    def _quant(detail: dict[str, Any]) -> tuple[float, int, int, int, Any] | None:
        scale, zero = detail["quantization"]
        if detail["dtype"] == np.float32 or not scale:
            return None
        info = np.iinfo(detail["dtype"])
        return float(scale), int(zero), int(info.min), int(info.max), detail["dtype"]

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Float rows as the interpreter's input type (int8 I/O: scale and zero point applied)."""
        if self._in_q is None:
            return x.astype(np.float32, copy=False)
        scale, zero, low, high, dtype = self._in_q
        return np.clip(np.round(x / scale + zero), low, high).astype(dtype)

    def raw(self, x: np.ndarray) -> np.ndarray:
        """One call on input already in the interpreter's type (what the latency loop times)."""
        self.interpreter.set_tensor(self._in_index, x)
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self._out_index)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = self.raw(self.quantize(x))
        if self._out_q is not None:
            scale, zero = self._out_q[0], self._out_q[1]
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
    runner = TfliteRunner(path, measure.threads, batch=1)
    in_spec, out_spec = TfliteRunner.spec(runner.input), TfliteRunner.spec(runner.output)
    outputs = _batched(runner, x, 1)
    accuracy, agreement = _scores(outputs, reference, labels)
    latency = _time_calls(runner.raw, runner.quantize(x), measure)
    batch = min(measure.throughput_batch, len(x))
    wide = TfliteRunner(path, measure.threads, batch=batch)
    throughput = _throughput(wide.raw, wide.quantize(x), measure)
    raw, packed = file_sizes(path)
    return Metrics(kind=kind, path=rel, runtime="ai_edge_litert.Interpreter (XNNPACK)", size_bytes=raw,
                   gzip_bytes=packed, accuracy=accuracy, agreement=agreement, latency_us=latency,
                   throughput=throughput, threads=measure.threads, input=in_spec, output=out_spec)


class SignatureRunner:
    """A SavedModel's serving_default, called with its keyword argument (positional is 7x slower)."""

    def __init__(self, directory: Path, signature: str = "serving_default") -> None:
        tf = tfenv.tensorflow()
        self.tf = tf
        self.loaded = tf.saved_model.load(str(directory))
        self.fn = self.loaded.signatures[signature]
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
    extra: dict[str, Any] = {"variables_bytes": var_raw, "variables_gzip_bytes": var_gzip,
                             "signatures": sorted(runner.loaded.signatures)}
    if "serving_xla" in runner.loaded.signatures:  # measured, so "XLA pays here" is a number, not a belief
        xla = SignatureRunner(directory, "serving_xla")
        extra["xla_latency_us"] = _time_calls(xla, x, measure)
        # agreement with this SavedModel's own serving_default (not with the unpruned float model)
        extra["xla_agreement"] = _scores(_batched(xla, x, measure.throughput_batch), outputs, None)[1]
    return Metrics(kind=kind, path=rel, runtime="tf.saved_model serving_default (keyword call)",
                   size_bytes=raw, gzip_bytes=packed, accuracy=accuracy, agreement=agreement, latency_us=latency,
                   throughput=throughput, threads=measure.threads, input=in_spec, output=out_spec, extra=extra)
