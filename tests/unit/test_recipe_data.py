"""DATA checks against the model's contract (pure numpy): the named and single-array .npz forms, dtypes kept,
what is refused, and where calibration rows come from."""

from __future__ import annotations

import numpy as np
import pytest

from builder.errors import InputError
from builder.optimize.data import (RawData, distilled_outputs, has_training_data, shared_rows, split_npz,
                                  validate_data)
from builder.report import TensorSpec

IMAGE = (TensorSpec("image", "float32", (None, 8, 8, 1)),)
PROBS = (TensorSpec("probs", "float32", (None, 10)),)
TWO_IN = (TensorSpec("tokens", "int32", (None, 12)), TensorSpec("extra", "float32", (None, 3)))
TWO_OUT = (TensorSpec("label", "float32", (None, 4)), TensorSpec("score", "float32", (None, 1)))


def single(n_train: int = 40, n_val: int = 20, calib: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {"x_train": rng.random((n_train, 8, 8, 1)), "y_train": rng.integers(0, 10, n_train),
              "x_val": rng.random((n_val, 8, 8, 1)), "y_val": rng.integers(0, 10, n_val)}
    if calib:
        arrays["x_calib"] = rng.random((7, 8, 8, 1))
    return arrays


def named(n: int = 30, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for split, rows in (("train", n), ("val", n // 2), ("calib", 5)):
        arrays[f"x_{split}/tokens"] = rng.integers(0, 50, (rows, 12)).astype(np.int64)
        arrays[f"x_{split}/extra"] = rng.random((rows, 3)).astype(np.float32)
    arrays["y_train/label"] = rng.integers(0, 4, n)
    arrays["y_val/label"] = rng.integers(0, 4, n // 2)
    arrays["y_train/score"] = rng.random((n, 1)).astype(np.float32)  # y_val/score absent: labels are optional
    return arrays


def test_single_array_form_for_one_input_one_output_model() -> None:
    raw = split_npz(single(), IMAGE, PROBS, "d.npz")
    data = validate_data(raw, IMAGE, PROBS, need_train=True, need_calib=True, calib_samples=5)
    assert set(data.x_val) == {"image"} and data.x_val["image"].dtype == np.float32
    assert set(data.y_val) == {"probs"}
    assert len(data.x_calib["image"]) == 5 and data.calibration_from == "x_calib"  # capped at calibration_samples


def test_named_form_keeps_id_dtypes_everywhere_and_labels_are_optional_per_output() -> None:
    raw = split_npz(named(), TWO_IN, TWO_OUT, "d.npz")
    data = validate_data(raw, TWO_IN, TWO_OUT, need_train=True, need_calib=True, calib_samples=100)
    for split in (data.x_train, data.x_val, data.x_calib):
        assert split["tokens"].dtype == np.int32 and split["extra"].dtype == np.float32  # ids never become floats
    assert set(data.y_val) == {"label"} and set(data.y_train) == {"label", "score"}


def test_an_output_without_training_labels_is_distilled_not_refused() -> None:
    arrays = {k: v for k, v in named().items() if k != "y_train/score"}
    raw = split_npz(arrays, TWO_IN, TWO_OUT, "d.npz")
    assert has_training_data(raw, TWO_OUT)  # one output's labels are enough to fine-tune
    data = validate_data(raw, TWO_IN, TWO_OUT, need_train=True, need_calib=False, calib_samples=10)
    assert set(data.y_train) == {"label"} and distilled_outputs(TWO_OUT, data.y_train) == ("score",)
    # x_train without any labels: the recipe that asks for fine-tuning gets it all by distillation, while
    # `auto` (has_training_data False) prunes one-shot
    bare = split_npz({k: v for k, v in arrays.items() if not k.startswith("y_train")}, TWO_IN, TWO_OUT, "d.npz")
    assert not has_training_data(bare, TWO_OUT)
    data = validate_data(bare, TWO_IN, TWO_OUT, need_train=True, need_calib=False, calib_samples=10)
    assert data.y_train is None and distilled_outputs(TWO_OUT, data.y_train) == ("label", "score")


def test_calibration_falls_back_to_training_rows_never_validation() -> None:
    raw = split_npz(single(calib=False), IMAGE, PROBS, "d.npz")
    data = validate_data(raw, IMAGE, PROBS, need_train=False, need_calib=True, calib_samples=100)
    assert data.calibration_from == "x_train"
    assert np.array_equal(data.x_calib["image"], data.x_train["image"])
    assert shared_rows(data.x_calib, data.x_val) == 0


def test_shared_rows_counts_exact_overlap() -> None:
    arrays = single()
    x_val = {"image": arrays["x_val"]}
    mixed = {"image": np.concatenate([arrays["x_calib"], arrays["x_val"][:3]])}
    assert shared_rows(mixed, x_val) == 3
    assert shared_rows(None, x_val) == 0


@pytest.mark.parametrize(
    ("arrays", "fragment"),
    [
        ({"x_val": np.zeros((4, 12))}, "'x_val' is one array but the model has 2 inputs: name them (x_val/tokens, x_val/extra)"),
        ({"x_val/text": np.zeros((4, 12))}, "'x_val/text' names no input of the model (it has: extra, tokens)"),
        ({"z_val": np.zeros(3)}, "unknown array 'z_val'"),
        ({"y_calib/label": np.zeros(3)}, "unknown array 'y_calib/label'"),
    ],
)
def test_badly_named_arrays_are_one_line(arrays: dict, fragment: str) -> None:
    with pytest.raises(InputError) as error:
        split_npz(arrays, TWO_IN, TWO_OUT, "d.npz")
    assert fragment in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("change", "need_train", "need_calib", "fragment"),
    [
        ({"x_val/tokens": np.zeros((15, 13), np.int32)}, False, False, "x_val/tokens has shape (15, 13), input 'tokens' is (N, 12)"),
        ({"x_val/tokens": np.full((15, 12), 1.5)}, False, False, "non-integer values; input 'tokens' takes int32 ids"),
        ({"x_val/tokens": np.full((15, 12), 2**40)}, False, False, "outside int32's range"),
        ({"x_val/extra": np.full((15, 3), np.nan, np.float32)}, False, False, "NaN or infinite"),
        ({"x_val/extra": np.full((15, 3), "x")}, False, False, "has dtype <U1"),
        ({"x_val/extra": np.zeros((14, 3), np.float32)}, False, False, "different row counts"),
        ({"y_val/label": np.zeros(14, int)}, False, False, "y_val/label has 14 labels for 15 inputs"),
        ({"x_train/tokens": None, "x_train/extra": None, "y_train/label": None, "y_train/score": None}, True, False,
         "the recipe prunes or trains, which needs x_train rows"),
        ({"x_calib/tokens": None, "x_calib/extra": None, "x_train/tokens": None, "x_train/extra": None,
          "y_train/label": None, "y_train/score": None}, False, True, "give x_calib or x_train (never x_val)"),
        ({"x_val/extra": None}, False, False, "x_val/extra is missing"),
    ],
)
def test_bad_data_is_one_line(change: dict, need_train: bool, need_calib: bool, fragment: str) -> None:
    arrays = {k: v for k, v in {**named(), **change}.items() if v is not None}
    with pytest.raises(InputError) as error:
        raw = split_npz(arrays, TWO_IN, TWO_OUT, "d.npz")
        validate_data(raw, TWO_IN, TWO_OUT, need_train=need_train, need_calib=need_calib, calib_samples=10)
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_function_form_yields_dicts_keyed_by_name(tmp_path, monkeypatch) -> None:
    (tmp_path / "userdata.py").write_text(
        "import numpy as np\n"
        "def rows(n):\n"
        "    for i in range(n):\n"
        "        yield ({'tokens': np.full(12, i % 50, np.int32), 'extra': np.zeros(3, np.float32)},\n"
        "               {'label': np.int64(i % 4)})\n"
        "def splits():\n"
        "    return {'train': list(rows(8)), 'val': list(rows(6))}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from builder.optimize.data import load_data

    raw: RawData = load_data("userdata:splits", TWO_IN, TWO_OUT)
    data = validate_data(raw, TWO_IN, TWO_OUT, need_train=False, need_calib=True, calib_samples=4)
    assert data.x_val["tokens"].shape == (6, 12) and data.x_val["tokens"].dtype == np.int32
    assert data.y_val["label"].tolist() == [0, 1, 2, 3, 0, 1]
    assert data.x_calib["tokens"].shape == (4, 12)


TEXT = (TensorSpec("text", "string", (None, 1)),)


@pytest.mark.parametrize("values", [np.array([["fine"], ["thé"]]), np.array([[b"fine"], ["thé".encode()]]),
                                    np.array([["fine"], [b"th\xc3\xa9"]], dtype=object)])
def test_string_inputs_take_str_bytes_or_objects_and_become_utf8_bytes(values: np.ndarray) -> None:
    from builder.optimize.data import numpy_dtype

    data = validate_data(split_npz({"x_val": values}, TEXT, PROBS, "d.npz"), TEXT, PROBS, need_train=False,
                         need_calib=False, calib_samples=10)
    got = data.x_val["text"]
    assert got.dtype.kind == "S" and got.dtype == np.dtype("S4") and got.shape == (2, 1)  # "thé" is 4 bytes
    assert list(np.char.decode(got[:, 0], "utf-8")) == ["fine", "thé"]
    assert numpy_dtype("string") == np.dtype(np.bytes_) and numpy_dtype("int32") == np.dtype("int32")


def test_numbers_for_a_string_input_are_one_line() -> None:
    with pytest.raises(InputError, match="input 'text' takes strings"):
        validate_data(split_npz({"x_val": np.zeros((3, 1))}, TEXT, PROBS, "d.npz"), TEXT, PROBS, need_train=False,
                      need_calib=False, calib_samples=10)
