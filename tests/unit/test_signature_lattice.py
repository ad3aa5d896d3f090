"""Signatures beyond float32 rows (pure numpy): every dtype the wire carries is one optimize takes; DATA for
inputs that take no batch (a scalar beside the batch, a fixed table, a signature of scalars) read as the
signature declares them; rows called on such a model; the gate judged only where the original answers."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from builder.errors import InputError
from builder.model.rows import as_rows, call_rows, fixed_batch, row_count, take, unbatched
from builder.optimize.data import split_npz, validate_data
from builder.optimize.quality import answered_rows, judge
from builder.report import OutputSpec, TensorSpec

FEATURES = TensorSpec("features", "float32", (None, 10))
TEMPERATURE = TensorSpec("temperature", "float32", ())
TABLE = TensorSpec("table", "float32", (3, 4))
SCALED = (FEATURES, TEMPERATURE)
PROBS = (TensorSpec("probs", "float32", (None, 3)),)


def check(arrays: dict[str, np.ndarray], inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...] = PROBS):
    raw = split_npz(arrays, inputs, outputs, "data.npz")
    return validate_data(raw, inputs, outputs, need_train=False, need_calib=False, calib_samples=8)


def test_which_inputs_take_no_batch() -> None:
    assert unbatched(SCALED) == {"temperature"}
    assert unbatched((FEATURES, TABLE)) == {"table"}
    assert unbatched((TEMPERATURE, TensorSpec("bias", "float32", ()))) == {"temperature", "bias"}
    fixed = (TensorSpec("a", "float32", (1, 10)), TensorSpec("b", "int32", (1, 4)))
    assert unbatched(fixed) == set() and fixed_batch(fixed) == 1
    assert unbatched((TensorSpec("a", "float32", (2, 10)), TABLE)) == {"a", "table"}
    assert fixed_batch(SCALED) is None


def test_a_scalar_beside_the_batch_is_read_as_declared_and_carried_one_value_per_row() -> None:
    rng = np.random.default_rng(0)
    data = check({"x_val/features": rng.random((6, 10)), "x_val/temperature": np.array(2.0)}, SCALED)
    assert data.held_out_rows == 6
    assert data.x_val["temperature"].shape == (6,) and data.x_val["temperature"].dtype == np.float32
    assert np.all(data.x_val["temperature"] == 2.0)


def test_a_value_per_row_is_taken_for_an_input_that_takes_no_batch() -> None:
    rng = np.random.default_rng(0)
    data = check({"x_val/features": rng.random((4, 10)), "x_val/temperature": np.array([1.0, 1.0, 2.0, 3.0])}, SCALED)
    assert list(data.x_val["temperature"]) == [1.0, 1.0, 2.0, 3.0]


def test_a_signature_of_scalars_has_one_row_per_example() -> None:
    inputs = (TensorSpec("a", "float64", ()), TensorSpec("b", "int32", ()))
    outputs = (TensorSpec("sum", "float64", ()),)
    one = check({"x_val/a": np.array(1.5), "x_val/b": np.array(2)}, inputs, outputs)
    assert one.held_out_rows == 1 and one.x_val["a"].shape == (1,)
    many = check({"x_val/a": np.arange(5.0), "x_val/b": np.array(2)}, inputs, outputs)
    assert many.held_out_rows == 5 and list(many.x_val["b"]) == [2] * 5


@pytest.mark.parametrize(("arrays", "expected"), [
    ({"x_val/features": np.zeros((4, 10)), "x_val/temperature": np.zeros((4, 2))},
     "x_val/temperature has shape (4, 2), input 'temperature' takes no batch: () (one value for every row) or (N,)"),
    ({"x_val/features": np.array(1.0), "x_val/temperature": np.array(1.0)},
     "x_val/features has shape (), input 'features' is (N, 10)"),
    ({"x_val/features": np.zeros((4, 9)), "x_val/temperature": np.array(1.0)},
     "x_val/features has shape (4, 9), input 'features' is (N, 10)"),
    ({"x_val/features": np.zeros((4, 10)), "x_val/temperature": np.zeros(3)},
     "different row counts ([3, 4])"),
])
def test_data_that_does_not_fit_is_one_line_naming_the_array_and_the_shape(arrays, expected) -> None:
    with pytest.raises(InputError) as error:
        check(arrays, SCALED)
    assert expected in str(error.value) and "\n" not in str(error.value)


def test_a_fixed_table_beside_the_batch_is_one_value_for_every_row() -> None:
    data = check({"x_val/features": np.zeros((5, 10)), "x_val/table": np.ones((3, 4))}, (FEATURES, TABLE))
    assert data.x_val["table"].shape == (5, 3, 4)
    with pytest.raises(InputError, match=r"takes no batch: \(3, 4\)"):
        check({"x_val/features": np.zeros((5, 10)), "x_val/table": np.ones((4, 4))}, (FEATURES, TABLE))


def test_scalar_labels_are_one_line() -> None:
    with pytest.raises(InputError, match="labels are one per row"):
        check({"x_val/features": np.zeros((4, 10)), "x_val/temperature": np.array(1.0), "y_val": np.array(1)},
              SCALED)


class Model:
    """A model as TF Serving calls it: features [-1, 10] and a scalar temperature, refusing any other rank."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []

    def __call__(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert np.ndim(feed["temperature"]) == 0, "the model takes a scalar temperature"
        self.calls.append((len(feed["features"]), float(feed["temperature"])))
        logits = feed["features"][:, :3] / feed["temperature"]
        return {"probs": logits, "seen": np.asarray(feed["temperature"])}


def test_rows_are_called_in_runs_of_equal_unbatched_values_and_answered_one_per_row() -> None:
    x = as_rows(SCALED, {"features": np.ones((5, 10)), "temperature": np.array(2.0)}, 5)
    x["temperature"][3:] = 4.0
    model = Model()
    answers = call_rows(SCALED, x, model)
    assert model.calls == [(3, 2.0), (2, 4.0)]
    assert answers["probs"].shape == (5, 3) and list(answers["probs"][:, 0]) == [0.5] * 3 + [0.25] * 2
    assert list(answers["seen"]) == [2.0, 2.0, 2.0, 4.0, 4.0]  # an answer without a batch: one per row
    assert row_count(SCALED, x) == 5 and take(SCALED, x, 1, 3)["temperature"].shape == (2,)


def test_a_call_without_row_form_is_passed_as_it_is() -> None:
    model = Model()
    answers = call_rows(SCALED, {"features": np.ones((2, 10)), "temperature": np.float32(2.0)}, model)
    assert model.calls == [(2, 2.0)] and answers["probs"].shape == (2, 3)


def test_a_backend_takes_rows_and_scalars_alike() -> None:
    from builder.model.backend import Backend
    from builder.model.signature import SignatureSpec

    class Fake(Backend):
        runtime = "fake"

        def __init__(self) -> None:
            self.signatures = {"serving_default": SignatureSpec("serving_default", SCALED, PROBS)}
            self.model = Model()

        def _invoke(self, signature, inputs):  # type: ignore[no-untyped-def]
            return {"probs": self.model(inputs)["probs"]}

    backend = Fake()
    declared = backend.predict("serving_default", {"temperature": np.float32(2.0), "features": np.ones((2, 10))})
    rows = backend.predict("serving_default", {"temperature": np.full(4, 2.0), "features": np.ones((4, 10))})
    assert declared["probs"].shape == (2, 3) and rows["probs"].shape == (4, 3)
    assert backend.model.calls == [(2, 2.0), (4, 2.0)]


def test_every_dtype_the_wire_carries_is_one_optimize_takes() -> None:
    from builder.optimize.model_io import SUPPORTED_DTYPES, check_supported
    from builder.wire.tensors import TF_DTYPES

    assert {"float64", "uint16", "uint32", "uint64"} <= SUPPORTED_DTYPES
    assert len(SUPPORTED_DTYPES) == len(TF_DTYPES)
    check_supported("m", (TensorSpec("state", "float64", (None, 4)),), (TensorSpec("value", "float64", (None, 1)),))
    check_supported("m", (TensorSpec("z", "complex64", (None, 4)),), (TensorSpec("w", "complex128", (None,)),))
    check_supported("m", (TensorSpec("b", "bfloat16", (None, 4)),), ())
    with pytest.raises(InputError, match="qint8"):  # a quantized dtype no serving signature holds
        check_supported("m", (TensorSpec("z", "qint8", (None, 4)),), ())


def test_the_gate_sets_aside_rows_where_the_original_answers_nan() -> None:
    rng = np.random.default_rng(0)
    original = rng.dirichlet(np.ones(3), 20).astype(np.float32)
    original[-1] = np.nan  # the all-padding row the gate adds: masked pooling over nothing
    same = original.copy()
    assert list(answered_rows({"probs": original})) == [True] * 19 + [False]
    specs = (OutputSpec("probs", "float32", (None, 3), "regression", "test"),)
    metrics, passed, why = judge({"probs": same}, {"probs": original}, {}, specs, max_accuracy_drop=0.01,
                                 max_relative_error=0.05)
    assert passed, why
    assert metrics[0].value == 0.0 and "1 of 20 rows set aside" in metrics[0].why
    wrong = same.copy()
    wrong[0] = [1.0, 0.0, 0.0] if original[0].argmax() != 0 else [0.0, 1.0, 0.0]
    _, passed, _ = judge({"probs": wrong}, {"probs": original}, {}, specs, max_accuracy_drop=0.01,
                         max_relative_error=0.01)
    assert not passed  # the rows kept are still judged


def test_the_gate_fails_a_file_that_answers_nan_where_the_original_answers() -> None:
    original = np.linspace(0, 1, 10, dtype=np.float32).reshape(10, 1)
    broken = original.copy()
    broken[2] = np.nan
    specs = (OutputSpec("value", "float32", (None, 1), "regression", "test"),)
    metrics, passed, _ = judge({"value": broken}, {"value": original}, {}, specs, max_accuracy_drop=0.01,
                               max_relative_error=0.05)
    assert not passed and "set aside" not in metrics[0].why


class Original:
    """An original model that refuses id 0 (a lookup without it) and answers NaN for an all-zero float row."""

    def predict(self, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids, values = np.asarray(x["ids"]), np.asarray(x["values"], dtype=np.float64)
        if np.any(ids == 0) and np.any(values != 0):
            raise ValueError("id 0 is not in the table")
        with np.errstate(invalid="ignore"):
            return {"mean": values.sum(axis=1, keepdims=True) / (values != 0).sum(axis=1, keepdims=True)}


def test_the_gates_own_rows_are_kept_only_where_the_original_answers_them() -> None:
    from builder.optimize.contract import answered_gate

    x = {"ids": np.array([1, 2, 3, 0]), "values": np.array([[1.0, 2.0], [3.0, 0.0], [0.0, 4.0], [0.0, 0.0]])}
    kept, answers, note = answered_gate(Original(), x, held_out=3, path="m")
    assert len(kept["ids"]) == 3 and list(answers["mean"][:, 0]) == [1.5, 3.0, 4.0]
    assert note and "row after the held-out ones" in note and "set aside" in note
    failing = {"ids": np.array([1, 2, 0]), "values": np.array([[1.0, 2.0], [3.0, 1.0], [5.0, 5.0]])}
    kept, answers, note = answered_gate(Original(), failing, held_out=2, path="m")
    assert len(kept["ids"]) == 2 and len(answers["mean"]) == 2 and note
    whole, answers, note = answered_gate(Original(), {k: v[:3] for k, v in x.items()}, held_out=2, path="m")
    assert len(whole["ids"]) == 3 and note is None


def test_a_held_out_row_the_original_refuses_is_one_line() -> None:
    from builder.optimize.contract import answered_gate

    x = {"ids": np.array([0, 2, 0]), "values": np.array([[1.0, 2.0], [3.0, 1.0], [0.0, 0.0]])}
    with pytest.raises(InputError, match="cannot be called with DATA's x_val rows"):
        answered_gate(Original(), x, held_out=2, path="m")


def test_a_converted_file_gets_back_only_the_dimensions_it_lost() -> None:
    from builder.optimize.quantize import fill_shape

    assert fill_shape([-1, -1, 8, 1], (-1, 8, 8, 1)) == [-1, 8, 8, 1]
    assert fill_shape([-1, 8, 8, 1], (-1, 8, 8, 1)) is None  # nothing lost: the file stays as converted
    assert fill_shape([-1, 4], (-1, 8)) is None  # a known dimension is never changed
    assert fill_shape([-1, -1], (-1, 8, 1)) is None  # another rank: not this tensor's declaration


def test_samples_carry_an_unbatched_input_as_declared_and_only_the_rows_one_request_holds() -> None:
    from builder.optimize.data import sample_rows

    x = as_rows(SCALED, {"features": np.arange(60.0).reshape(6, 10), "temperature": np.array(2.0)}, 6)
    inputs, rows = sample_rows(SCALED, x, 4)
    assert rows == 4 and inputs["features"].shape == (4, 10) and inputs["temperature"].shape == ()
    x["temperature"][2:] = 3.0
    inputs, rows = sample_rows(SCALED, x, 4)
    assert rows == 2 and inputs["features"].shape == (2, 10) and float(inputs["temperature"]) == 2.0
    plain = {"features": np.zeros((5, 10))}
    inputs, rows = sample_rows((FEATURES,), plain, 32)
    assert rows == 5 and inputs["features"].shape == (5, 10)


def test_a_dataset_gives_a_scalar_per_batch_or_per_example() -> None:
    from builder.optimize.data import _dataset_arrays

    batches = [({"features": np.ones((3, 10)), "temperature": np.array(2.0)},),
               ({"features": np.zeros((2, 10)), "temperature": np.array(4.0)},)]
    x, _ = _dataset_arrays(batches, "val", SCALED, PROBS, "data:fn")
    assert x["features"].shape == (5, 10) and list(x["temperature"]) == [2.0] * 3 + [4.0] * 2
    examples = [({"features": np.ones(10), "temperature": np.array(float(i))},) for i in range(4)]
    x, _ = _dataset_arrays(examples, "val", SCALED, PROBS, "data:fn")
    assert x["features"].shape == (4, 10) and list(x["temperature"]) == [0.0, 1.0, 2.0, 3.0]


def test_calibration_rows_give_an_unbatched_input_as_declared() -> None:
    from builder.optimize.quantize import representative_rows

    calib = as_rows(SCALED, {"features": np.ones((3, 10), np.float32), "temperature": np.float32(2.0)}, 3)
    rows = list(representative_rows(calib, {"features": 2, "temperature": 0}))
    assert len(rows) == 3 and rows[0]["features"].shape == (1, 10) and rows[0]["temperature"].shape == ()
    assert list(representative_rows(calib))[0]["temperature"].shape == (1,)  # without the ranks: as they are
