"""A zoo of ordinary user models that no part of tfsmith was written around.

Each builder trains a tiny model briefly (so its answers mean something and a bad artifact shows up as a
quality drop), saves it the way a user would, and writes its DATA `.npz` next to it. Everything is built from
scikit-learn's bundled datasets or synthetic data (nothing downloads), seeded, and small enough to take
seconds on two shared cores.

DATA files use the named form (`x_train/<input>`, `y_train/<output>`, `x_val/…`, `y_val/…`, `x_calib/<input>`)
except `cnn_classifier`, which uses the single-array form (`x_train`, `y_train`, …), so both forms are covered.
Labels are class ids (int64) for classification outputs and targets (float32) for regression outputs; token ids
stay int32 in every split, calibration included; text stays text: fixed-width UTF-8 bytes (`S<n>`), the only
string form `np.load(allow_pickle=False)` reads (`np.char.decode(a, "utf-8")` gives str back).

Two groups: `NAMES`, the models LiteRT serves (a plain .tflite converts), and `TF_NAMES`, those only TensorFlow
serves or that need something of the user's to load: a Keras 3 GRU over variable-length sequences (the TFLite
builtins cannot lower its tensor lists: it needs Select TF ops), a `TextVectorization` string classifier, a Keras 3
model with a custom registered layer (its module must be imported: `imports`), and a `tf.Module` whose only
signature is `predict`. `ALL_NAMES` is both.

Use:
    from tests import zoo
    m = zoo.build("two_heads", tmp_path)          # or zoo.two_heads(tmp_path), or zoo.build_all(tmp_path)
    outs = zoo.predict(m, zoo.load_data(m)["x_val"])   # the ORIGINAL model's answers, per output name
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from builder.optimize import tfenv

Task = Literal["classification", "binary", "regression"]
Kind = Literal["tf_keras", "keras3", "saved_model", "tflite"]
Shape = tuple[int | None, ...]

SPLITS = ("x_train", "y_train", "x_val", "y_val", "x_calib")


@dataclass(frozen=True)
class ZooModel:
    """One zoo model on disk and the contract a client of it relies on.

    `inputs` maps input name -> (dtype, shape) and `outputs` maps output name -> (dtype, shape, task); shapes
    include the batch dimension as None. `kind` says how the file loads (`predict` does it), `data_form` which
    `.npz` layout DATA uses, `labels` which outputs have labels in DATA, and `val_metric` what the trained
    model scored on the validation rows (accuracy for classification, MAE for regression), so a test can tell
    how far an artifact may fall.
    """

    name: str
    model_path: Path
    data_path: Path
    inputs: dict[str, tuple[str, Shape]]
    outputs: dict[str, tuple[str, Shape, Task]]
    kind: Kind
    data_form: Literal["single", "named"] = "named"
    labels: tuple[str, ...] = ()
    val_metric: dict[str, float] = field(default_factory=dict)
    signature: str = "serving_default"
    #: modules that must be imported (from `model_path.parent`) before the model loads: its custom layers
    imports: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------- helpers


def _split(n: int, seed: int, val_fraction: float = 0.2, calib: int = 64) -> tuple[np.ndarray, ...]:
    """Row indices for train / val / calib; calibration rows come out of training, disjoint from val."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(n * val_fraction)
    n_calib = min(calib, (n - n_val) // 4)
    return order[n_val + n_calib :], order[:n_val], order[n_val : n_val + n_calib]


def _named_arrays(
    x: dict[str, np.ndarray], y: dict[str, np.ndarray], seed: int
) -> dict[str, np.ndarray]:
    """The named `.npz` form: every input under x_*/<name>, every labelled output under y_*/<name>."""
    n = len(next(iter(x.values())))
    train, val, calib = _split(n, seed)
    arrays: dict[str, np.ndarray] = {}
    for name, values in x.items():
        arrays[f"x_train/{name}"] = values[train]
        arrays[f"x_val/{name}"] = values[val]
        arrays[f"x_calib/{name}"] = values[calib]
    for name, values in y.items():
        arrays[f"y_train/{name}"] = values[train]
        arrays[f"y_val/{name}"] = values[val]
    return arrays


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    np.savez_compressed(path, **arrays)
    return path


def _seed(seed: int) -> None:
    tf = tfenv.tensorflow()
    tf.keras.utils.set_random_seed(seed)  # Python, NumPy and TF seeds in one call
    np.random.seed(seed)


def _accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(probs, axis=-1) == labels))


def _mae(pred: np.ndarray, target: np.ndarray) -> float:
    return float(np.mean(np.abs(pred.reshape(-1) - target.reshape(-1))))


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's 8x8 digits as (N, 8, 8) float32 in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.images / 16.0).astype(np.float32), digits.target.astype(np.int64)


