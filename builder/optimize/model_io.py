"""Load MODEL the way that keeps the most options open, read its serving contract, and say which options are closed.

- Keras 2 files (`.keras`/`.h5` saved with tf_keras) and Keras 2 SavedModels load as tf_keras models: pruning,
  QAT and post-training quantization all apply (Sequential/Functional models only).
- Keras 3 files do not load in tf_keras and tfmot cannot handle Keras 3 objects (tfmot works only with Keras 2):
  the model is loaded with Keras 3 and exported to a SavedModel with its own input/output names; it is pruned
  by tfsmith's own step (`prune_keras3`, any Keras 3 model) and takes the post-training path, without QAT.
- SavedModels of any signature (Keras, or a plain `tf.Module`) keep their `serving_default` (or the signature
  `--signature` names, e.g. `predict`) as the contract and are converted from it directly, so names stay the
  original's.
- String inputs (a `TextVectorization` first layer) are part of the contract like any dtype: TensorFlow serves
  them; the TFLite builtins cannot, which the converter says when it is tried.
- Custom layers and objects (`@keras.saving.register_keras_serializable`) load once the user's module is
  imported (`--import MODULE`, found on sys.path or in the current directory); the exported SavedModel carries
  the graph, so serving needs no user code.
- A `.tflite` is the original itself: nothing to convert, only to evaluate and measure.

The contract (input/output names, dtypes, shapes) is always the ORIGINAL model's serving signature; Keras
models have none of their own, so theirs is what `model.export` would serve: inputs named after the model's
input layers, outputs named as the model returns them (a dict's keys; for a list, Keras's output names). `sniff_model` needs no TensorFlow (early errors); `load_model` imports it.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.errors import InputError
from builder.optimize import tfenv
from builder.optimize.qat_models import QAT_WHY, is_quantization_aware
from builder.model.rows import answer_rows, fixed_batch, row_count, take
from builder.report import TensorSpec
from builder.wire.tensors import TF_DTYPES

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
TFLITE_MAGIC = b"TFL3"
#: dtypes a signature's edge may have: every one the wire carries (TF Serving's TensorProto, `builder.wire`),
#: strings spelled as the contract does. TensorFlow serves them all from the original's own SavedModel; a
#: converter that cannot take one (the TFLite builtins and float64, say) drops out with a note, never the model.
SUPPORTED_DTYPES = frozenset({"string" if name == "object" else name for name in TF_DTYPES})
DEFAULT_SIGNATURE = "serving_default"
Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class ModelFacts:
    """What MODEL is, read without TensorFlow."""

    path: Path
    format: str  # "keras2" | "keras3" | "saved_model" | "tflite"
    keras_version: str | None


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except (TypeError, ValueError):
        return None


def sniff_model(path: Path) -> ModelFacts:
    """Identify MODEL from its bytes: a .keras zip's metadata, an HDF5 attribute, a .tflite, or a SavedModel."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"model {path}: no such file or directory")
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise InputError(f"model {path}: a folder but not a SavedModel (no saved_model.pb)")
        return ModelFacts(path, "saved_model", None)
    with path.open("rb") as file:  # 8 bytes tell the format: never the whole (hundreds of MB) file
        head = file.read(8)
    if head[4:8] == TFLITE_MAGIC:
        return ModelFacts(path, "tflite", None)
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
    raise InputError(f"model {path}: not a .keras zip, an .h5 file, a .tflite file or a SavedModel folder")


