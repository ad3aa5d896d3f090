"""The models a bench run compares, and every artifact the runtimes need, made from one source.

The .tflite files are made by `tfsmith optimize`'s own converter (`builder.optimize.quantize.convert_saved_model`,
from the model's exported SavedModel), and OpenVINO's IR (float, NNCF int8) by its own IR converter
(`builder.optimize.openvino_ir`), so bench times the same files optimize ships, not look-alikes. MODEL is:
- a Keras 2 model file (+ optional DATA .npz): the SavedModel is exported and the four .tflite variants
  converted here;
- a `tfsmith optimize --out` folder: its SavedModel and .tflite files are timed as they are; variants it did not
  ship are converted from its SavedModel (or from the Keras model it started from) for comparison;
- a SavedModel folder or a lone .tflite;
- a built-in: `example` (the model `tfsmith example` writes: the same CNN and digits data, trained here for a
  few epochs), `mobilenet_v2` and `resnet50` (`tf_keras.applications`, weights=None: random weights, latency
  only, since pretrained weights would need a download).

TensorFlow is imported inside functions (after the command set the thread count).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.bench.runtimes import IR_VARIANT_FORMATS, VARIANT_FORMATS, bench_row
from builder.errors import InputError
from builder.model.registry import IR_DEFAULT, IR_SUFFIX, TENSORFLOW_DEFAULT

TFLITE_VARIANTS = tuple(VARIANT_FORMATS)
IR_VARIANTS = tuple(IR_VARIANT_FORMATS)
#: bench's variant name -> the converter's mode name
CONVERTER_MODES = {"fp32": "fp32", "dynamic": "dynamic", "fp16": "float16", "int8": "int8"}
BUILTINS = ("example", "mobilenet_v2", "resnet50")
#: how many epochs the built-in example trains: enough for real accuracy, short enough for a bench run
EXAMPLE_EPOCHS = 5
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
    #: the bench runtime that serves what `tfsmith optimize` chose (given an optimize --out folder)
    shipped: str | None = None
    #: the SavedModel signature timed and converted (a tf.Module's may be `predict`)
    signature: str = "serving_default"
    #: OpenVINO's IR by variant (fp32, int8): the .xml, its .bin beside it
    ir: dict[str, Path] = field(default_factory=dict)


def _tf() -> Any:
    """TensorFlow with Keras 2 as tf.keras, imported the one way optimize imports it."""
    from builder.optimize import tfenv

    return tfenv.tensorflow()


def one_line(error: BaseException) -> str:
    """An exception as one short line for the report (the reason a runtime could not run)."""
    from builder.optimize.causes import cause

    first = cause(error)
    return f"{type(error).__name__}: {first}" if first != type(error).__name__ else first


def load_data(path: Path) -> dict[str, np.ndarray]:
    """DATA .npz as plain x_val/y_val/x_calib/x_train arrays; one clear error otherwise.

    Both forms optimize reads are accepted: plain names, or names per input/output (`x_val/<input>`) when the
    model has one input and one output. bench feeds one input tensor, so DATA naming several inputs is refused
    here, before any work starts.
    """
    try:
        with np.load(path) as archive:
            raw = {k: archive[k] for k in archive.files}
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read DATA {path}: {one_line(error)}") from None
    data: dict[str, np.ndarray] = {}
    for key, values in raw.items():
        split, _, name = key.partition("/")
        others = sorted({k.partition("/")[2] for k in raw if k.startswith(split + "/")})
        if name and len(others) > 1:
            what = "inputs" if split.startswith("x_") else "outputs"
            raise InputError(f"DATA {path} names {len(others)} {what} under {split}/ ({', '.join(others)}): "
                             "tfsmith bench measures models with one input and one output")
        data[split] = values
    if "x_val" not in data:
        raise InputError(f"DATA {path} has no x_val array (expected x_val[/<input>], y_val, x_calib or x_train)")
    return data


def _eval_and_calib(data: dict[str, np.ndarray] | None, input_shape: tuple[int, ...], seed: int = 0,
                    dtype: np.dtype = np.dtype(np.float32)
                    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[str]]:
    notes: list[str] = []
    if data is None:
        if np.issubdtype(dtype, np.integer):
            # ids: random values could fall outside the model's vocabulary; 0 is a valid id for any lookup
            x = np.zeros((64, *input_shape), dtype=np.int32)
            notes.append("no DATA: all-zero ids for latency and calibration; no accuracy claim")
            return x, None, x[:32], notes
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((64, *input_shape)).astype(np.float32)
        notes.append("no DATA: random inputs for latency and calibration; no accuracy claim")
        return x, None, x[:32], notes
    x_eval = _model_dtype(data["x_val"][:EVAL_LIMIT])
    y_eval = data["y_val"][:EVAL_LIMIT] if "y_val" in data else None
    calib_source = data.get("x_calib", data.get("x_train", data["x_val"]))
    return x_eval, y_eval, _model_dtype(calib_source[:CALIB_LIMIT]), notes


def _model_dtype(x: np.ndarray) -> np.ndarray:
    """Floats as float32; integer inputs (token ids) keep an integer type, in calibration too."""
    return x.astype(np.int32 if np.issubdtype(x.dtype, np.integer) else np.float32)


def convert_tflite(saved_model: Path, variant: str, calib: np.ndarray, signature: str = "serving_default") -> bytes:
    """One .tflite variant (fp32, dynamic, fp16, int8) from a SavedModel, through optimize's converter."""
    from builder.optimize.quantize import convert_saved_model

    if variant not in CONVERTER_MODES:
        raise ValueError(f"unknown .tflite variant {variant}")
    return convert_saved_model(saved_model, CONVERTER_MODES[variant], calib if variant == "int8" else None,
                               signature=signature)


