"""The models a bench run compares, and every artifact the runtimes need, made here from one source.

The bench does not depend on `tfsmith optimize`: given a Keras 2 model file (+ optional DATA .npz) it
exports the SavedModel and converts the four .tflite variants itself. It also accepts an optimize `--out`
folder (SavedModel + .tflite files found inside) and two built-in names:
- `mobilenet_v2`: `tf_keras.applications.MobileNetV2(weights=None)`, random weights: LATENCY ONLY.
- `digits-cnn`: a small CNN trained for a few epochs on scikit-learn's bundled digits (accuracy is real).

TensorFlow is imported inside functions (after `builder.bench.tfenv.configure` set the threads).
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.errors import InputError

TFLITE_VARIANTS = ("fp32", "dynamic", "fp16", "int8")
BUILTINS = ("mobilenet_v2", "digits-cnn")
EVAL_LIMIT = 512
CALIB_LIMIT = 128


@dataclass
class BenchModel:
    """Artifacts and data for one bench run. Paths missing from a dict come with a reason in `failures`."""

    name: str
    trained: bool
    saved_model: Path | None
    keras_path: Path | None
    tflite: dict[str, Path]
    x_eval: np.ndarray
    y_eval: np.ndarray | None
    x_calib: np.ndarray
    failures: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    source: str = ""


def _tf() -> Any:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def one_line(error: BaseException) -> str:
    """An exception as one short line for the report (the reason a runtime could not run)."""
    text = str(error).strip().splitlines()
    first = next((line.strip() for line in text if line.strip()), "")
    return f"{type(error).__name__}: {first[:200]}" if first else type(error).__name__


def load_data(path: Path) -> dict[str, np.ndarray]:
    """DATA .npz with x_val/y_val (and x_train/x_calib for calibration); one clear error otherwise."""
    try:
        with np.load(path) as archive:
            data = {k: archive[k] for k in archive.files}
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read DATA {path}: {one_line(error)}") from None
    if "x_val" not in data:
        raise InputError(f"DATA {path} has no x_val array (expected x_train,y_train,x_val,y_val[,x_calib])")
    return data


def _eval_and_calib(data: dict[str, np.ndarray] | None, input_shape: tuple[int, ...], seed: int = 0
                    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[str]]:
    notes: list[str] = []
    if data is None:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((64, *input_shape)).astype(np.float32)
        notes.append("no DATA: random inputs for latency and calibration; no accuracy claim")
        return x, None, x[:32], notes
    x_eval = data["x_val"][:EVAL_LIMIT].astype(np.float32)
    y_eval = data["y_val"][:EVAL_LIMIT] if "y_val" in data else None
    calib_source = data.get("x_calib", data.get("x_train", data["x_val"]))
    return x_eval, y_eval, calib_source[:CALIB_LIMIT].astype(np.float32), notes


def convert_tflite(keras_model: Any | None, saved_model: Path | None, variant: str, calib: np.ndarray) -> bytes:
    """One .tflite variant: fp32, dynamic (range), fp16, or int8 (full integer kernels, float I/O)."""
    tf = _tf()
    if keras_model is not None:
        converter = tf.lite.TFLiteConverter.from_keras_model(keras_model)
    elif saved_model is not None:
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    else:
        raise ValueError("no model to convert")
    if variant == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif variant == "fp16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif variant == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]

        def representative() -> Any:
            for i in range(len(calib)):
                yield [calib[i : i + 1]]

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    elif variant != "fp32":
        raise ValueError(f"unknown .tflite variant {variant}")
    return converter.convert()


def from_keras(keras_model: Any, name: str, keras_path: Path | None, data: dict[str, np.ndarray] | None,
               workdir: Path, trained: bool, say: Callable[[str], None] = lambda _: None) -> BenchModel:
    """Export the SavedModel and convert every .tflite variant from an in-memory tf_keras model."""
    workdir.mkdir(parents=True, exist_ok=True)
    input_shape = tuple(int(d) for d in keras_model.input_shape[1:])
    x_eval, y_eval, x_calib, notes = _eval_and_calib(data, input_shape)
    failures: dict[str, str] = {}
    saved_model: Path | None = workdir / "saved_model"
    say("exporting the SavedModel (model.export: serving signature only)")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints every captured variable
            keras_model.export(str(saved_model))
    except Exception as error:  # noqa: BLE001 - reported per runtime
        failures["savedmodel"] = one_line(error)
        saved_model = None
    tflite: dict[str, Path] = {}
    for variant in TFLITE_VARIANTS:
        say(f"converting .tflite {variant}")
        try:
            path = workdir / f"model_{variant}.tflite"
            path.write_bytes(convert_tflite(keras_model, None, variant, x_calib))
            tflite[variant] = path
        except Exception as error:  # noqa: BLE001
            failures[f"tflite-{variant}"] = one_line(error)
    if keras_path is None:
        keras_path = workdir / "model.h5"
        keras_model.save(str(keras_path))
    return BenchModel(name=name, trained=trained, saved_model=saved_model, keras_path=keras_path, tflite=tflite,
                      x_eval=x_eval, y_eval=y_eval, x_calib=x_calib, failures=failures, notes=notes,
                      source=str(keras_path))


def _variant_of(path: Path) -> str:
    stem = path.stem.lower()
    for key, variant in (("int8", "int8"), ("full_int", "int8"), ("dynamic", "dynamic"), ("drq", "dynamic"),
                         ("float16", "fp16"), ("fp16", "fp16")):
        if key in stem:
            return variant
    return "fp32" if ("fp32" in stem or "float" in stem) else stem


def from_directory(directory: Path, data: dict[str, np.ndarray] | None, workdir: Path,
                   say: Callable[[str], None] = lambda _: None) -> BenchModel:
    """An optimize --out folder or a bare SavedModel: use the artifacts found, convert what is missing."""
    tf = _tf()
    pbs = sorted(directory.rglob("saved_model.pb"), key=lambda p: len(p.parts))
    saved_model = pbs[0].parent if pbs else None
    keras_files = sorted([*directory.glob("*.keras"), *directory.glob("*.h5")])
    source = _optimize_source(directory)
    if not keras_files and source is not None:
        keras_files = [source]  # an optimize --out folder: its report names the model it started from
    tflite: dict[str, Path] = {}
    for path in sorted(directory.rglob("*.tflite")):
        tflite.setdefault(_variant_of(path), path)
    if saved_model is None and not tflite and not keras_files:
        raise InputError(f"{directory} holds no SavedModel, .tflite or Keras model file")
    if keras_files:
        bench = from_keras_file(keras_files[0], data, workdir, say)
        bench.tflite.update(tflite)  # the optimize run's own files win over our conversions
        if tflite:
            bench.notes.append(f".tflite artifacts from {directory}: "
                               + ", ".join(f"{k}={v.name}" for k, v in sorted(tflite.items()))
                               + f"; SavedModel baseline exported from the original model {keras_files[0]}")
        bench.name = directory.name
        bench.source = str(directory)
        return bench
    input_shape: tuple[int, ...]
    if saved_model is not None:
        signature = tf.saved_model.load(str(saved_model)).signatures["serving_default"]
        spec = next(iter(signature.structured_input_signature[1].values()))
        input_shape = tuple(int(d) for d in spec.shape[1:])
    else:
        from builder.bench.runtimes import tflite_input_shape

        input_shape = tflite_input_shape(next(iter(tflite.values())))[1:]
    x_eval, y_eval, x_calib, notes = _eval_and_calib(data, input_shape)
    failures = {"keras": "no Keras model file in the folder (eager call needs one)",
                "onnx": "no Keras model file in the folder (tf2onnx from_keras needs one)"}
    if saved_model is not None:
        for variant in TFLITE_VARIANTS:
            if variant not in tflite:
                say(f"converting .tflite {variant} from the SavedModel")
                try:
                    path = workdir / f"model_{variant}.tflite"
                    workdir.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(convert_tflite(None, saved_model, variant, x_calib))
                    tflite[variant] = path
                except Exception as error:  # noqa: BLE001
                    failures[f"tflite-{variant}"] = one_line(error)
    else:
        failures["savedmodel"] = "no SavedModel in the folder"
    return BenchModel(name=directory.name, trained=data is not None, saved_model=saved_model, keras_path=None,
                      tflite=tflite, x_eval=x_eval, y_eval=y_eval, x_calib=x_calib, failures=failures,
                      notes=notes, source=str(directory))


def _optimize_source(directory: Path) -> Path | None:
    """The Keras 2 model an optimize --out folder was made from (report.json `model.source`), if still there."""
    import json

    try:
        report = json.loads((directory / "report.json").read_text())
        source = Path(report["model"]["source"])
        fmt = report["model"].get("format", "keras2")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source if fmt == "keras2" and source.is_file() else None


def from_keras_file(path: Path, data: dict[str, np.ndarray] | None, workdir: Path,
                    say: Callable[[str], None] = lambda _: None) -> BenchModel:
    """A Keras 2 (tf_keras) model file; Keras 3 files do not load here and say so."""
    _tf()
    import tf_keras

    try:
        model = tf_keras.models.load_model(str(path), compile=False)
    except Exception as error:  # noqa: BLE001 - bad input: one line
        raise InputError(f"cannot load {path} as a Keras 2 (tf_keras) model: {one_line(error)}") from None
    return from_keras(model, path.stem, path, data, workdir, trained=data is not None, say=say)


def mobilenet_v2(workdir: Path, say: Callable[[str], None] = lambda _: None) -> BenchModel:
    """MobileNetV2 224x224, random weights (pretrained weights would need a download): latency only."""
    _tf()
    import tf_keras

    say("building MobileNetV2 (weights=None: random weights, latency only)")
    model = tf_keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))
    bench = from_keras(model, "mobilenet_v2", None, None, workdir, trained=False, say=say)
    bench.notes.append("random weights (weights=None): latency only; int8 agreement is not meaningful")
    return bench


def digits_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """scikit-learn's bundled 8x8 digits (no download) as DATA arrays scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(len(x) * 0.8)
    return {"x_train": x[:split], "y_train": y[:split], "x_val": x[split:], "y_val": y[split:],
            "x_calib": x[:200]}