def _standardize(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Scale features with the training rows' statistics, the way a user prepares tabular data."""
    mean, std = x[rows].mean(axis=0), x[rows].std(axis=0) + 1e-6
    return ((x - mean) / std).astype(np.float32)


# ---------------------------------------------------------------------------------------------- models


def cnn_classifier(folder: Path, seed: int = 0, epochs: int = 3) -> ZooModel:
    """tf_keras Functional CNN on 8x8 digits: input `image` (N, 8, 8, 1) -> softmax `probs` (10 classes).

    The one zoo model whose DATA uses the single-array form (x_train, y_train, …).
    """
    keras = tfenv.keras()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    x, y = _digits()
    x = x[..., None]
    train, val, calib = _split(len(x), seed)
    inputs = keras.Input(shape=(8, 8, 1), name="image")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(32, activation="relu")(h)
    outputs = keras.layers.Dense(10, activation="softmax", name="probs")(h)
    model = keras.Model(inputs, outputs, name="cnn_classifier")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    model.fit(x[train], y[train], epochs=epochs, batch_size=32, verbose=0)
    accuracy = _accuracy(model.predict(x[val], verbose=0), y[val])
    model_path = folder / "cnn_classifier.keras"
    model.save(model_path)
    data_path = _save_npz(
        folder / "cnn_classifier.npz",
        {"x_train": x[train], "y_train": y[train], "x_val": x[val], "y_val": y[val], "x_calib": x[calib]},
    )
    return ZooModel(
        name="cnn_classifier",
        model_path=model_path,
        data_path=data_path,
        inputs={"image": ("float32", (None, 8, 8, 1))},
        outputs={"probs": ("float32", (None, 10), "classification")},
        kind="tf_keras",
        data_form="single",
        labels=("probs",),
        val_metric={"probs": accuracy},
    )


def two_inputs(folder: Path, seed: int = 0, epochs: int = 3) -> ZooModel:
    """tf_keras Functional with inputs `pixels` (64) and `meta` (4 quadrant means) -> concat -> softmax `label`."""
    keras = tfenv.keras()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images, y = _digits()
    pixels = images.reshape(len(images), 64)
    meta = np.stack(
        [images[:, :4, :4].mean((1, 2)), images[:, :4, 4:].mean((1, 2)),
         images[:, 4:, :4].mean((1, 2)), images[:, 4:, 4:].mean((1, 2))],
        axis=1,
    ).astype(np.float32)
    in_pixels = keras.Input(shape=(64,), name="pixels")
    in_meta = keras.Input(shape=(4,), name="meta")
    h = keras.layers.Concatenate()([in_pixels, in_meta])
    h = keras.layers.Dense(32, activation="relu")(h)
    out = keras.layers.Dense(10, activation="softmax", name="label")(h)
    model = keras.Model({"pixels": in_pixels, "meta": in_meta}, {"label": out}, name="two_inputs")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss={"label": "sparse_categorical_crossentropy"})
    arrays = _named_arrays({"pixels": pixels, "meta": meta}, {"label": y}, seed)
    model.fit(
        {"pixels": arrays["x_train/pixels"], "meta": arrays["x_train/meta"]},
        {"label": arrays["y_train/label"]}, epochs=epochs, batch_size=32, verbose=0,
    )
    pred = model.predict({"pixels": arrays["x_val/pixels"], "meta": arrays["x_val/meta"]}, verbose=0)
    accuracy = _accuracy(pred["label"], arrays["y_val/label"])
    model_path = folder / "two_inputs.keras"
    model.save(model_path)
    return ZooModel(
        name="two_inputs",
        model_path=model_path,
        data_path=_save_npz(folder / "two_inputs.npz", arrays),
        inputs={"pixels": ("float32", (None, 64)), "meta": ("float32", (None, 4))},
        outputs={"label": ("float32", (None, 10), "classification")},
        kind="tf_keras",
        labels=("label",),
        val_metric={"label": accuracy},
    )


def two_heads(folder: Path, seed: int = 0, epochs: int = 60) -> ZooModel:
    """tf_keras Functional on iris: input `features` (sepal length, sepal width, petal width) -> two heads:
    `species` (softmax, 3 classes) and `size` (regression: petal length in cm, 1.0–6.9).

    Iris has 150 rows, so "briefly" means more epochs over far fewer rows (still about a second).
    """
    keras = tfenv.keras()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    from sklearn.datasets import load_iris

    iris = load_iris()
    data = iris.data.astype(np.float32)
    features = data[:, [0, 1, 3]]
    size = data[:, 2:3].astype(np.float32)
    species = iris.target.astype(np.int64)
    arrays = _named_arrays({"features": features}, {"species": species, "size": size}, seed)
    inputs = keras.Input(shape=(3,), name="features")
    h = keras.layers.Dense(16, activation="relu")(inputs)
    out_species = keras.layers.Dense(3, activation="softmax", name="species")(h)
    out_size = keras.layers.Dense(1, name="size")(h)
    model = keras.Model(inputs, {"species": out_species, "size": out_size}, name="two_heads")
    model.compile(
        optimizer=keras.optimizers.Adam(0.02),
        loss={"species": "sparse_categorical_crossentropy", "size": "mse"},
    )
    model.fit(
        arrays["x_train/features"],
        {"species": arrays["y_train/species"], "size": arrays["y_train/size"]},
        epochs=epochs, batch_size=16, verbose=0,
    )
    pred = model.predict(arrays["x_val/features"], verbose=0)
    model_path = folder / "two_heads.keras"
    model.save(model_path)
    return ZooModel(
        name="two_heads",
        model_path=model_path,
        data_path=_save_npz(folder / "two_heads.npz", arrays),
        inputs={"features": ("float32", (None, 3))},
        outputs={
            "species": ("float32", (None, 3), "classification"),
            "size": ("float32", (None, 1), "regression"),
        },
        kind="tf_keras",
        labels=("species", "size"),
        val_metric={
            "species": _accuracy(pred["species"], arrays["y_val/species"]),
            "size": _mae(pred["size"], arrays["y_val/size"]),
        },
    )


