"""`tfsmith example`: a small trained model and its data, so a newcomer can run the pipeline in minutes.

Trains a small CNN on scikit-learn's bundled 8x8 digits (shipped inside the wheel: no network) with tf_keras,
and writes MODEL (`digits_cnn.keras`, Keras 2 format, so pruning and QAT apply) and DATA (`digits.npz`).
The calibration split is carved out of the training rows, disjoint from the validation rows accuracy is
reported on.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.optimize import tfenv

MODEL_NAME = "digits_cnn.keras"
DATA_NAME = "digits.npz"


@dataclass(frozen=True)
class ExampleFiles:
    model: Path
    data: Path
    val_accuracy: float


def digits_arrays(seed: int = 0, calib: int = 200, val_fraction: float = 0.2) -> dict[str, np.ndarray]:
    """The digits split into train / val / calib, images scaled to [0, 1] as (N, 8, 8, 1) float32."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_val = int(len(x) * val_fraction)
    x_val, y_val = x[:n_val], y[:n_val]
    x_calib = x[n_val : n_val + calib]
    x_train, y_train = x[n_val + calib :], y[n_val + calib :]
    return {
        "x_train": x_train,
        "y_train": y_train,
        "x_val": x_val,
        "y_val": y_val,
        "x_calib": x_calib,
    }


def build_cnn(num_classes: int = 10, width: int = 32, dense: int = 128):  # -> tf_keras.Model
    """A small Functional CNN for 8x8x1 inputs (about 150k parameters at the defaults)."""
    keras = tfenv.keras()
    inputs = keras.Input(shape=(8, 8, 1), name="image")
    h = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.Conv2D(width * 2, 3, padding="same", activation="relu")(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(dense, activation="relu")(h)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="probs")(h)
    model = keras.Model(inputs, outputs, name="digits_cnn")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def train_example(epochs: int = 15, seed: int = 0, width: int = 32, dense: int = 128):
    """Train the example CNN; returns (model, arrays, val_accuracy)."""
    tf = tfenv.tensorflow()
    tf.keras.utils.set_random_seed(seed)
    arrays = digits_arrays(seed=seed)
    model = build_cnn(width=width, dense=dense)
    model.fit(arrays["x_train"], arrays["y_train"], epochs=epochs, batch_size=32, verbose=0)
    _, accuracy = model.evaluate(arrays["x_val"], arrays["y_val"], verbose=0)
    return model, arrays, float(accuracy)


def write_example(out: Path, epochs: int = 15, seed: int = 0) -> ExampleFiles:
    """Train and write MODEL + DATA into `out` atomically (both appear, or neither)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        from builder.errors import InputError

        raise InputError(f"--out {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    model, arrays, accuracy = train_example(epochs=epochs, seed=seed)
    staging = Path(tempfile.mkdtemp(prefix=".tfsmith-example-", dir=out))
    try:
        model.save(staging / MODEL_NAME)
        np.savez_compressed(staging / DATA_NAME, **arrays)
        for name in (MODEL_NAME, DATA_NAME):
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExampleFiles(model=out / MODEL_NAME, data=out / DATA_NAME, val_accuracy=accuracy)