def _convert_missing(saved_model: Path, tflite: dict[str, Path], calib: np.ndarray, workdir: Path,
                     failures: dict[str, str], say: Callable[[str], None], signature: str = "serving_default",
                     ir: dict[str, Path] | None = None) -> None:
    """Convert every variant not in `tflite` (and, given `ir`, every OpenVINO IR variant not in it) from the
    SavedModel into workdir; failures recorded per variant."""
    workdir.mkdir(parents=True, exist_ok=True)
    for variant in TFLITE_VARIANTS:
        if variant in tflite:
            continue
        say(f"converting .tflite {variant}")
        try:
            path = workdir / f"model_{variant}.tflite"
            path.write_bytes(convert_tflite(saved_model, variant, calib, signature))
            tflite[variant] = path
        except Exception as error:  # noqa: BLE001 - reported per runtime
            failures[f"tflite-{variant}"] = one_line(error)
    if ir is not None:
        convert_missing_ir(saved_model, ir, calib, workdir, failures, say, signature)


def convert_missing_ir(saved_model: Path, ir: dict[str, Path], calib: np.ndarray, workdir: Path,
                       failures: dict[str, str], say: Callable[[str], None], signature: str = "serving_default"
                       ) -> None:
    """OpenVINO's IR variants not in `ir`, through optimize's IR converter (float, then NNCF int8 on `calib`);
    where OpenVINO is not installed or refuses, the reason is recorded per variant."""
    import importlib.util

    wanted = [v for v in IR_VARIANTS if v not in ir]
    if not wanted:
        return
    if importlib.util.find_spec("openvino") is None:
        failures.update({f"ir-{v}": "openvino is not installed" for v in wanted})
        return
    from builder.optimize import openvino_ir

    try:
        say("converting to OpenVINO's IR")
        model = openvino_ir.convert_saved_model(saved_model, signature)
        if "fp32" in wanted:
            ir["fp32"] = openvino_ir.write_ir(model, workdir / "openvino_fp32.xml")
        if "int8" in wanted:
            say("quantizing OpenVINO's IR to int8 with NNCF")
            name = model.inputs[0].get_any_name()
            ir["int8"] = openvino_ir.write_ir(openvino_ir.quantize_int8(model, {name: calib}),
                                              workdir / "openvino_int8.xml")
    except Exception as error:  # noqa: BLE001 - reported per runtime
        failures.update({f"ir-{v}": one_line(error) for v in wanted if v not in ir})