def regression(folder: Path, seed: int = 0, epochs: int = 40) -> ZooModel:
    """tf_keras on sklearn's diabetes: input `features` (10) -> linear `target` (1 unit; targets 25–346).

    The output bias starts at the training mean, as a user would, so a few epochs reach a sensible MAE (~45,
    against ~65 for always answering the mean): an int8 artifact that is off by tens is then visible.
    """
    keras = tfenv.keras()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    from sklearn.datasets import load_diabetes

    diabetes = load_diabetes()
    x = diabetes.data.astype(np.float32)
    y = diabetes.target.astype(np.float32)[:, None]
    arrays = _named_arrays({"features": x}, {"target": y}, seed)
    mean = float(arrays["y_train/target"].mean())
    inputs = keras.Input(shape=(10,), name="features")
    h = keras.layers.Rescaling(20.0)(inputs)  # sklearn ships these features scaled to about ±0.1
    h = keras.layers.Dense(16, activation="relu")(h)
    out = keras.layers.Dense(1, name="target", bias_initializer=keras.initializers.Constant(mean))(h)
    model = keras.Model(inputs, out, name="regression")
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    model.fit(arrays["x_train/features"], arrays["y_train/target"], epochs=epochs, batch_size=32, verbose=0)
    mae = _mae(model.predict(arrays["x_val/features"], verbose=0), arrays["y_val/target"])
    model_path = folder / "regression.keras"
    model.save(model_path)
    return ZooModel(
        name="regression",
        model_path=model_path,
        data_path=_save_npz(folder / "regression.npz", arrays),
        inputs={"features": ("float32", (None, 10))},
        outputs={"target": ("float32", (None, 1), "regression")},
        kind="tf_keras",
        labels=("target",),
        val_metric={"target": mae},
    )


VOCAB = 200
SEQ_LEN = 16


def _token_data(seed: int, n: int = 1200) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic token ids: neutral ids 50..199 plus a few marker ids; ids 10..29 mean class 0, 30..49 class 1.

    Ids 0..9 never occur, so a runtime that feeds random or negative ids is caught by the model's answers,
    not hidden by them.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n).astype(np.int64)
    tokens = rng.integers(50, VOCAB, size=(n, SEQ_LEN))
    for row, label in enumerate(labels):
        k = int(rng.integers(2, 5))
        positions = rng.choice(SEQ_LEN, size=k, replace=False)
        low = 10 if label == 0 else 30
        tokens[row, positions] = rng.integers(low, low + 20, size=k)
    return tokens.astype(np.int32), labels


def _token_classifier(name: str, folder: Path, seed: int, epochs: int, length: int | None, body: Callable[[Any], Any],
                      rows: int = 1200) -> ZooModel:
    """A tf_keras classifier over int32 `tokens` (N, length) -> Embedding(200, 16) -> `body` -> softmax
    `sentiment` (2), trained briefly on `_token_data`; `length` None takes sequences of any length."""
    keras = tfenv.keras()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens, labels = _token_data(seed, n=rows)
    arrays = _named_arrays({"tokens": tokens}, {"sentiment": labels}, seed)
    inputs = keras.Input(shape=(length,), dtype="int32", name="tokens")
    h = body(keras.layers.Embedding(VOCAB, 16)(inputs))
    out = keras.layers.Dense(2, activation="softmax", name="sentiment")(h)
    model = keras.Model(inputs, out, name=name)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="sparse_categorical_crossentropy")
    model.fit(arrays["x_train/tokens"], arrays["y_train/sentiment"], epochs=epochs, batch_size=32, verbose=0)
    accuracy = _accuracy(model.predict(arrays["x_val/tokens"], verbose=0), arrays["y_val/sentiment"])
    return _saved(model, name, folder, arrays, inputs={"tokens": ("int32", (None, length))},
                  outputs={"sentiment": ("float32", (None, 2), "classification")}, labels=("sentiment",),
                  val_metric={"sentiment": accuracy})


def _saved(model: Any, name: str, folder: Path, arrays: dict[str, np.ndarray], **contract: Any) -> ZooModel:
    """A trained tf_keras model saved as `<name>.keras` beside its DATA `<name>.npz`, as a ZooModel."""
    model_path = folder / f"{name}.keras"
    model.save(model_path)
    return ZooModel(name=name, model_path=model_path, data_path=_save_npz(folder / f"{name}.npz", arrays),
                    kind="tf_keras", **contract)


