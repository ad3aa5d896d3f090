"""Runtimes that execute a model, behind one small interface, and a pool that keeps them thread-safe.

The .tflite file is the contract: LiteRT runs it natively (XNNPACK on), OpenVINO reads the same file
(measured 9.2 ms vs LiteRT's 14.0 ms for an int8 ResNet50 at 2 threads on a Xeon, and 29.6 vs 51.8 ms on an
AMD EPYC: often faster for larger CNNs), and OpenVINO can quantize the fp32 .tflite with NNCF
at start (openvino-nncf, calibrated on the folder's samples). Interpreters are not thread-safe, so each worker
thread owns exactly one backend instance, checked out of a `BackendPool` for the length of one call.
Which runtime serves is decided before the server starts (named, or measured on the host by
`builder.packaging.runtime_choice` for `auto`): this module only runs what it is told to. TensorFlow
(SavedModels, and .tflite files on TensorFlow's own interpreter) lives in `tensorflow_backend`, imported
only when that runtime is asked for.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import InputError
from builder.measure import loop, stats
from builder.server.interpreters import Backend, LiteRTBackend, _litert_signatures, _open_litert
from builder.server.protocol import DEFAULT_SIGNATURE, STRING, SignatureSpec, TensorSpec
from builder.server.protocol import batched as is_batched

RUNTIMES = ("litert", "openvino", "openvino-nncf", "tensorflow")
class OpenVINOBackend(Backend):
    """OpenVINO reading the same .tflite; f32 precision (its bf16 default ran 1.5x slower
    than f32 on an AVX-512 Xeon, measured on MobileNetV2)."""

    runtime = "openvino"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        ov = _import_openvino(self.runtime)
        from ai_edge_litert.interpreter import Interpreter

        # Names and order come from LiteRT so every runtime exposes the identical signature.
        probe = _open_litert(model_path, 1, Interpreter)
        self.signatures, indices = _litert_signatures(probe)
        graph_inputs = [int(d["index"]) for d in probe.get_input_details()]  # type: ignore[attr-defined]
        graph_outputs = [int(d["index"]) for d in probe.get_output_details()]  # type: ignore[attr-defined]
        del probe
        core = ov.Core()  # type: ignore[attr-defined]
        model = self._read_model(core, model_path)
        batched = {
            i: ov.PartialShape([-1, *[int(d) for d in port.get_partial_shape()[1:].to_shape()]])  # type: ignore[attr-defined]
            for i, port in enumerate(model.inputs)  # type: ignore[attr-defined]
            if port.get_partial_shape().rank.get_length() > 0
        }
        if all(s.inputs and is_batched(s.inputs[0]) for s in self.signatures.values()) and batched:
            model.reshape({model.inputs[i]: shape for i, shape in batched.items()})  # type: ignore[attr-defined]
        config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1"}
        self._compiled = core.compile_model(model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._positions = {
            key: {
                **{n: graph_inputs.index(i) for n, i in idx.items() if i in graph_inputs},
                **{n: ("out", graph_outputs.index(i)) for n, i in idx.items() if i in graph_outputs},
            }
            for key, idx in indices.items()
        }

    def _read_model(self, core: object, model_path: Path) -> object:
        """The OpenVINO model to compile, fresh (the caller reshapes it); openvino-nncf overrides this only."""
        return core.read_model(str(model_path))  # type: ignore[attr-defined]

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        pos = self._positions[signature.name]
        feed = {pos[name]: np.ascontiguousarray(value) for name, value in inputs.items()}
        self._request.infer(feed)
        result: dict[str, np.ndarray] = {}
        for spec in signature.outputs:
            _, k = pos[spec.name]
            result[spec.name] = np.array(self._request.get_output_tensor(k).data, dtype=spec.dtype, copy=True)
        return result


class OpenVINONNCFBackend(OpenVINOBackend):
    """OpenVINO reading the fp32 .tflite, quantized to int8 by NNCF at server start from calibration samples.

    bench measured this fastest for MobileNetV2 here (4.90 ms vs LiteRT int8 7.03 ms). The shipped artifact
    stays the fp32 .tflite plus its samples; the int8 graph exists only in OpenVINO's memory. Quantization runs
    once per process (cached), each worker compiles its own copy. Answers are int8-approximate: compare them
    with the fp32 model by agreement, not bit for bit (smoke.py does).
    """

    runtime = "openvino-nncf"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        self._samples_path = nncf_inputs(model_path)[1]
        super().__init__(model_path, threads)

    def _read_model(self, core: object, model_path: Path) -> object:
        quantized = _nncf_quantized(str(model_path), str(self._samples_path), _mtimes(model_path, self._samples_path))
        return quantized.clone()  # type: ignore[attr-defined]


#: Calibration samples NNCF uses at most (more barely moves int8 ranges and slows every server start).
NNCF_CALIBRATION_SAMPLES = 128
#: The float model in a `tfsmith optimize --out` folder (builder/optimize/__init__.py).
FP32_TFLITE = "model_fp32.tflite"


def _import_openvino(runtime: str) -> object:
    try:
        import openvino as ov
    except ImportError:
        raise InputError(f"runtime {runtime} needs the openvino package (pip install 'tfsmith[bench]')") from None
    return ov


def _mtimes(*paths: Path) -> tuple[float, ...]:
    return tuple(p.stat().st_mtime for p in paths)


@functools.lru_cache(maxsize=4)
def _nncf_quantized(model_path: str, samples_path: str, _stamp: tuple[float, ...]) -> object:
    """The fp32 .tflite read by OpenVINO and quantized by NNCF with up to NNCF_CALIBRATION_SAMPLES of `x`."""
    ov = _import_openvino("openvino-nncf")
    try:
        import nncf
    except ImportError:
        raise InputError("runtime openvino-nncf needs the nncf package (pip install 'tfsmith[bench]')") from None
    inputs = load_calibration(Path(samples_path))
    model = ov.Core().read_model(model_path)  # type: ignore[attr-defined]
    from ai_edge_litert.interpreter import Interpreter

    signature = next(iter(_litert_signatures(_open_litert(Path(model_path), 1, Interpreter))[0].values()))
    if len(signature.inputs) != 1:
        raise InputError(f"{model_path}: runtime openvino-nncf quantizes one-input models; this one has "
                         f"{len(signature.inputs)} inputs (serve it with litert or openvino)")
    spec = signature.inputs[0]
    if np.dtype(spec.dtype).kind != "f":
        raise InputError(f"{model_path}: runtime openvino-nncf needs a float input, not {spec.dtype}")
    x = inputs.get(spec.name)
    if x is None:
        raise InputError(f"{samples_path}: no samples for input {spec.name!r}")
    items = [x[i : i + 1].astype(spec.dtype) for i in range(min(len(x), NNCF_CALIBRATION_SAMPLES))]
    return nncf.quantize(model, nncf.Dataset(items), subset_size=len(items))


def load_calibration(samples_path: Path) -> dict[str, np.ndarray]:
    """The held-out inputs of an optimize samples file, by input name; InputError when it has none."""
    from builder.server.artifacts import load_samples

    samples = load_samples(samples_path)
    if not samples.inputs or samples.rows == 0:
        raise InputError(f"{samples_path}: no calibration samples (`x/<input>`) for runtime openvino-nncf")
    return samples.inputs


def nncf_inputs(model_path: Path) -> tuple[Path, Path]:
    """(fp32 .tflite, calibration samples) for serving `model_path`'s folder with openvino-nncf.

    The fp32 model is `model_fp32.tflite` beside the chosen model (optimize's layout), else the model itself;
    the samples are the folder's report `samples` (default samples.npz). Without samples the backend is
    refused: NNCF without calibration would have to guess int8 ranges.
    """
    from builder.server.artifacts import calibration_samples

    fp32 = model_path.parent / FP32_TFLITE
    source = fp32 if fp32.is_file() else model_path
    samples = calibration_samples(model_path)
    if samples is None:
        raise InputError(
            f"runtime openvino-nncf needs calibration samples (samples.npz, as `tfsmith optimize --out` "
            f"writes) beside {model_path}; none found"
        )
    return source, samples


def model_for_runtime(runtime: str, model_path: Path) -> Path:
    """The .tflite a runtime serves: openvino-nncf quantizes the fp32 model itself, the others run the chosen one."""
    return nncf_inputs(model_path)[0] if runtime == "openvino-nncf" else model_path


def create_backend(runtime: str, model_path: Path, threads: int = 1) -> Backend:
    """A backend of the named runtime for this model (openvino-nncf: `model_path` is the fp32 .tflite)."""
    if runtime == "tensorflow":
        from builder.server.tensorflow_backend import create_tensorflow_backends

        return create_tensorflow_backends(model_path, 1, threads)[0]
    if runtime == "litert":
        return LiteRTBackend(model_path, threads)
    if runtime == "openvino":
        return OpenVINOBackend(model_path, threads)
    if runtime == "openvino-nncf":
        return OpenVINONNCFBackend(model_path, threads)
    raise InputError(f"unknown runtime {runtime!r}; choose one of: auto, {', '.join(RUNTIMES)}")


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

    @classmethod
    def create(cls, runtime: str, model_path: Path, workers: int = 1, threads: int = 1) -> BackendPool:
        if runtime == "tensorflow":  # one thread-safe SavedModel shared by every worker (tensorflow_backend)
            from builder.server.tensorflow_backend import create_tensorflow_backends

            return cls(create_tensorflow_backends(model_path, workers, threads))
        return cls([create_backend(runtime, model_path, threads) for _ in range(max(1, workers))])

    @contextmanager
    def checkout(self) -> Iterator[Backend]:
        backend = self._free.get()
        try:
            yield backend
        finally:
            self._free.put(backend)

    def predict(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Blocking; safe from any number of threads."""
        with self.checkout() as backend:
            return backend.predict(signature, inputs)


def sample_inputs(signature: SignatureSpec, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic stand-in inputs matching a signature (dynamic dimensions taken as 1), for when the model
    came without example inputs. Integer inputs are all 0: for token ids or indices (an embedding lookup, a
    gather) 0 is the one value every model accepts, where random or negative ids may fail the lookup."""
    rng = np.random.default_rng(seed)
    result: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        shape = [batch if i == 0 and d is None else max(d or 1, 1) for i, d in enumerate(spec.shape)]
        dtype = np.dtype(spec.dtype)
        if spec.dtype == STRING:
            raise ValueError(f"input {spec.name!r} takes strings; no text is made up for it")
        if dtype.kind == "f":
            result[spec.name] = rng.random(shape).astype(dtype)
        else:
            result[spec.name] = np.zeros(shape, dtype=dtype)
    return result


def as_input(rows: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Sample rows in the input's dtype; text (numpy str or bytes arrays) as the object arrays of bytes the
    server passes for strings."""
    if spec.dtype != STRING:
        return rows.astype(spec.dtype)
    flat = np.empty(rows.size, dtype=object)
    flat[:] = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in rows.reshape(-1).tolist()]
    return flat.reshape(rows.shape)


def example_inputs(signature: SignatureSpec, samples_path: Path | None, batch: int = 1) -> dict[str, np.ndarray]:
    """The model's own example inputs for one call: the first `batch` rows of its samples file, in the
    signature's dtypes; generated stand-ins when there are none or they do not fit the signature."""
    from builder.server.artifacts import load_samples

    if samples_path is not None:
        try:
            samples = load_samples(samples_path)
        except InputError:
            samples = None
        if samples is not None and samples.rows >= batch:
            found = {}
            for spec in signature.inputs:
                rows = samples.inputs.get(spec.name)
                if rows is None or rows.ndim != len(spec.shape):
                    break
                found[spec.name] = as_input(rows[:batch], spec)
            else:
                return found
    return sample_inputs(signature, batch)


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
                backend.predict(signature.name, inputs)
        times = loop.interleave({"model": lambda: pool.predict(signature.name, inputs)}, budget_s, warmup=0,
                                min_samples=SELF_TEST_MIN_SAMPLES)[0]["model"]
    except Exception as error:  # noqa: BLE001 - a model that cannot be timed is still served
        logging.getLogger("tfsmith.serve").warning("start-up self-test could not run the model (%s: %s); "
                                                   "serving without it", type(error).__name__, error)
        return None
    return stats.median(times) * 1e6


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1
