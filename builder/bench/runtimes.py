"""Every bench row, with the same small interface: `load()`, then `prepare(x)` -> a zero-argument `run` that
executes ONE inference on that prepared input and returns the output as numpy.

Two kinds of rows:
- **tfsmith's rows** stand for a serving runtime of `builder.model.registry` (LiteRT on each .tflite variant,
  OpenVINO reading the .tflite at f32 or bf16, OpenVINO on its own IR converted from the SavedModel: float at
  f32 or bf16, NNCF int8; TensorFlow on the SavedModel at f32, with its XLA `serving_xla`, or with oneDNN
  bf16). They run through `builder.model.create.create_backend`, the
  backends the server and optimize use, with the same settings: what bench times is what an image serves. Their
  names are derived from the registry (`SERVED_ROWS`), so a runtime added there is a bench row here.
- **peers** tfsmith does not deploy keep an adapter of their own: eager Keras, OpenVINO reading the SavedModel
  (f32, bf16 as OpenVINO's default gives a user on a bf16 CPU, NNCF int8) and ONNX Runtime.

Every row gets the same thread count (TF intra-op threads, LiteRT num_threads, OpenVINO INFERENCE_NUM_THREADS,
ORT intra_op_num_threads) and does the same work per call: input already in the runtime's own form, one
inference, output back as a numpy array. Conversions (ONNX export, NNCF / ORT int8 quantization, the XLA
signature) happen in `load()`, which is timed and reported separately and never counted as latency.
Heavy imports live inside the methods so importing this module is cheap.
"""

from __future__ import annotations

import gzip
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.bench.results import ROLE_BASELINE, ROLE_PEER, ROLE_TFSMITH
from builder.model import registry
from builder.model.signature import DEFAULT_SIGNATURE

Runner = Callable[[], Any]

#: bench's .tflite variants -> the artifact formats optimize writes (what a registry runtime `reads`).
VARIANT_FORMATS = {"fp32": "tflite_fp32", "dynamic": "tflite_dynamic", "fp16": "tflite_float16",
                 "int8": "tflite_int8"}
#: bench's IR variants -> the IR formats optimize writes.
IR_VARIANT_FORMATS = {"fp32": "openvino_ir_fp32", "int8": "openvino_ir_int8"}
#: How a row names the file an engine reads: OpenVINO reading the .tflite is `openvino-tflite-*` and its own IR
#: `openvino-ir-*`, so that both differ from the peer rows of OpenVINO reading the SavedModel (`openvino-fp32`, ...).
TFLITE_ROW_PREFIX = {"litert": "litert-", "openvino": "openvino-tflite-"}
IR_ROW_PREFIX = "openvino-ir-"
#: The rows that run the SavedModel on TensorFlow: by its own signature, and by its XLA-compiled `serving_xla`.
SAVEDMODEL_ROW, SAVEDMODEL_XLA_ROW = "savedmodel", "savedmodel-xla"
XLA_SIGNATURE = "serving_xla"
#: Peers no tfsmith image serves, each with its own adapter: eager Keras; OpenVINO reading the SavedModel at f32,
#: at bf16 (OpenVINO's own default on a CPU that computes in bf16) and quantized by NNCF; ONNX Runtime.
KERAS_ROW = "keras"
OPENVINO_PEER_ROWS = {"openvino-fp32": "f32", "openvino-bf16": "bf16", "openvino-int8": "int8"}
ONNX_ROWS = ("onnxruntime-fp32", "onnxruntime-int8")


@dataclass(frozen=True)
class ServedRow:
    """A bench row that times one serving runtime on one artifact, as an image serves it."""

    name: str
    #: the registry's runtime name (report.json `chosen_runtime`, `serve --runtime`)
    runtime: str
    #: the .tflite variant it runs (fp32, dynamic, fp16, int8); None: the SavedModel
    variant: str | None
    #: the SavedModel signature it calls when not the model's own (`serving_xla`)
    signature: str | None = None
    #: it runs OpenVINO's IR (variant fp32 or int8), not a .tflite
    ir: bool = False