def from_keras(keras_model: Any, name: str, keras_path: Path | None, data: dict[str, np.ndarray] | None,
               workdir: Path, trained: bool, say: Callable[[str], None] = lambda _: None, convert_ir: bool = True
               ) -> BenchModel:
    """Export the SavedModel and convert every .tflite variant (and OpenVINO IR variant, unless the caller
    brings its own: `convert_ir`) from an in-memory tf_keras model."""
    if len(keras_model.inputs) != 1 or len(keras_model.outputs) != 1:
        names = ", ".join(str(getattr(t, "name", t)).split(":")[0] for t in keras_model.inputs)
        raise InputError(f"{name}: tfsmith bench measures models with one input and one output; this one has "
                         f"{len(keras_model.inputs)} input(s) ({names}) and {len(keras_model.outputs)} output(s)")
    workdir.mkdir(parents=True, exist_ok=True)
    input_shape = tuple(int(d) for d in keras_model.input_shape[1:])
    dtype = np.dtype(keras_model.inputs[0].dtype.as_numpy_dtype)
    x_eval, y_eval, x_calib, notes = _eval_and_calib(data, input_shape, dtype=dtype)
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
    ir: dict[str, Path] = {}
    if saved_model is not None:
        _convert_missing(saved_model, tflite, x_calib, workdir, failures, say, ir=ir if convert_ir else None)
    else:
        for variant in TFLITE_VARIANTS:
            failures[f"tflite-{variant}"] = f"no SavedModel to convert ({failures['savedmodel']})"
        for variant in IR_VARIANTS:
            failures[f"ir-{variant}"] = f"no SavedModel to convert ({failures['savedmodel']})"
    if keras_path is None:
        keras_path = workdir / "model.h5"
        keras_model.save(str(keras_path))
    return BenchModel(name=name, trained=trained, saved_model=saved_model, keras_path=keras_path, tflite=tflite,
                      x_eval=x_eval, y_eval=y_eval, x_calib=x_calib, failures=failures, notes=notes,
                      source=str(keras_path), ir=ir)


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
    ir = {_variant_of(path): path for path in sorted(directory.glob(f"*{IR_SUFFIX}"))
          if _variant_of(path) in IR_VARIANTS and path.with_suffix(".bin").is_file()}
    report = _optimize_report(directory)
    chosen = report.get("chosen")
    shipped = shipped_runtime(chosen, report.get("chosen_runtime"), report.get("chosen_signature"))
    if chosen and (directory / chosen).suffix == ".tflite" and (directory / chosen).is_file():
        tflite[_variant_of(directory / chosen)] = directory / chosen  # e.g. the QAT file, not the PTQ one
    if saved_model is None and not tflite and not keras_files and not ir:
        raise InputError(f"{directory} holds no SavedModel, .tflite, OpenVINO IR or Keras model file")
    if keras_files:
        bench = from_keras_file(keras_files[0], data, workdir, say, convert_ir=False)
        bench.tflite.update(tflite)  # the optimize run's own files win over our conversions
        bench.ir.update(ir)
        if bench.saved_model is not None:  # only the IR variants the folder lacks are converted
            convert_missing_ir(bench.saved_model, bench.ir, bench.x_calib, workdir, bench.failures, say)
        if tflite or ir:
            bench.notes.append(f"artifacts from {directory}: "
                               + ", ".join(f"{k}={v.name}" for k, v in sorted(tflite.items()))
                               + "".join(f", ir-{k}={v.name}" for k, v in sorted(ir.items()))
                               + f"; SavedModel baseline exported from the original model {keras_files[0]}")
        bench.name = directory.name
        bench.source = str(directory)
        bench.shipped = shipped
        return bench
    input_shape: tuple[int, ...]
    if saved_model is not None:
        signatures = tf.saved_model.load(str(saved_model)).signatures
        key = str(((report.get("model") or {}).get("contract") or {}).get("signature") or "serving_default")
        if key not in signatures:
            if not signatures:
                raise InputError(f"{saved_model}: the SavedModel has no signatures to time")
            key = sorted(signatures)[0]
        signature, signature_key = signatures[key], key
        inputs = signature.structured_input_signature[1]
        _one_in_one_out(directory.name, list(inputs), list(signature.structured_outputs))
        spec = next(iter(inputs.values()))
        if spec.dtype.name == "string" or any(d is None for d in spec.shape[1:]):
            raise InputError(f"{directory.name}: bench times one fixed-shape numeric input; input "
                             f"{next(iter(inputs))!r} is {spec.dtype.name} {list(spec.shape)}: its timings are in "
                             "tfsmith optimize's report (every artifact x runtime x signature, same loop)")
        input_shape = tuple(int(d) for d in spec.shape[1:])
        dtype = np.dtype(spec.dtype.as_numpy_dtype)
    else:
        input_shape, dtype = _tflite_contract(next(iter(tflite.values())))
    x_eval, y_eval, x_calib, notes = _eval_and_calib(data, input_shape, dtype=dtype)
    failures = {"keras": "no Keras model file in the folder (eager call needs one)",
                "onnx": "no Keras model file in the folder (tf2onnx from_keras needs one)"}
    key = "serving_default"
    if saved_model is not None:
        key = signature_key
        _convert_missing(saved_model, tflite, x_calib, workdir, failures, say, key, ir=ir)
    else:
        failures["savedmodel"] = "no SavedModel in the folder"
    return BenchModel(name=directory.name, trained=data is not None, saved_model=saved_model, keras_path=None,
                      tflite=tflite, x_eval=x_eval, y_eval=y_eval, x_calib=x_calib, failures=failures,
                      notes=notes, source=str(directory), shipped=shipped, signature=key, ir=ir)


