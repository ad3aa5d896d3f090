"""Load MODEL the way that keeps the most options open, and say plainly which options are closed and why.

- Keras 2 files (`.keras`/`.h5` saved with tf_keras) and Keras 2 SavedModels load as tf_keras models: pruning,
  QAT and post-training quantization all apply (if the model is Sequential/Functional).
- Keras 3 files cannot be loaded by tf_keras and tfmot cannot handle Keras 3 objects (FACTS §4): the model is
  loaded with Keras 3, exported to a SavedModel, and takes the post-training-only path.
- Serving-only SavedModels (no Keras metadata) take the post-training path from their `serving_default`.

`sniff_model` needs no TensorFlow (for `--explain` and early errors); `load_model` imports it.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.errors import InputError
from builder.optimize import tfenv

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class ModelFacts:
    """What MODEL is, read without TensorFlow."""

    path: Path
    format: str  # "keras2" | "keras3" | "saved_model"
    keras_version: str | None


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except (TypeError, ValueError):
        return None


def sniff_model(path: Path) -> ModelFacts:
    """Identify MODEL from its bytes: a .keras zip's metadata, an HDF5 attribute, or a SavedModel folder."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"model {path}: no such file or directory")
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise InputError(f"model {path}: a folder but not a SavedModel (no saved_model.pb)")
        return ModelFacts(path, "saved_model", None)
    head = path.read_bytes()[:8]
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
                if "config.json" not in names:
                    raise InputError(f"model {path}: a zip file but not a Keras model (no config.json inside)")
                meta = json.loads(archive.read("metadata.json")) if "metadata.json" in names else {}
                config = json.loads(archive.read("config.json"))
        except (zipfile.BadZipFile, json.JSONDecodeError, KeyError, OSError) as error:
            raise InputError(f"model {path}: corrupt .keras file ({error})") from error
        version = meta.get("keras_version") or (config.get("keras_version") if isinstance(config, dict) else None)
        return ModelFacts(path, "keras3" if _major(version) == 3 else "keras2", version)
    if head == HDF5_MAGIC:
        try:
            import h5py

            with h5py.File(path, "r") as handle:
                version = handle.attrs.get("keras_version")
                if "model_config" not in handle.attrs:
                    raise InputError(f"model {path}: an HDF5 file without a model config (weights only?)")
        except InputError:
            raise
        except Exception as error:  # h5py raises OSError/KeyError on damaged files
            raise InputError(f"model {path}: corrupt HDF5 file ({type(error).__name__})") from error
        version = version.decode() if isinstance(version, bytes) else version
        return ModelFacts(path, "keras3" if _major(version) == 3 else "keras2", version)
    raise InputError(f"model {path}: not a .keras zip, an .h5 file or a SavedModel folder")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | None, ...]
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass
class LoadedModel:
    """The model plus what can be done to it. `keras_model` is set only when tfmot can work on it."""

    facts: ModelFacts
    input: TensorInfo
    output: TensorInfo
    keras_model: Any | None  # tf_keras.Model (Sequential/Functional) or None
    saved_model_dir: Path | None  # a SavedModel to convert from when there is no usable Keras 2 model
    trainable_why_not: str | None  # why pruning/QAT are impossible, None when they are possible
    params: int | None
    _predict: Callable[[np.ndarray], np.ndarray] = field(repr=False, default=None)  # type: ignore[assignment]
    _keep: list[Any] = field(default_factory=list, repr=False)  # temp dirs and loaded objects kept alive

    def predict(self, x: np.ndarray, batch: int = 256) -> np.ndarray:
        """The float model's outputs, in batches."""
        return np.concatenate([self._predict(x[i : i + batch]) for i in range(0, len(x), batch)], axis=0)


def _is_graph_model(model: Any) -> bool:
    keras = tfenv.keras()
    return isinstance(model, keras.Sequential) or bool(getattr(model, "_is_graph_network", False))


def _shape(shape: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None else int(d) for d in shape)


def _from_keras2(facts: ModelFacts, model: Any) -> LoadedModel:
    tf = tfenv.tensorflow()
    if not _is_graph_model(model):
        return _from_subclassed(facts, model)
    if len(model.inputs or []) != 1 or len(model.outputs or []) != 1:
        raise InputError(f"model {facts.path}: only models with one input and one output are supported "
                         f"(it has {len(model.inputs or [])} inputs, {len(model.outputs or [])} outputs)")
    in_t, out_t = model.inputs[0], model.outputs[0]
    name = model.input_names[0] if hasattr(model, "input_names") else in_t.name.split(":")[0]

    def predict(x: np.ndarray) -> np.ndarray:
        return np.asarray(model(tf.constant(x), training=False))

    return LoadedModel(
        facts=facts,
        input=TensorInfo(name, _shape(in_t.shape), in_t.dtype.name),
        output=TensorInfo("output_0", _shape(out_t.shape), out_t.dtype.name),
        keras_model=model,
        saved_model_dir=None,
        trainable_why_not=None,
        params=int(model.count_params()),
        _predict=predict,
    )


