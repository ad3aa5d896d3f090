"""TensorFlow as a runtime: SavedModels (every signature) and .tflite files on TensorFlow's own interpreter.

Serves what LiteRT cannot: a SavedModel (a GRU over variable-length sequences, a `TextVectorization` string
model, a `tf.Module` whose only signature is `predict`, an XLA-compiled `serving_xla`), and a .tflite that
needs Select TF ops where the TensorFlow build carries the Flex delegate. TensorFlow is imported here only,
lazily: the LiteRT serving image has no TensorFlow, and importing it costs seconds.

Threads are process-wide in TensorFlow and can be set only before the first op runs, so
`prepare_tensorflow` sets them once per process, before any model loads:
- intra-op = the server's `--threads`: how many cores one op (a matmul, a convolution) may use;
- inter-op = the server's `--interpreters`: each call in flight drives its graph's ops from one inter-op thread,
  so as many threads as concurrent calls let them run side by side, and more would only oversubscribe the
  cores intra-op already uses (TensorFlow's default is one per core, for each pool).
A loaded SavedModel's functions are thread-safe (concurrent calls run side by side on the inter-op
pool), so every worker of the pool shares ONE loaded model: measured on MobileNetV2 with two signatures
(`tf.saved_model.load` three times in one process, each followed by a call), every further copy added
~165 MiB resident to the first one's ~210 MiB, and would buy no concurrency the shared one lacks. A
TensorFlow Lite interpreter is not thread-safe, so each worker owns its own, as for LiteRT.

`tensorflow-bf16` is the same SavedModel with oneDNN's bf16 auto-mixed precision (`onednn_bf16`): on a
Xeon with AMX a random-weight ResNet50 ran 55 ms against 71 ms in f32 at 2 threads (its largest output
difference 4e-6), and on a CPU without bf16 compute it can only lose, so it is a candidate optimize times,
never a default.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import IncompatibleError, InputError
from builder.model.artifact import SAVED_MODEL_PB, is_saved_model
from builder.model.backend import SELECT_OPS_MARKER, Backend, LiteRTBackend, cause
from builder.model.failures import ModelInputError, clean_message
from builder.model.signature import SignatureSpec, TensorSpec

RUNTIME = "tensorflow"
#: Set in CUDA serving images (the guard reads it too): a server that finds no GPU refuses to start.
REQUIRE_GPU_ENV = "TFSMITH_IMAGE_REQUIRE_GPU"

log = logging.getLogger("tfsmith.serve")


@functools.lru_cache(maxsize=1)
def prepare_tensorflow(threads: int, workers: int) -> Any:
    """TensorFlow imported with its thread pools set (see the module docstring) and its devices said in one
    log line; IncompatibleError when TFSMITH_IMAGE_REQUIRE_GPU=1 and no GPU is visible. Once per process."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        raise InputError("runtime tensorflow needs the tensorflow package (a TensorFlow serving image has it)") from None
    gpus = tf.config.list_physical_devices("GPU")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(1, workers))
        for gpu in gpus:  # take GPU memory as needed, not all of it: `--model-processes N` puts N on one GPU
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:  # ops already ran in this process (a test, a host tool): its set-up stays as it is
        log.debug("TensorFlow was already initialized in this process; its threads and GPU memory stay as set")
    line = device_line(tf.__version__, [_gpu_name(tf, gpu) for gpu in gpus], threads, workers)
    log.info("%s", line)
    if os.environ.get(REQUIRE_GPU_ENV, "") == "1" and not gpus:
        raise IncompatibleError(f"{REQUIRE_GPU_ENV}=1 but TensorFlow {tf.__version__} sees no GPU: run the image "
                                "with the GPU passed in (docker run --gpus all) or unset it to serve on the CPU")
    return tf


def device_line(version: str, gpus: list[str], threads: int, workers: int) -> str:
    """What TensorFlow runs on, in one line (pure, so its wording is tested without a GPU)."""
    pools = f"{threads} intra-op / {workers} inter-op threads"
    if not gpus:
        return f"TensorFlow {version} runs on the CPU (no GPU visible; {pools})"
    return f"TensorFlow {version} sees {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}: {', '.join(gpus)} ({pools})"