def shipped_runtime(chosen: str | None, chosen_runtime: str | None, chosen_signature: str | None = None) -> str | None:
    """The bench row (`runtimes.bench_row`) that times optimize's choice: artifact (report.json `chosen`) x runtime
    (`chosen_runtime`; LiteRT when the report names none, as `package` serves a .tflite by default) x signature
    (a SavedModel served by its `serving_xla` is bench's savedmodel-xla, by tensorflow-bf16 savedmodel-bf16). None
    when bench has no such runtime (a Select-TF-ops .tflite on TensorFlow's interpreter)."""
    if not chosen:
        return None
    path = Path(chosen)
    if path.suffix == IR_SUFFIX:
        return bench_row((chosen_runtime or IR_DEFAULT).lower(), _variant_of(path), ir=True)
    if path.suffix != ".tflite":
        return bench_row((chosen_runtime or TENSORFLOW_DEFAULT).lower(), None, chosen_signature)
    return bench_row((chosen_runtime or "litert").lower(), _variant_of(path))


def _optimize_report(directory: Path) -> dict[str, Any]:
    import json

    try:
        report = json.loads((directory / "report.json").read_text())
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def _optimize_source(directory: Path) -> Path | None:
    """The Keras 2 model an optimize --out folder was made from (report.json `model.source`), if still there."""
    model = _optimize_report(directory).get("model")
    try:
        source = Path(model["source"])  # type: ignore[index]
        fmt = model.get("format", "keras2")  # type: ignore[union-attr]
    except (KeyError, TypeError):
        return None
    return source if fmt == "keras2" and source.is_file() else None


def _keras_major(path: Path) -> int | None:
    """The Keras major version a `.keras` zip was saved with (its metadata.json), None for other files."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            version = json.loads(archive.read("metadata.json")).get("keras_version", "")
        return int(str(version).split(".")[0])
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None


def _from_keras3(path: Path, data: dict[str, np.ndarray] | None, workdir: Path,
                 say: Callable[[str], None]) -> BenchModel:
    """Keras 3 files do not load in tf_keras: export Keras 3's serving SavedModel and time from that."""
    import keras  # Keras 3, independent of the legacy tf.keras

    say("exporting the Keras 3 model's SavedModel")
    try:
        model = keras.saving.load_model(str(path), compile=False)
        if len(model.inputs) != 1 or len(model.outputs) != 1:
            raise InputError(f"{path.name}: tfsmith bench measures models with one input and one output; this one "
                             f"has {len(model.inputs)} input(s) and {len(model.outputs)} output(s)")
        exported = workdir / "keras3"
        with contextlib.redirect_stdout(io.StringIO()):  # export prints the endpoint's signature
            model.export(str(exported / "saved_model"))
    except InputError:
        raise
    except Exception as error:  # noqa: BLE001 - bad input: one line
        raise InputError(f"cannot load or export {path} as a Keras 3 model: {one_line(error)}") from None
    bench = from_directory(exported, data, workdir, say)
    reason = "a Keras 3 model: eager Keras and tf2onnx here run Keras 2 (tf_keras) models"
    bench.failures.update({"keras": reason, "onnx": reason})
    bench.name, bench.source = path.stem, str(path)
    return bench


def from_keras_file(path: Path, data: dict[str, np.ndarray] | None, workdir: Path,
                    say: Callable[[str], None] = lambda _: None, convert_ir: bool = True) -> BenchModel:
    """A Keras 2 (tf_keras) model file, or a Keras 3 `.keras` (timed through its exported SavedModel)."""
    _tf()
    import tf_keras

    if _keras_major(path) == 3:
        return _from_keras3(path, data, workdir, say)
    try:
        model = tf_keras.models.load_model(str(path), compile=False)
    except Exception as error:  # noqa: BLE001 - bad input: one line
        raise InputError(f"cannot load {path} as a Keras 2 (tf_keras) model: {one_line(error)}") from None
    return from_keras(model, path.stem, path, data, workdir, trained=data is not None, say=say,
                      convert_ir=convert_ir)


