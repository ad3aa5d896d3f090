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
    """Set the environment TensorFlow reads at import; harmless when called twice."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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


def configure_threads(threads: int) -> bool:
    """TensorFlow's threads as every timing sets them (`builder.measure.threads`); False once TF ran ops."""
    from builder.measure.threads import configure_tensorflow

    return configure_tensorflow(tensorflow(), threads)
