"""TFLite conversion (float32, dynamic-range, float16, full int8 with int8 I/O) and quantization-aware training.

Conversion goes through the exported SavedModel's `serving_default` for every post-training mode, so Keras 2,
Keras 3 and serving-only SavedModels take one path. `EXPERIMENTAL_SPARSITY` is never set: it makes XNNPACK
refuse the model on this stack (FACTS §4). QAT uses tfmot; after pruning it uses the pruning-preserving scheme
so fine-tuning does not refill the zeros.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import IncompatibleError, TfsmithError
from builder.optimize import tfenv


def _configure(converter: Any, mode: str, x_calib: np.ndarray | None) -> None:
    tf = tfenv.tensorflow()
    if mode == "fp32":
        return
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif mode in ("int8", "qat_int8"):
        if x_calib is None or len(x_calib) == 0:
            raise TfsmithError("int8 conversion needs calibration rows and none were given")
        calib = x_calib.astype(np.float32)

        def representative() -> Iterator[list[np.ndarray]]:
            for row in calib:
                yield [row[None, ...]]

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    elif mode != "dynamic":
        raise ValueError(f"unknown conversion mode {mode!r}")


def _convert(converter: Any, mode: str) -> bytes:
    try:
        return bytes(converter.convert())
    except Exception as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise TfsmithError(f"TFLite {mode} conversion failed: {first}") from error


def convert_saved_model(saved_model_dir: Path, mode: str, x_calib: np.ndarray | None = None) -> bytes:
    """A .tflite flatbuffer from a SavedModel's serving_default: mode fp32, dynamic, float16 or int8."""
    tf = tfenv.tensorflow()
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir), signature_keys=["serving_default"])
    _configure(converter, mode, x_calib)
    return _convert(converter, mode)


def quantization_aware_train(model: Any, x_train: np.ndarray, y_train: np.ndarray, loss: Any, epochs: int,
                             batch_size: int, pruned: bool, verbose: int = 0) -> Any:
    """Fine-tune with fake-quant nodes; pruning-preserving (PQAT) when the model was pruned."""
    import tensorflow_model_optimization as tfmot

    from builder.optimize.prune import compile_for_finetune

    try:
        if pruned:
            annotated = tfmot.quantization.keras.quantize_annotate_model(model)
            qat = tfmot.quantization.keras.quantize_apply(
                annotated, tfmot.experimental.combine.Default8BitPrunePreserveQuantizeScheme())
        else:
            qat = tfmot.quantization.keras.quantize_model(model)
        compile_for_finetune(qat, loss, learning_rate=1e-4)
        qat.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, shuffle=True, verbose=verbose)
    except Exception as error:  # e.g. a layer tfmot has no quantize config for
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise IncompatibleError(f"quantization-aware training failed: {first}; set qat = false") from error
    return qat


def convert_qat(model: Any, x_calib: np.ndarray | None) -> bytes:
    """int8 (int8 I/O) .tflite from a QAT tf_keras model (its fake-quant ranges; calibration fills the input's)."""
    tf = tfenv.tensorflow()
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    _configure(converter, "qat_int8", x_calib)
    return _convert(converter, "qat_int8")