@dataclass
class LoadedModel:
    """The original model, its contract, and what can be done to it.

    `keras_model` is set only when tfmot can work on it; `saved_model_dir` is the SavedModel whose
    `serving_default` (= the contract) every post-training conversion starts from; `tflite_path` is set when the
    original is a .tflite.
    """

    facts: ModelFacts
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    keras_model: Any | None
    saved_model_dir: Path | None
    tflite_path: Path | None
    trainable_why_not: str | None
    params: int | None
    signature: str = DEFAULT_SIGNATURE  # the signature that is the contract (a SavedModel's may be `predict`)
    #: a Keras 3 model (Functional, Sequential or subclassed) tfsmith's own pruning step fine-tunes
    #: (`builder.optimize.prune_keras3`): tfmot takes only tf_keras models, so `keras_model` stays None and
    #: QAT does not apply; its contract and every conversion start from its exported SavedModel as ever
    keras3_model: Any | None = None
    #: (the .keras file, the --import modules) a Keras 3 model is loaded from when pruning asks for it
    #: (`keras3()`): a model loaded and exported in a process of its own is not held here until then
    keras3_file: tuple[Path, tuple[str, ...]] | None = None
    #: the original's other signatures (`embed`, `score_pair`, ...): name -> (inputs, outputs); each is kept
    #: and judged (`builder.optimize.signatures`)
    others: dict[str, tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]] = field(default_factory=dict)
    #: (scale, zero point) of each output a full-integer .tflite answers in uint8/int8: scores, not ids
    quantized_outputs: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: the SavedModel conversions start from when it is not `saved_model_dir`: a mixed-precision model's float32
    #: twin (same weights), since the TFLite builtins have no float16 convolution
    convert_from: Path | None = None
    #: what loading found that the run's notes should say (a mixed-precision model's float32 twin, ...)
    notes: list[str] = field(default_factory=list)
    _predict: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] = field(repr=False, default=None)  # type: ignore[assignment]
    _predict_other: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]] | None = field(repr=False, default=None)
    _keep: list[Any] = field(default_factory=list, repr=False)  # temp dirs and loaded objects kept alive
    #: `saved_model_dir` as `tf.saved_model.load` gave it here (None for a .tflite): what the plan's probe
    #: conversion reads instead of loading the folder again (`builder.optimize.loads`)
    loaded_saved_model: Any = field(default=None, repr=False)

    def predict(self, x: Arrays, batch: int | None = None) -> dict[str, np.ndarray]:
        """The original model's outputs by output name, in batches (fixed-batch models: their batch size; else
        `batch`, by default `budget.rows_per_call` for its weights, and few rows of big inputs a call:
        `budget.rows_by_input_bytes`).

        Inputs that take no batch (a scalar beside the batch) come in row form (`builder.model.rows`)."""
        from builder.optimize.budget import rows_by_input_bytes, rows_per_call

        step = fixed_batch(self.inputs) or batch or rows_by_input_bytes(
            x, rows_per_call(4 * self.params if self.params else None))
        return _in_batches(self.inputs, self.outputs, x, self._predict, step)

    def predict_signature(self, name: str, x: Arrays, batch: int = 256) -> dict[str, np.ndarray]:
        """The original's outputs of another of its signatures (`others`), in batches."""
        assert self._predict_other is not None, "the original has no other signatures"
        predict_other = self._predict_other
        return _in_batches(*self.others[name], x, lambda feed: predict_other(name, feed), batch)

    @property
    def has_keras3(self) -> bool:
        """A Keras 3 model is there to prune, held or loadable."""
        return self.keras3_model is not None or self.keras3_file is not None

    def keras3(self) -> Any | None:
        """The Keras 3 model pruning fine-tunes (its float32 twin for a mixed-precision one), loaded now when
        loading kept it in a process of its own."""
        if self.keras3_model is None and self.keras3_file is not None:
            path, imports = self.keras3_file
            model = stateless(_keras3_model(self.facts, imports), [])
            if mixed_policy(model) is not None:
                from builder.optimize.qat_models import qat_loading

                with qat_loading():
                    model = float32_twin(model)
            self.keras3_model = model
        return self.keras3_model

    def release(self) -> None:
        """Drop the original's weights from this process (its Keras model, its loaded SavedModel, the functions
        that answer for it); its files stay. Every step after the conversions reads files, and a BERT-base
        held twice (the Keras model and its loaded export) is about 1 GB the evaluations and the race need."""
        self.keras_model = self.keras3_model = self.loaded_saved_model = None
        self.keras3_file = None
        self._predict = _released
        self._predict_other = None
        from builder.optimize.original_process import OriginalProcess

        for item in self._keep:
            if isinstance(item, OriginalProcess):
                item.close()  # the process the original answers from ends
        self._keep[:] = [item for item in self._keep if isinstance(item, tempfile.TemporaryDirectory)]

    def close(self) -> None:
        for item in self._keep:
            if isinstance(item, tempfile.TemporaryDirectory):
                item.cleanup()
            elif hasattr(item, "found") and hasattr(item, "close"):  # an OriginalProcess
                item.close()


def _released(_: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    raise RuntimeError("the original model was released from this process; its answers were computed before")


def _in_batches(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], x: Arrays,
                call: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]], step: int) -> dict[str, np.ndarray]:
    """`call` over every row of `x`, `step` rows a call, one answer per row: unbatched inputs in row form are
    called as declared; an output without a batch is each row's own call's (`builder.model.rows.answer_rows`)."""
    rows = row_count(inputs, x)
    parts = [answer_rows(inputs, outputs, take(inputs, x, i, i + step), call)
             for i in range(0, rows, step)]
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


def _one_line(error: BaseException, log: str = "load-model") -> str:
    """The library's own first error line, whole, and where its full text was written (a temp log: --out is
    not written when loading fails)."""
    from builder.optimize.causes import logged

    return logged(log, error)


def _shape(shape: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None or (isinstance(d, int) and d < 0) else int(d) for d in shape)


