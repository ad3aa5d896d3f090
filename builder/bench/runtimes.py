"""One adapter per runtime, all with the same small interface: `load()`, then `prepare(x)` -> a zero-argument
`run` that executes ONE inference on that prepared input and returns the output as numpy.

Every adapter gets the same thread count (TF intra/inter op threads, LiteRT num_threads, OpenVINO
INFERENCE_NUM_THREADS, ORT intra_op_num_threads) and does the same work per call: input already in the
runtime's own form, one inference, output back as a numpy array. Conversions (ONNX export, NNCF / ORT int8
quantization) happen in `load()`, which is timed and reported separately and never counted as latency.
Heavy imports live inside the methods so importing this module is cheap.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.bench.results import ROLE_BASELINE, ROLE_PEER, ROLE_TFSMITH

Runner = Callable[[], Any]

#: Every runtime the bench knows, in report order. A row names an engine and the artifact it reads, so OpenVINO
#: reading the .tflite (`openvino-tflite-*`, what a tfsmith image serves) and OpenVINO reading the SavedModel
#: (`openvino-fp32`, `openvino-int8`: a peer) are different rows.
ALL_RUNTIMES = (
    "keras", "savedmodel", "savedmodel-xla",
    "litert-fp32", "litert-dynamic", "litert-fp16", "litert-int8",
    "openvino-tflite-fp32", "openvino-tflite-int8", "openvino-tflite-nncf",
    "openvino-fp32", "openvino-int8",
    "onnxruntime-fp32", "onnxruntime-int8",
)

# --- bench rows <-> serving runtimes (the server's names: report.json `chosen_runtime`, `serve --runtime`) ----
#: The rows that run a .tflite the way a serving runtime does: the prefix, then the file's variant (`litert-int8`).
TFLITE_ROW_PREFIX = {"litert": "litert-", "openvino": "openvino-tflite-"}
#: openvino-nncf always quantizes the fp32 .tflite at load: one row, no variant.
NNCF_ROW = "openvino-tflite-nncf"
#: The rows that run a SavedModel on TensorFlow: by the signature it serves, and by its XLA-compiled `serving_xla`.
SAVEDMODEL_ROW, SAVEDMODEL_XLA_ROW = "savedmodel", "savedmodel-xla"


def serving_runtime(row: str) -> str | None:
    """The serving runtime a bench row stands for (`openvino-tflite-int8` -> openvino, `openvino-tflite-nncf` ->
    openvino-nncf); None for the peers no tfsmith image serves (Keras eager, OpenVINO on the SavedModel, ORT)."""
    if row == NNCF_ROW:
        return "openvino-nncf"
    for runtime, prefix in TFLITE_ROW_PREFIX.items():
        if row.startswith(prefix):
            return runtime
    return "tensorflow" if row in (SAVEDMODEL_ROW, SAVEDMODEL_XLA_ROW) else None


def bench_row(runtime: str, tflite_variant: str | None, signature: str | None = None) -> str | None:
    """The bench row that times `runtime` serving one artifact: a .tflite of `tflite_variant` (fp32, int8, ...),
    or a SavedModel (variant None) by `signature`. None when the bench has no such row (a .tflite on TensorFlow's
    interpreter)."""
    if tflite_variant is None:
        if runtime != "tensorflow":
            return None
        return SAVEDMODEL_XLA_ROW if signature == "serving_xla" else SAVEDMODEL_ROW
    if runtime == "openvino-nncf":
        return NNCF_ROW
    prefix = TFLITE_ROW_PREFIX.get(runtime)
    return None if prefix is None else prefix + tflite_variant


def role_of(name: str) -> str:
    """savedmodel is the baseline; the rows a tfsmith image serves a .tflite with are tfsmith's; the rest peers."""
    if name == SAVEDMODEL_ROW:
        return ROLE_BASELINE
    if serving_runtime(name) in ("litert", "openvino", "openvino-nncf"):
        return ROLE_TFSMITH
    return ROLE_PEER


