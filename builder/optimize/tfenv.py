"""Import TensorFlow the one way that works with tfmot: Keras 2 (`tf_keras`) as `tf.keras`.

tfmot cannot prune or quantize Keras 3 objects (FACTS §4), and `TF_USE_LEGACY_KERAS` is read once, when
TensorFlow is first imported, so it has to be set before any import of tensorflow in the process.
"""

from __future__ import annotations

import os
from types import ModuleType


def setup() -> None:
    """Set the environment TensorFlow reads at import; harmless when called twice."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def tensorflow() -> ModuleType:
    """The tensorflow module, imported with Keras 2 as tf.keras."""
    setup()
    import tensorflow as tf

    return tf


def keras() -> ModuleType:
    """tf_keras (Keras 2), the only Keras tfmot accepts."""
    setup()
    tensorflow()
    import tf_keras

    return tf_keras