def token_ids(folder: Path, seed: int = 0, epochs: int = 3) -> ZooModel:
    """tf_keras: int32 `tokens` (N, 16) -> Embedding(200, 16) -> average pooling -> softmax `sentiment` (2)."""
    keras = tfenv.keras()

    def body(h: Any) -> Any:
        return keras.layers.Dense(16, activation="relu")(keras.layers.GlobalAveragePooling1D()(h))

    return _token_classifier("token_ids", folder, seed, epochs, SEQ_LEN, body)


def keras3(folder: Path, seed: int = 0, epochs: int = 3) -> ZooModel:
    """A Keras 3 model (`import keras`, not tf_keras) saved as `.keras`: `pixels` (64) -> softmax `digit`.

    With TF_USE_LEGACY_KERAS=1, tf.keras is Keras 2; the `keras` package itself is still Keras 3, and its
    `.keras` files do not load in tf_keras (nor the other way round).
    """
    tfenv.tensorflow()
    import keras

    if not keras.__version__.startswith("3."):
        raise RuntimeError(f"the keras3 zoo model needs Keras 3, found keras {keras.__version__}")
    keras.utils.set_random_seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images, y = _digits()
    pixels = images.reshape(len(images), 64)
    arrays = _named_arrays({"pixels": pixels}, {"digit": y}, seed)
    inputs = keras.Input(shape=(64,), name="pixels")
    h = keras.layers.Dense(32, activation="relu")(inputs)
    out = keras.layers.Dense(10, activation="softmax", name="digit")(h)
    model = keras.Model(inputs, {"digit": out}, name="keras3")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss={"digit": "sparse_categorical_crossentropy"})
    model.fit(arrays["x_train/pixels"], {"digit": arrays["y_train/digit"]}, epochs=epochs, batch_size=32,
              verbose=0)
    pred = model.predict(arrays["x_val/pixels"], verbose=0)
    model_path = folder / "keras3.keras"
    model.save(model_path)
    return ZooModel(
        name="keras3",
        model_path=model_path,
        data_path=_save_npz(folder / "keras3.npz", arrays),
        inputs={"pixels": ("float32", (None, 64))},
        outputs={"digit": ("float32", (None, 10), "classification")},
        kind="keras3",
        labels=("digit",),
        val_metric={"digit": _accuracy(pred["digit"], arrays["y_val/digit"])},
    )


def tf_module(folder: Path, seed: int = 0, steps: int = 200) -> ZooModel:
    """A plain `tf.Module` SavedModel (no Keras): wine `features` (13) -> `probabilities` (3) and `logits` (3).

    A softmax regression trained with a GradientTape loop, saved with an explicit serving_default signature,
    the way code written against TensorFlow Core (not Keras) ships a model. Only `probabilities` has labels.
    """
    tf = tfenv.tensorflow()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    from sklearn.datasets import load_wine

    wine = load_wine()
    x = wine.data.astype(np.float32)
    y = wine.target.astype(np.int64)
    train, _, _ = _split(len(x), seed)
    x = _standardize(x, train)
    arrays = _named_arrays({"features": x}, {"probabilities": y}, seed)

    class WineClassifier(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="wine_classifier")
            self.w = tf.Variable(tf.random.normal([13, 3], stddev=0.1, seed=seed), name="w")
            self.b = tf.Variable(tf.zeros([3]), name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, 13], tf.float32, name="features")])
        def serve(self, features: Any) -> dict[str, Any]:
            logits = tf.matmul(features, self.w) + self.b
            return {"probabilities": tf.nn.softmax(logits), "logits": logits}

    module = WineClassifier()
    optimizer = tf.optimizers.SGD(0.1)
    xt, yt = tf.constant(arrays["x_train/features"]), tf.constant(arrays["y_train/probabilities"])
    for _ in range(steps):
        with tf.GradientTape() as tape:
            logits = tf.matmul(xt, module.w) + module.b
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yt, logits=logits))
        grads = tape.gradient(loss, [module.w, module.b])
        optimizer.apply_gradients(zip(grads, [module.w, module.b]))
    probs = module.serve(tf.constant(arrays["x_val/features"]))["probabilities"].numpy()
    model_path = folder / "tf_module"
    tf.saved_model.save(module, str(model_path), signatures={"serving_default": module.serve})
    return ZooModel(
        name="tf_module",
        model_path=model_path,
        data_path=_save_npz(folder / "tf_module.npz", arrays),
        inputs={"features": ("float32", (None, 13))},
        outputs={
            "probabilities": ("float32", (None, 3), "classification"),
            "logits": ("float32", (None, 3), "classification"),
        },
        kind="saved_model",
        labels=("probabilities",),
        val_metric={"probabilities": _accuracy(probs, arrays["y_val/probabilities"])},
    )


