"""DATA for fine-tuning, calibration and evaluation, named per model input and output, checked before any work.

Two forms:
- a `.npz` whose arrays are named per input and output: `x_train/<input>`, `y_train/<output>`,
  `x_val/<input>`, `y_val/<output>`, `x_calib/<input>`. A model with one input and one output may use the
  plain names `x_train`, `y_train`, `x_val`, `y_val`, `x_calib`. `x_val` is required (the held-out rows every
  number is reported on); the rest only when the recipe needs it (pruning/QAT: the train split; int8: calibration
  rows). Labels are optional per output: an output without `y_val/<output>` is judged by fidelity to the
  original model, and one without `y_train/<output>` is fine-tuned to the original's own answers.
- `package.module:function` returning `{"train": ds, "val": ds, "calib": ds}` or `(train, val[, calib])`, each
  a `tf.data.Dataset` (or any iterable) of `(x, y)` or `x` elements, batched or not, where `x` is a dict keyed by
  input name (or one array for a one-input model) and `y` a dict keyed by output name (or one array).

Each array is read as the signature declares its input: a batched input is rows (N, ...); an input that takes
no batch (a scalar `temperature` beside the batch, a fixed table, a signature of scalars) is one value as
declared, used for every row, or one value per row with a leading axis. Inside, such an input is carried one
value per row (`builder.model.rows`), and a model is called with it as declared.

Dtypes are kept: token ids stay integers everywhere, calibration included (they are cast to the model's input
dtype, never to float). Calibration rows are `x_calib`, or else the first training rows: never `x_val`.
"""

from __future__ import annotations

import importlib
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import InputError
from builder.model.rows import as_rows, fixed_batch, unbatched
from builder.report import TensorSpec
from builder.wire.tensors import BFLOAT16_MAX  # and numpy spells bfloat16 (ml_dtypes registered)

SPLITS = ("train", "val", "calib")
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class RawData:
    """DATA as read: `x[split][input]`, `y[split][output]`, before it is checked against the model."""

    x: dict[str, Arrays]
    y: dict[str, Arrays]
    source: str


@dataclass(frozen=True)
class Data:
    """DATA checked against the contract: arrays keyed by input/output name in the model's dtypes."""

    x_train: Arrays | None
    y_train: Arrays | None
    x_val: Arrays
    y_val: Arrays  # only outputs that have labels
    x_calib: Arrays | None
    calibration_from: str  # x_calib | x_train | none
    source: str

    @property
    def held_out_rows(self) -> int:
        return _rows(self.x_val)

    @property
    def train_rows(self) -> int:
        return _rows(self.x_train) if self.x_train else 0


