"""Signatures beyond rows of real numbers, pure numpy.

- An output without a batch beside the batched ones (a sum over the call's rows): optimize's rows get one answer
  per row, each row's own call's, whatever batch they are asked in; a server's call is answered as the model
  answers it, the scalar as declared.
- complex64/complex128: TensorFlow's TensorProto carries them (gRPC), DATA gives them, the gate measures both
  parts; TF Serving's JSON has no complex values and v2 no complex datatype, so those refuse in one line.
- bfloat16 (numpy's spelling from ml_dtypes, as TensorFlow's): `half_val` bit patterns or raw bytes on gRPC, BF16
  on v2, numbers in JSON; DATA gives it as real numbers or as numpy saves a bfloat16 array (2-byte void)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from builder.model.failures import ModelInputError
from builder.model.rows import answer_rows, unbatched_outputs
from builder.report import TensorSpec

FEATURES = TensorSpec("features", "float32", (None, 3))
TEMPERATURE = TensorSpec("temperature", "float32", ())
DOUBLED = TensorSpec("doubled", "float32", (None, 3))
TOTAL = TensorSpec("total", "float64", ())


class Summing:
    """doubled = 2 x features (per row), total = the sum of every value in the call (times the temperature)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        features = np.asarray(x["features"])
        self.calls.append(len(features))
        scale = float(np.asarray(x.get("temperature", 1.0)))
        return {"doubled": features * 2, "total": np.float64(features.sum() * scale)}


def test_which_outputs_carry_no_batch() -> None:
    assert unbatched_outputs((FEATURES,), (DOUBLED, TOTAL)) == {"total"}
    assert unbatched_outputs((FEATURES, TEMPERATURE), (TOTAL,)) == {"total"}
    assert unbatched_outputs((FEATURES,), (DOUBLED,)) == set()
    # a signature of scalars answers once per call: no batch to stand beside
    assert unbatched_outputs((TEMPERATURE,), (TOTAL,)) == set()


def test_rows_get_their_own_calls_answer_whatever_batch_they_come_in() -> None:
    x = {"features": np.arange(12, dtype=np.float32).reshape(4, 3)}
    model = Summing()
    together = answer_rows((FEATURES,), (DOUBLED, TOTAL), x, model)
    assert model.calls == [1, 1, 1, 1]  # each row alone: its answer does not depend on its neighbours
    assert together["total"].shape == (4,) and list(together["total"]) == [3.0, 12.0, 21.0, 30.0]
    np.testing.assert_array_equal(together["doubled"], x["features"] * 2)
    halves = [answer_rows((FEATURES,), (DOUBLED, TOTAL), {"features": x["features"][i:i + 2]}, Summing())
              for i in (0, 2)]
    assert list(np.concatenate([h["total"] for h in halves])) == list(together["total"])


def test_a_scalar_input_in_row_form_goes_with_its_row() -> None:
    x = {"features": np.ones((3, 3), np.float32), "temperature": np.array([1.0, 2.0, 2.0], np.float32)}
    answers = answer_rows((FEATURES, TEMPERATURE), (DOUBLED, TOTAL), x, Summing())
    assert list(answers["total"]) == [3.0, 6.0, 6.0]


def test_a_fixed_batch_is_called_in_its_own_batches() -> None:
    fixed = TensorSpec("features", "float32", (2, 3))
    model = Summing()
    answers = answer_rows((fixed,), (TensorSpec("doubled", "float32", (2, 3)), TOTAL),
                          {"features": np.ones((4, 3), np.float32)}, model)
    assert model.calls == [2, 2] and list(answers["total"]) == [6.0, 6.0, 6.0, 6.0]


def test_without_a_scalar_output_rows_are_called_as_before() -> None:
    model = Summing()
    answers = answer_rows((FEATURES,), (DOUBLED,), {"features": np.ones((5, 3), np.float32)}, model)
    assert model.calls == [5] and answers["doubled"].shape == (5, 3)


def _backend(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]):  # type: ignore[no-untyped-def]
    from builder.model.backend import Backend
    from builder.model.signature import SignatureSpec

    class Fake(Backend):
        runtime = "fake"

        def __init__(self) -> None:
            self.signatures = {"serving_default": SignatureSpec("serving_default", inputs, outputs)}
            self.model = Summing()

        def _invoke(self, signature, feed):  # type: ignore[no-untyped-def]
            return self.model(feed)

    return Fake()


