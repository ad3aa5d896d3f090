"""Import TensorFlow the one way that works with tfmot: Keras 2 (`tf_keras`) as `tf.keras`.

tfmot cannot prune or quantize Keras 3 objects (it works only with Keras 2), and `TF_USE_LEGACY_KERAS` is read once, when
TensorFlow is first imported, so it has to be set before any import of tensorflow in the process.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType


def setup() -> None:
    """Set the environment TensorFlow reads at import; harmless when called twice.

    `TF_ONEDNN_USE_SYSTEM_ALLOCATOR`: TensorFlow's x86 wheels put every tensor of 4 KiB or more in oneDNN's
    pool, which never gives a byte back. optimize opens and closes one model after another in one process; with
    the pool, a BERT-base-sized SavedModel loaded, run and closed left 1.04 GiB resident where importing
    TensorFlow took 0.54, and every later runner sat beside that. From malloc, the same close went back to
    0.59 GiB, and a call took the same CPU time (batch 1: 256 against 262 ms; batch 8: 1.89 against 1.92 s)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence what C++ code writes straight to fd 2 (absl/XNNPACK/converter banners) for a block.

    Python-level errors are raised, not printed, so nothing a user needs is lost; the CLI uses this to keep
    its output to the progress lines and the table.
    """
    if os.environ.get("TFSMITH_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def tensorflow() -> ModuleType:
    """The tensorflow module, imported with Keras 2 as tf.keras."""
    setup()
    import importlib

    if "tensorflow" not in sys.modules:
        with quiet_native_stderr():
            module = importlib.import_module("tensorflow")
            # Device discovery logs "failed call to cuInit" as an error on every GPU-less host; do it here,
            # silenced, instead of at the first op in the middle of the user's output.
            module.config.list_physical_devices()
    return importlib.import_module("tensorflow")


def keras() -> ModuleType:
    """tf_keras (Keras 2), the only Keras tfmot accepts."""
    setup()
    tensorflow()
    import tf_keras

    return tf_keras


def tfmot() -> ModuleType:
    """tensorflow_model_optimization, imported without importing Keras 3 on the way.

    tfmot's pruning registry tries `from keras.src.engine import base_layer` at import; Keras 3 has no such
    module, so the import fails and tfmot goes on without it, but only after importing the whole Keras 3
    package (scikit-learn and SciPy through its wrappers): 1.8 CPU seconds of every load of a Keras 2 model
    for nothing. Where Keras 3 is installed and not imported yet, it is hidden while tfmot imports: the same
    ImportError, at once, and the same registry (`tfmot_keras_hidden`)."""
    keras()
    import importlib

    with tfmot_keras_hidden(sys.modules):
        return importlib.import_module("tensorflow_model_optimization")


@contextlib.contextmanager
def tfmot_keras_hidden(modules: dict) -> Iterator[None]:
    """`import keras` fails inside the block where Keras 3 is installed but not imported (the entry None in
    `modules`, `sys.modules`, is Python's own "not importable" mark); afterwards keras imports as ever."""
    hide = "keras" not in modules and keras3_installed()
    if hide:
        modules["keras"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if hide and modules.get("keras", 0) is None:
            del modules["keras"]


def keras3_installed() -> bool:
    """The `keras` distribution installed here is Keras 3 (TensorFlow 2.16+ depends on it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("keras").split(".")[0] == "3"
    except PackageNotFoundError:
        return False


def configure_threads(threads: int) -> bool:
    """TensorFlow's threads as every timing sets them (`builder.measure.threads`); False once TF ran ops."""
    from builder.measure.threads import configure_tensorflow

    return configure_tensorflow(tensorflow(), threads)


def give_memory_back() -> None:
    """Return what released models held to the machine: Keras's global state cleared, Python's cycles
    collected, and glibc's free heap pages handed back (`malloc_trim`; TensorFlow's CPU tensors come from
    malloc, and freed weights otherwise stay in this process's resident set)."""
    import gc
    import sys

    for name in ("tf_keras", "keras"):
        module = sys.modules.get(name)
        backend = getattr(module, "backend", None) if module is not None else None
        clear = getattr(backend, "clear_session", None)
        if clear is not None:
            try:
                clear()
            except Exception:  # noqa: BLE001 - a Keras that cannot clear keeps its state; nothing else depends on it
                pass
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator keeps its own policy
        pass