def _from_subclassed(facts: ModelFacts, model: Any) -> LoadedModel:
    """A subclassed Keras 2 model: exported through its save spec, then the post-training path."""
    keep: list[Any] = []
    staging = tempfile.TemporaryDirectory(prefix="tfsmith-subclassed-")
    keep.append(staging)
    exported = Path(staging.name) / "saved_model"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            model.export(str(exported))
    except Exception as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise InputError(f"model {facts.path}: a subclassed model that cannot be exported: {first}") from error
    why = ("a subclassed model: tfmot prunes and quantization-aware-trains only Sequential/Functional models, "
           "so pruning and QAT are refused; post-training quantization from its SavedModel")
    return _from_saved_model(facts, exported, keep, why)


def _from_saved_model(facts: ModelFacts, directory: Path, keep: list[Any], why: str) -> LoadedModel:
    tf = tfenv.tensorflow()
    try:
        loaded = tf.saved_model.load(str(directory))
    except Exception as error:
        raise InputError(f"model {facts.path}: cannot load SavedModel ({type(error).__name__})") from error
    if "serving_default" not in loaded.signatures:
        raise InputError(f"model {facts.path}: the SavedModel has no serving_default signature")
    fn = loaded.signatures["serving_default"]
    inputs = fn.structured_input_signature[1]
    outputs = fn.structured_outputs
    if len(inputs) != 1 or len(outputs) != 1:
        raise InputError(f"model {facts.path}: only one input and one output are supported "
                         f"(serving_default has {len(inputs)} inputs, {len(outputs)} outputs)")
    (in_name, in_spec), (out_name, out_spec) = next(iter(inputs.items())), next(iter(outputs.items()))

    def predict(x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(**{in_name: tf.constant(x, dtype=in_spec.dtype)})[out_name])

    keep.append(loaded)
    params = sum(int(np.prod(v.shape)) for v in getattr(loaded, "variables", []))
    return LoadedModel(
        facts=facts,
        input=TensorInfo(in_name, _shape(in_spec.shape), in_spec.dtype.name),
        output=TensorInfo(out_name, _shape(out_spec.shape), out_spec.dtype.name),
        keras_model=None,
        saved_model_dir=directory,
        trainable_why_not=why,
        params=params or None,
        _predict=predict,
        _keep=keep,
    )


def load_model(path: Path) -> LoadedModel:
    """Load MODEL (see module doc). Bad or unreadable files raise one-line InputErrors."""
    facts = sniff_model(path)
    keras = tfenv.keras()
    if facts.format == "keras2":
        try:
            model = keras.models.load_model(str(facts.path), compile=True)
        except Exception as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
            raise InputError(f"model {facts.path}: tf_keras cannot load it: {first}") from error
        return _from_keras2(facts, model)
    keep: list[Any] = []
    if facts.format == "keras3":
        try:
            import keras as keras3  # Keras 3, independent of the legacy tf.keras

            model3 = keras3.saving.load_model(str(facts.path), compile=False)
        except Exception as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
            raise InputError(f"model {facts.path}: Keras 3 cannot load it: {first}") from error
        staging = tempfile.TemporaryDirectory(prefix="tfsmith-keras3-")
        keep.append(staging)
        exported = Path(staging.name) / "saved_model"
        with contextlib.redirect_stdout(io.StringIO()):
            model3.export(str(exported))
        why = (f"a Keras {facts.keras_version} model: tfmot prunes and quantization-aware-trains only Keras 2 "
               "(tf_keras) models, so pruning and QAT are skipped; post-training quantization from its SavedModel")
        return _from_saved_model(facts, exported, keep, why)
    # SavedModel: a Keras 2 SavedModel (keras_metadata.pb) loads as a model; a serving-only one does not.
    if (facts.path / "keras_metadata.pb").is_file():
        try:
            model = keras.models.load_model(str(facts.path), compile=True)
            return _from_keras2(ModelFacts(facts.path, "saved_model", None), model)
        except InputError:
            raise
        except Exception:  # fall through to the post-training path
            pass
    why = "a serving-only SavedModel (no Keras model inside): pruning and QAT need a Keras 2 model"
    return _from_saved_model(facts, facts.path, keep, why)
