"""Build the lattice's cell models (run as a subprocess: `python -m tests.modelgen.cells OUT SPECS.json`).

Each cell (`tests.modelgen.lattice.Cell`) becomes a `tf.Module` SavedModel with the cell's signature, its DATA
(`x_val/x`, and `x_val/scale` as a 0-d array: one value for every row), the original's answers on a probe
(`<id>.reference.npz`: `x/serving_default/<input>`, `y/serving_default/<output>`; the probe's scale differs from
DATA's) and its contract (`<id>.contract.json`), in the files `tests.modelgen.runner` reads for any model.
A cell whose dtype the model cannot even be written in is a build error, recorded like any other.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from tests.modelgen.lattice import SIZES, Cell, CellSpec

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

VAL_ROWS, PROBE_ROWS = 16, 5
WORDS = ("good", "bad", "fine", "awful", "great", "meh", "ok")
#: DATA's scale and the probe's: the served model is asked with another value than optimize saw
DATA_SCALE, PROBE_SCALE = 2.0, 3.0


def values(cell: Cell, rows: int, rng: np.random.Generator) -> np.ndarray:
    """`rows` rows of x (rank 0: one value per row), in the cell's dtype; small integers, so x times 3 fits."""
    shape = (rows, *SIZES[:max(cell.rank - 1, 0)])
    if cell.dtype == "string":
        return np.array(WORDS, dtype=np.bytes_)[rng.integers(0, len(WORDS), size=shape)]
    if cell.dtype == "bool":
        return rng.random(shape) < 0.5
    if cell.dtype.startswith("complex"):
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(cell.dtype)
    if cell.dtype in ("float16", "bfloat16", "float32", "float64"):
        floats = rng.normal(0.0, 3.0, size=shape)
        if cell.dtype == "bfloat16":
            import ml_dtypes

            return floats.astype(ml_dtypes.bfloat16)
        return floats.astype(cell.dtype)
    return rng.integers(0, 10, size=shape).astype(cell.dtype)


def module_for(cell: Cell) -> Any:
    """The cell's `tf.Module`: y = f(x[, scale]) in x's dtype and shape, summary = one float64 per row."""
    import tensorflow as tf

    dtype = tf.as_dtype(cell.dtype)
    specs = [tf.TensorSpec(list(cell.x_shape), dtype, name="x")]
    if cell.beside:
        specs.append(tf.TensorSpec([], tf.float32, name="scale"))

    def transform(x: Any, scale: Any | None) -> Any:
        if dtype == tf.string:
            return tf.strings.join([x, tf.strings.as_string(scale, precision=1) if scale is not None else "!"])
        if dtype == tf.bool:
            return tf.math.logical_xor(x, scale > 0) if scale is not None else tf.math.logical_not(x)
        factor = tf.cast(scale, dtype) if scale is not None else tf.constant(2, dtype)
        return x * factor

    def summary(x: Any) -> Any:
        if dtype == tf.string:
            value = tf.cast(tf.strings.length(x), tf.float64)
        elif dtype.is_complex:
            value = tf.cast(tf.math.real(x), tf.float64)
        else:
            value = tf.cast(x, tf.float64)
        if cell.rank <= 1:
            return value
        return tf.reduce_sum(tf.reshape(value, [tf.shape(value)[0], -1]), axis=1)

    class CellModule(tf.Module):
        @tf.function(input_signature=specs)
        def serve(self, x: Any, scale: Any | None = None) -> dict[str, Any]:
            answers = {"y": transform(x, scale), "summary": summary(x)}
            if cell.out_scalar:
                answers["total"] = tf.reduce_sum(answers["summary"])
            return answers

    return CellModule()


def build_one(spec: CellSpec, folder: Path) -> dict[str, Any]:
    import tensorflow as tf

    from tests.modelgen.build import contract_of_saved_model

    cell = spec.the_cell
    rng = np.random.default_rng(spec.seed * 1000 + spec.index)
    module = module_for(cell)
    path = folder / f"{spec.id}.savedmodel"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    x_val = values(cell, VAL_ROWS, rng)
    arrays = {"x_val/x": x_val}
    probe = {"x": values(cell, cell.x_shape[0] if cell.rank and cell.x_shape[0] else PROBE_ROWS, rng)}
    if cell.rank == 0:
        probe["x"] = probe["x"][:1].reshape(())  # a signature of scalars: one call, as declared
    if cell.beside:
        arrays["x_val/scale"] = np.array(DATA_SCALE, np.float32)
        probe["scale"] = np.array(PROBE_SCALE, np.float32)
    data_path = folder / f"{spec.id}.npz"
    np.savez(data_path, **arrays)
    loaded = tf.saved_model.load(str(path)).signatures["serving_default"]
    answers = {k: np.asarray(v.numpy()) for k, v in loaded(**{n: tf.constant(v) for n, v in probe.items()}).items()}
    answers = {k: v.astype(np.bytes_) if v.dtype == object else v for k, v in answers.items()}  # np.load-able
    reference = {**{f"x/serving_default/{n}": v for n, v in probe.items()},
                 **{f"y/serving_default/{n}": v for n, v in answers.items()}}
    np.savez(folder / f"{spec.id}.reference.npz", **reference)
    entry = {"id": spec.id, "spec": spec.as_dict(), "model": str(path), "data": str(data_path),
             "contract": contract_of_saved_model(path), "labels": []}
    (folder / f"{spec.id}.contract.json").write_text(json.dumps(entry, indent=1))
    return entry


def main(argv: list[str]) -> int:
    out, specs_path = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for raw in json.loads(specs_path.read_text()):
        spec = CellSpec(**raw)
        try:
            build_one(spec, out)
            print(f"built {spec.id}", flush=True)
        except Exception as error:  # one cell that cannot be built must not hide the others
            failed += 1
            (out / f"{spec.id}.build-error.txt").write_text(
                f"{type(error).__name__}: {error}\n\n{traceback.format_exc()}")
            print(f"FAILED {spec.id}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
