"""The data plane's call and its rules (`core/call.py`), and each protocol's decoding into it, for signatures
beyond one batched float32 input: a scalar input beside a batched one, a scalar-only signature, float64."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builder.model.signature import SignatureSpec, TensorSpec
from builder.server.core.call import Call, RequestError, batch_of, check_shape, make_call
from builder.server.protocols import jsoncodec, tfs_rest, v2

SCALAR_BESIDE = SignatureSpec("serving_default",
                              inputs=(TensorSpec("features", "float32", (None, 3)), TensorSpec("temperature", "float32", ())),
                              outputs=(TensorSpec("probs", "float32", (None, 3)),))
SCALARS_ONLY = SignatureSpec("serving_default", inputs=(TensorSpec("t", "float32", ()),),
                             outputs=(TensorSpec("y", "float32", ()),))
DOUBLES = SignatureSpec("serving_default", inputs=(TensorSpec("state", "float64", (None, 2)),),
                        outputs=(TensorSpec("value", "float64", (None, 1)),))


def test_a_scalar_beside_a_batch_is_checked_as_a_scalar_and_the_batch_comes_from_the_batched_input() -> None:
    features = np.zeros((4, 3), np.float32)
    temperature = np.array(0.5, np.float32)
    call = make_call(SCALAR_BESIDE, {"features": features, "temperature": temperature}, max_batch=64)
    assert call == Call("serving_default", call.inputs, 4) and call.inputs["temperature"].ndim == 0
    with pytest.raises(RequestError, match=r"inputs.temperature: expected rank 0 \(shape \[\]\), got shape \[4\]"):
        make_call(SCALAR_BESIDE, {"features": features, "temperature": np.full(4, 0.5, np.float32)}, max_batch=64)
    with pytest.raises(RequestError, match="expected rank 2"):
        check_shape(np.zeros(3, np.float32), SCALAR_BESIDE.inputs[0], "inputs.features", batched=True)


def test_a_signature_of_scalars_only_is_a_batch_of_one() -> None:
    call = make_call(SCALARS_ONLY, {"t": np.array(2.0, np.float32)}, max_batch=1)
    assert call.batch == 1
    assert batch_of({"a": np.zeros((2, 3)), "b": np.array(1.0)}) == 2
    with pytest.raises(RequestError, match="different batch sizes"):
        batch_of({"a": np.zeros((2, 3)), "b": np.zeros(3)})


def test_tf_serving_columns_carry_a_scalar_and_rows_refuse_it_in_one_line() -> None:
    body = {"inputs": {"features": [[1, 2, 3], [4, 5, 6]], "temperature": 0.5}}
    call = tfs_rest.parse_predict(body, {"serving_default": SCALAR_BESIDE})
    assert call.batch == 2 and call.inputs["temperature"].shape == () and not call.row_format
    rows = {"instances": [{"features": [1, 2, 3], "temperature": 0.5}]}
    with pytest.raises(RequestError, match=r"temperature of this signature are scalars \(shape \[\]\), which the row "
                                           r"format \('instances'\) cannot carry") as refused:
        tfs_rest.parse_predict(rows, {"serving_default": SCALAR_BESIDE})
    assert refused.value.status == 400


def test_v2_carries_a_scalar_beside_a_batch() -> None:
    document = {"inputs": [{"name": "features", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]},
                           {"name": "temperature", "shape": [], "datatype": "FP32", "data": [0.5]}]}
    arrays = v2.parse_inputs(document, SCALAR_BESIDE, memoryview(b""))
    call = make_call(SCALAR_BESIDE, arrays, max_batch=64)
    assert call.batch == 2 and float(call.inputs["temperature"]) == 0.5


def test_float64_passes_every_decoder_exactly() -> None:
    values = [[0.1, 1e-300], [2.5, -3.0]]
    general = tfs_rest.parse_predict({"inputs": values}, {"serving_default": DOUBLES})
    assert general.inputs["state"].dtype == np.float64
    np.testing.assert_array_equal(general.inputs["state"], np.array(values, np.float64))
    fast = jsoncodec.parse_predict(json.dumps({"inputs": values}).encode(), {"serving_default": DOUBLES}, 64)
    if fast is not None:  # the fast path may leave it to the general path, never read it differently
        np.testing.assert_array_equal(fast.inputs["state"], general.inputs["state"])
        assert fast.inputs["state"].dtype == np.float64
    call = make_call(DOUBLES, {"state": np.array(values, np.float64)}, max_batch=64)
    assert call.batch == 2
    with pytest.raises(RequestError, match="expects float64, got float32"):
        make_call(DOUBLES, {"state": np.array(values, np.float32)}, max_batch=64)


TWO_OUTPUTS = SignatureSpec("serving_default", inputs=(TensorSpec("x", "float32", (None, 2)),),
                            outputs=(TensorSpec("a", "float32", (None, 1)), TensorSpec("b", "float32", (None, 1))))


def test_the_outputs_asked_for_are_checked_before_the_inputs_and_kept_in_the_call() -> None:
    x = np.zeros((3, 2), np.float32)
    assert make_call(TWO_OUTPUTS, {"x": x}, max_batch=8).outputs == ()  # none named: every output
    assert make_call(TWO_OUTPUTS, {"x": x}, max_batch=8, outputs=["b"]).outputs == ("b",)
    with pytest.raises(RequestError, match=r"unknown output\(s\) c; this signature has a, b"):
        make_call(TWO_OUTPUTS, {"wrong": x}, max_batch=8, outputs=["c"])  # the outputs first, then the inputs
    with pytest.raises(RequestError, match="missing"):
        make_call(TWO_OUTPUTS, {"wrong": x}, max_batch=8, outputs=["a"])
