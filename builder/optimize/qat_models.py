"""Quantization-aware-trained tf_keras models (tfmot's `quantize_model`): loading them without a module of the
user's own, and telling them apart.

Two sharp edges of tfmot 0.8 with tf_keras 2.21, both thin-wrapped here for the duration of a load:
- its layers (`QuantizeLayer`, `QuantizeWrapperV2`, ...) are custom objects: a `.h5`, `.keras` or Keras
  SavedModel names them, and only `quantize_scope()` lets tf_keras rebuild them;
- a `.keras` file does not load back even inside that scope ("Layer 'quantize_layer' expected 5 variables, but
  received 3"): rebuilding from the config builds these layers twice, so each carries stale copies of its range
  variables ahead of the live ones, and a wrapper also lists the inner layer's kernel and bias ahead of its
  own. The file holds the live variables last, in the layer's order, so they are matched from the end, shape by
  shape (the answers then equal the same model loaded from `.h5`, bit for bit, on the QAT CNN tried here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

#: tfmot's quantization-aware-training classes: a model holding them was trained for int8 already.
QAT_LAYERS = frozenset({"QuantizeLayer", "QuantizeWrapper", "QuantizeWrapperV2", "QuantizeAnnotate"})
QAT_WHY = ("a quantization-aware-trained model (tfmot's quantize wrappers): its int8 conversion keeps the ranges "
           "it learned, and pruning or training it again would lose them")


def is_quantization_aware(model: Any) -> bool:
    """Whether a tf_keras model holds tfmot's QAT layers (fake-quant ranges learned in training)."""
    return any(type(layer).__name__ in QAT_LAYERS for layer in getattr(model, "layers", ()))


def _load_matched_from_the_end(layer: Any, store: Any) -> None:
    """`load_own_variables` for tfmot's layers: the saved variables assigned to the layer's last ones, each of
    the same shape (see the module docstring); a shape that differs is refused as tf_keras refuses a count."""
    layer._update_trackables()
    variables = layer._trainable_weights + layer._non_trainable_weights
    saved = [store[str(i)] for i in range(len(store.keys()))]
    count = min(len(saved), len(variables))
    pairs = list(zip(variables[len(variables) - count:], saved[len(saved) - count:]))
    if count == 0 and (saved or variables) or any(tuple(v.shape) != tuple(s.shape) for v, s in pairs):
        raise ValueError(f"Layer '{layer.name}' expected {len(variables)} variables, but received {len(saved)} "
                         f"variables during loading, and their shapes do not line up. Expected: "
                         f"{[v.name for v in variables]}")
    for variable, value in pairs:
        variable.assign(value)


@contextlib.contextmanager
def qat_loading() -> Iterator[None]:
    """tfmot's custom-object scope, and its layers' variables matched from the end while a model loads; nothing
    where tfmot is not installed (models without its layers load as they always do)."""
    try:
        from builder.optimize import tfenv

        tfmot = tfenv.tfmot()
        from tensorflow_model_optimization.python.core.quantization.keras import quantize_layer, quantize_wrapper
    except Exception:  # noqa: BLE001 - tfmot absent or broken
        yield
        return
    classes = (quantize_layer.QuantizeLayer, quantize_wrapper.QuantizeWrapper)
    before = [cls.__dict__.get("load_own_variables") for cls in classes]
    for cls in classes:
        cls.load_own_variables = _load_matched_from_the_end  # type: ignore[attr-defined]
    try:
        with tfmot.quantization.keras.quantize_scope():
            yield
    finally:
        for cls, method in zip(classes, before):
            if method is None:
                del cls.load_own_variables
            else:
                cls.load_own_variables = method  # type: ignore[attr-defined]