def _rows(arrays: Mapping[str, np.ndarray] | None) -> int:
    return len(next(iter(arrays.values()))) if arrays else 0


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    from builder.optimize.causes import cause

    if not path.is_file():
        raise InputError(f"data {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise InputError(f"data {path}: not a readable .npz ({type(error).__name__}: "
                         f"{cause(error)})") from error


def split_npz(arrays: Mapping[str, np.ndarray], inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
              source: str) -> RawData:
    """Sort .npz arrays into splits by name; plain `x_val` etc. only for one-input / one-output models."""
    x: dict[str, Arrays] = {s: {} for s in SPLITS}
    y: dict[str, Arrays] = {s: {} for s in SPLITS}
    in_names, out_names = {t.name for t in inputs}, {t.name for t in outputs}
    for key, value in arrays.items():
        prefix, _, name = key.partition("/")
        part, _, split = prefix.partition("_")
        if part not in ("x", "y") or split not in SPLITS or (part == "y" and split == "calib"):
            raise InputError(f"data {source}: unknown array {key!r} (expected x_train/<input>, y_train/<output>, "
                             "x_val/<input>, y_val/<output>, x_calib/<input>)")
        names, specs = (in_names, inputs) if part == "x" else (out_names, outputs)
        if not name:
            if len(specs) != 1:
                listed = ", ".join(f"{key}/{t.name}" for t in specs)
                raise InputError(f"data {source}: {key!r} is one array but the model has {len(specs)} "
                                 f"{'inputs' if part == 'x' else 'outputs'}: name them ({listed})")
            name = specs[0].name
        elif name not in names:
            raise InputError(f"data {source}: {key!r} names no {'input' if part == 'x' else 'output'} of the model "
                             f"(it has: {', '.join(sorted(names))})")
        (x if part == "x" else y)[split][name] = value
    return RawData(x, y, source)


def _as_dict(value: Any, specs: tuple[TensorSpec, ...], what: str, source: str) -> Arrays:
    if isinstance(value, Mapping):
        return {str(k): np.asarray(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)) and len(specs) > 1 and len(value) == len(specs):
        return {s.name: np.asarray(v) for s, v in zip(specs, value)}
    if len(specs) != 1:
        raise InputError(f"data {source}: {what} must be a dict keyed by name ({', '.join(s.name for s in specs)})")
    return {specs[0].name: np.asarray(value)}


def _dataset_arrays(ds: Any, part: str, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
                    source: str) -> tuple[Arrays, Arrays]:
    """Read a dataset of `(x, y)` or `x` elements into arrays; batched when x already has the input's rank."""
    xs: list[Arrays] = []
    ys: list[Arrays] = []
    try:
        for element in ds:
            if isinstance(element, tuple) and len(element) in (1, 2):
                xs.append(_as_dict(element[0], inputs, f"the {part} dataset's x", source))
                if len(element) > 1:
                    ys.append(_as_dict(element[1], outputs, f"the {part} dataset's y", source))
            else:
                xs.append(_as_dict(element, inputs, f"the {part} dataset's x", source))
    except InputError:
        raise
    except Exception as error:
        from builder.optimize.causes import logged

        raise InputError(f"data {source}: cannot iterate the {part} dataset: {type(error).__name__}: "
                         f"{logged('data-' + part, error)}") from error
    if not xs:
        return {}, {}
    names = {s.name for s in inputs}
    stray = sorted({name for chunk in xs for name in chunk} - names)
    if stray:
        raise InputError(f"data {source}: the {part} dataset's x has {stray[0]!r}, which names no input of the model "
                         f"(it has: {', '.join(sorted(names))})")
    rank = {s.name: len(s.shape) for s in inputs}
    free = unbatched(inputs)
    first = next((name for name in xs[0] if name not in free), None)
    batched = first is not None and xs[0][first].ndim == rank.get(first, -1)

    def rows_of(chunk: Arrays) -> int:
        return len(chunk[first]) if batched and first in chunk and np.ndim(chunk[first]) else 1

    def join(chunks: list[Arrays]) -> Arrays:
        out: Arrays = {}
        for name in chunks[0]:
            parts = [c[name] for c in chunks]
            if batched and name in free and all(np.ndim(p) == rank[name] for p in parts):  # one value a batch
                parts = [np.broadcast_to(p, (rows_of(c), *np.shape(p))) for p, c in zip(parts, chunks)]
            try:
                out[name] = np.concatenate(parts) if batched else np.stack(parts)
            except ValueError as error:
                raise InputError(f"data {source}: the {part} dataset's {name!r} elements differ in shape "
                                 f"({error})") from error
        return out

    return join(xs), (join(ys) if ys else {})


def _load_function(spec: str, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> RawData:
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
        from builder.optimize.causes import logged

        raise InputError(f"data {spec}: the function raised {type(error).__name__}: {logged('data', error)}") from error
    if isinstance(result, Mapping):
        parts = {k: result.get(k) for k in SPLITS}
    elif isinstance(result, (tuple, list)) and len(result) in (2, 3):
        parts = dict(zip(SPLITS, result))
    else:
        raise InputError(f"data {spec}: expected {{'train','val'[,'calib']}} or (train, val[, calib]) datasets")
    x: dict[str, Arrays] = {s: {} for s in SPLITS}
    y: dict[str, Arrays] = {s: {} for s in SPLITS}
    for part, ds in parts.items():
        if ds is not None:
            x[part], labels = _dataset_arrays(ds, part, inputs, outputs, spec)
            if part != "calib":
                y[part] = labels
    return RawData(x, y, spec)


def load_data(spec: str, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> RawData:
    """Read DATA from a .npz path or a `module:function` reference, sorted by the model's input/output names."""
    path = Path(spec)
    if path.suffix == ".npz" or path.exists() or ":" not in spec:
        raw = split_npz(_load_npz(path), inputs, outputs, spec)
    else:
        raw = _load_function(spec, inputs, outputs)
    if not raw.x["val"]:
        raise InputError(f"data {spec}: x_val is missing (held-out rows to report quality on are required)")
    return raw


#: The contract's spelling of a string tensor (TensorFlow's `tf.string`).
STRING = "string"


def as_bytes(x: np.ndarray) -> np.ndarray:
    """Strings as a fixed-width bytes array (numpy `S<n>`, UTF-8): what `np.savez`/`np.load(allow_pickle=False)`
    keep and `tf.constant` takes as `tf.string`. `U` (str) arrays are encoded; object arrays of str/bytes too."""
    x = np.asarray(x)
    if x.dtype.kind == "S":
        return x
    if x.dtype.kind == "U":
        return np.char.encode(x, "utf-8")
    flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in x.reshape(-1)]
    return np.array(flat, dtype=np.bytes_).reshape(x.shape)


def numpy_dtype(dtype: str) -> np.dtype:
    """A contract dtype as numpy's: `string` is bytes (`S`), everything else numpy's own name."""
    return np.dtype(np.bytes_) if dtype == STRING else np.dtype(dtype)


def _cast(name: str, where: str, x: np.ndarray, spec: TensorSpec, source: str) -> np.ndarray:
    """`x` in the input's dtype without changing a value (float ids or NaNs are refused, never rounded);
    string inputs take str or bytes arrays (`U`, `S`, or objects) and become UTF-8 bytes."""
    if spec.dtype == STRING:
        if x.dtype.kind not in "SUO":
            raise InputError(f"data {source}: {where} has dtype {x.dtype}; input {name!r} takes strings "
                             "(a str or bytes array)")
        try:
            return as_bytes(x)
        except (TypeError, UnicodeError) as error:
            raise InputError(f"data {source}: {where} holds values that are not strings ({error})") from error
    want = np.dtype(spec.dtype)
    if want.name == "bfloat16":
        return _as_bfloat16(name, where, x, want, source)
    if want.kind == "c":  # complex: any real or complex numbers, finite
        if x.dtype.kind not in "fiuc":
            raise InputError(f"data {source}: {where} has dtype {x.dtype}; input {name!r} takes {want}")
        if x.dtype.kind in "fc" and not np.all(np.isfinite(x)):
            raise InputError(f"data {source}: {where} contains NaN or infinite values")
        return x.astype(want, copy=False)
    if x.dtype.kind not in "fiub":
        raise InputError(f"data {source}: {where} has dtype {x.dtype}; input {name!r} takes {want}")
    if want.kind in "iub" and x.dtype.kind == "f":
        if not np.all(np.isfinite(x)) or not np.all(np.mod(x, 1) == 0):
            raise InputError(f"data {source}: {where} has non-integer values; input {name!r} takes {want} ids")
    if want.kind == "f" and x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise InputError(f"data {source}: {where} contains NaN or infinite values")
    largest = np.finfo(want).max if want.kind == "f" else None
    if largest is not None and x.dtype.kind in "fiu" and x.size and np.max(np.abs(x.astype(np.float64))) > largest:
        raise InputError(f"data {source}: {where} has values outside {want}'s range (largest {largest:g})")
    if want.kind in "iu" and x.size:
        info = np.iinfo(want)
        if x.min() < info.min or x.max() > info.max:
            raise InputError(f"data {source}: {where} has values outside {want}'s range")
    return x.astype(want, copy=False)


def _as_bfloat16(name: str, where: str, x: np.ndarray, want: np.dtype, source: str) -> np.ndarray:
    """Numbers for a bfloat16 input: any real numbers within its range, finite, or a bfloat16 array as numpy
    saves one (`np.savez` writes the 2-byte values as void, `V2`: read back as bfloat16)."""
    if x.dtype.kind == "V" and x.dtype.itemsize == 2 and x.dtype.fields is None:
        x = x.view(want)
    elif x.dtype.name != "bfloat16" and x.dtype.kind not in "fiu":
        raise InputError(f"data {source}: {where} has dtype {x.dtype}; input {name!r} takes {want}")
    wide = x.astype(np.float64)
    if not np.all(np.isfinite(wide)):
        raise InputError(f"data {source}: {where} contains NaN or infinite values")
    if wide.size and np.max(np.abs(wide)) > BFLOAT16_MAX:
        raise InputError(f"data {source}: {where} has values outside {want}'s range (largest {BFLOAT16_MAX:g})")
    return x.astype(want, copy=False)


def _fits(got: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    return len(got) == len(expected) and all(e is None or e == g for e, g in zip(expected, got))


def _shown(dims: tuple[int | None, ...], rows: bool) -> str:
    parts = (["N"] if rows else []) + ["?" if d is None else str(d) for d in dims]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _check_x(split: str, arrays: Arrays, inputs: tuple[TensorSpec, ...], source: str) -> Arrays:
    """x arrays in the model's dtypes, read as the signature declares each input: a batched input is rows
    (N, *its other dimensions); an input that takes no batch (`builder.model.rows`: a scalar beside the batch,
    a fixed table, a signature of scalars) is one value as declared, used for every row, or one value per row
    with a leading axis. Returned in row form: every input with one leading row axis."""
    free = unbatched(inputs)
    out: Arrays = {}
    for spec in inputs:
        key = f"x_{split}/{spec.name}" if len(inputs) > 1 else f"x_{split}"
        if spec.name not in arrays:
            raise InputError(f"data {source}: {key} is missing (the model's inputs: "
                             f"{', '.join(s.name for s in inputs)})")
        x = np.asarray(arrays[spec.name])
        if spec.name in free:
            if not (_fits(x.shape, spec.shape) or _fits(x.shape[1:], spec.shape)):
                raise InputError(f"data {source}: {key} has shape {x.shape}, input {spec.name!r} takes no batch: "
                                 f"{_shown(spec.shape, False)} (one value for every row) or "
                                 f"{_shown(spec.shape, True)} (one value per row)")
        elif x.ndim == 0 or not _fits(x.shape[1:], tuple(spec.shape[1:])):
            raise InputError(f"data {source}: {key} has shape {x.shape}, input {spec.name!r} is "
                             f"{_shown(tuple(spec.shape[1:]), True)}")
        out[spec.name] = _cast(spec.name, key, x, spec, source)
    counts = {len(v) for k, v in out.items() if k not in free or v.ndim == len(_spec(inputs, k).shape) + 1}
    if len(counts) > 1:
        raise InputError(f"data {source}: the x_{split} arrays have different row counts ({sorted(counts)})")
    rows = counts.pop() if counts else 1
    batch = fixed_batch(inputs)
    if batch and rows % batch:
        batched = next(s.name for s in inputs if s.name not in free)
        key = f"x_{split}/{batched}" if len(inputs) > 1 else f"x_{split}"
        raise InputError(f"data {source}: {key} has {rows} rows; input {batched!r} takes batches of exactly {batch} "
                         f"rows, so give a multiple of {batch}")
    return as_rows(inputs, out, rows)


def _spec(inputs: tuple[TensorSpec, ...], name: str) -> TensorSpec:
    return next(s for s in inputs if s.name == name)


def _check_y(split: str, arrays: Arrays, outputs: tuple[TensorSpec, ...], rows: int, source: str) -> Arrays:
    out: Arrays = {}
    for spec in outputs:
        if spec.name not in arrays:
            continue
        key = f"y_{split}/{spec.name}" if len(outputs) > 1 else f"y_{split}"
        y = np.asarray(arrays[spec.name])
        if spec.dtype == STRING and y.dtype.kind in "SUO":  # the answers of a string output, as text
            try:
                y = as_bytes(y)
            except (TypeError, UnicodeError) as error:
                raise InputError(f"data {source}: {key} holds values that are not strings ({error})") from error
        elif y.dtype.kind not in "fiub":
            expected = "strings or numbers" if spec.dtype == STRING else "numbers (class ids or values)"
            raise InputError(f"data {source}: {key} has dtype {y.dtype}, expected {expected}")
        if rows == 1 and y.ndim == 0 and not spec.shape:
            y = y[np.newaxis]  # a scalar output's one answer to a signature of scalars, as the output declares it
        if y.ndim == 0:
            raise InputError(f"data {source}: {key} has shape (): labels are one per row, ({rows}, ...)")
        if len(y) != rows:
            raise InputError(f"data {source}: {key} has {len(y)} labels for {rows} inputs")
        if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
            raise InputError(f"data {source}: {key} contains NaN or infinite values")
        out[spec.name] = y
    return out


def validate_data(raw: RawData, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], *,
                  need_train: bool, need_calib: bool, calib_samples: int) -> Data:
    """Check DATA against the contract and the recipe: inputs in the model's dtypes, labels per output."""
    source = raw.source
    x_val = _check_x("val", raw.x["val"], inputs, source)
    if _rows(x_val) == 0:
        raise InputError(f"data {source}: x_val is empty")
    y_val = _check_y("val", raw.y["val"], outputs, _rows(x_val), source)
    x_train = y_train = None
    if raw.x["train"]:
        x_train = _check_x("train", raw.x["train"], inputs, source)
        y_train = _check_y("train", raw.y["train"], outputs, _rows(x_train), source)
    if need_train and (not x_train or _rows(x_train) == 0):
        raise InputError(f"data {source}: the recipe prunes or trains, which needs x_train rows (with y_train "
                         f"labels for the outputs that have them: {', '.join(s.name for s in outputs)}; the others "
                         "are fine-tuned to the original's own answers)")
    x_calib, calibration_from = None, "none"
    if raw.x["calib"]:
        x_calib, calibration_from = _check_x("calib", raw.x["calib"], inputs, source), "x_calib"
        if _rows(x_calib) == 0:
            raise InputError(f"data {source}: x_calib is empty (int8 calibration needs representative inputs)")
    elif need_calib:
        if not x_train or _rows(x_train) == 0:
            raise InputError(f"data {source}: int8 needs calibration rows: give x_calib or x_train (never x_val)")
        x_calib, calibration_from = x_train, "x_train"
    if x_calib is not None:
        x_calib = {k: v[:calib_samples] for k, v in x_calib.items()}
    return Data(x_train=x_train, y_train=y_train or None, x_val=x_val, y_val=y_val, x_calib=x_calib,
                calibration_from=calibration_from, source=source)


def has_training_data(raw: RawData, outputs: tuple[TensorSpec, ...]) -> bool:
    """x_train and labels for at least one output: what fine-tuning (pruning, QAT) needs. An output without
    labels is fine-tuned to the original model's own answers on the training rows (`distilled_outputs`).

    Why one label and not none: with no labels at all, `auto` prunes one-shot (the highest sparsity the gate
    keeps, found on the held-out rows) rather than fine-tuning to a fixed target on the original's answers alone."""
    return bool(raw.x["train"]) and any(s.name in raw.y["train"] for s in outputs)


def distilled_outputs(outputs: tuple[TensorSpec, ...], y_train: Mapping[str, np.ndarray] | None) -> tuple[str, ...]:
    """The outputs fine-tuning has no training labels for, in the model's order: they are fine-tuned to the
    original model's own answers on the training rows (distillation), so one output without labels does not
    stop pruning or QAT for the others."""
    return tuple(s.name for s in outputs if s.name not in (y_train or {}))


def shared_rows(a: Arrays | None, b: Arrays | None) -> int:
    """How many rows of `a` also appear, byte for byte, in `b` (calibration leaking into the held-out rows)."""
    if not a or not b or _rows(a) == 0 or _rows(b) == 0:
        return 0
    names = sorted(a)

    def keys(arrays: Arrays) -> list[bytes]:
        return [b"".join(np.ascontiguousarray(arrays[n][i]).tobytes() for n in names) for i in range(_rows(arrays))]

    seen = set(keys(b))
    return sum(k in seen for k in keys(a))


def sample_rows(inputs: tuple[TensorSpec, ...], x: Arrays, rows: int) -> tuple[Arrays, int]:
    """(the first held-out rows as one request carries them, how many rows that is): batched inputs their
    first rows, an input that takes no batch as the signature declares it (its row-form value of those rows).
    Rows are cut where that value changes, so one request holds them all. What samples.npz keeps: a client
    sends a scalar `temperature` as a scalar, never one per row."""
    free = unbatched(inputs)
    count = min(rows, _rows(x))
    for spec in inputs:
        if spec.name in free:
            values = np.asarray(x[spec.name])[:count]
            same = [i for i in range(1, count) if not np.array_equal(values[i], values[0])]
            count = same[0] if same else count
    return ({name: np.asarray(v)[0] if name in free else np.asarray(v)[:count] for name, v in x.items()}, count)


def head(arrays: Arrays, rows: int) -> Arrays:
    return {k: v[:rows] for k, v in arrays.items()}