def check_supported(path: Path, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> None:
    """One line, before any work, for a signature dtype nothing here serves (strings are served by TensorFlow)."""
    for kind, specs in (("input", inputs), ("output", outputs)):
        for spec in specs:
            if spec.dtype not in SUPPORTED_DTYPES:
                raise InputError(f"model {path}: {kind} {spec.name!r} has dtype {spec.dtype}, which tfsmith does not "
                                 f"serve (supported: {', '.join(sorted(SUPPORTED_DTYPES))})")


def _is_graph_model(model: Any) -> bool:
    keras = tfenv.keras()
    return isinstance(model, keras.Sequential) or bool(getattr(model, "_is_graph_network", False))


def keras_specs(model: Any) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """A Keras model's contract: its input names, and its outputs named as the model returns them.

    Output names come from what the model returns, never from layer names: a model returning a dict
    (`{"boxes": ..., "scores": ..., "classes": ...}`, all three from one layer named `nms`) answers by its keys,
    as `model.export` serves it; a model returning a list or one tensor answers by Keras's output names (the
    layers' names, made unique as Keras 2 does: `nms`, `nms_1`). Dtypes and shapes here are Keras's symbolic
    ones; the contract is read again from the exported signature, which holds what the model really returns
    (Keras declares a `StringLookup(invert=True)` output int64; its signature says string).
    """
    inputs = tuple(TensorSpec(n, _dtype_name(t), _shape(t.shape)) for n, t in keras_inputs(model))
    outputs = tuple(TensorSpec(n, _dtype_name(t), _shape(t.shape)) for n, t in keras_outputs(model))
    return inputs, outputs


def input_structure(model: Any) -> Mapping[str, Any] | None:
    """The model's inputs by key when it was built on a dict of inputs (`keras.Model({"age": a, ...}, out)`),
    else None. Such a model is called with a dict keyed the same way (Keras 3 refuses a list), and its keys are
    the names a client sends, whatever the Input layers are called and in whatever order `model.inputs` lists
    them."""
    structure = next((found for found in (getattr(model, "_inputs_struct", None),  # Keras 3
                                          getattr(model, "_nested_inputs", None))  # tf_keras
                      if found is not None), None)
    return structure if isinstance(structure, Mapping) else None


def keras_inputs(model: Any) -> list[tuple[str, Any]]:
    """(name, symbolic tensor) of each input: a dict-input model's keys, else the input layers' names."""
    structure = input_structure(model)
    if structure is not None:
        return [(str(name), tensor) for name, tensor in structure.items()]
    if _is_subclassed_keras3(model):
        return _subclassed_inputs(model)
    in_names = list(getattr(model, "input_names", None) or [t.name.split(":")[0] for t in model.inputs])
    return list(zip(in_names, model.inputs))


def keras_outputs(model: Any) -> list[tuple[str, Any]]:
    """(name, symbolic tensor) of each output, named as the model returns it (see `keras_specs`)."""
    structure = next((found for found in (getattr(model, "_outputs_struct", None),  # Keras 3
                                          getattr(model, "_nested_outputs", None))  # tf_keras
                      if found is not None), None)
    if isinstance(structure, Mapping):
        return [(str(name), tensor) for name, tensor in structure.items()]
    if _is_subclassed_keras3(model):
        return _subclassed_outputs(model)
    tensors = list(model.outputs)
    names = list(getattr(model, "output_names", None) or [])
    if len(names) != len(tensors):
        names = [f"output_{i}" for i in range(len(tensors))]
    return list(zip(unique_names(names), tensors))


def _is_subclassed_keras3(model: Any) -> bool:
    """A Keras 3 subclassed model: no symbolic inputs (`model.inputs` raises), only the shapes it was built at."""
    try:
        getattr(model, "inputs")
    except AttributeError:
        return hasattr(model, "_build_shapes_dict")
    return False


def _subclassed_inputs(model: Any) -> list[tuple[str, Any]]:
    """A Keras 3 subclassed model's inputs as `model.export` serves them: from the shapes it was built at, any
    batch, named `args_<i>` by position (a dict argument by its keys)."""
    import keras  # type: ignore[import-not-found]

    shapes = getattr(model, "_build_shapes_dict", None) or {}
    dtype = getattr(model, "input_dtype", None) or "float32"
    if not shapes:
        raise InputError(f"a subclassed {type(model).__name__} saved before it was built or called: there is no "
                         "input shape to serve; call the model once on an input, then save it")

    def symbolic(shape: Any) -> Any:
        return keras.KerasTensor((None, *tuple(shape)[1:]), dtype=dtype)

    found: list[tuple[str, Any]] = []
    for i, shape in enumerate(shapes.values()):
        if isinstance(shape, Mapping):
            found.extend((str(key), symbolic(value)) for key, value in shape.items())
        else:
            found.append((f"args_{i}", symbolic(shape)))
    return found


def _subclassed_outputs(model: Any) -> list[tuple[str, Any]]:
    """A Keras 3 subclassed model's outputs as `model.export` names them (a dict's keys, else `output_<i>`),
    with the shapes and dtypes it computes for its inputs."""
    inputs = _subclassed_inputs(model)
    args = [tensor for _, tensor in inputs]
    keyed = any(not name.startswith("args_") for name, _ in inputs)
    result = model.compute_output_spec({name: t for name, t in inputs} if keyed else args[0] if len(args) == 1
                                       else args)
    if isinstance(result, Mapping):
        return [(str(name), tensor) for name, tensor in result.items()]
    tensors = list(result) if isinstance(result, (list, tuple)) else [result]
    return [(f"output_{i}", tensor) for i, tensor in enumerate(tensors)]


def unique_names(names: list[str]) -> list[str]:
    """Names made unique the way Keras 2 names the outputs of one layer that returns several: `nms`, `nms_1`."""
    seen: set[str] = set()
    counts: dict[str, int] = {}
    out = []
    for name in names:
        proposal = name
        while proposal in seen:
            counts[name] = counts.get(name, 0) + 1
            proposal = f"{name}_{counts[name]}"
        seen.add(proposal)
        out.append(proposal)
    return out


def _dtype_name(tensor: Any) -> str:
    return tensor.dtype.name if hasattr(tensor.dtype, "name") else str(tensor.dtype)


def keras_serving_fn(model: Any, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
                     like: Any = None) -> Callable:
    """serve(dict by input name) -> dict by output name (the contract's), calling the model with its inputs in
    the model's own order (a signature lists names sorted, the model may not).

    `like`: the model whose input/output names and order to use when `model` renamed its layers (tfmot's QAT
    wrappers call the output `quant_<name>`); positions are the same.

    A float output answers in the dtype `outputs` declares: a mixed-precision model's float32 twin (what the
    conversions start from, and what pruning fine-tunes) computes in float32 where the original answers float16,
    and a client of the original gets float16.
    """
    tf = tfenv.tensorflow()
    own_in, own_out = keras_specs(like if like is not None else model)
    dtypes = {s.name: tf.as_dtype(s.dtype) for s in outputs}
    in_names = [s.name for s in own_in]
    own_out_names = [s.name for s in own_out]
    out_names = [s.name for s in outputs]
    own = like if like is not None else model
    by_name = input_structure(own) is not None or (_is_subclassed_keras3(own)
                                                   and any(not n.startswith("args_") for n in in_names))

    def serve(feed: dict[str, Any]) -> dict[str, Any]:
        if by_name:  # a model built on a dict of inputs is called with that dict
            result = model({n: feed[n] for n in in_names}, training=False)
        else:
            args = [feed[n] for n in in_names]
            result = model(args[0] if len(args) == 1 else args, training=False)
        if not isinstance(result, Mapping):
            result = dict(zip(own_out_names, result if isinstance(result, (list, tuple)) else [result]))
        return {n: _as_declared(result[n], dtypes[n], tf) for n in out_names}

    return serve


def _as_declared(tensor: Any, dtype: Any, tf: Any) -> Any:
    """`tensor` cast to `dtype` where both are floats of another width; anything else as it is."""
    if tensor.dtype != dtype and tensor.dtype.is_floating and dtype.is_floating:
        return tf.cast(tensor, dtype)
    return tensor


def is_keras3(model: Any) -> bool:
    """Whether `model` is a Keras 3 model (subclassed ones included), not a tf_keras one."""
    import sys

    keras = sys.modules.get("keras")
    return (keras is not None and str(getattr(keras, "__version__", "")).startswith("3.")
            and isinstance(model, keras.Model))


def export_keras(model: Any, directory: Path, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
                 *, keras3: bool | None = None, xla: bool = False, like: Any = None) -> None:
    """A serving-only SavedModel whose `serving_default` IS the contract: keyword inputs, named outputs.

    `keras3`: which Keras's `ExportArchive` to use; None tells it from the model (a pruned Keras 3 model is
    exported like its original).

    `ExportArchive` (what `model.export` uses) stores only what serving needs, no optimizer slots (0.94 MB vs
    2.8 MB with `tf.saved_model.save` on the example CNN).
    """
    tf = tfenv.tensorflow()
    if keras3 is None:
        keras3 = is_keras3(model)
    if keras3:
        from keras.export import ExportArchive  # type: ignore[import-not-found]
    else:
        from tf_keras.export import ExportArchive
    signature = [{s.name: tf.TensorSpec(_tf_shape(s.shape), s.dtype, name=s.name) for s in inputs}]
    serve = keras_serving_fn(model, inputs, outputs, like)
    archive = ExportArchive()
    archive.track(model)
    if keras3:
        _each_weight_once(archive)
    archive.add_endpoint("serving_default", tf.function(serve, input_signature=signature, autograph=False))
    if xla:
        archive.add_endpoint("serving_xla", tf.function(serve, input_signature=signature, autograph=False,
                                                        jit_compile=True))
    with contextlib.redirect_stdout(io.StringIO()):  # write_out prints every endpoint's signature
        archive.write_out(str(directory))


def _each_weight_once(archive: Any) -> None:
    """Keras 3's archive lists the model's `keras.Variable`s, and `write_out` adds the `tf.Variable`s inside
    them that the endpoints capture: two objects per weight, each saved, so `variables/` held every weight twice
    (873 MB for a BERT-base's 436 MB). The lists are pointed at those same `tf.Variable`s: one copy, and the
    revived SavedModel's `.variables` still lists every weight."""
    import keras  # type: ignore[import-not-found]

    holder = archive._tf_trackable  # the lists are tracked attributes: replaced whole, never edited in place
    for name in ("variables", "trainable_variables", "non_trainable_variables"):
        setattr(holder, name, [v.value if isinstance(v, keras.Variable) else v for v in getattr(holder, name)])


XLA_SIGNATURE = "serving_xla"


def add_xla_signature(directory: Path, signature: str = DEFAULT_SIGNATURE) -> None:
    """Re-save a SavedModel with a `serving_xla` signature: `signature` compiled with XLA (jit_compile), same
    inputs and outputs. Every signature it had stays; it is written beside it and swapped in when complete."""
    tf = tfenv.tensorflow()
    directory = Path(directory)
    loaded = tf.saved_model.load(str(directory))
    fn = loaded.signatures[signature]
    specs = fn.structured_input_signature[1]
    compiled = tf.function(lambda **feed: fn(**feed), jit_compile=True, autograph=False)
    signatures = dict(loaded.signatures)
    signatures[XLA_SIGNATURE] = compiled.get_concrete_function(**specs)
    fresh = directory.with_name(directory.name + ".xla")
    with contextlib.redirect_stdout(io.StringIO()):
        tf.saved_model.save(loaded, str(fresh), signatures=signatures)
    shutil.rmtree(directory)
    fresh.rename(directory)


def remove_signature(directory: Path, name: str) -> None:
    """Re-save a SavedModel without the signature `name` (every other one stays); written beside it and
    swapped in when complete. For a `serving_xla` that cannot run here: a served folder carries no signature
    that cannot answer."""
    tf = tfenv.tensorflow()
    directory = Path(directory)
    loaded = tf.saved_model.load(str(directory))
    signatures = {key: fn for key, fn in loaded.signatures.items() if key != name}
    fresh = directory.with_name(directory.name + ".without")
    with contextlib.redirect_stdout(io.StringIO()):
        tf.saved_model.save(loaded, str(fresh), signatures=signatures)
    shutil.rmtree(directory)
    fresh.rename(directory)


def declared_signatures(saved_model_dir: Path) -> Any:
    """The SavedModel's signatures as its saved_model.pb declares them (the proto's `signature_def` map), read
    without loading the model."""
    from tensorflow.python.tools import saved_model_utils  # type: ignore[import-not-found]

    return saved_model_utils.get_meta_graph_def(str(saved_model_dir), "serve").signature_def


def saved_signature(saved_model_dir: Path, key: str) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """A SavedModel signature's inputs and outputs as its saved_model.pb declares them, read without loading
    it (numpy's dtype names, TensorFlow's `string`; None for a dimension of any size)."""
    tf = tfenv.tensorflow()
    signature = declared_signatures(saved_model_dir)[key]

    def specs(tensors: Any) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(name, tf.as_dtype(info.dtype).name,
                                tuple(None if d.size < 0 else int(d.size) for d in info.tensor_shape.dim))
                     for name, info in sorted(tensors.items()))

    return specs(signature.inputs), specs(signature.outputs)