def configure_tf_threads(threads: int) -> None:
    """Fix TF's thread pools (the shared set-up, `builder.measure.threads`) before TF runs anything."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from builder.measure.threads import configure_tensorflow

    configure_tensorflow(tf, threads)  # False when TF already ran ops here: the report notes the setting


def artifact_sizes(path: Path) -> tuple[int, int]:
    """Raw and gzip'd size of a file, or of every file under a folder (gzip level 9, per file)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
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

    def to_float(self, y: Any) -> np.ndarray:
        """Runner output as float scores (dequantized where the model's output is integer)."""
        return np.asarray(y, dtype=np.float32)


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


class SavedModelAdapter(Adapter):
    """The SavedModel serving signature, called with KEYWORD arguments (positional calls are ~7x slower)."""

    xla = False
    signature = "serving_default"  # which signature to call (build_adapters sets the model's)

    def load(self) -> None:
        import tensorflow as tf

        self.loaded = tf.saved_model.load(str(self.artifact))
        signature = self.loaded.signatures[self.signature]
        self.input_name = next(iter(signature.structured_input_signature[1]))
        self.output_name = next(iter(signature.structured_outputs))
        self.fn = tf.function(signature, jit_compile=True) if self.xla else signature

    def prepare(self, x: np.ndarray) -> Runner:
        import tensorflow as tf

        kwargs = {self.input_name: tf.constant(x)}
        fn, out = self.fn, self.output_name
        return lambda: fn(**kwargs)[out].numpy()


class XLAAdapter(SavedModelAdapter):
    """The same signature compiled with XLA (`tf.function(jit_compile=True)`)."""

    xla = True


class LiteRTAdapter(Adapter):
    """LiteRT (`ai_edge_litert` Interpreter, XNNPACK delegate by default); one interpreter per batch shape."""

    def load(self) -> None:
        interpreter = _tflite_interpreter(self.artifact, self.threads)
        interpreter.allocate_tensors()
        self.input = interpreter.get_input_details()[0]
        self.output = interpreter.get_output_details()[0]
        self._interpreters: dict[tuple[int, ...], Any] = {tuple(self.input["shape"]): interpreter}

    def _interpreter_for(self, shape: tuple[int, ...]) -> Any:
        if shape not in self._interpreters:
            interpreter = _tflite_interpreter(self.artifact, self.threads)
            interpreter.resize_tensor_input(self.input["index"], list(shape))
            interpreter.allocate_tensors()
            self._interpreters[shape] = interpreter
        return self._interpreters[shape]

    def prepare(self, x: np.ndarray) -> Runner:
        interpreter = self._interpreter_for(tuple(x.shape))
        prepared = _quantize(x, self.input["dtype"], self.input["quantization"])
        in_index, out_index = self.input["index"], self.output["index"]

        def run() -> np.ndarray:
            interpreter.set_tensor(in_index, prepared)
            interpreter.invoke()
            return interpreter.get_tensor(out_index)

        return run

    def to_float(self, y: Any) -> np.ndarray:
        return _dequantize(np.asarray(y), self.output["quantization"])