def _gpu_name(tf: Any, device: Any) -> str:
    try:
        details = tf.config.experimental.get_device_details(device)
    except Exception:  # noqa: BLE001 - the name is only for the log line
        details = {}
    return str(details.get("device_name") or device.name)


def tensor_spec(name: str, tf_spec: Any) -> TensorSpec:
    """A `tf.TensorSpec` as the server's TensorSpec: numpy dtype name (strings: object), None for dynamic dims."""
    dtype = np.dtype(tf_spec.dtype.as_numpy_dtype).name
    if tf_spec.shape.rank is None:
        raise InputError(f"signature tensor {name!r} has an unknown rank; the server needs at least the rank")
    return TensorSpec(name=name, dtype=dtype, shape=tuple(None if d is None else int(d) for d in tf_spec.shape))


def signature_spec(key: str, function: Any) -> SignatureSpec:
    """A concrete function's inputs (keyword arguments, in its own order) and outputs."""
    args, kwargs = function.structured_input_signature
    if args:
        raise InputError(f"signature {key!r} takes positional arguments; serving signatures take named inputs")
    order = list(getattr(function, "_arg_keywords", None) or kwargs)
    outputs = function.structured_outputs
    if not isinstance(outputs, Mapping):
        raise InputError(f"signature {key!r} returns {type(outputs).__name__}, not named outputs")
    return SignatureSpec(
        name=key,
        inputs=tuple(tensor_spec(n, kwargs[n]) for n in order if n in kwargs),
        outputs=tuple(tensor_spec(n, spec) for n, spec in outputs.items()),
    )


class SavedModelBackend(Backend):
    """A SavedModel loaded with `tf.saved_model.load`, every signature served under its own key.

    Signatures are called with keyword arguments, the input names: a loaded signature function refuses
    positional ones ("too many positional arguments", TensorFlow 2.21). Thread-safe (see the module
    docstring), so `create_tensorflow_backends` shares one instance among all workers.
    """

    runtime = RUNTIME
    platform = "tensorflow_savedmodel"

    def __init__(self, model_path: Path, threads: int = 1, workers: int = 1, precision: str = "f32",
                 runtime: str = RUNTIME) -> None:
        tf = prepare_tensorflow(threads, workers)
        self._tf = tf
        self.runtime = runtime
        self._precision = (lambda: onednn_bf16(tf)) if precision == "bf16" else contextlib.nullcontext
        try:
            loaded = tf.saved_model.load(str(model_path))
        except Exception as error:  # noqa: BLE001 - any load failure is the user's model: one line, cause kept
            raise InputError(f"{model_path}: TensorFlow cannot load this SavedModel: {cause(error, 'load')}") from None
        self._loaded = loaded  # keeps the variables the functions capture alive
        self._functions = dict(loaded.signatures)
        if not self._functions:
            raise InputError(f"{model_path}: the SavedModel has no serving signatures (save it with "
                             "`signatures=` or export it with model.export())")
        self.signatures = {key: signature_spec(key, fn) for key, fn in self._functions.items()}

    def at(self, precision: str, runtime: str) -> SavedModelBackend:
        """The same loaded SavedModel served at another precision, as another runtime (`tensorflow-bf16` beside
        `tensorflow`): one load instead of two (0.8-1.2 s for MobileNetV2). The functions are shared, which
        the bf16 switch allows (`onednn_bf16`: TensorFlow keeps one instantiation of a function per setting)."""
        twin = copy.copy(self)
        twin.runtime = runtime
        twin._precision = (lambda: onednn_bf16(self._tf)) if precision == "bf16" else contextlib.nullcontext
        return twin

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            with self._precision():
                results = self._functions[signature.name](**inputs)
        except self._tf.errors.InvalidArgumentError as error:  # a kernel refusing these values or shapes
            raise ModelInputError(clean_message(error.message)) from None
        return {spec.name: _array(results[spec.name].numpy()) for spec in signature.outputs}