def test_a_server_call_is_answered_as_declared_and_optimize_rows_one_per_row() -> None:
    backend = _backend((FEATURES,), (DOUBLED, TOTAL))
    x = {"features": np.ones((4, 3), np.float32)}
    served = backend.answer("serving_default", x)
    assert np.ndim(served["total"]) == 0 and float(served["total"]) == 12.0 and backend.model.calls == [4]
    rows = backend.predict("serving_default", x)
    assert rows["total"].shape == (4,) and list(rows["total"]) == [3.0] * 4


def test_a_fixed_batch_model_answering_for_the_whole_batch_is_not_split() -> None:
    fixed = TensorSpec("features", "float32", (2, 3))
    backend = _backend((fixed,), (TensorSpec("doubled", "float32", (2, 3)), TOTAL))
    assert float(backend.answer("serving_default", {"features": np.ones((2, 3), np.float32)})["total"]) == 6.0
    with pytest.raises(ModelInputError, match="'total' for the whole batch"):
        backend.answer("serving_default", {"features": np.ones((4, 3), np.float32)})


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("content", [True, False])
def test_complex_tensors_cross_the_tensorproto_as_tensorflow_writes_them(dtype: str, content: bool) -> None:
    from builder.wire.tensors import WireError, fill_proto, read_tensor
    from builder.wire.tfs_proto import TensorProto

    values = (np.arange(6) + 1j * np.arange(6)[::-1]).astype(dtype).reshape(2, 3)
    proto = TensorProto.FromString(fill_proto(TensorProto(), values, content).SerializeToString())
    assert proto.dtype == {"complex64": 8, "complex128": 18}[dtype]
    back, raw = read_tensor(proto, "x")
    assert raw == content and back.dtype == values.dtype
    np.testing.assert_array_equal(back, values)
    field = {"complex64": "scomplex_val", "complex128": "dcomplex_val"}[dtype]
    one = TensorProto(dtype=proto.dtype)
    one.tensor_shape.dim.add(size=2)
    getattr(one, field).extend([1.0, 2.0])  # one (real, imaginary) pair fills the shape, as in TensorFlow
    assert list(read_tensor(one, "x")[0]) == [1 + 2j, 1 + 2j]
    getattr(one, field).append(3.0)
    with pytest.raises(WireError, match="pairs"):
        read_tensor(one, "x")


def test_data_for_a_complex_input_takes_real_or_complex_numbers() -> None:
    from builder.errors import InputError
    from builder.optimize.data import split_npz, validate_data

    z = TensorSpec("z", "complex64", (None, 2))
    out = (TensorSpec("w", "complex64", (None, 2)),)
    for given in (np.ones((4, 2), np.complex128), np.ones((4, 2), np.float32), np.ones((4, 2), np.int64)):
        data = validate_data(split_npz({"x_val": given}, (z,), out, "d.npz"), (z,), out, need_train=False,
                             need_calib=False, calib_samples=8)
        assert data.x_val["z"].dtype == np.complex64
    for bad, why in ((np.full((4, 2), np.nan + 1j), "NaN"), (np.array([["a", "b"]] * 4), "dtype")):
        with pytest.raises(InputError, match=why):
            validate_data(split_npz({"x_val": bad}, (z,), out, "d.npz"), (z,), out, need_train=False,
                          need_calib=False, calib_samples=8)


def test_the_gate_measures_both_parts_of_a_complex_answer() -> None:
    from builder.optimize.contract import answers_moved
    from builder.optimize.quality import fidelity

    original = np.array([[1 + 1j, 2 - 1j], [3 + 0j, -1 + 2j], [0 + 0j, 1 + 1j]], np.complex64)
    assert fidelity(original, original)[0] == 0.0
    imaginary_off = original + 0.5j  # the real parts alone would agree
    assert fidelity(imaginary_off, original)[0] > 0.1
    assert answers_moved({"w": original}, {"w": imaginary_off}) is not None
    assert answers_moved({"w": original}, {"w": original.copy()}) is None