class OpenVINOAdapter(Adapter):
    """OpenVINO reading a SavedModel or a .tflite directly; f32 inference precision (its bf16 default on
    AVX-512 BF16 CPUs measured 1.5x slower here); optional NNCF post-training int8 with a calibration set."""

    def __init__(self, name: str, artifact: Path, threads: int, calib: np.ndarray | None = None,
                 workdir: Path | None = None) -> None:
        super().__init__(name, artifact, threads)
        self.calib = calib
        self.workdir = workdir

    def _config(self) -> dict[str, Any]:
        return {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": self.threads,
                "PERFORMANCE_HINT": "LATENCY"}

    def load(self) -> None:
        import openvino as ov

        self.core = ov.Core()
        self.model = self.core.read_model(str(self.artifact))
        self.in_quant: tuple[float, int] = (0.0, 0)
        self.out_quant: tuple[float, int] = (0.0, 0)
        # Feed what OpenVINO's graph takes: an int8-I/O .tflite may come in as i8 (quantize with the file's
        # parameters) or as f32 (OpenVINO folded the (de)quantization in).
        self.in_dtype = self.model.inputs[0].get_element_type().to_dtype()
        if self.artifact.suffix == ".tflite":
            interpreter = _tflite_interpreter(self.artifact, 1)
            if not np.issubdtype(self.in_dtype, np.floating):
                self.in_quant = interpreter.get_input_details()[0]["quantization"]
            if not np.issubdtype(self.model.outputs[0].get_element_type().to_dtype(), np.floating):
                self.out_quant = interpreter.get_output_details()[0]["quantization"]
        if self.calib is not None:
            import nncf

            samples = [self.calib[i : i + 1] for i in range(len(self.calib))]
            self.model = nncf.quantize(self.model, nncf.Dataset(samples), subset_size=len(samples))
            if self.workdir is not None and self.artifact.suffix != ".tflite":
                # the int8 IR a user of OpenVINO would ship: its size is what we report (for the .tflite +
                # NNCF-at-load path the shipped file stays the .tflite, so its size is reported instead)
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
        prepared = np.ascontiguousarray(_quantize(x, self.in_dtype, self.in_quant))
        # Bind the input once (shared memory): `infer([array])` re-wraps the input on every call and measured
        # ~3x slower per call on a tiny CNN here (0.24 vs 0.08 ms), which would charge OpenVINO for glue.
        request.set_input_tensor(ov.Tensor(prepared, shared_memory=True))

        def run(_shared: np.ndarray = prepared) -> np.ndarray:  # holds the shared input buffer alive
            request.infer()
            return request.get_output_tensor(0).data.copy()

        return run

    def to_float(self, y: Any) -> np.ndarray:
        return _dequantize(np.asarray(y), self.out_quant)


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
    """Adapters for the requested runtimes, and (artifact, reason) for those that cannot even be built."""
    adapters: list[Adapter] = []
    missing: dict[str, tuple[str, str]] = {}
    failures = bench.failures
    for name in names:
        if name == "keras":
            if bench.keras_path is None:
                missing[name] = ("", failures.get("keras", "no Keras model"))
            else:
                adapters.append(KerasAdapter(name, bench.keras_path, threads))
        elif name in ("savedmodel", "savedmodel-xla", "openvino-fp32", "openvino-int8"):
            if bench.saved_model is None:
                missing[name] = ("", failures.get("savedmodel", "no SavedModel"))
            elif name in ("savedmodel", "savedmodel-xla"):
                adapter = (SavedModelAdapter if name == "savedmodel" else XLAAdapter)(name, bench.saved_model, threads)
                adapter.signature = getattr(bench, "signature", "serving_default")
                adapters.append(adapter)
            else:
                calib = bench.x_calib if name.endswith("int8") else None
                adapters.append(OpenVINOAdapter(name, bench.saved_model, threads, calib, workdir / "openvino"))
        elif name == NNCF_ROW:
            # The fp32 .tflite read by OpenVINO and quantized by NNCF at load time from calibration samples:
            # the shipped artifact stays the .tflite (plus samples), the int8 graph is OpenVINO's own.
            path = bench.tflite.get("fp32")
            if path is None:
                missing[name] = ("", failures.get("tflite-fp32", "no fp32 .tflite"))
            else:
                adapters.append(OpenVINOAdapter(name, path, threads, bench.x_calib, workdir / "openvino"))
        elif serving_runtime(name) in TFLITE_ROW_PREFIX:
            variant = name.rsplit("-", 1)[1]
            path = bench.tflite.get(variant)
            if path is None:
                missing[name] = ("", failures.get(f"tflite-{variant}", f"no {variant} .tflite"))
            elif serving_runtime(name) == "litert":
                adapters.append(LiteRTAdapter(name, path, threads))
            else:
                adapters.append(OpenVINOAdapter(name, path, threads))
        elif name.startswith("onnxruntime-"):
            if bench.keras_path is None:
                missing[name] = ("", failures.get("onnx", "no Keras model for tf2onnx"))
            else:
                calib = bench.x_calib if name.endswith("int8") else None
                adapters.append(ONNXRuntimeAdapter(name, bench.keras_path, threads, workdir / "onnx", calib))
        else:
            missing[name] = ("", f"unknown runtime (known: {', '.join(ALL_RUNTIMES)})")
    return adapters, missing
