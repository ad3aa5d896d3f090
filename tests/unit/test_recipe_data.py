"""DATA checks against the model's shapes (pure numpy): what is accepted, converted, refused, and where
calibration rows come from."""

from __future__ import annotations

import numpy as np
import pytest

from builder.errors import InputError
from builder.optimize.data import Data, shared_rows, validate_data

IN, OUT = (None, 8, 8, 1), (None, 10)


def make(n_train: int = 40, n_val: int = 20, calib: bool = True, seed: int = 0) -> Data:
    rng = np.random.default_rng(seed)
    return Data(
        x_train=rng.random((n_train, 8, 8, 1)), y_train=rng.integers(0, 10, n_train),
        x_val=rng.random((n_val, 8, 8, 1)), y_val=rng.integers(0, 10, n_val),
        x_calib=rng.random((7, 8, 8, 1)) if calib else None, source="d.npz")


def test_valid_data_is_cast_to_float32_and_labels_to_ids() -> None:
    data = make()
    onehot = np.eye(10)[data.y_val]
    checked = validate_data(Data(**{**data.__dict__, "y_val": onehot}), IN, OUT, need_train=True, need_calib=True,
                            calib_samples=5)
    assert checked.x_val.dtype == np.float32 and checked.x_train.dtype == np.float32
    assert np.array_equal(checked.y_val, data.y_val) and checked.y_val.dtype == np.int64
    assert len(checked.x_calib) == 5  # capped at the recipe's calibration_samples


def test_calibration_falls_back_to_training_rows_never_validation() -> None:
    data = make(calib=False)
    checked = validate_data(data, IN, OUT, need_train=False, need_calib=True, calib_samples=100)
    assert np.array_equal(checked.x_calib, data.x_train.astype(np.float32))
    assert shared_rows(checked.x_calib, checked.x_val) == 0


def test_shared_rows_counts_exact_overlap() -> None:
    data = make()
    mixed = np.concatenate([data.x_calib, data.x_val[:3]])
    assert shared_rows(mixed, data.x_val) == 3
    assert shared_rows(None, data.x_val) == 0


@pytest.mark.parametrize(
    ("change", "need_train", "need_calib", "fragment"),
    [
        ({"x_val": np.zeros((20, 64))}, False, False, "x_val has shape (20, 64), the model's input is (N, 8, 8, 1)"),
        ({"x_val": np.zeros((20, 8, 8, 3))}, False, False, "x_val has shape (20, 8, 8, 3)"),
        ({"x_val": np.full((20, 8, 8, 1), "x")}, False, False, "x_val has dtype <U1"),
        ({"x_val": np.full((20, 8, 8, 1), np.nan)}, False, False, "NaN or infinite"),
        ({"x_val": np.zeros((0, 8, 8, 1))}, False, False, "x_val is empty"),
        ({"y_val": np.zeros(19, int)}, False, False, "y_val has 19 labels for 20 inputs"),
        ({"y_val": np.full(20, 10)}, False, False, "class ids 10..10 but the model has 10 outputs"),
        ({"y_val": np.full(20, 1.5)}, False, False, "non-integer values"),
        ({"y_val": np.zeros((20, 3))}, False, False, "y_val has shape (20, 3)"),
        ({"x_calib": np.zeros((0, 8, 8, 1))}, False, True, "x_calib is empty"),
        ({"x_calib": None, "x_train": None, "y_train": None}, False, True, "give x_calib or x_train (never x_val)"),
        ({"y_train": None}, True, False, "needs x_train and y_train"),
    ],
)
def test_bad_data_is_one_line(change: dict, need_train: bool, need_calib: bool, fragment: str) -> None:
    data = Data(**{**make().__dict__, **change})
    with pytest.raises(InputError) as error:
        validate_data(data, IN, OUT, need_train=need_train, need_calib=need_calib, calib_samples=10)
    assert fragment in str(error.value) and "\n" not in str(error.value)