def _array(value: Any) -> np.ndarray:
    """An answer as an array: a scalar string comes from `.numpy()` as bare bytes, which every encoder would
    have to special-case; as a 0-d object array it is a string tensor like any other. A scalar of another dtype
    comes as a numpy scalar (bfloat16's from ml_dtypes): a 0-d array too."""
    return np.asarray(value, dtype=object) if isinstance(value, bytes) else np.asarray(value)  # a bfloat16 scalar too


#: TensorFlow's Grappler pass that rewrites float32 ops oneDNN runs in bfloat16 (AMX / AVX512-BF16 on x86).
ONEDNN_BF16 = "auto_mixed_precision_onednn_bfloat16"
_bf16_lock = threading.Lock()
_bf16_users = 0


@contextlib.contextmanager
def onednn_bf16(tf: Any) -> Iterator[None]:
    """Calls inside run with oneDNN's bf16 auto-mixed precision.

    The option is process-wide, but TensorFlow reads it when a call starts and keeps one instantiation of
    the function per setting, so f32 and bf16 calls of the same model can alternate (optimize times both in
    one loop). Calls in flight on other threads keep it on until the last one leaves.
    """
    global _bf16_users
    with _bf16_lock:
        _bf16_users += 1
        if _bf16_users == 1:
            tf.config.optimizer.set_experimental_options({ONEDNN_BF16: True})
    try:
        yield
    finally:
        with _bf16_lock:
            _bf16_users -= 1
            if _bf16_users == 0:
                tf.config.optimizer.set_experimental_options({ONEDNN_BF16: False})


class TFLiteOnTensorFlowBackend(LiteRTBackend):
    """A .tflite on TensorFlow's own interpreter (`tf.lite.Interpreter`), the same interface as LiteRT's.

    It exists for models that need Select TF ops: TensorFlow builds that link the Flex delegate run them
    here. A build without it (the stock TensorFlow 2.21 wheel has none) is refused at load with the
    interpreter's own first line and what to serve instead.
    """

    runtime = RUNTIME

    def __init__(self, model_path: Path, threads: int = 1, workers: int = 1) -> None:
        self._tf = prepare_tensorflow(threads, workers)
        super().__init__(model_path, threads)

    def _refusal(self, model_path: Path, error: BaseException) -> str:
        return flex_refusal(model_path, error, self._tf.__version__)

    def _interpreter_class(self) -> type:
        import warnings

        with warnings.catch_warnings():  # tf.lite.Interpreter warns that LiteRT replaces it; here it is meant
            warnings.simplefilter("ignore")
            interpreter = self._tf.lite.Interpreter

        class Quiet(interpreter):  # type: ignore[misc, valid-type]
            def __init__(self, **kwargs: Any) -> None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    super().__init__(**kwargs)

        return Quiet


def flex_refusal(model_path: Path, error: BaseException, version: str) -> str:
    """One line for a .tflite TensorFlow's interpreter cannot prepare, keeping the interpreter's first line."""
    text = cause(error, "tflite")
    if SELECT_OPS_MARKER in text:
        return (f"{model_path}: needs Select TF ops, and this TensorFlow {version} has no Flex delegate: {text}; "
                "serve the SavedModel it was converted from with --runtime tensorflow")
    return f"{model_path}: TensorFlow's interpreter cannot run this model: {text}"


def create_tensorflow_backends(model_path: Path, workers: int, threads: int, precision: str = "f32",
                               runtime: str = RUNTIME) -> list[Backend]:
    """The pool's backends: one shared SavedModel for every worker, or one TensorFlow interpreter each."""
    if is_saved_model(model_path):
        shared = SavedModelBackend(model_path, threads, workers, precision, runtime)
        return [shared] * max(1, workers)
    if model_path.suffix == ".tflite" and precision == "f32":
        return [TFLiteOnTensorFlowBackend(model_path, threads, workers) for _ in range(max(1, workers))]
    if model_path.suffix == ".tflite":
        raise InputError(f"{model_path}: runtime {runtime} serves a SavedModel folder (with {SAVED_MODEL_PB}); "
                         "a .tflite runs on runtime tensorflow")
    raise InputError(f"{model_path}: runtime {runtime} serves a SavedModel folder (with {SAVED_MODEL_PB}) "
                     "or a .tflite file")