def ready_tflite(folder: Path, seed: int = 0, epochs: int = 3) -> ZooModel:
    """An existing fp32 `.tflite` a user converted themselves: the digits CNN through the TFLite converter.

    Converted from the Keras model's exported SavedModel, so the file's serving_default signature keeps the
    names `image` and `probs`. DATA is in the named form (unlike `cnn_classifier`).
    """
    tf = tfenv.tensorflow()
    folder = Path(folder)
    source = cnn_classifier(folder / "ready_tflite_source", seed=seed, epochs=epochs)
    keras = tfenv.keras()
    model = keras.models.load_model(source.model_path)
    saved = folder / "ready_tflite_source" / "saved_model"
    # A signature that returns a dict keeps the output's name in the .tflite (model.export would call it
    # output_0), which is what a user who cares about their API does.
    serve = tf.function(
        lambda image: {"probs": model(image, training=False)},
        input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="image")],
    )
    with tfenv.quiet_native_stderr():
        tf.saved_model.save(model, str(saved), signatures={"serving_default": serve})
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
        flatbuffer = converter.convert()
    model_path = folder / "ready_tflite.tflite"
    model_path.write_bytes(flatbuffer)
    single = np.load(source.data_path)
    arrays = {
        "x_train/image": single["x_train"], "y_train/probs": single["y_train"],
        "x_val/image": single["x_val"], "y_val/probs": single["y_val"], "x_calib/image": single["x_calib"],
    }
    model_zoo = ZooModel(
        name="ready_tflite",
        model_path=model_path,
        data_path=_save_npz(folder / "ready_tflite.npz", arrays),
        inputs={"image": ("float32", (None, 8, 8, 1))},
        outputs={"probs": ("float32", (None, 10), "classification")},
        kind="tflite",
        labels=("probs",),
        val_metric={},
    )
    probs = predict(model_zoo, {"image": arrays["x_val/image"]})["probs"]
    return ZooModel(**{**model_zoo.__dict__, "val_metric": {"probs": _accuracy(probs, arrays["y_val/probs"])}})


# ---------------------------------------------------------------------------------------------- TensorFlow-only


def gru_sequence(folder: Path, seed: int = 0, epochs: int = 4) -> ZooModel:
    """Keras 3 GRU over variable-length sequences: `steps` (N, None, 6) -> softmax `trend` (2 classes).

    A row is a noisy walk; the class says whether its first feature drifts up or down. DATA has 12 steps per row
    (arrays are rectangular), the signature takes any length. The TFLite builtins cannot lower a Keras 3 GRU's
    tensor lists ("requires element_shape to be static"): it converts only with Select TF ops.
    """
    tfenv.tensorflow()
    import keras

    keras.utils.set_random_seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n, steps, features = 900, 12, 6
    labels = rng.integers(0, 2, size=n).astype(np.int64)
    drift = np.where(labels == 1, 0.25, -0.25)[:, None]
    x = rng.normal(0.0, 0.5, size=(n, steps, features)).astype(np.float32)
    x[:, :, 0] += np.cumsum(np.broadcast_to(drift, (n, steps)), axis=1) / 2
    arrays = _named_arrays({"steps": x}, {"trend": labels}, seed)
    inputs = keras.Input(shape=(None, features), name="steps")
    h = keras.layers.GRU(16)(inputs)
    out = keras.layers.Dense(2, activation="softmax", name="trend")(h)
    model = keras.Model(inputs, {"trend": out}, name="gru_sequence")
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss={"trend": "sparse_categorical_crossentropy"})
    model.fit(arrays["x_train/steps"], {"trend": arrays["y_train/trend"]}, epochs=epochs, batch_size=32, verbose=0)
    pred = model.predict(arrays["x_val/steps"], verbose=0)
    model_path = folder / "gru_sequence.keras"
    model.save(model_path)
    return ZooModel(
        name="gru_sequence",
        model_path=model_path,
        data_path=_save_npz(folder / "gru_sequence.npz", arrays),
        inputs={"steps": ("float32", (None, None, features))},
        outputs={"trend": ("float32", (None, 2), "classification")},
        kind="keras3",
        labels=("trend",),
        val_metric={"trend": _accuracy(pred["trend"], arrays["y_val/trend"])},
    )


POSITIVE = ("great", "good", "fun", "lovely", "superb", "enjoyable")
NEGATIVE = ("bad", "awful", "dull", "boring", "poor", "terrible")
NEUTRAL = ("the", "film", "plot", "actors", "music", "story", "was", "and", "a", "scene", "ending", "cast")


def _reviews(seed: int, n: int = 800) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic one-line reviews (UTF-8 bytes, some with capitals and punctuation, which TextVectorization
    strips) and their sentiment: 1 when positive words outnumber negative ones."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n).astype(np.int64)
    texts = []
    for label in labels:
        words = list(rng.choice(NEUTRAL, size=int(rng.integers(4, 9))))
        strong, weak = (POSITIVE, NEGATIVE) if label == 1 else (NEGATIVE, POSITIVE)
        words += list(rng.choice(strong, size=int(rng.integers(2, 4))))
        words += list(rng.choice(weak, size=int(rng.integers(0, 2))))
        rng.shuffle(words)
        words[0] = words[0].capitalize()
        texts.append((" ".join(words) + rng.choice([".", "!", ""])).encode("utf-8"))
    return np.array(texts, dtype=np.bytes_)[:, None], labels