def _precision_suffix(entry: registry.Runtime) -> str:
    """What a runtime's name adds to its engine's (`openvino-bf16` -> bf16, `tensorflow-bf16` -> bf16, litert -> "")."""
    return entry.name.removeprefix(entry.engine).lstrip("-")


def _file_rows(entry: registry.Runtime, prefix: str, formats: dict[str, str], ir: bool) -> tuple[ServedRow, ...]:
    """One row per variant the runtime reads; a precision of its own on the float file is one row named by the
    precision (`openvino-tflite-bf16`, `openvino-ir-bf16`)."""
    suffix = _precision_suffix(entry)
    variants = [v for v, format in formats.items() if entry.serves(format)]
    if suffix and len(variants) == 1:
        return (ServedRow(prefix + suffix, entry.name, variants[0], ir=ir),)
    return tuple(ServedRow(prefix + "-".join(filter(None, (suffix, v))), entry.name, v, ir=ir) for v in variants)


def _rows_of(entry: registry.Runtime) -> tuple[ServedRow, ...]:
    suffix = _precision_suffix(entry)
    if entry.tflite or entry.ir:
        rows = _file_rows(entry, TFLITE_ROW_PREFIX[entry.engine], VARIANT_FORMATS, False) if entry.tflite else ()
        return rows + (_file_rows(entry, IR_ROW_PREFIX, IR_VARIANT_FORMATS, True) if entry.ir else ())
    if entry.serves(registry.SAVED_MODEL_FORMAT):
        rows = [ServedRow("-".join(filter(None, (SAVEDMODEL_ROW, suffix))), entry.name, None)]
        if not suffix:  # XLA compiles the f32 graph: one more signature of the same runtime
            rows.append(ServedRow(SAVEDMODEL_XLA_ROW, entry.name, None, XLA_SIGNATURE))
        return tuple(rows)
    return ()


def _served_rows() -> tuple[ServedRow, ...]:
    """Every (runtime, artifact) an image can serve and bench can time, from the registry: the SavedModel rows
    first (the baseline leads the table), then the .tflite rows in the registry's tie order, then the IR rows."""
    rows = [row for entry in registry.RUNTIMES for row in _rows_of(entry)]
    return (*(r for r in rows if r.variant is None), *(r for r in rows if r.variant is not None and not r.ir),
            *(r for r in rows if r.ir))


SERVED_ROWS: tuple[ServedRow, ...] = _served_rows()
_SERVED_BY_NAME = {row.name: row for row in SERVED_ROWS}

#: Every row the bench knows, in report order.
ALL_RUNTIMES: tuple[str, ...] = (KERAS_ROW, *(r.name for r in SERVED_ROWS), *OPENVINO_PEER_ROWS, *ONNX_ROWS)


def served_row(row: str) -> ServedRow | None:
    """The serving runtime and artifact behind a tfsmith row; None for a peer."""
    return _SERVED_BY_NAME.get(row)


def serving_runtime(row: str) -> str | None:
    """The serving runtime a bench row stands for (`openvino-tflite-int8` -> openvino, `openvino-ir-bf16` ->
    openvino-bf16, `savedmodel-bf16` -> tensorflow-bf16); None for the peers no tfsmith image serves (Keras eager,
    OpenVINO on the SavedModel, ORT)."""
    found = served_row(row)
    return found.runtime if found else None


