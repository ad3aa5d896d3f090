"""DATA for fine-tuning, calibration and evaluation, checked against the model before any work starts.

Two forms:
- a `.npz` with `x_train`, `y_train`, `x_val`, `y_val` and optionally `x_calib` (`x_val` is required; the rest
  only when the recipe needs it: pruning/QAT need the train split, int8 needs calibration rows);
- `package.module:function` returning `{"train": ds, "val": ds, "calib": ds}` or a tuple `(train, val[, calib])`
  of `tf.data.Dataset`s yielding `(x, y)` (calib: `x`), batched or not. They are read into arrays once.

Calibration rows are `x_calib`, or else taken from the training rows: never from `x_val`, the rows accuracy is
reported on.
"""

from __future__ import annotations

import importlib
import sys
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import InputError


@dataclass(frozen=True)
class Data:
    x_train: np.ndarray | None
    y_train: np.ndarray | None
    x_val: np.ndarray
    y_val: np.ndarray | None
    x_calib: np.ndarray | None
    source: str

    @property
    def has_labels(self) -> bool:
        return self.y_val is not None


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise InputError(f"data {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise InputError(f"data {path}: not a readable .npz ({type(error).__name__}: "
                         f"{str(error).splitlines()[0][:120] if str(error) else ''})") from error


def _dataset_arrays(ds: Any, what: str, source: str, input_rank: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Read a dataset of `(x, y)` or `x` elements; batched when x already has the model's input rank."""
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    try:
        for element in ds:
            if isinstance(element, (tuple, list)):
                xs.append(np.asarray(element[0]))
                if len(element) > 1:
                    ys.append(np.asarray(element[1]))
            else:
                xs.append(np.asarray(element))
    except Exception as error:
        raise InputError(f"data {source}: cannot iterate the {what} dataset ({type(error).__name__})") from error
    if not xs:
        return np.zeros((0,), dtype=np.float32), None
    join = np.concatenate if xs[0].ndim == input_rank else np.stack
    try:
        return join(xs), (join(ys) if ys else None)
    except ValueError as error:
        raise InputError(f"data {source}: the {what} dataset's elements differ in shape ({error})") from error


def _load_function(spec: str, input_rank: int) -> dict[str, np.ndarray]:
    module_name, _, func_name = spec.partition(":")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
        func = getattr(module, func_name)
    except (ImportError, AttributeError) as error:
        raise InputError(f"data {spec}: cannot import {func_name!r} from {module_name!r} ({error})") from error
    try:
        result = func()
    except Exception as error:
        raise InputError(f"data {spec}: the function raised {type(error).__name__}: {error}") from error
    if isinstance(result, dict):
        parts = {k: result.get(k) for k in ("train", "val", "calib")}
    elif isinstance(result, (tuple, list)) and len(result) in (2, 3):
        parts = dict(zip(("train", "val", "calib"), result))
    else:
        raise InputError(f"data {spec}: expected {{'train','val'[,'calib']}} or (train, val[, calib]) datasets")
    arrays: dict[str, np.ndarray] = {}
    for part, ds in parts.items():
        if ds is None:
            continue
        x, y = _dataset_arrays(ds, part, spec, input_rank)
        arrays[f"x_{part}"] = x
        if y is not None and part != "calib":
            arrays[f"y_{part}"] = y
    return arrays


def load_data(spec: str, input_rank: int) -> Data:
    """Read DATA from a .npz path or a `module:function` reference (checked against the model later).

    `input_rank` counts the batch dimension; it tells batched datasets from unbatched ones.
    """
    path = Path(spec)
    if path.suffix == ".npz" or path.exists() or ":" not in spec:
        arrays = _load_npz(path)
    else:
        arrays = _load_function(spec, input_rank)
    allowed = {"x_train", "y_train", "x_val", "y_val", "x_calib"}
    unknown = sorted(set(arrays) - allowed)
    if unknown:
        raise InputError(f"data {spec}: unknown array {unknown[0]!r} (expected: {', '.join(sorted(allowed))})")
    if "x_val" not in arrays:
        raise InputError(f"data {spec}: x_val is missing (held-out rows to report accuracy on are required)")
    return Data(
        x_train=arrays.get("x_train"),
        y_train=arrays.get("y_train"),
        x_val=arrays["x_val"],
        y_val=arrays.get("y_val"),
        x_calib=arrays.get("x_calib"),
        source=spec,
    )


def _check_x(name: str, x: np.ndarray, input_shape: tuple[int | None, ...], source: str) -> np.ndarray:
    if x.dtype.kind not in "fiu":
        raise InputError(f"data {source}: {name} has dtype {x.dtype}, the model needs numbers (float32)")
    expected = tuple(input_shape[1:])
    got = tuple(x.shape[1:])
    if len(got) != len(expected) or any(e is not None and e != g for e, g in zip(expected, got)):
        shown = "(N, " + ", ".join("?" if e is None else str(e) for e in expected) + ")"
        raise InputError(f"data {source}: {name} has shape {x.shape}, the model's input is {shown}")
    if not np.all(np.isfinite(x)):
        raise InputError(f"data {source}: {name} contains NaN or infinite values")
    return x.astype(np.float32, copy=False)


def _check_y(name: str, y: np.ndarray, n: int, classes: int, source: str) -> np.ndarray:
    """Labels as integer class ids (N,) — accepts ids (N,)/(N,1) or one-hot (N, classes)."""
    if y.shape[0] != n:
        raise InputError(f"data {source}: {name} has {y.shape[0]} labels for {n} inputs")
    if y.dtype.kind not in "fiub":
        raise InputError(f"data {source}: {name} has dtype {y.dtype}, expected integer class ids or one-hot")
    if y.ndim == 2 and y.shape[1] == classes and classes > 1:
        return np.argmax(y, axis=1).astype(np.int64)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise InputError(f"data {source}: {name} has shape {y.shape}; expected (N,) class ids or (N, {classes}) one-hot")
    if y.dtype.kind == "f" and not np.all(np.equal(np.mod(y, 1), 0)):
        raise InputError(f"data {source}: {name} has non-integer values; expected class ids")
    ids = y.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= classes):
        raise InputError(f"data {source}: {name} has class ids {int(ids.min())}..{int(ids.max())} but the model "
                         f"has {classes} outputs")
    return ids


def validate_data(data: Data, input_shape: tuple[int | None, ...], output_shape: tuple[int | None, ...], *,
                  need_train: bool, need_calib: bool, calib_samples: int) -> Data:
    """Check DATA against the model and the recipe; returns float32 inputs, integer labels, calibration rows."""
    source = data.source
    classes = int(output_shape[-1]) if output_shape and output_shape[-1] else 1
    if len(data.x_val) == 0:
        raise InputError(f"data {source}: x_val is empty")
    x_val = _check_x("x_val", data.x_val, input_shape, source)
    y_val = _check_y("y_val", data.y_val, len(x_val), classes, source) if data.y_val is not None else None
    x_train = y_train = None
    if data.x_train is not None:
        x_train = _check_x("x_train", data.x_train, input_shape, source)
        if data.y_train is not None:
            y_train = _check_y("y_train", data.y_train, len(x_train), classes, source)
    if need_train and (x_train is None or y_train is None or len(x_train) == 0):
        raise InputError(f"data {source}: the recipe prunes or trains, which needs x_train and y_train")
    x_calib = None
    if data.x_calib is not None:
        if len(data.x_calib) == 0:
            raise InputError(f"data {source}: x_calib is empty (int8 calibration needs representative inputs)")
        x_calib = _check_x("x_calib", data.x_calib, input_shape, source)
    elif need_calib:
        if x_train is None or len(x_train) == 0:
            raise InputError(f"data {source}: int8 needs calibration rows: give x_calib or x_train (never x_val)")
        x_calib = x_train
    if need_calib and x_calib is not None:
        x_calib = x_calib[:calib_samples]
    return replace(data, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val, x_calib=x_calib)


def shared_rows(a: np.ndarray | None, b: np.ndarray | None) -> int:
    """How many rows of `a` also appear, byte for byte, in `b` (calibration leaking into the held-out rows)."""
    if a is None or b is None or len(a) == 0 or len(b) == 0:
        return 0
    seen = {row.tobytes() for row in np.ascontiguousarray(b, dtype=np.float32)}
    return sum(row.tobytes() in seen for row in np.ascontiguousarray(a, dtype=np.float32))