def train_digits_cnn(data: dict[str, np.ndarray], epochs: int = 3, width: int = 16, seed: int = 0) -> Any:
    """A small Conv/Dense tf_keras model trained briefly on the digits: real (if modest) accuracy."""
    tf = _tf()
    import tf_keras

    tf.keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([
        tf_keras.layers.Input((8, 8, 1)),
        tf_keras.layers.Conv2D(width, 3, activation="relu", padding="same"),
        tf_keras.layers.MaxPooling2D(),
        tf_keras.layers.Flatten(),
        tf_keras.layers.Dense(64, activation="relu"),
        tf_keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(data["x_train"], data["y_train"], epochs=epochs, batch_size=32, verbose=0)
    return model


def digits_cnn(workdir: Path, say: Callable[[str], None] = lambda _: None, epochs: int = 5) -> BenchModel:
    say(f"training a small digits CNN ({epochs} epochs on scikit-learn's bundled digits)")
    data = digits_arrays()
    model = train_digits_cnn(data, epochs=epochs)
    return from_keras(model, "digits-cnn", None, data, workdir, trained=True, say=say)


def resolve(model: str, data_path: Path | None, workdir: Path, say: Callable[[str], None] = lambda _: None
            ) -> BenchModel:
    """MODEL as the user gave it: a Keras file, an optimize --out / SavedModel folder, or a built-in name."""
    data = load_data(data_path) if data_path is not None else None
    path = Path(model)
    if path.is_dir():
        return from_directory(path, data, workdir, say)
    if path.is_file():
        if path.suffix == ".tflite":
            return from_directory_tflite(path, data, workdir)
        return from_keras_file(path, data, workdir, say)
    if model == "mobilenet_v2":
        return mobilenet_v2(workdir, say)
    if model == "digits-cnn":
        return digits_cnn(workdir, say)
    raise InputError(f"MODEL {model!r} is neither a file, a folder, nor a built-in ({', '.join(BUILTINS)})")


def from_directory_tflite(path: Path, data: dict[str, np.ndarray] | None, workdir: Path) -> BenchModel:
    """A lone .tflite: only the .tflite runtimes can run it (the others say why)."""
    from builder.bench.runtimes import tflite_input_shape

    x_eval, y_eval, x_calib, notes = _eval_and_calib(data, tflite_input_shape(path)[1:])
    reason = "only a .tflite was given"
    return BenchModel(name=path.stem, trained=data is not None, saved_model=None, keras_path=None,
                      tflite={_variant_of(path): path}, x_eval=x_eval, y_eval=y_eval, x_calib=x_calib,
                      failures={"savedmodel": reason, "keras": reason, "onnx": reason}, notes=notes,
                      source=str(path))