def bench_row(runtime: str, tflite_variant: str | None, signature: str | None = None, ir: bool = False
              ) -> str | None:
    """The bench row that times `runtime` serving one artifact: a .tflite of `tflite_variant` (fp32, int8, ...),
    OpenVINO's IR of that variant (`ir`), or a SavedModel (variant None) by `signature`. A runtime that reads only
    the float file (openvino-bf16 computes it in bf16) has one row whatever file the report names. None when the
    bench has no such row (a .tflite on TensorFlow's interpreter, a name the registry does not know)."""
    rows = [r for r in SERVED_ROWS if r.runtime == runtime]
    if tflite_variant is None:
        wanted = XLA_SIGNATURE if signature == XLA_SIGNATURE else None
        return next((r.name for r in rows if r.variant is None and r.signature == wanted), None)
    tflite_rows = [r for r in rows if r.variant is not None and r.ir == ir]
    if len(tflite_rows) == 1:
        return tflite_rows[0].name
    return next((r.name for r in tflite_rows if r.variant == tflite_variant), None)


def role_of(name: str) -> str:
    """savedmodel is the baseline (what TF Serving serves); every other row a tfsmith image serves is tfsmith's;
    the rest are peers."""
    if name == SAVEDMODEL_ROW:
        return ROLE_BASELINE
    return ROLE_TFSMITH if served_row(name) is not None else ROLE_PEER


def configure_tf_threads(threads: int) -> None:
    """Fix TF's thread pools (the shared set-up, `builder.measure.threads`) before TF runs anything."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from builder.measure.threads import configure_tensorflow

    configure_tensorflow(tf, threads)  # False when TF already ran ops here: the report notes the setting


def artifact_sizes(path: Path) -> tuple[int, int]:
    """Raw and gzip'd size of an artifact: a file, an IR's .xml and .bin, or every file under a folder (gzip
    level 9, per file)."""
    from builder.model.artifact import artifact_files

    files = artifact_files(path)
    raw = sum(p.stat().st_size for p in files)
    packed = sum(len(gzip.compress(p.read_bytes(), compresslevel=9)) for p in files)
    return raw, packed


def _tflite_interpreter(path: Path, threads: int) -> Any:
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path), num_threads=threads)


def tflite_input_shape(path: Path) -> tuple[int, ...]:
    details = _tflite_interpreter(path, 1).get_input_details()[0]
    return tuple(int(d) for d in details["shape"])


def random_input_for_tflite(path: Path, batch: int = 1, seed: int = 0) -> np.ndarray:
    """A float input of the model's shape (the quantizing adapters convert it as the model needs)."""
    shape = (batch, *tflite_input_shape(path)[1:])
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _quantize(x: np.ndarray, dtype: Any, quantization: tuple[float, int]) -> np.ndarray:
    scale, zero = quantization
    if np.issubdtype(dtype, np.floating) or scale == 0:
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale + zero), info.min, info.max).astype(dtype)


def as_answer(y: np.ndarray) -> np.ndarray:
    """Floats as float32 (every runtime's scores compared alike); strings, booleans and integers as they are."""
    return y.astype(np.float32) if np.issubdtype(y.dtype, np.floating) else y


def _dequantize(y: np.ndarray, quantization: tuple[float, int]) -> np.ndarray:
    scale, zero = quantization
    if np.issubdtype(y.dtype, np.floating) or scale == 0:
        return y.astype(np.float32)
    return (y.astype(np.float32) - zero) * scale


class Adapter:
    """Base: name, role, the artifact it runs, the thread count."""

    def __init__(self, name: str, artifact: Path, threads: int) -> None:
        self.name = name
        self.role = role_of(name)
        self.artifact = Path(artifact)
        self.threads = threads
        self.size_artifact: Path = self.artifact  # what the size columns measure

    def load(self) -> None:
        raise NotImplementedError

    def prepare(self, x: np.ndarray) -> Runner:
        raise NotImplementedError

    def answer(self, y: Any) -> np.ndarray:
        """Runner output as the model answers it: float scores as float32, anything else (strings, booleans,
        integer ids) as it is, never cast."""
        return as_answer(np.asarray(y))