def text_classifier(folder: Path, seed: int = 0, epochs: int = 4) -> ZooModel:
    """Keras 3 with a `TextVectorization` first layer: string `text` (N, 1) -> softmax `sentiment` (2 classes).

    The input is text itself (TF Serving takes it as JSON strings); TFLite's builtins have no kernels for its
    string ops (StringLower, StringSplitV2, ...), so TensorFlow serves it.
    """
    tf = tfenv.tensorflow()
    import keras

    keras.utils.set_random_seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    texts, labels = _reviews(seed)
    arrays = _named_arrays({"text": texts}, {"sentiment": labels}, seed)
    vectorize = keras.layers.TextVectorization(max_tokens=64, output_sequence_length=12)
    vectorize.adapt(tf.constant(arrays["x_train/text"][:, 0]))
    inputs = keras.Input(shape=(1,), dtype="string", name="text")
    h = keras.layers.Embedding(64, 8)(vectorize(inputs))
    h = keras.layers.GlobalAveragePooling1D()(h)
    out = keras.layers.Dense(2, activation="softmax", name="sentiment")(h)
    model = keras.Model(inputs, out, name="text_classifier")
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
    # Keras 3's fit refuses numpy string arrays ("Invalid dtype: bytes..."); a tf.Tensor of strings is fine
    model.fit(tf.constant(arrays["x_train/text"]), tf.constant(arrays["y_train/sentiment"]), epochs=epochs,
              batch_size=32, verbose=0)
    pred = np.asarray(model(tf.constant(arrays["x_val/text"]), training=False))
    model_path = folder / "text_classifier.keras"
    model.save(model_path)
    return ZooModel(
        name="text_classifier",
        model_path=model_path,
        data_path=_save_npz(folder / "text_classifier.npz", arrays),
        inputs={"text": ("string", (None, 1))},
        outputs={"sentiment": ("float32", (None, 2), "classification")},
        kind="keras3",
        labels=("sentiment",),
        val_metric={"sentiment": _accuracy(pred, arrays["y_val/sentiment"])},
    )


CUSTOM_MODULE = "zoo_custom_layers"
CUSTOM_SOURCE = '''"""A user's own layer, registered so a saved model can name it."""
import keras


@keras.saving.register_keras_serializable(package="zoo")
class Gate(keras.layers.Layer):
    """x * sigmoid(w): a learned per-feature gate."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="w")

    def call(self, x):
        return x * keras.ops.sigmoid(self.w)
'''


def forget_module(name: str) -> None:
    """Unload the user's module and unregister its classes, as in a fresh process that never imported it."""
    import sys

    import keras

    sys.modules.pop(name, None)
    registered = keras.saving.get_custom_objects()
    for key in [k for k, v in registered.items() if getattr(v, "__module__", "") == name]:
        registered.pop(key)


def import_model_modules(model: ZooModel) -> None:
    """Import the modules a model's custom classes live in, from the model's folder."""
    import importlib
    import sys

    folder = str(model.model_path.parent)
    if model.imports and folder not in sys.path:
        sys.path.insert(0, folder)
    for name in model.imports:
        importlib.import_module(name)


def custom_layer(folder: Path, seed: int = 0, epochs: int = 3) -> ZooModel:
    """Keras 3 with a custom registered layer (`zoo>Gate`, defined in `zoo_custom_layers.py` beside the model):
    `pixels` (64) -> Gate -> Dense -> softmax `digit`. The model loads only once that module is imported; the
    module is unloaded and unregistered after the build, so a loader that forgets it fails as a user's would."""
    tfenv.tensorflow()
    import importlib
    import sys

    import keras

    keras.utils.set_random_seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CUSTOM_MODULE}.py").write_text(CUSTOM_SOURCE, encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        forget_module(CUSTOM_MODULE)
        layers = importlib.import_module(CUSTOM_MODULE)
        images, y = _digits()
        pixels = images.reshape(len(images), 64)
        arrays = _named_arrays({"pixels": pixels}, {"digit": y}, seed)
        inputs = keras.Input(shape=(64,), name="pixels")
        h = layers.Gate()(inputs)
        h = keras.layers.Dense(32, activation="relu")(h)
        out = keras.layers.Dense(10, activation="softmax", name="digit")(h)
        model = keras.Model(inputs, {"digit": out}, name="custom_layer")
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss={"digit": "sparse_categorical_crossentropy"})
        model.fit(arrays["x_train/pixels"], {"digit": arrays["y_train/digit"]}, epochs=epochs, batch_size=32,
                  verbose=0)
        pred = model.predict(arrays["x_val/pixels"], verbose=0)
        model_path = folder / "custom_layer.keras"
        model.save(model_path)
    finally:
        sys.path.remove(str(folder))
        forget_module(CUSTOM_MODULE)
    return ZooModel(
        name="custom_layer",
        model_path=model_path,
        data_path=_save_npz(folder / "custom_layer.npz", arrays),
        inputs={"pixels": ("float32", (None, 64))},
        outputs={"digit": ("float32", (None, 10), "classification")},
        kind="keras3",
        labels=("digit",),
        val_metric={"digit": _accuracy(pred["digit"], arrays["y_val/digit"])},
        imports=(CUSTOM_MODULE,),
    )