def test_json_and_v2_refuse_a_complex_signature_in_one_line() -> None:
    from builder.model.signature import SignatureSpec
    from builder.server.core.call import RequestError
    from builder.server.protocols.tfs_rest import json_carries

    real = SignatureSpec("serving_default", (FEATURES,), (DOUBLED,))
    json_carries(real)
    spectrum = SignatureSpec("serving_default", (FEATURES,), (TensorSpec("spectrum", "complex64", (None, 3)),))
    with pytest.raises(RequestError, match="output 'spectrum' is complex64: TF Serving's JSON") as refused:
        json_carries(spectrum)
    assert "\n" not in str(refused.value)

    from builder.server.protocols.v2 import carried

    assert carried(real) is real
    with pytest.raises(RequestError, match="v2 has no complex datatype"):
        carried(spectrum)


@pytest.mark.parametrize("content", [True, False])
def test_bfloat16_crosses_the_tensorproto_as_bit_patterns(content: bool) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from builder.wire.tensors import fill_proto, read_tensor
    from builder.wire.tfs_proto import TensorProto

    values = np.array([[0.5, -2.0, 3.0e38], [1.0, 0.0, -1.5]], dtype=ml_dtypes.bfloat16)
    proto = TensorProto.FromString(fill_proto(TensorProto(), values, content).SerializeToString())
    assert proto.dtype == 14 and (len(proto.half_val) == 0) == content
    back, _ = read_tensor(proto, "x")
    assert back.dtype == values.dtype
    np.testing.assert_array_equal(back.astype(np.float32), values.astype(np.float32))


def test_data_for_a_bfloat16_input_takes_numbers_or_numpys_saved_bfloat16() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import io

    from builder.errors import InputError
    from builder.optimize.data import split_npz, validate_data

    b = TensorSpec("b", "bfloat16", (None, 2))
    out = (TensorSpec("o", "float32", (None, 2)),)
    saved = io.BytesIO()
    np.savez(saved, x_val=np.full((4, 2), 1.5, ml_dtypes.bfloat16))
    saved.seek(0)
    as_numpy_saves_it = np.load(saved)["x_val"]
    assert as_numpy_saves_it.dtype.kind == "V"
    for given in (as_numpy_saves_it, np.full((4, 2), 1.5, np.float32), np.ones((4, 2), np.int32)):
        data = validate_data(split_npz({"x_val": given}, (b,), out, "d.npz"), (b,), out, need_train=False,
                             need_calib=False, calib_samples=8)
        assert data.x_val["b"].dtype.name == "bfloat16" and float(data.x_val["b"].astype(np.float32).max()) >= 1.0
    for bad, why in ((np.full((4, 2), 1e39), "range"), (np.full((4, 2), np.inf), "NaN or infinite"),
                     (np.array([["a", "b"]] * 4), "dtype")):
        with pytest.raises(InputError, match=why):
            validate_data(split_npz({"x_val": bad}, (b,), out, "d.npz"), (b,), out, need_train=False,
                          need_calib=False, calib_samples=8)


def test_json_numbers_for_a_bfloat16_input_within_its_range() -> None:
    from builder.server.core.call import RequestError
    from builder.server.protocols.jsoncodec import to_typed_array

    spec = TensorSpec("b", "bfloat16", (None, 2))
    got = to_typed_array([[0.5, 2.0], [1.0, -3.0]], spec, "inputs.b")
    assert got.dtype.name == "bfloat16" and got.astype(np.float32).tolist() == [[0.5, 2.0], [1.0, -3.0]]
    with pytest.raises(RequestError, match="out of range"):
        to_typed_array([[1e39, 0.0]], spec, "inputs.b")


def test_the_report_says_how_a_scalar_output_is_judged() -> None:
    from builder.optimize.contract import make_contract

    reference = {"doubled": np.ones((4, 3), np.float32), "total": np.array([3.0, 6.0, 9.0, 1.0])}
    contract = make_contract((FEATURES,), (DOUBLED, TOTAL), reference, {}, {})
    total = next(o for o in contract.outputs if o.name == "total")
    assert total.task == "regression" and total.task_why.startswith("one value a call, not one a row")
    assert next(o for o in contract.outputs if o.name == "doubled").task_why != total.task_why