class KerasAdapter(Adapter):
    """Eager call of the tf_keras model (`model(x, training=False)`): what a notebook user measures."""

    def load(self) -> None:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        import tf_keras

        self.model = tf_keras.models.load_model(str(self.artifact), compile=False)

    def prepare(self, x: np.ndarray) -> Runner:
        import tensorflow as tf

        tensor = tf.constant(x)
        model = self.model
        return lambda: model(tensor, training=False).numpy()


class ServingAdapter(Adapter):
    """A tfsmith row: the model layer's backend for a registry runtime (`builder.model.create.create_backend`),
    created and called as the server creates and calls it, by signature with named inputs.

    One backend per batch size for the engines that allocate at a shape (LiteRT, OpenVINO), so neither
    timing pays a re-allocation when bench alternates batch 1 and the larger batch (a server worker sees
    one shape after another too, but that cost is the shape cost optimize reports, not the model's latency);
    TensorFlow's SavedModel is one backend for every shape, as in the server.
    """

    def __init__(self, row: ServedRow, artifact: Path, threads: int, workdir: Path,
                 signature: str = DEFAULT_SIGNATURE) -> None:
        super().__init__(row.name, artifact, threads)
        self.row = row
        self.workdir = workdir
        #: the model's own signature (the contract's), and the one this row calls (`serving_xla` for XLA)
        self.model_signature = signature
        self.signature = row.signature or signature
        self.in_quant: tuple[float, int] = (0.0, 0)
        self.out_quant: tuple[float, int] = (0.0, 0)

    @property
    def _per_shape(self) -> bool:
        return registry.runtime(self.row.runtime).engine != "tensorflow"

    def load(self) -> None:
        path = self._model_path()
        self._path = path
        self._backends: dict[tuple[int, ...], Any] = {}
        backend = self._create(path)
        if self.signature not in backend.signatures and self.row.signature is None:
            self.signature = DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in backend.signatures else next(
                iter(backend.signatures))
        spec = backend.signatures[self.signature]
        self.input, self.output = spec.inputs[0], spec.outputs[0]
        self._first = backend
        if self.artifact.suffix == ".tflite":  # a user's .tflite may take and give int8: the file says how
            interpreter = _tflite_interpreter(self.artifact, 1)
            self.in_quant = _quantization(interpreter.get_input_details()[0])
            self.out_quant = _quantization(interpreter.get_output_details()[0])

    def _create(self, path: Path) -> Any:
        from builder.model.create import create_backend

        return create_backend(self.row.runtime, path, self.threads)

    def _model_path(self) -> Path:
        """What the runtime is given: the artifact itself, or the SavedModel with its `serving_xla`."""
        if self.row.signature == XLA_SIGNATURE:
            return self._with_xla_signature()
        return self.artifact

    def _with_xla_signature(self) -> Path:
        """The SavedModel when it carries `serving_xla` (an optimize folder exported with xla), else a copy to
        which optimize's own step adds it (`builder.optimize.model_io.add_xla_signature`)."""
        if _has_signature(self.artifact, XLA_SIGNATURE):
            return self.artifact
        copy = self.workdir / "savedmodel-xla" / "saved_model"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(self.artifact, copy)
        from builder.optimize.model_io import add_xla_signature

        add_xla_signature(copy, self.model_signature)
        self.size_artifact = copy
        return copy

    def _backend_for(self, shape: tuple[int, ...]) -> Any:
        if not self._per_shape:
            return self._first
        if not self._backends:
            self._backends[shape] = self._first
        if shape not in self._backends:
            self._backends[shape] = self._create(self._path)
        return self._backends[shape]

    def prepare(self, x: np.ndarray) -> Runner:
        backend = self._backend_for(tuple(x.shape))
        prepared = np.ascontiguousarray(_quantize(x, np.dtype(self.input.dtype), self.in_quant))
        feed, signature, output = {self.input.name: prepared}, self.signature, self.output.name
        return lambda: backend.answer(signature, feed)[output]  # one call, as a server makes it

    def answer(self, y: Any) -> np.ndarray:
        """Dequantized where the file gives int8 for a float output; otherwise as the model answers it."""
        return _dequantize(np.asarray(y), self.out_quant) if self.out_quant[0] else as_answer(np.asarray(y))


