"""Runtimes that execute a .tflite model, behind one small interface, and a pool that keeps them thread-safe.

The .tflite file is the contract: LiteRT runs it natively (XNNPACK on), OpenVINO reads the same file
(FACTS §5: often faster on Intel CPUs for larger CNNs). Interpreters are not thread-safe, so each worker
thread owns exactly one backend instance, checked out of a `BackendPool` for the length of one call.
`choose_runtime` measures both on the model itself when asked for `auto`, and says why it chose.
"""

from __future__ import annotations

import gc
import os
import queue
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.errors import InputError
from builder.serve.protocol import DEFAULT_SIGNATURE, SignatureSpec, TensorSpec

RUNTIMES = ("litert", "openvino")


class Backend(ABC):
    """One model instance; NOT thread-safe: use it from one thread at a time (see BackendPool)."""

    runtime: str
    signatures: Mapping[str, SignatureSpec]

    @abstractmethod
    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch whose size the model accepts; returns arrays the caller may keep."""

    def predict(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run a batch; models with a fixed batch size take it one fixed-size slice at a time."""
        spec = self.signatures[signature]
        batch = next(iter(inputs.values())).shape[0]
        fixed = spec.inputs[0].shape[0] if spec.inputs and spec.inputs[0].shape else -1
        if fixed == -1 or fixed == batch:
            return self._invoke(spec, inputs)
        if batch % fixed:
            raise ValueError(f"batch {batch} is not a multiple of the model's fixed batch size {fixed}")
        parts = [
            self._invoke(spec, {k: v[i : i + fixed] for k, v in inputs.items()}) for i in range(0, batch, fixed)
        ]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def read_signatures(model_path: Path) -> dict[str, SignatureSpec]:
    """The model's signatures as LiteRT reports them (a single `serving_default` when the file has none)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = _open_litert(model_path, threads=1, interpreter_cls=Interpreter)
    return _litert_signatures(interpreter)[0]


def _open_litert(model_path: Path, threads: int, interpreter_cls: type) -> object:
    try:
        return interpreter_cls(model_path=str(model_path), num_threads=threads)
    except (ValueError, RuntimeError) as error:
        raise InputError(f"{model_path}: not a loadable .tflite model ({str(error).splitlines()[0]})") from None


def _spec(name: str, detail: Mapping[str, object]) -> TensorSpec:
    shape = detail.get("shape_signature")
    if shape is None or len(shape) == 0:  # type: ignore[arg-type]
        shape = detail["shape"]
    return TensorSpec(name=name, dtype=np.dtype(detail["dtype"]).name, shape=tuple(int(d) for d in shape))  # type: ignore[union-attr, arg-type]


def _litert_signatures(interpreter: object) -> tuple[dict[str, SignatureSpec], dict[str, dict[str, int]]]:
    """Signature specs plus, per signature, the tensor index of every input and output name."""
    signatures: dict[str, SignatureSpec] = {}
    indices: dict[str, dict[str, int]] = {}
    listing = interpreter.get_signature_list()  # type: ignore[attr-defined]
    for key, names in listing.items():
        runner = interpreter.get_signature_runner(key)  # type: ignore[attr-defined]
        ins, outs = runner.get_input_details(), runner.get_output_details()
        del runner  # it holds tensor views; allocate_tensors refuses to run while they live
        signatures[key] = SignatureSpec(
            name=key,
            inputs=tuple(_spec(n, ins[n]) for n in names["inputs"]),
            outputs=tuple(_spec(n, outs[n]) for n in names["outputs"]),
        )
        indices[key] = {n: int(d["index"]) for n, d in {**ins, **outs}.items()}
    gc.collect()
    if not signatures:  # converted without signatures: expose the graph's inputs/outputs under the default name
        ins = interpreter.get_input_details()  # type: ignore[attr-defined]
        outs = interpreter.get_output_details()  # type: ignore[attr-defined]
        in_names = [_clean(d["name"]) for d in ins]
        out_names = [_clean(d["name"]) for d in outs]
        signatures[DEFAULT_SIGNATURE] = SignatureSpec(
            name=DEFAULT_SIGNATURE,
            inputs=tuple(_spec(n, d) for n, d in zip(in_names, ins)),
            outputs=tuple(_spec(n, d) for n, d in zip(out_names, outs)),
        )
        indices[DEFAULT_SIGNATURE] = {
            **{n: int(d["index"]) for n, d in zip(in_names, ins)},
            **{n: int(d["index"]) for n, d in zip(out_names, outs)},
        }
    return signatures, indices


def _clean(tensor_name: str) -> str:
    return tensor_name.split(":")[0].removeprefix("serving_default_")


class LiteRTBackend(Backend):
    """`ai_edge_litert` interpreter with the default resolver (XNNPACK delegate on) and N threads."""

    runtime = "litert"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self._interpreter = _open_litert(model_path, threads, Interpreter)
        self.signatures, self._indices = _litert_signatures(self._interpreter)
        self._interpreter.allocate_tensors()  # type: ignore[attr-defined]
        self._shapes: dict[int, tuple[int, ...]] = {
            int(d["index"]): tuple(int(x) for x in d["shape"])
            for d in self._interpreter.get_input_details()  # type: ignore[attr-defined]
        }

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        it = self._interpreter
        index = self._indices[signature.name]
        resized = False
        for name, value in inputs.items():
            i = index[name]
            if self._shapes.get(i) != value.shape:
                it.resize_tensor_input(i, list(value.shape))  # type: ignore[attr-defined]
                self._shapes[i] = value.shape
                resized = True
        if resized:
            it.allocate_tensors()  # type: ignore[attr-defined]
        for name, value in inputs.items():
            it.set_tensor(index[name], np.ascontiguousarray(value))  # type: ignore[attr-defined]
        it.invoke()  # type: ignore[attr-defined]
        return {spec.name: it.get_tensor(index[spec.name]) for spec in signature.outputs}  # type: ignore[attr-defined]


class OpenVINOBackend(Backend):
    """OpenVINO reading the same .tflite; f32 precision (its bf16 default was 1.5x slower here, FACTS §5)."""

    runtime = "openvino"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        try:
            import openvino as ov
        except ImportError:
            raise InputError("runtime openvino needs the openvino package (pip install 'tfsmith[bench]')") from None
        from ai_edge_litert.interpreter import Interpreter

        # Names and order come from LiteRT so both runtimes expose the identical signature.
        probe = _open_litert(model_path, 1, Interpreter)
        self.signatures, indices = _litert_signatures(probe)
        graph_inputs = [int(d["index"]) for d in probe.get_input_details()]  # type: ignore[attr-defined]
        graph_outputs = [int(d["index"]) for d in probe.get_output_details()]  # type: ignore[attr-defined]
        del probe
        core = ov.Core()
        model = core.read_model(str(model_path))
        batched = {
            i: ov.PartialShape([-1, *[int(d) for d in port.get_partial_shape()[1:].to_shape()]])
            for i, port in enumerate(model.inputs)
            if port.get_partial_shape().rank.get_length() > 0
        }
        if all(s.inputs and s.inputs[0].batched for s in self.signatures.values()) and batched:
            model.reshape({model.inputs[i]: shape for i, shape in batched.items()})
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

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        pos = self._positions[signature.name]
        feed = {pos[name]: np.ascontiguousarray(value) for name, value in inputs.items()}
        self._request.infer(feed)
        result: dict[str, np.ndarray] = {}
        for spec in signature.outputs:
            _, k = pos[spec.name]
            result[spec.name] = np.array(self._request.get_output_tensor(k).data, dtype=spec.dtype, copy=True)
        return result


def create_backend(runtime: str, model_path: Path, threads: int = 1) -> Backend:
    """A backend of the named runtime for this model."""
    if runtime == "litert":
        return LiteRTBackend(model_path, threads)
    if runtime == "openvino":
        return OpenVINOBackend(model_path, threads)
    raise InputError(f"unknown runtime {runtime!r}; choose one of: auto, {', '.join(RUNTIMES)}")


class BackendPool:
    """N backend instances for N worker threads; a call checks one out, so none is ever shared."""

    def __init__(self, backends: list[Backend]) -> None:
        if not backends:
            raise ValueError("a pool needs at least one backend")
        self.size = len(backends)
        self.runtime = backends[0].runtime
        self.signatures = backends[0].signatures
        self._free: queue.SimpleQueue[Backend] = queue.SimpleQueue()
        for backend in backends:
            self._free.put(backend)

    @classmethod
    def create(cls, runtime: str, model_path: Path, workers: int = 1, threads: int = 1) -> BackendPool:
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


@dataclass(frozen=True)
class RuntimeChoice:
    """Which runtime serves the model, and why (recorded in image labels and the server's status)."""

    runtime: str
    reason: str
    p50_us: Mapping[str, float]


Measure = Callable[[str, Path, int], float]


def sample_inputs(signature: SignatureSpec, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs matching a signature (dynamic dimensions taken as 1)."""
    rng = np.random.default_rng(seed)
    result: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        shape = [batch if i == 0 and d == -1 else max(d, 1) for i, d in enumerate(spec.shape)]
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            result[spec.name] = rng.random(shape).astype(dtype)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            result[spec.name] = rng.integers(max(info.min, -128), min(info.max, 127), shape, endpoint=True).astype(dtype)
        else:
            result[spec.name] = rng.integers(0, 2, shape).astype(dtype)
    return result


def measure_p50_us(runtime: str, model_path: Path, threads: int, runs: int = 200) -> float:
    """Median latency of one batch-1 call of the default signature, after a warm-up."""
    backend = create_backend(runtime, model_path, threads)
    signature = next(iter(backend.signatures))
    inputs = sample_inputs(backend.signatures[signature])
    for _ in range(20):
        backend.predict(signature, inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        backend.predict(signature, inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def choose_runtime(
    requested: str, model_path: Path, threads: int = 1, measure: Measure = measure_p50_us, margin: float = 0.9
) -> RuntimeChoice:
    """`litert`/`openvino` as asked; `auto` measures both on this model and takes OpenVINO only if clearly faster.

    LiteRT is the default because the .tflite is the contract and it is what the optimizer evaluated; OpenVINO
    must beat it by more than run-to-run noise (`margin`) to be picked.
    """
    if requested in RUNTIMES:
        return RuntimeChoice(requested, "requested", {})
    if requested != "auto":
        raise InputError(f"unknown runtime {requested!r}; choose one of: auto, {', '.join(RUNTIMES)}")
    timings = {"litert": measure("litert", model_path, threads)}
    try:
        timings["openvino"] = measure("openvino", model_path, threads)
    except Exception as error:  # noqa: BLE001 - any OpenVINO failure means: stay on LiteRT, and say why
        return RuntimeChoice("litert", f"auto: openvino unavailable ({str(error).splitlines()[0][:120]})", timings)
    if timings["openvino"] < margin * timings["litert"]:
        runtime = "openvino"
    else:
        runtime = "litert"
    reason = (
        f"auto: batch-1 p50 litert {timings['litert']:.0f} us, openvino {timings['openvino']:.0f} us "
        f"({threads} thread{'s' if threads != 1 else ''}) -> {runtime}"
    )
    return RuntimeChoice(runtime, reason, timings)


def default_threads() -> int:
    """Interpreter threads per worker when not given: 1 (concurrency comes from workers, not intra-op threads)."""
    return 1


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1