def predict_module(folder: Path, seed: int = 0, steps: int = 150) -> ZooModel:
    """A `tf.Module` SavedModel whose ONLY signature is `predict` (no serving_default): breast-cancer
    `measurements` (30) -> `malignant` (2-class softmax). Logistic regression trained with a GradientTape loop."""
    tf = tfenv.tensorflow()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    x = data.data.astype(np.float32)
    y = data.target.astype(np.int64)
    train, _, _ = _split(len(x), seed)
    x = _standardize(x, train)
    arrays = _named_arrays({"measurements": x}, {"malignant": y}, seed)

    class Screening(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="screening")
            self.w = tf.Variable(tf.zeros([30, 2]), name="w")
            self.b = tf.Variable(tf.zeros([2]), name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, 30], tf.float32, name="measurements")])
        def predict(self, measurements: Any) -> dict[str, Any]:
            return {"malignant": tf.nn.softmax(tf.matmul(measurements, self.w) + self.b)}

    module = Screening()
    optimizer = tf.optimizers.SGD(0.2)
    xt, yt = tf.constant(arrays["x_train/measurements"]), tf.constant(arrays["y_train/malignant"])
    for _ in range(steps):
        with tf.GradientTape() as tape:
            logits = tf.matmul(xt, module.w) + module.b
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yt, logits=logits))
        grads = tape.gradient(loss, [module.w, module.b])
        optimizer.apply_gradients(zip(grads, [module.w, module.b]))
    probs = module.predict(tf.constant(arrays["x_val/measurements"]))["malignant"].numpy()
    model_path = folder / "predict_module"
    tf.saved_model.save(module, str(model_path), signatures={"predict": module.predict})
    return ZooModel(
        name="predict_module",
        model_path=model_path,
        data_path=_save_npz(folder / "predict_module.npz", arrays),
        inputs={"measurements": ("float32", (None, 30))},
        outputs={"malignant": ("float32", (None, 2), "classification")},
        kind="saved_model",
        labels=("malignant",),
        val_metric={"malignant": _accuracy(probs, arrays["y_val/malignant"])},
        signature="predict",
    )


FRAME_FEATURES = 4
FRAMES = 24


def conv1d_variable(folder: Path, seed: int = 0, epochs: int = 6) -> ZooModel:
    """tf_keras Conv1D over variable-length frames: `frames` (N, None, 4) -> Conv1D(kernel 5) -> max pooling ->
    sigmoid `alarm` (N, 1), a binary classifier with 0/1 labels.

    A row is noise; an alarm row has a short bump in its first feature somewhere. DATA has 24 frames per row, the
    signature takes any length of at least 5 (the kernel): a .tflite of it stores length 1 as a placeholder, at
    which its convolution cannot prepare.
    """
    keras = tfenv.keras()
    _seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n = 900
    labels = rng.integers(0, 2, size=n).astype(np.int64)
    x = rng.normal(0.0, 0.3, size=(n, FRAMES, FRAME_FEATURES)).astype(np.float32)
    for row in np.flatnonzero(labels):
        start = int(rng.integers(0, FRAMES - 5))
        x[row, start : start + 5, 0] += np.array([0.5, 1.0, 1.5, 1.0, 0.5], dtype=np.float32)
    arrays = _named_arrays({"frames": x}, {"alarm": labels}, seed)
    inputs = keras.Input(shape=(None, FRAME_FEATURES), name="frames")
    h = keras.layers.Conv1D(8, 5, activation="relu")(inputs)
    h = keras.layers.GlobalMaxPooling1D()(h)
    out = keras.layers.Dense(1, activation="sigmoid", name="alarm")(h)
    model = keras.Model(inputs, out, name="conv1d_variable")
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="binary_crossentropy")
    model.fit(arrays["x_train/frames"], arrays["y_train/alarm"], epochs=epochs, batch_size=32, verbose=0)
    pred = model.predict(arrays["x_val/frames"], verbose=0)
    return _saved(model, "conv1d_variable", folder, arrays, inputs={"frames": ("float32", (None, None, FRAME_FEATURES))},
                  outputs={"alarm": ("float32", (None, 1), "binary")}, labels=("alarm",),
                  val_metric={"alarm": float(np.mean((pred[:, 0] >= 0.5) == (arrays["y_val/alarm"] == 1)))})


def bilstm_variable(folder: Path, seed: int = 0, epochs: int = 3) -> ZooModel:
    """tf_keras bidirectional LSTM over variable-length token ids: `tokens` (N, None) int32 -> Embedding ->
    Bidirectional(LSTM(8)) -> softmax `sentiment` (2). DATA has 16 ids per row; clients send any length."""
    keras = tfenv.keras()
    return _token_classifier("bilstm_variable", folder, seed, epochs, None,
                             lambda h: keras.layers.Bidirectional(keras.layers.LSTM(8))(h), rows=600)


