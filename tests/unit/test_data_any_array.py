"""DATA for any signature (pure numpy): every array numpy can save, in every place DATA has, against signatures
with a scalar beside the batch, only scalars, a fixed batch, an input whose first dimension is no batch, strings
and rank 5 is either read as the signature declares it or refused in one line naming the array; never a
traceback from data.py."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest

from builder.errors import InputError
from builder.model.rows import unbatched
from builder.optimize.data import RawData, _dataset_arrays, split_npz, validate_data
from builder.report import TensorSpec

T = TensorSpec
SIGNATURES: dict[str, tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]] = {
    "scalar beside the batch": ((T("features", "float32", (None, 10)), T("temperature", "float32", ())),
                                (T("probs", "float32", (None, 3)),)),
    "scalars only": ((T("a", "float64", ()), T("b", "int32", ())), (T("total", "float64", ()),)),
    "fixed batch": ((T("a", "float32", (1, 10)), T("b", "int32", (1, 4))), (T("o", "float32", (1, 2)),)),
    "first dimensions no batch": ((T("a", "float32", (2, 5)), T("table", "float32", (3, 4))),
                                  (T("o", "float32", (2, 3)),)),
    "strings": ((T("text", "string", (None,)),), (T("label", "string", (None,)),)),
    "rank 5 of bytes": ((T("x", "uint8", (None, 2, None, 3, 1)),), (T("y", "bool", (None, 2)),)),
    "ids and a string scalar": ((T("ids", "int64", (None, 5)), T("lang", "string", ())), (T("y", "int64", (None,)),)),
}

#: arrays numpy can save (and some only pickling could), each put in every place of DATA in turn
ODD = {
    "0-d float": np.array(1.5), "0-d int": np.array(3), "0-d str": np.array("a"), "0-d bytes": np.array(b"a"),
    "0-d object": np.array(None, dtype=object), "objects": np.array([1, "a", None], dtype=object),
    "ragged objects": np.array([np.zeros(2), np.zeros(3), None], dtype=object),
    "structured": np.zeros(3, dtype=[("a", "f4"), ("b", "i4")]), "0-d structured": np.zeros((), dtype=[("a", "f4")]),
    "empty": np.zeros((0,)), "no rows": np.zeros((0, 10)), "no columns": np.zeros((4, 0)),
    "complex": np.ones((4, 10), np.complex64), "datetime": np.array(["2020-01-01"] * 4, dtype="datetime64[D]"),
    "timedelta": np.zeros(4, "m8[s]"), "void": np.zeros(4, "V3"), "NaN": np.full((4, 10), np.nan),
    "0-d inf": np.array(np.inf), "beyond float32": np.full((4, 10), 1e300), "beyond float16": np.full((4, 10), 7e4),
    "bool": np.ones((4, 10), bool), "unicode": np.array([["ab"] * 10] * 4), "float16": np.ones((4, 10), np.float16),
    "3 rows": np.ones((3, 10)), "rank 1": np.ones(4), "rank 3": np.ones((4, 10, 1)),
    "uint64 max": np.full((4, 10), 2**64 - 1, np.uint64), "bytes objects": np.array([b"a", b"b", b"c", b"d"], object),
    "long double": np.ones((4, 10), np.longdouble), "rank 5": np.ones((4, 2, 7, 3, 1), np.uint8),
    "non-integer ids": np.full((4, 5), 0.5), "negative to uint8": np.full((4, 2, 7, 3, 1), -1),
}


def fitting(inputs: tuple[TensorSpec, ...], split: str = "x_val") -> dict[str, np.ndarray]:
    """x_val (and `split`'s x) that fits the signature (4 rows where it has a batch)."""
    out = {}
    for spec in inputs:
        shape = tuple(4 if d is None else d for d in spec.shape)
        for part in {"x_val", split if split.startswith("x") else "x_train"}:
            out[f"{part}/{spec.name}"] = np.zeros(shape, dtype=np.bytes_ if spec.dtype == "string" else spec.dtype)
    return out


def places(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> list[str]:
    return ([f"x_{split}/{s.name}" for split in ("val", "train", "calib") for s in inputs]
            + [f"y_{split}/{s.name}" for split in ("val", "train") for s in outputs])


def read(arrays: dict[str, np.ndarray], inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]):
    raw = split_npz(arrays, inputs, outputs, "data.npz")
    return validate_data(raw, inputs, outputs, need_train=False, need_calib=False, calib_samples=8)


CASES = [(sig, odd, place) for sig, (ins, outs) in SIGNATURES.items() for odd in ODD for place in places(ins, outs)]


@pytest.mark.parametrize(("signature", "odd"), sorted({(s, o) for s, o, _ in CASES}))
def test_any_array_anywhere_is_read_or_refused_in_one_line_naming_it(signature: str, odd: str) -> None:
    inputs, outputs = SIGNATURES[signature]
    for place in places(inputs, outputs):
        arrays = {**fitting(inputs, place.split("/")[0]), place: ODD[odd]}
        try:
            data = read(arrays, inputs, outputs)
        except InputError as error:
            message = str(error)
            assert "\n" not in message and message.startswith("data data.npz: "), message
            split, _, name = place.partition("/")
            specs = inputs if split.startswith("x") else outputs
            named = place if len(specs) > 1 else split  # a one-input (one-output) model's plain names
            assert f"{named} " in message or f"{split} arrays have different row counts" in message or \
                f"{split} is empty" in message, (place, message)
            continue
        # read: every input with one row axis (an unbatched one in row form), in the model's dtype, rows alike
        rows, free = data.held_out_rows, unbatched(inputs)
        for spec in inputs:
            value = data.x_val[spec.name]
            assert value.shape[0] == rows, (place, spec, value.shape)
            assert value.ndim == len(spec.shape) + (spec.name in free), (place, spec, value.shape)
            assert value.dtype == (np.dtype("S") if spec.dtype == "string" else np.dtype(spec.dtype)) or \
                (spec.dtype == "string" and value.dtype.kind == "S")


def test_every_odd_array_survives_an_npz_round_trip_or_is_one_line(tmp_path) -> None:
    """What np.load gives back (object arrays cannot be read without pickling): still one line."""
    from builder.optimize.data import load_data

    inputs, outputs = SIGNATURES["scalar beside the batch"]
    for odd, value in ODD.items():
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.npz"
        np.savez(path, **{**fitting(inputs), "x_val/temperature": value})
        try:
            raw = load_data(str(path), inputs, outputs)
            validate_data(raw, inputs, outputs, need_train=False, need_calib=False, calib_samples=8)
        except InputError as error:
            assert "\n" not in str(error), (odd, str(error))


def test_a_zero_d_temperature_is_one_value_for_every_row() -> None:
    inputs, outputs = SIGNATURES["scalar beside the batch"]
    data = read({"x_val/features": np.ones((6, 10)), "x_val/temperature": np.array(2.0)}, inputs, outputs)
    assert data.held_out_rows == 6 and data.x_val["temperature"].tolist() == [2.0] * 6


def test_a_signature_of_scalars_takes_one_call_as_declared_labels_included() -> None:
    inputs, outputs = SIGNATURES["scalars only"]
    arrays = {"x_val/a": np.array(1.5), "x_val/b": np.array(2), "y_val/total": np.array(3.5)}
    data = read(arrays, inputs, outputs)
    assert data.held_out_rows == 1 and data.y_val["total"].tolist() == [3.5]
    with pytest.raises(InputError, match=r"y_val has shape \(\): labels are one per row, \(3, ...\)"):
        read({**arrays, "x_val/a": np.arange(3.0)}, inputs, outputs)


def test_a_fixed_batch_is_rows_of_that_batch() -> None:
    inputs, outputs = SIGNATURES["fixed batch"]
    data = read({"x_val/a": np.ones((5, 10)), "x_val/b": np.ones((5, 4), np.int32)}, inputs, outputs)
    assert data.held_out_rows == 5 and data.x_val["a"].shape == (5, 10)
    with pytest.raises(InputError) as error:
        read({"x_val/a": np.ones((5, 9)), "x_val/b": np.ones((5, 4), np.int32)}, inputs, outputs)
    assert "x_val/a has shape (5, 9), input 'a' is (N, 10)" in str(error.value)
    pairs = (T("x", "float32", (2, 3)),)  # a model built for batches of exactly 2 rows
    assert read({"x_val": np.ones((6, 3))}, pairs, (T("y", "float32", (2,)),)).held_out_rows == 6
    with pytest.raises(InputError) as error:
        read({"x_val": np.ones((5, 3))}, pairs, (T("y", "float32", (2,)),))
    assert str(error.value) == ("data data.npz: x_val has 5 rows; input 'x' takes batches of exactly 2 rows, so give "
                                "a multiple of 2")


def test_an_input_whose_first_dimension_is_no_batch_is_read_as_declared_or_per_row() -> None:
    inputs, outputs = SIGNATURES["first dimensions no batch"]  # [2, 5] and [3, 4]: no common batch
    assert unbatched(inputs) == {"a", "table"}
    one = read({"x_val/a": np.ones((2, 5)), "x_val/table": np.ones((3, 4))}, inputs, outputs)
    assert one.held_out_rows == 1 and one.x_val["table"].shape == (1, 3, 4) and one.x_val["a"].shape == (1, 2, 5)
    many = read({"x_val/a": np.ones((7, 2, 5)), "x_val/table": np.ones((3, 4))}, inputs, outputs)
    assert many.held_out_rows == 7 and many.x_val["table"].shape == (7, 3, 4)
    with pytest.raises(InputError) as error:
        read({"x_val/a": np.ones((2, 5)), "x_val/table": np.ones((4, 4))}, inputs, outputs)
    assert str(error.value) == ("data data.npz: x_val/table has shape (4, 4), input 'table' takes no batch: (3, 4) "
                                "(one value for every row) or (N, 3, 4) (one value per row)")


def test_values_a_smaller_float_cannot_hold_are_refused_not_made_infinite() -> None:
    inputs = (T("x", "float16", (None, 2)),)
    outputs = (T("y", "float16", (None,)),)
    with pytest.raises(InputError, match=r"x_val has values outside float16's range \(largest 65504\)"):
        read({"x_val": np.array([[1.0, 7e4]])}, inputs, outputs)
    assert read({"x_val": np.array([[1.0, 6e4]])}, inputs, outputs).x_val["x"].dtype == np.float16
    with pytest.raises(InputError, match="outside float16's range"):  # |int64 min| is no int64: judged as a float
        read({"x_val": np.array([[1, np.iinfo(np.int64).min]])}, inputs, outputs)


def test_a_dataset_naming_no_input_is_one_line() -> None:
    inputs, outputs = SIGNATURES["scalar beside the batch"]
    elements = [({"features": np.zeros((4, 10)), "temperature": np.float32(1), "temp": 1.0}, np.zeros((4, 3)))]
    with pytest.raises(InputError) as error:
        _dataset_arrays(elements, "val", inputs, outputs, "mod:data")
    assert str(error.value) == ("data mod:data: the val dataset's x has 'temp', which names no input of the model "
                                "(it has: features, temperature)")


@pytest.mark.parametrize("elements", [
    [({"features": np.zeros((4, 10)), "temperature": np.float32(2)}, np.zeros((4, 3)))] * 2,  # a scalar per batch
    [({"features": np.zeros(10), "temperature": np.float32(2)}, np.zeros(3))] * 3,  # a scalar per example
    [({"features": np.zeros((4, 10)), "temperature": np.ones(4, np.float32)}, np.zeros((4, 3)))],  # one per row
])
def test_a_dataset_gives_the_scalar_as_declared_or_per_row(elements) -> None:
    inputs, outputs = SIGNATURES["scalar beside the batch"]
    x, y = _dataset_arrays(elements, "val", inputs, outputs, "mod:data")
    raw = RawData({"train": {}, "val": x, "calib": {}}, {"train": {}, "val": y, "calib": {}}, "mod:data")
    data = validate_data(raw, inputs, outputs, need_train=False, need_calib=False, calib_samples=8)
    assert data.x_val["temperature"].shape == (data.held_out_rows,) == (len(data.y_val["probs"]),)


@pytest.mark.parametrize("elements", [
    [({"features": np.zeros((4, 10)), "temperature": 1.0},), ({"features": np.zeros((3, 9)), "temperature": 1.0},)],
    [({"features": np.zeros((4, 10)), "temperature": 1.0},), ({"features": np.zeros(10), "temperature": 1.0},)],
    [({"features": np.zeros((4, 10)), "temperature": np.ones(3)},)],
    [({"features": np.array([None] * 10, dtype=object), "temperature": 1.0},)],
    [({"features": np.zeros((4,), dtype=[("a", "f4")]), "temperature": 1.0},)],
    [None], ["text"], [3], [()], [(1, 2, 3)],
    [({"features": np.zeros((4, 10)), "temperature": 1.0}, np.float32(1))],
])
def test_a_dataset_that_does_not_fit_is_one_line(elements) -> None:
    inputs, outputs = SIGNATURES["scalar beside the batch"]
    with pytest.raises(InputError) as error:
        x, y = _dataset_arrays(elements, "val", inputs, outputs, "mod:data")
        raw = RawData({"train": {}, "val": x, "calib": {}}, {"train": {}, "val": y, "calib": {}}, "mod:data")
        validate_data(raw, inputs, outputs, need_train=False, need_calib=False, calib_samples=8)
    assert "\n" not in str(error.value) and str(error.value).startswith("data mod:data: ")


def test_the_odd_arrays_are_what_numpy_saves() -> None:
    """The cases are real: each plain array round-trips through np.save (objects only with pickling)."""
    for odd, value in ODD.items():
        buffer = io.BytesIO()
        np.save(buffer, value, allow_pickle=value.dtype.hasobject)
        buffer.seek(0)
        back = np.load(buffer, allow_pickle=value.dtype.hasobject)
        assert back.shape == value.shape and back.dtype == value.dtype, odd
    assert len(CASES) == len(set(CASES)) and any(itertools.islice(CASES, 1))