def _random_weights(name: str, build: Callable[[], Any], workdir: Path, say: Callable[[str], None]) -> BenchModel:
    say(f"building {name} (weights=None: random weights, latency only)")
    bench = from_keras(build(), name, None, None, workdir, trained=False, say=say)
    bench.notes.append("random weights (weights=None): latency only; int8 agreement is not meaningful")
    return bench


def mobilenet_v2(workdir: Path, say: Callable[[str], None] = lambda _: None) -> BenchModel:
    """MobileNetV2 224x224, random weights (pretrained weights would need a download): latency only."""
    from builder.optimize import tfenv

    keras = tfenv.keras()
    return _random_weights("mobilenet_v2", lambda: keras.applications.MobileNetV2(weights=None,
                                                                                  input_shape=(224, 224, 3)),
                           workdir, say)


def resnet50(workdir: Path, say: Callable[[str], None] = lambda _: None) -> BenchModel:
    """ResNet50 224x224, random weights: latency only."""
    from builder.optimize import tfenv

    keras = tfenv.keras()
    return _random_weights("resnet50", lambda: keras.applications.ResNet50(weights=None,
                                                                           input_shape=(224, 224, 3)),
                           workdir, say)


def example(workdir: Path, say: Callable[[str], None] = lambda _: None, epochs: int = EXAMPLE_EPOCHS
            ) -> BenchModel:
    """The model `tfsmith example` writes (same CNN, same digits split), trained here for `epochs`."""
    from builder.optimize.example import train_example

    say(f"training the example CNN ({epochs} epochs on scikit-learn's bundled digits)")
    model, arrays, _ = train_example(epochs=epochs)
    return from_keras(model, "example", None, arrays, workdir, trained=True, say=say)


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
    builtins: dict[str, Callable[..., BenchModel]] = {"example": example, "mobilenet_v2": mobilenet_v2,
                                                      "resnet50": resnet50}
    if model in builtins:
        return builtins[model](workdir, say)
    raise InputError(f"MODEL {model!r} is neither a file, a folder, nor a built-in ({', '.join(BUILTINS)})")


def _one_in_one_out(name: str, inputs: list[str], outputs: list[str]) -> None:
    if len(inputs) != 1 or len(outputs) != 1:
        raise InputError(f"{name}: tfsmith bench measures models with one input and one output; this one has "
                         f"inputs ({', '.join(inputs)}) and outputs ({', '.join(outputs)})")


def _tflite_contract(path: Path) -> tuple[tuple[int, ...], np.dtype]:
    """The one input's shape (without batch) and dtype of a .tflite; several inputs/outputs are refused."""
    from builder.bench.runtimes import _tflite_interpreter

    interpreter = _tflite_interpreter(path, 1)
    ins, outs = interpreter.get_input_details(), interpreter.get_output_details()
    _one_in_one_out(path.name, [d["name"] for d in ins], [d["name"] for d in outs])
    return tuple(int(d) for d in ins[0]["shape"][1:]), np.dtype(ins[0]["dtype"])


def _tflite_variant(path: Path) -> str:
    """The variant a .tflite is: from optimize's file names, else from its tensors' types.

    Float16 weights mean fp16; int8 tensors are dynamic-range when only weights are int8 (a minority of the
    tensors) and full int8 when activations are too.
    """
    named = _variant_of(path)
    if named in TFLITE_VARIANTS:
        return named
    from builder.bench.runtimes import _tflite_interpreter

    types = [np.dtype(t["dtype"]) for t in _tflite_interpreter(path, 1).get_tensor_details()]
    if any(t == np.float16 for t in types):
        return "fp16"
    int8 = sum(t in (np.dtype(np.int8), np.dtype(np.uint8)) for t in types)
    if int8 == 0:
        return "fp32"
    return "int8" if int8 * 2 > len(types) else "dynamic"


def from_directory_tflite(path: Path, data: dict[str, np.ndarray] | None, workdir: Path) -> BenchModel:
    """A lone .tflite: only the .tflite runtimes can run it (the others say why)."""
    input_shape, dtype = _tflite_contract(path)
    x_eval, y_eval, x_calib, notes = _eval_and_calib(data, input_shape, dtype=dtype)
    reason = "only a .tflite was given"
    return BenchModel(name=path.stem, trained=data is not None, saved_model=None, keras_path=None,
                      tflite={_tflite_variant(path): path}, x_eval=x_eval, y_eval=y_eval, x_calib=x_calib,
                      failures={"savedmodel": reason, "keras": reason, "onnx": reason}, notes=notes,
                      source=str(path))