BUILDERS: dict[str, Callable[..., ZooModel]] = {
    "cnn_classifier": cnn_classifier,
    "two_inputs": two_inputs,
    "two_heads": two_heads,
    "regression": regression,
    "token_ids": token_ids,
    "keras3": keras3,
    "tf_module": tf_module,
    "ready_tflite": ready_tflite,
    "gru_sequence": gru_sequence,
    "text_classifier": text_classifier,
    "custom_layer": custom_layer,
    "predict_module": predict_module,
    "conv1d_variable": conv1d_variable,
    "bilstm_variable": bilstm_variable,
}
#: served by LiteRT (a plain .tflite converts)
NAMES = ("cnn_classifier", "two_inputs", "two_heads", "regression", "token_ids", "keras3", "tf_module",
         "ready_tflite")
#: served by TensorFlow, or loadable only with the user's help (`imports`, `signature`)
TF_NAMES = ("gru_sequence", "text_classifier", "custom_layer", "predict_module")
ALL_NAMES = NAMES + TF_NAMES
#: models over sequences of any length, served at lengths their DATA does not have
VARIABLE_NAMES = ("conv1d_variable", "bilstm_variable")


def build(name: str, folder: Path, seed: int = 0) -> ZooModel:
    """Build one zoo model by name into `folder / name`."""
    return BUILDERS[name](Path(folder) / name, seed=seed)


def build_all(folder: Path, seed: int = 0, names: tuple[str, ...] = NAMES) -> list[ZooModel]:
    """Build zoo models (default: the LiteRT-served `NAMES`), each into its own subfolder of `folder`."""
    return [build(name, folder, seed=seed) for name in names]


# ---------------------------------------------------------------------------------------------- reading back


def load_data(model: ZooModel) -> dict[str, dict[str, np.ndarray]]:
    """DATA as split -> {input or output name -> array}, whichever form the file uses."""
    with np.load(model.data_path) as npz:
        files = {key: npz[key] for key in npz.files}
    out: dict[str, dict[str, np.ndarray]] = {split: {} for split in SPLITS}
    if model.data_form == "single":
        (input_name,) = model.inputs
        (output_name,) = model.outputs
        for split in SPLITS:
            if split in files:
                out[split][input_name if split.startswith("x_") else output_name] = files[split]
        return out
    for key, values in files.items():
        split, _, name = key.partition("/")
        out[split][name] = values
    return out


def predict(model: ZooModel, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The original model's answers for a batch, per output name, loading the file the way its kind needs.

    This is the reference an artifact is judged against. The loaded model is not cached: call it with a
    whole batch, not row by row.
    """
    tf = tfenv.tensorflow()
    feed = {name: (np.asarray(values) if model.inputs[name][0] == "string" else
                   np.asarray(values, dtype=model.inputs[name][0])) for name, values in inputs.items()}
    import_model_modules(model)
    if any(dtype == "string" for dtype, _ in model.inputs.values()) and model.kind == "keras3":
        import keras

        loaded = keras.saving.load_model(model.model_path)
        tensors = {k: tf.constant(v) for k, v in feed.items()}  # Keras 3 refuses numpy strings, takes tensors
        raw = loaded(tensors if len(tensors) > 1 else next(iter(tensors.values())), training=False)
        raw = {k: np.asarray(v) for k, v in raw.items()} if isinstance(raw, dict) else np.asarray(raw)
    elif model.kind == "tf_keras":
        loaded = tfenv.keras().models.load_model(model.model_path)
        raw = loaded.predict(feed if len(feed) > 1 else next(iter(feed.values())), verbose=0)
    elif model.kind == "keras3":
        import keras

        loaded = keras.saving.load_model(model.model_path)
        raw = loaded.predict(feed if len(feed) > 1 else next(iter(feed.values())), verbose=0)
    elif model.kind == "saved_model":
        fn = tf.saved_model.load(str(model.model_path)).signatures[model.signature]
        raw = {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in feed.items()}).items()}
    else:
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(model.model_path))
        runner = interpreter.get_signature_runner(model.signature)
        n = len(next(iter(feed.values())))
        rows = [runner(**{k: v[i : i + 1] for k, v in feed.items()}) for i in range(n)]
        raw = {k: np.concatenate([row[k] for row in rows]) for k in rows[0]}
    if not isinstance(raw, dict):
        (only,) = model.outputs
        raw = {only: raw}
    return {name: np.asarray(raw[name]) for name in model.outputs}


if __name__ == "__main__":  # python -m tests.zoo OUT_DIR: build the zoo for a look by hand
    import sys

    for built in build_all(Path(sys.argv[1] if len(sys.argv) > 1 else "zoo-out"), names=ALL_NAMES):
        print(f"{built.name:15s} {built.kind:12s} {built.model_path}  {built.val_metric}")