def _quantization(detail: dict[str, Any]) -> tuple[float, int]:
    scale, zero = detail["quantization"]
    return float(scale), int(zero)


def _has_signature(saved_model: Path, key: str) -> bool:
    """Whether a SavedModel carries a signature, read from its saved_model.pb without loading it."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved_model / "saved_model.pb").read_bytes())
    return any(key in graph.signature_def for graph in proto.meta_graphs)


class OpenVINOAdapter(Adapter):
    """A peer: OpenVINO reading the SavedModel directly, as a user of OpenVINO would, at an explicit inference
    precision (`f32`; `bf16`, which is OpenVINO's own default on a CPU that computes in bf16); with `calib`,
    NNCF post-training int8 on those samples, its IR saved so that its size is what is reported."""

    def __init__(self, name: str, artifact: Path, threads: int, precision: str = "f32",
                 calib: np.ndarray | None = None, workdir: Path | None = None) -> None:
        super().__init__(name, artifact, threads)
        self.precision = precision
        self.calib = calib
        self.workdir = workdir

    def _config(self) -> dict[str, Any]:
        return {"INFERENCE_PRECISION_HINT": self.precision, "INFERENCE_NUM_THREADS": self.threads,
                "PERFORMANCE_HINT": "LATENCY"}

    def load(self) -> None:
        import openvino as ov

        self.core = ov.Core()
        self.model = self.core.read_model(str(self.artifact))
        self.in_dtype = self.model.inputs[0].get_element_type().to_dtype()
        if self.calib is not None:
            import nncf

            samples = [self.calib[i : i + 1] for i in range(len(self.calib))]
            self.model = nncf.quantize(self.model, nncf.Dataset(samples), subset_size=len(samples))
            if self.workdir is not None:  # the int8 IR a user of OpenVINO would ship: its size is what we report
                folder = self.workdir / self.name
                folder.mkdir(parents=True, exist_ok=True)
                ov.save_model(self.model, str(folder / "model.xml"))
                self.size_artifact = folder
        self._compiled: dict[tuple[int, ...], Any] = {}

    def _compiled_for(self, shape: tuple[int, ...]) -> Any:
        if shape not in self._compiled:
            model = self.model.clone()
            model.reshape({model.inputs[0].get_any_name(): list(shape)})
            self._compiled[shape] = self.core.compile_model(model, "CPU", self._config())
        return self._compiled[shape]

    def prepare(self, x: np.ndarray) -> Runner:
        import openvino as ov

        compiled = self._compiled_for(tuple(x.shape))
        request = compiled.create_infer_request()
        prepared = np.ascontiguousarray(x.astype(self.in_dtype))
        # Bind the input once (shared memory): `infer([array])` re-wraps the input on every call and measured
        # ~3x slower per call on a tiny CNN here (0.24 vs 0.08 ms), which would charge OpenVINO for glue.
        request.set_input_tensor(ov.Tensor(prepared, shared_memory=True))

        def run(_shared: np.ndarray = prepared) -> np.ndarray:  # holds the shared input buffer alive
            request.infer()
            return request.get_output_tensor(0).data.copy()

        return run


class ONNXRuntimeAdapter(Adapter):
    """ONNX Runtime on a tf2onnx export of the Keras model (from_keras, opset 17); int8 is static QDQ after
    ORT's quantization pre-processing (without it static int8 silently runs 1.4-2.3x slower)."""

    def __init__(self, name: str, artifact: Path, threads: int, workdir: Path, calib: np.ndarray | None = None
                 ) -> None:
        super().__init__(name, artifact, threads)
        self.workdir = workdir
        self.calib = calib

    def load(self) -> None:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        import onnxruntime as ort
        import tensorflow as tf
        import tf2onnx
        import tf_keras

        self.workdir.mkdir(parents=True, exist_ok=True)
        import hashlib

        digest = hashlib.sha256(self.artifact.read_bytes()).hexdigest()[:12]
        fp32 = self.workdir / f"model_fp32_{digest}.onnx"  # shared by the fp32 and int8 adapters of one model
        if not fp32.exists():
            model = tf_keras.models.load_model(str(self.artifact), compile=False)
            spec = (tf.TensorSpec((None, *model.input_shape[1:]), tf.float32, name="input"),)
            tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(fp32))
        path = fp32
        if self.calib is not None:
            from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
            from onnxruntime.quantization.shape_inference import quant_pre_process

            pre = self.workdir / f"model_pre_{digest}.onnx"
            path = self.workdir / f"model_int8_{digest}.onnx"
            quant_pre_process(str(fp32), str(pre))
            calib = self.calib

            class Reader(CalibrationDataReader):
                def __init__(self) -> None:
                    self.items = iter([{"input": calib[i : i + 1]} for i in range(len(calib))])

                def get_next(self) -> dict[str, np.ndarray] | None:
                    return next(self.items, None)

            quantize_static(str(pre), str(path), Reader(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
        self.size_artifact = path
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name

    def prepare(self, x: np.ndarray) -> Runner:
        session, feed = self.session, {self.input_name: np.ascontiguousarray(x, dtype=np.float32)}
        return lambda: session.run(None, feed)[0]


def build_adapters(names: list[str], bench: Any, threads: int, workdir: Path
                   ) -> tuple[list[Adapter], dict[str, tuple[str, str]]]:
    """Adapters for the requested rows, and (artifact, reason) for those that cannot even be built."""
    adapters: list[Adapter] = []
    missing: dict[str, tuple[str, str]] = {}
    failures = bench.failures
    for name in names:
        served = served_row(name)
        if served is not None and served.variant is None:
            if bench.saved_model is None:
                missing[name] = ("", failures.get("savedmodel", "no SavedModel"))
            else:
                adapters.append(ServingAdapter(served, bench.saved_model, threads, workdir,
                                               getattr(bench, "signature", DEFAULT_SIGNATURE)))
        elif served is not None and served.ir:
            path = bench.ir.get(served.variant)
            if path is None:
                missing[name] = ("", failures.get(f"ir-{served.variant}", f"no {served.variant} OpenVINO IR"))
            else:
                adapters.append(ServingAdapter(served, path, threads, workdir))
        elif served is not None:
            path = bench.tflite.get(served.variant)
            if path is None:
                missing[name] = ("", failures.get(f"tflite-{served.variant}", f"no {served.variant} .tflite"))
            else:
                adapters.append(ServingAdapter(served, path, threads, workdir))
        elif name == KERAS_ROW:
            if bench.keras_path is None:
                missing[name] = ("", failures.get("keras", "no Keras model"))
            else:
                adapters.append(KerasAdapter(name, bench.keras_path, threads))
        elif name in OPENVINO_PEER_ROWS:
            precision = OPENVINO_PEER_ROWS[name]
            if bench.saved_model is None:
                missing[name] = ("", failures.get("savedmodel", "no SavedModel"))
            elif precision == "int8":
                adapters.append(OpenVINOAdapter(name, bench.saved_model, threads, "f32", bench.x_calib,
                                                workdir / "openvino"))
            else:
                adapters.append(OpenVINOAdapter(name, bench.saved_model, threads, precision))
        elif name in ONNX_ROWS:
            if bench.keras_path is None:
                missing[name] = ("", failures.get("onnx", "no Keras model for tf2onnx"))
            else:
                calib = bench.x_calib if name.endswith("int8") else None
                adapters.append(ONNXRuntimeAdapter(name, bench.keras_path, threads, workdir / "onnx", calib))
        else:
            missing[name] = ("", f"unknown runtime (known: {', '.join(ALL_RUNTIMES)})")
    return adapters, missing