def _tf_shape(shape: tuple[int | None, ...]) -> list[int | None]:
    """The signature's shape: as the model declares it (a batch of any size, or the fixed one a model built with
    `batch_size` takes)."""
    return list(shape)


def saved_model_contract(fn: Any) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """A loaded signature's (inputs, outputs), each sorted by name: a SavedModel stores both as maps, which a
    loaded function lists in an order that can differ from one process to the next."""
    inputs = fn.structured_input_signature[1]
    outputs = fn.structured_outputs
    if not isinstance(outputs, Mapping):
        outputs = {"output_0": outputs}
    return (tuple(TensorSpec(n, s.dtype.name, _shape(s.shape)) for n, s in sorted(inputs.items())),
            tuple(TensorSpec(n, s.dtype.name, _shape(s.shape)) for n, s in sorted(outputs.items())))


def _as_array(tensor: Any) -> np.ndarray:
    """A TensorFlow answer as an array: a scalar bfloat16 tensor's `__array__` gives numpy no array (an ml_dtypes
    scalar), its `.numpy()` value does."""
    try:
        return np.asarray(tensor)
    except ValueError:
        return np.asarray(tensor.numpy())


def _signature_predict(fn: Any, inputs: tuple[TensorSpec, ...]) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    tf = tfenv.tensorflow()

    def predict(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = fn(**{s.name: tf.constant(x[s.name], dtype=tf.as_dtype(s.dtype)) for s in inputs})
        return {k: _as_array(v) for k, v in result.items()}

    return predict


def _from_saved_model(facts: ModelFacts, directory: Path, keep: list[Any], why: str | None,
                      keras_model: Any | None = None, signature: str | None = None) -> LoadedModel:
    tf = tfenv.tensorflow()
    try:
        loaded = tf.saved_model.load(str(directory))
    except Exception as error:
        raise InputError(f"model {facts.path}: TensorFlow cannot load the SavedModel: {type(error).__name__}: "
                         f"{_one_line(error)}") from error
    key = signature or DEFAULT_SIGNATURE
    if key not in loaded.signatures:
        has = ", ".join(sorted(loaded.signatures)) or "none"
        if signature:
            raise InputError(f"model {facts.path}: the SavedModel has no signature {signature!r} (it has: {has})")
        hint = (f"name the one to serve with --signature {sorted(loaded.signatures)[0]}" if loaded.signatures else
                "save it with signatures={'serving_default': fn}")
        raise InputError(f"model {facts.path}: the SavedModel has no serving_default signature (it has: {has}); "
                         f"{hint}")
    fn = loaded.signatures[key]
    inputs, outputs = saved_model_contract(fn)
    check_supported(facts.path, inputs, outputs)
    others = {}
    for name, other in loaded.signatures.items():
        if name != key:
            others[name] = saved_model_contract(other)
            check_supported(facts.path, *others[name])
    keep.append(loaded)
    params = sum(int(np.prod(v.shape)) for v in getattr(loaded, "variables", []))
    if keras_model is not None:
        k_in, k_out = keras_specs(keras_model)
        if {s.name for s in k_in} != {s.name for s in inputs} or {s.name for s in k_out} != {s.name for s in outputs}:
            keras_model, why = None, ("a Keras SavedModel whose serving_default names differ from the model's "
                                      "layers: pruning and QAT would change its API, so only post-training")
        elif others:
            keras_model, why = None, (f"a SavedModel with more signatures than {key} ({', '.join(others)}): pruning "
                                      "and QAT rebuild it from Keras, which would drop them, so only post-training "
                                      "quantization applies")
    predictors = {name: _signature_predict(loaded.signatures[name], others[name][0]) for name in others}
    return LoadedModel(facts=facts, inputs=inputs, outputs=outputs, keras_model=keras_model,
                       saved_model_dir=directory, tflite_path=None, trainable_why_not=why,
                       params=int(keras_model.count_params()) if keras_model is not None else (params or None),
                       signature=key, others=others, _predict=_signature_predict(fn, inputs),
                       _predict_other=lambda name, x: predictors[name](x), _keep=keep, loaded_saved_model=loaded)


def _answering_apart(facts: ModelFacts, directory: Path, keep: list[Any], why: str | None,
                     signature: str | None = None) -> LoadedModel:
    """A SavedModel loaded and answering in a process of its own (`builder.optimize.original_process`): the
    same contract and answers as `_from_saved_model`, and its memory the machine's again once it is released."""
    from builder.optimize.original_process import OriginalProcess

    process = OriginalProcess(_from_saved_model, facts, Path(directory), [], why, None, signature)
    keep.append(process)
    found = process.found
    return LoadedModel(facts=facts, inputs=found.inputs, outputs=found.outputs, keras_model=None,
                       saved_model_dir=directory, tflite_path=None, trainable_why_not=why, params=found.params,
                       signature=found.signature, others=found.others,
                       _predict=lambda x: process.predict(None, x), _predict_other=process.predict, _keep=keep)


def _from_keras2(facts: ModelFacts, model: Any, keep: list[Any]) -> LoadedModel:
    inputs, outputs = keras_specs(model)
    check_supported(facts.path, inputs, outputs)
    graph = _is_graph_model(model)
    staging = tempfile.TemporaryDirectory(prefix="tfsmith-keras2-")
    keep.append(staging)
    exported = Path(staging.name) / "saved_model"
    try:
        export_keras(model, exported, inputs, outputs)
    except Exception as error:
        raise InputError(f"model {facts.path}: cannot be exported as a SavedModel: {_one_line(error, 'export')}"
                         ) from error
    why = None if graph else ("a subclassed model: tfmot prunes and quantization-aware-trains only "
                              "Sequential/Functional models, so only post-training quantization applies")
    if graph and is_quantization_aware(model):
        why = QAT_WHY
    return _from_saved_model(facts, exported, keep, why, keras_model=model if graph else None)


def _from_tflite(facts: ModelFacts) -> LoadedModel:
    from builder.model.backend import LiteRTBackend
    from builder.model.signature import DEFAULT_SIGNATURE, STRING

    try:
        backend = LiteRTBackend(facts.path, threads=1)
    except InputError:
        raise
    except Exception as error:
        raise InputError(f"model {facts.path}: LiteRT cannot load it: {_one_line(error)}") from error
    key = DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in backend.signatures else next(iter(backend.signatures))
    sig = backend.signatures[key]

    def contract_spec(spec: TensorSpec) -> TensorSpec:  # a backend's string tensor is the contract's `string`
        return TensorSpec(spec.name, "string" if spec.dtype == STRING else spec.dtype, _shape(spec.shape))

    inputs = tuple(contract_spec(s) for s in sig.inputs)
    outputs = tuple(contract_spec(s) for s in sig.outputs)
    check_supported(facts.path, inputs, outputs)

    def typed(values: np.ndarray, spec: TensorSpec) -> np.ndarray:
        return np.asarray(values) if spec.dtype == "string" else np.asarray(values, dtype=spec.dtype)

    def predict(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return backend.predict(key, {s.name: typed(x[s.name], s) for s in inputs})

    others = {name: (tuple(contract_spec(t) for t in spec.inputs), tuple(contract_spec(t) for t in spec.outputs))
              for name, spec in backend.signatures.items() if name != key}

    def predict_other(name: str, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return backend.predict(name, {s.name: typed(x[s.name], s) for s in others[name][0]})

    return LoadedModel(facts=facts, inputs=inputs, outputs=outputs, keras_model=None, saved_model_dir=None,
                       tflite_path=facts.path, params=None,
                       trainable_why_not="a .tflite file: it is already converted, so it is evaluated and measured "
                                         "as it is (no pruning, QAT or re-quantization)",
                       signature=key, others=others, quantized_outputs=backend.output_quantization(key),
                       _predict=predict, _predict_other=predict_other, _keep=[backend])


def import_user_modules(names: tuple[str, ...]) -> None:
    """Import the user's modules (`--import`) so the custom layers and objects they register can load; the
    current directory is searched too. One line, keeping the ImportError's first line, when one fails."""
    import importlib
    import sys

    cwd = str(Path.cwd())
    if names and cwd not in sys.path:
        sys.path.insert(0, cwd)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # ImportError, or anything the module raises while it runs
            from builder.optimize.causes import logged

            raise InputError(f"--import {name}: cannot import it: {type(error).__name__}: "
                             f"{logged('import-' + name.replace('.', '-'), error)}") from error


#: What Keras's safe mode says when it refuses a `Lambda` holding Python code (Keras 3 and tf_keras alike).
SAFE_MODE_MARKERS = ("enable_unsafe_deserialization", "safe_mode=False")
#: The module of tfsmith's own that turns safe mode off for one run (`--import` it).
UNSAFE_MODULE = "builder.optimize.unsafe_deserialization"


def _keras_load_error(facts: ModelFacts, which: str, error: BaseException, imports: tuple[str, ...]) -> InputError:
    text = str(error)
    if any(marker in text for marker in SAFE_MODE_MARKERS):
        return InputError(safe_mode_line(facts.path, which, text, _one_line(error)))
    hint = ""
    if "Could not locate" in text or "Unknown layer" in text or "custom_objects" in text:
        hint = ("; it uses a custom class: pass the module that defines and registers it with --import MODULE"
                if not imports else f"; --import {', '.join(imports)} did not register it")
    return InputError(f"model {facts.path}: {which} cannot load it: {_one_line(error)}{hint}")


def safe_mode_line(path: Path, which: str, text: str, logged_line: str) -> str:
    """One line for a model Keras's safe mode refuses: Keras's own reason (its first sentence: the advice
    after it names a loader argument tfsmith's user cannot pass) and how to proceed when the file is trusted.

    `logged_line` is Keras's whole first line with the log that holds its full text."""
    reason = text.strip().splitlines()[0].strip() if text.strip() else "safe mode refused it"
    first = reason.split(". ", 1)[0].rstrip(".")
    log = logged_line[logged_line.rfind(" (full text: "):] if logged_line.endswith(")") and " (full text: " in logged_line else ""
    return (f"model {path}: {which}'s safe mode refuses it: {first}, and loading it would run that code{log}; "
            f"if you trust this file, pass --import {UNSAFE_MODULE} (or a module of yours that calls "
            "keras.config.enable_unsafe_deserialization()); the exported SavedModel carries the graph, so serving "
            "it needs neither")


def _load_keras2(path: Path) -> Any:
    """A tf_keras file or SavedModel, tfmot's quantization-aware layers included (`qat_models`)."""
    from builder.optimize.qat_models import qat_loading

    with qat_loading():
        return tfenv.keras().models.load_model(str(path), compile=True)


MIXED_NOTE = ("mixed precision ({policy}): the .tflite files and OpenVINO's IR are converted from a float32 copy of "
              "the model with the same weights (the TFLite builtins have no float16 convolution), and each is judged "
              "against the original")


def mixed_policy(model: Any) -> str | None:
    """The mixed-precision policy a Keras model computes in (`mixed_float16`, `mixed_bfloat16`), or None."""
    for layer in getattr(model, "layers", ()):
        name = getattr(getattr(layer, "dtype_policy", None), "name", "")
        if str(name).startswith("mixed_"):
            return str(name)
    return None


def _rewritten(config: Any, rewrite: Callable[[str, Any], Any]) -> Any:
    """A Keras config (nested dicts and lists) with `rewrite(key, value)` applied to every entry, depth first."""
    if isinstance(config, dict):
        return {key: _rewritten(rewrite(key, value), rewrite) for key, value in config.items()}
    if isinstance(config, list):
        return [_rewritten(item, rewrite) for item in config]
    return config


def _without_mixed_policy(key: str, value: Any) -> Any:
    """Every mixed-precision dtype policy as float32 (tf_keras and Keras 3 spell a policy as a string or as a
    serialized `Policy`/`DTypePolicy`)."""
    if key == "dtype" and isinstance(value, str) and value.startswith("mixed_"):
        return "float32"
    if key == "dtype" and isinstance(value, dict) and str(value.get("config", {}).get("name", "")).startswith("mixed_"):
        return {**value, "config": {**value["config"], "name": "float32"}}
    return value


def _without_state(key: str, value: Any) -> Any:
    """Stateful recurrent layers as stateless ones; the fixed batch stays, as the contract says it."""
    return False if key == "stateful" and value is True else value


def rebuilt(model: Any, rewrite: Callable[[str, Any], Any]) -> Any:
    """The same model with the same weights, rebuilt from its config as `rewrite` changes it."""
    twin = type(model).from_config(_rewritten(model.get_config(), rewrite))
    twin.set_weights(model.get_weights())
    return twin


def float32_twin(model: Any) -> Any:
    """The same model computing in float32: rebuilt without the mixed policy, with its weights (a
    mixed-precision model keeps its variables in float32 already)."""
    return rebuilt(model, _without_mixed_policy)


STATELESS_NOTE = ("stateful recurrent layers ({layers}): served stateless, each request starting from zero states "
                  "as the model's first call after reset_states does (a server shared by many clients cannot carry "
                  "one client's state to its next request); the contract and every answer judged are the stateless "
                  "model's")


def stateless(model: Any, notes: list[str]) -> Any:
    """A model with stateful RNN layers rebuilt stateless with the same weights (a note says so); any other model
    as it is. A stateful model's answer depends on the calls before it, so it is no function a server can offer
    many clients, and its fixed batch of one refuses the rows it is judged on."""
    found = sorted({layer.name for layer in _all_layers(model) if getattr(layer, "stateful", False)})
    if not found:
        return model
    twin = rebuilt(model, _without_state)
    notes.append(STATELESS_NOTE.format(layers=", ".join(found)))
    return twin


def _all_layers(model: Any) -> list[Any]:
    """Every layer, those inside wrappers (Bidirectional, TimeDistributed) and nested models too."""
    found: list[Any] = []
    for layer in getattr(model, "layers", ()):
        found.append(layer)
        for inner in ("layer", "forward_layer", "backward_layer"):
            if getattr(layer, inner, None) is not None:
                found.append(getattr(layer, inner))
        found.extend(_all_layers(layer) if getattr(layer, "layers", None) else [])
    return found


def _with_float32_twin(loaded: LoadedModel, model: Any, keras3: bool) -> LoadedModel:
    """A mixed-precision model gets its float32 twin exported for the conversions (`convert_from`) and, where
    tfmot may fine-tune it, as the model pruning and QAT start from; the original's SavedModel stays the floor."""
    policy = mixed_policy(model)
    if policy is None:
        return loaded
    staging = tempfile.TemporaryDirectory(prefix="tfsmith-float32-")
    loaded._keep.append(staging)
    exported = Path(staging.name) / "saved_model"
    try:
        from builder.optimize.qat_models import qat_loading

        with qat_loading():
            twin = float32_twin(model)
        export_keras(twin, exported, loaded.inputs, loaded.outputs, keras3=keras3, like=model)
    except Exception as error:  # noqa: BLE001 - the original still converts as it is, or says why it cannot
        from builder.optimize.causes import cause

        loaded.notes.append(f"mixed precision ({policy}): no float32 copy for the conversions: {cause(error)}")
        return loaded
    loaded.convert_from = exported
    if loaded.keras_model is not None:
        loaded.keras_model = twin
    if loaded.keras3_model is not None:
        loaded.keras3_model = twin
    loaded.notes.append(MIXED_NOTE.format(policy=policy))
    return loaded


def _keras3_exported(facts: ModelFacts, imports: tuple[str, ...], exported: Path, twin_dir: Path
                     ) -> tuple[Any, list[str], bool]:
    """A Keras 3 model loaded from its file and exported as the SavedModel every conversion starts from:
    (the model, as pruning fine-tunes it: its float32 twin when it is mixed precision; notes; whether the
    float32 twin the conversions start from was written to `twin_dir`)."""
    model3 = _keras3_model(facts, imports)
    notes: list[str] = []
    model3 = stateless(model3, notes)
    try:
        inputs, outputs = keras_specs(model3)
    except InputError as error:
        raise InputError(f"model {facts.path}: {error}") from error
    check_supported(facts.path, inputs, outputs)
    try:
        export_keras(model3, exported, inputs, outputs, keras3=True)
    except Exception as error:
        raise InputError(f"model {facts.path}: Keras 3 cannot export it: {_one_line(error, 'export')}") from error
    policy = mixed_policy(model3)
    if policy is None:
        return model3, notes, False
    try:
        from builder.optimize.qat_models import qat_loading

        with qat_loading():
            twin = float32_twin(model3)
        export_keras(twin, twin_dir, inputs, outputs, keras3=True, like=model3)
    except Exception as error:  # noqa: BLE001 - the original still converts as it is, or says why it cannot
        from builder.optimize.causes import cause

        return model3, [*notes, f"mixed precision ({policy}): no float32 copy for the conversions: {cause(error)}"], False
    return twin, [*notes, MIXED_NOTE.format(policy=policy)], True


def _keras3_model(facts: ModelFacts, imports: tuple[str, ...]) -> Any:
    """The Keras 3 model in `facts.path`, or one line saying why Keras cannot load it."""
    tfenv.tensorflow()
    import_user_modules(tuple(imports))
    try:
        import keras as keras3  # Keras 3, independent of the legacy tf.keras

        return keras3.saving.load_model(str(facts.path), compile=False)
    except Exception as error:
        raise _keras_load_error(facts, "Keras 3", error, imports) from error


def export_keras3_file(facts: ModelFacts, imports: tuple[str, ...], exported: Path, twin_dir: Path
                       ) -> tuple[list[str], bool]:
    """`_keras3_exported` run in a process of its own (`builder.optimize.isolated`): its notes, and whether
    the float32 twin was written; the model itself stays there."""
    _, notes, twin = _keras3_exported(facts, imports, exported, twin_dir)
    return notes, twin


def load_model(path: Path, signature: str | None = None, imports: tuple[str, ...] = (), apart: bool = False,
               limit: int | None = None) -> LoadedModel:
    """Load MODEL (see module doc). Bad, unreadable or unservable files raise one-line InputErrors.

    `signature`: the SavedModel signature that is the contract (default serving_default); `imports`: the user's
    modules to import first (custom layers). `apart`: a Keras 3 model is loaded and exported in a process of its
    own, watched against `limit` (`builder.optimize.isolated`), and its SavedModel (or the SavedModel given, when
    no Keras 2 model is inside) is loaded and answers from another (`builder.optimize.original_process`) until
    it is released: with oneDNN, TensorFlow keeps what a model held in its allocator's pools after the model is
    gone, so a big model loaded here would hold its memory for the whole run."""
    facts = sniff_model(path)
    if signature and signature != DEFAULT_SIGNATURE and facts.format != "saved_model":
        raise InputError(f"--signature {signature}: only a SavedModel has signatures to choose from; "
                         f"{facts.path} is a {facts.format} model, whose contract is {DEFAULT_SIGNATURE}")
    import_user_modules(tuple(imports))
    keep: list[Any] = []
    if facts.format == "tflite":
        return _from_tflite(facts)
    if facts.format == "keras2":
        try:
            model = _load_keras2(facts.path)
        except Exception as error:
            raise _keras_load_error(facts, "tf_keras", error, imports) from error
        notes: list[str] = []
        model = stateless(model, notes)
        loaded = _with_float32_twin(_from_keras2(facts, model, keep), model, keras3=False)
        loaded.notes[:0] = notes
        return loaded
    if facts.format == "keras3":
        staging = tempfile.TemporaryDirectory(prefix="tfsmith-keras3-")
        keep.append(staging)
        exported, twin_dir = Path(staging.name) / "saved_model", Path(staging.name) / "float32"
        if apart:  # the Keras model's memory is the machine's again when that process ends
            from builder.optimize import isolated

            notes, twin = isolated.call(export_keras3_file, facts, imports, exported, twin_dir, limit=limit)
            model3 = None
        else:
            model3, notes, twin = _keras3_exported(facts, imports, exported, twin_dir)
        why = (f"a Keras {facts.keras_version} model: tfmot quantization-aware-trains only Keras 2 (tf_keras) "
               "models, so QAT does not apply (pruning is tfsmith's own for Keras 3)")
        found = (_answering_apart if apart else _from_saved_model)(facts, exported, keep, why)
        found.keras3_model, found.keras3_file = model3, (facts.path, imports)
        if twin:
            found.convert_from = twin_dir
        found.notes[:0] = notes
        return found
    # SavedModel: a Keras 2 SavedModel (keras_metadata.pb) also loads as a model (for pruning/QAT).
    model = None
    why = ("a SavedModel without a Keras 2 Sequential/Functional model inside: pruning and QAT need one, so only "
           "post-training quantization applies")
    if (facts.path / "keras_metadata.pb").is_file():
        try:
            model = _load_keras2(facts.path)
        except Exception:  # not loadable as Keras 2: the post-training path from its signature still works
            model = None
        if model is not None and not _is_graph_model(model):
            model, why = None, ("a subclassed Keras model: tfmot prunes and quantization-aware-trains only "
                                "Sequential/Functional models, so only post-training quantization applies")
    why = None if model is not None else why
    if model is not None and is_quantization_aware(model):
        why = QAT_WHY
    if apart and model is None:
        return _answering_apart(facts, facts.path, keep, why, signature=signature)
    loaded = _from_saved_model(facts, facts.path, keep, why, keras_model=model, signature=signature)
    return _with_float32_twin(loaded, model, keras3=False) if model is not None else loaded


def copy_original(loaded: LoadedModel, destination: Path) -> None:
    """The original .tflite copied into --out (it is what gets served)."""
    assert loaded.tflite_path is not None
    shutil.copy2(loaded.tflite_path, destination)
