"""The SavedModel optimize writes holds each weight once: its `variables/` within 5% of the float32 weights'
bytes, whichever Keras wrote the model, and still after the XLA signature is added. (Keras 3's export archive
once saved every weight twice: the layer's keras.Variable and the tf.Variable inside it.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf

#: How far `variables/` may exceed the weights' bytes (the index and checkpoint headers are a few KB).
TOLERANCE = 0.05


def variables_bytes(saved_model: Path) -> int:
    return sum(f.stat().st_size for f in (saved_model / "variables").iterdir())


def weight_bytes(model) -> int:  # noqa: ANN001 - a Keras 2 or 3 model
    return sum(np.asarray(w).nbytes for w in model.get_weights())


def build(keras):  # noqa: ANN001, ANN201 - the keras module (3, or tf_keras), a model with ~3 MB of weights
    pixels = keras.Input((256,), name="pixels")
    hidden = keras.layers.Dense(1024, activation="relu")(pixels)
    hidden = keras.layers.BatchNormalization()(hidden)  # non-trainable weights too
    scores = keras.layers.Dense(512, name="scores")(hidden)
    return keras.Model(pixels, {"scores": scores})


def export_and_check(model, folder: Path, keras3: bool) -> None:  # noqa: ANN001
    from builder.optimize import tfenv
    from builder.optimize.model_io import add_xla_signature, export_keras, keras_specs

    tf = tfenv.tensorflow()
    inputs, outputs = keras_specs(model)
    saved = folder / "saved_model"
    export_keras(model, saved, inputs, outputs, keras3=keras3)
    weights = weight_bytes(model)
    assert variables_bytes(saved) <= weights * (1 + TOLERANCE), (variables_bytes(saved), weights)

    feed = np.random.default_rng(0).normal(size=(3, 256)).astype(np.float32)
    expected = np.asarray(model(feed, training=False)["scores"])
    served = tf.saved_model.load(str(saved)).signatures["serving_default"](pixels=tf.constant(feed))
    np.testing.assert_allclose(served["scores"].numpy(), expected, rtol=1e-5, atol=1e-5)

    add_xla_signature(saved)
    assert variables_bytes(saved) <= weights * (1 + TOLERANCE), (variables_bytes(saved), weights)
    revived = tf.saved_model.load(str(saved))
    assert set(revived.signatures) >= {"serving_default", "serving_xla"}
    np.testing.assert_allclose(revived.signatures["serving_default"](pixels=tf.constant(feed))["scores"].numpy(),
                               expected, rtol=1e-5, atol=1e-5)


def test_keras3_export_writes_each_weight_once(tmp_path: Path) -> None:
    from builder.optimize import tfenv

    tfenv.tensorflow()
    import keras

    export_and_check(build(keras), tmp_path, keras3=True)


def test_keras2_export_writes_each_weight_once(tmp_path: Path) -> None:
    from builder.optimize import tfenv

    export_and_check(build(tfenv.keras()), tmp_path, keras3=False)
