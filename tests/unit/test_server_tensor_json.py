"""The numeric fast path of a JSON predict answers exactly what the general path answers, or stands aside.

Differential: every body goes through both `jsoncodec.parse_predict` and `protocol.parse_predict`; where the
fast path takes a body, the arrays (dtype, shape, values), the signature and the row/column form must equal
the general path's; where the general path refuses a body, the fast path must not take it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.report import TensorSpec
from builder.server.protocols import jsoncodec
from builder.server.core.call import RequestError
from builder.server.protocols.jsoncodec import TfsCall
from builder.server.protocols.tfs_rest import SignatureSpec, parse_json, parse_predict


def signatures(dtype: str = "float32", shape: tuple[int | None, ...] = (None, 2, 3), *, inputs: int = 1,
               name: str = "serving_default") -> dict[str, SignatureSpec]:
    specs = tuple(TensorSpec(f"x{i}", dtype, shape) for i in range(inputs))
    out = (TensorSpec("y", "float32", (None, 1)),)
    return {name: SignatureSpec(name, specs, out), "other": SignatureSpec("other", specs, out)}


def general(body: bytes, sigs: dict[str, SignatureSpec], max_batch: int = 64) -> TfsCall | RequestError:
    try:
        return parse_predict(parse_json(body), sigs, max_batch)
    except RequestError as error:
        return error


def assert_same(body: bytes, sigs: dict[str, SignatureSpec], max_batch: int = 64) -> TfsCall | None:
    fast = jsoncodec.parse_predict(body, sigs, max_batch)
    slow = general(body, sigs, max_batch)
    if fast is None:
        return None
    assert not isinstance(slow, RequestError), f"fast path took a body the general path refuses: {slow}"
    assert (fast.signature, fast.row_format, fast.batch) == (slow.signature, slow.row_format, slow.batch)
    assert fast.inputs.keys() == slow.inputs.keys()
    for name, array in fast.inputs.items():
        assert array.dtype == slow.inputs[name].dtype and array.shape == slow.inputs[name].shape
        np.testing.assert_array_equal(array, slow.inputs[name])
    return fast


def test_rows_and_columns_take_the_fast_path_with_the_general_answer() -> None:
    x = np.random.default_rng(0).random((3, 2, 3), dtype=np.float32)
    for body in ({"instances": x.tolist()}, {"inputs": x.tolist()},
                 {"signature_name": "other", "instances": x.tolist()}, {"instances": x.tolist(), "signature_name": ""}):
        encoded = json.dumps(body).encode()
        call = assert_same(encoded, signatures())
        assert call is not None, body.keys()
        np.testing.assert_array_equal(call.inputs["x0"], x)
    pretty = json.dumps({"instances": x.tolist()}, indent=2).encode()
    assert assert_same(pretty, signatures()) is not None


@pytest.mark.parametrize("body", [
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5]]]}',          # ragged innermost
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3,4],[5,6]]]}',       # ragged, same count of numbers
    b'{"instances": [[[1,2,3],[4,5,6,7,8,9]]]}',                     # 9 numbers, wrong nesting
    b'{"instances": [[1,2,3,4,5,6]]}',                               # right count, too shallow
    b'{"instances": [[[1,2,3],[4,5,[6]]]]}',                         # too deep at one leaf
    b'{"instances": [[[1,2,3],[4,5,true]]]}',                        # a boolean among numbers
    b'{"instances": [[[1,2,3],[4,5,NaN]]]}',                         # a literal only the standard library reads
    b'{"instances": [[[1,2,3],[4,5,1e400]]]}',                       # beyond a double
    b'{"instances": [[[1,2,3],[4,5,3.5e38]]]}',                      # beyond float32
    b'{"instances": [[[1,2,3],[4,5,6]]], "instances": [[[1,2,3],[4,5,6]]]}',  # duplicate key
    b'{"instances": [[[1,2,3],[4,5,6]]], "inputs": [[[1,2,3],[4,5,6]]]}',
    b'{"instances": [[[1,2,3],[4,5,6]]], "extra": 1}',
    b'{"\\u0069nstances": [[[1,2,3],[4,5,6]]]}',                     # an escaped key
    b'{"instances": [[[1,2,3],[4,5,6]]], "signature_name": "nope"}',
    b'{"instances": [[[1,2,3],[4,5,6]]], "signature_name": 7}',
    b'{"instances": []}',
    b'{"instances": [[[1,2,3],[4,5,6]]]',                            # truncated
    b'[[[1,2,3],[4,5,6]]]',
    b'{"instances": {"x0": [[1,2,3],[4,5,6]]}}',
])
def test_what_the_fast_path_cannot_be_sure_of_goes_to_the_general_path(body: bytes) -> None:
    assert jsoncodec.parse_predict(body, signatures(), 64) is None
    assert_same(body, signatures())


def test_a_batch_over_the_limit_is_left_to_the_general_refusal() -> None:
    body = json.dumps({"instances": np.zeros((5, 2, 3)).tolist()}).encode()
    assert jsoncodec.parse_predict(body, signatures(), 4) is None
    assert isinstance(general(body, signatures(), 4), RequestError)


@pytest.mark.parametrize(("dtype", "values", "taken"), [
    ("int32", [[[1, 2, 3], [4, 5, -6]]], True),
    ("int8", [[[1, 2, 3], [4, 5, 300]]], False),        # out of range: the general path's refusal
    ("uint8", [[[1, 2, 3], [4, 5, -1]]], False),
    ("int64", [[[1, 2, 3], [4, 5, 2**62]]], True),
    ("int32", [[[1, 2, 3], [4, 5, 6.0]]], False),        # 6.0 for an integer input: general path decides
    ("float16", [[[1, 2, 3], [4, 5, 6.5]]], True),
    ("float64", [[[0.1, 2, 3], [4, 5, 6]]], True),
    ("float32", [[[1, 2, 3], [4, 5, 2**60]]], False),    # beyond exact doubles: the general path's rounding
    ("bool", [[[True, False, True], [True, True, False]]], False),
    ("object", [[["a", "b", "c"], ["d", "e", "f"]]], False),
])
def test_dtypes(dtype: str, values: Any, taken: bool) -> None:
    body = json.dumps({"instances": values}).encode()
    assert (assert_same(body, signatures(dtype)) is not None) is taken


def test_signatures_it_does_not_take() -> None:
    body = json.dumps({"instances": np.zeros((1, 2, 3)).tolist()}).encode()
    assert jsoncodec.parse_predict(body, signatures(shape=(None, None, 3)), 64) is None  # dynamic dimension
    assert jsoncodec.parse_predict(body, signatures(inputs=2), 64) is None


def test_scalar_rows() -> None:
    call = assert_same(b'{"instances": [1.5, 2, -3e2]}', signatures(shape=(None,)))
    assert call is not None and call.inputs["x0"].tolist() == [1.5, 2.0, -300.0]


def test_the_parser_is_reusable_after_a_refusal() -> None:
    good = json.dumps({"instances": np.ones((2, 2, 3)).tolist()}).encode()
    assert jsoncodec.parse_predict(b'{"instances": [[[1,2,3],[4,5,[6]]]]}', signatures(), 64) is None
    assert jsoncodec.parse_predict(good, signatures(), 64) is not None
    assert jsoncodec.parse_predict(good, signatures(), 64) is not None


numbers = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False, width=64),
                    st.booleans())
leaf_lists = st.recursive(numbers, lambda inner: st.lists(inner, min_size=0, max_size=4), max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(value=leaf_lists, key=st.sampled_from(["instances", "inputs"]), indent=st.sampled_from([None, 1]),
       dtype=st.sampled_from(["float32", "float64", "int32", "uint8", "float16"]),
       shape=st.sampled_from([(None,), (None, 2), (None, 2, 3), (None, 1, 1)]))
def test_any_body_gets_the_general_answer(value: Any, key: str, indent: int | None, dtype: str,
                                          shape: tuple[int | None, ...]) -> None:
    assert_same(json.dumps({key: value}, indent=indent).encode(), signatures(dtype, shape))


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 3), seed=st.integers(0, 2**16), shape=st.sampled_from([(2,), (2, 3), (1, 4, 2)]),
       dtype=st.sampled_from(["float32", "float64", "float16"]))
def test_rectangular_numbers_are_always_taken(rows: int, seed: int, shape: tuple[int, ...], dtype: str) -> None:
    x = np.random.default_rng(seed).standard_normal((rows, *shape)) * 100
    body = json.dumps({"instances": x.tolist()}).encode()
    assert assert_same(body, signatures(dtype, (None, *shape))) is not None


def test_integers_beyond_a_narrower_float_are_refused_not_made_infinite() -> None:
    answer = general(b'{"instances": [70000, 1]}', signatures("float16", (None,)))
    assert isinstance(answer, RequestError) and "out of range for float16" in str(answer)
    taken = general(b'{"instances": [60000, 1]}', signatures("float16", (None,)))
    assert isinstance(taken, TfsCall) and np.isfinite(taken.inputs["x0"]).all()


# --- v2 (Open Inference Protocol) JSON bodies --------------------------------------------------------------

from builder.server.protocols import v2  # noqa: E402


def v2_signature(dtype: str = "float32", inputs: tuple[str, ...] = ("x",)) -> SignatureSpec:
    return SignatureSpec("serving_default", tuple(TensorSpec(n, dtype, (None, 3)) for n in inputs),
                         (TensorSpec("y", "float32", (None, 1)),))


def v2_general(body: bytes, signature: SignatureSpec) -> dict[str, np.ndarray] | str:
    try:
        return v2.parse_inputs(parse_json(body), signature, memoryview(b""))
    except RequestError as error:
        return f"error: {error}"


def v2_same(body: bytes, signature: SignatureSpec) -> bool:
    """True when the fast path took the body; asserts it answers exactly what the general path answers."""
    document = jsoncodec.v2_document(body, v2.DATATYPES)
    if document is None:
        return False
    plain = parse_json(body)
    assert {k: v for k, v in document.items() if k != "inputs"} == {k: v for k, v in plain.items() if k != "inputs"}
    try:
        fast: dict[str, np.ndarray] | str = v2.parse_inputs(document, signature, memoryview(b""))
    except RequestError as error:
        fast = f"error: {error}"
    slow = v2_general(body, signature)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
    else:
        assert fast.keys() == slow.keys()
        for name, array in fast.items():
            assert array.dtype == slow[name].dtype and array.shape == slow[name].shape
            np.testing.assert_array_equal(array, slow[name])
    return True


def test_v2_flat_numbers_take_the_fast_path() -> None:
    x = np.random.default_rng(3).random((2, 3), dtype=np.float32)
    body = json.dumps({"id": "a", "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                                              "data": x.ravel().tolist()}], "outputs": [{"name": "y"}]}).encode()
    assert v2_same(body, v2_signature())
    document = jsoncodec.v2_document(body, v2.DATATYPES)
    assert isinstance(document["inputs"][0]["data"], np.ndarray)
    two = json.dumps({"inputs": [{"name": n, "shape": [1, 3], "datatype": "INT32", "data": [1, 2, -3]}
                                 for n in ("a", "b")]}, indent=1).encode()
    assert v2_same(two, v2_signature("int32", ("a", "b")))
    named_data = json.dumps({"inputs": [{"name": "data", "shape": [1, 3], "datatype": "FP32",
                                         "data": [1, 2, 3]}]}).encode()
    assert v2_same(named_data, v2_signature(inputs=("data",)))  # an input called "data" is still a string


@pytest.mark.parametrize("datatype, dtype", [("FP32", np.float32), ("FP16", np.float16), ("INT8", np.int8),
                                             ("UINT16", np.uint16), ("FP64", np.float64)])
def test_v2_the_fast_path_types_the_numbers_it_reads_so_v2_does_not_read_them_again(datatype: str, dtype: Any) -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 3], "datatype": datatype, "data": [1, 2, 3]}]}).encode()
    document = jsoncodec.v2_document(body, v2.DATATYPES)
    assert document is not None and document["inputs"][0]["data"].dtype == dtype
    assert v2_same(body, v2_signature(np.dtype(dtype).name))


@pytest.mark.parametrize("datatype, data", [("INT8", [1, 2, 300]), ("FP16", [1.0, 2.0, 1e6]), ("UINT8", [1, 2, -1])])
def test_v2_a_number_its_datatype_cannot_hold_is_left_to_the_general_path_which_refuses_it(datatype: str,
                                                                                           data: list[Any]) -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 3], "datatype": datatype, "data": data}]}).encode()
    document = jsoncodec.v2_document(body, v2.DATATYPES)
    assert document is not None and isinstance(document["inputs"][0]["data"], list)
    refused = v2_general(body, v2_signature(np.dtype(v2.DATATYPES[datatype]).name))
    assert isinstance(refused, str) and "out of range" in refused
    assert v2_same(body, v2_signature(np.dtype(v2.DATATYPES[datatype]).name))


@pytest.mark.parametrize("data", [
    [[1, 2, 3], [4, 5, 6]],   # nested: the general path reads it too, and decides
    [[1], 2, 3, 4, 5, 6],     # ragged: refused by the general path
    [1, 2, 3, 4, 5, True],
    [1, 2, 3, 4, 5, "6"],
    [1, 2, 3, 4, 5, 2**60],
])
def test_v2_what_is_not_flat_numbers_gets_the_general_answer(data: Any) -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": data}]}).encode()
    v2_same(body, v2_signature())
    document = jsoncodec.v2_document(body, v2.DATATYPES)
    assert document is None or not isinstance(document["inputs"][0]["data"], np.ndarray)


def test_v2_bodies_with_escapes_or_stray_data_keys_take_the_general_path() -> None:
    escaped = b'{"inputs": [{"name": "x\\u0020", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}'
    assert jsoncodec.v2_document(escaped, v2.DATATYPES) is None
    stray = b'{"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3], ' \
            b'"parameters": {"d1ata": [[1]]}}]}'
    assert jsoncodec.v2_document(stray, v2.DATATYPES) is None
    assert v2_general(stray, v2_signature()).startswith("error:")


@settings(max_examples=300, deadline=None)
@given(data=st.lists(numbers, max_size=8) | leaf_lists, datatype=st.sampled_from(["FP32", "FP64", "INT32", "UINT8",
                                                                               "FP16", "INT64", "BOOL"]),
       shape=st.sampled_from([[2, 3], [1, 3], [0, 3]]), indent=st.sampled_from([None, 2]))
def test_v2_any_body_gets_the_general_answer(data: Any, datatype: str, shape: list[int], indent: int | None) -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}]},
                      indent=indent).encode()
    v2_same(body, v2_signature(v2.DATATYPES[datatype]))


# --- bodies in doubt, and which decoder the general path uses ---------------------------------------------

@pytest.mark.parametrize("body", [
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5,6]]], "signature_name": "other"}',
    b'{"\\u0069nstances": [[[1,2,3],[4,5,6]]]}',                  # escaped key: the standard library reads it
    b'{"signature_name": "a[b", "instances": [[[1,2,3],[4,5,6]]]}',
    b'{"signature_name": "x]", "instances": [[[1,2,3],[4,5,6]]]}',  # unknown signature (the general refusal)
    b'{"instances": -[[[1,2,3],[4,5,6]]]}',
    b'{"instances": [[[1,2,3],[4,5,6]]]}\x0c',                     # a blank JSON does not allow
    b'{"instances": [[[1,2,3],[4,5,6]]]} x',
    b'{"instances": [[[1,2,3],[4,5,6]]]}}',
    b'{"instances": [[[1,2,3],[4,5,6]]]',
    b'{"instances": [[[1,2,3],[4,,6]]]}',
    b'{"instances": [[[1,2,3],[4,5 6]]]}',
    b'{"instances": [[[1,2,3],[4],[5,6]]]}',                       # ragged, same count
    b'{"instances": [[[1,2],[3,4,5,6]]]}',
    b'{"instances": [[[1,2,3],[4,5,"6"]]]}',
    b'{"instances": [[[1,2,3],[4,5,NaN]]]}',
    b'{"instances": [[[1,2,3],[4,5,true]]]}',
    b'{"instances": [[[1,2,3],[4,5,1e400]]]}',
    b'{"instances": [[[1,2,3],[4,5,6]]], "instances": [[[1,2,3],[4,5,6]]]}',
    b'{"instances": 1, "inputs": [[[1,2,3],[4,5,6]]]}',
    b'{"signature_name": 7, "instances": [[[1,2,3],[4,5,6]]]}',
    b'{"extra": 1, "instances": [[[1,2,3],[4,5,6]]]}',
    b'\xef\xbb\xbf{"instances": [[[1,2,3],[4,5,6]]]}',               # a byte order mark
])
def test_the_fast_path_takes_nothing_the_general_path_refuses(body: bytes) -> None:
    call = assert_same(body, signatures())
    assert call is None or not isinstance(general(body, signatures()), RequestError)


@pytest.mark.parametrize("body, left", [
    (b'{"instances": [[[1,2,3],[4,5,NaN]]]}', jsoncodec.Left.UNREADABLE),  # simdjson refuses NaN
    (b'{"instances": [[[1,2,3],[4,5,6]]]', jsoncodec.Left.UNREADABLE),
    (b'{"instances": [[[1,2,3],[4,5,123456789012345678901234567890]]]}', jsoncodec.Left.UNREADABLE),
    (b'{"instances": [[[1,2,3],[4],[5,6]]]}', jsoncodec.Left.PARSED),      # read, but ragged
    (b'{"instances": [[[1,2,3],[4,5,"6"]]]}', jsoncodec.Left.PARSED),
])
def test_a_body_left_to_the_general_path_says_which_decoder_reads_it(body: bytes, left: jsoncodec.Left) -> None:
    assert jsoncodec.read_predict(body, signatures(), 64) is left


def test_the_general_path_reads_a_body_once_and_answers_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body the fast path leaves is decoded exactly once more: by msgspec when simdjson read it, by the
    standard library when simdjson refused it; refusals keep the standard library's message."""
    from builder.server.protocols import jsoncodec
    from builder.server.protocols.tfs_rest import decode_predict

    reads: list[bool] = []
    loads = jsoncodec.loads
    monkeypatch.setattr(jsoncodec, "loads", lambda body, standard=False: reads.append(standard) or loads(body, standard))
    sigs = signatures()
    ragged = b'{"instances": [[[1,2,3],[4],[5,6]]]}'
    with pytest.raises(RequestError):
        decode_predict(ragged, sigs, 64, None)
    named = b'{"instances": [{"x0": [[1,2,3],[4,5,6]]}]}'
    assert decode_predict(named, sigs, 64, None).inputs["x0"].shape == (1, 2, 3)
    with pytest.raises(RequestError, match="malformed JSON body: Expecting ',' delimiter"):
        decode_predict(b'{"instances": [1 2]}', sigs, 64, None)
    nan = b'{"instances": [[[1,2,3],[4,5,NaN]]]}'
    assert np.isnan(decode_predict(nan, sigs, 64, None).inputs["x0"][0, 1, 2])
    assert reads == [False, False, True, True]
    fast = json.dumps({"instances": [[[1, 2, 3], [4, 5, 6]]]}).encode()
    assert decode_predict(fast, sigs, 64, None).inputs["x0"].dtype == np.float32
    assert reads == [False, False, True, True]  # the fast path alone
