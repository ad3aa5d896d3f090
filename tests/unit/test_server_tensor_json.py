"""The numeric fast path of a JSON predict answers exactly what the general path answers, or stands aside.

Differential: every body goes through both `tensor_json.parse_predict` and `protocol.parse_predict`; where the
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
from builder.server import tensor_json
from builder.server.protocol import PredictCall, RequestError, SignatureSpec, parse_json, parse_predict


def signatures(dtype: str = "float32", shape: tuple[int | None, ...] = (None, 2, 3), *, inputs: int = 1,
               name: str = "serving_default") -> dict[str, SignatureSpec]:
    specs = tuple(TensorSpec(f"x{i}", dtype, shape) for i in range(inputs))
    out = (TensorSpec("y", "float32", (None, 1)),)
    return {name: SignatureSpec(name, specs, out), "other": SignatureSpec("other", specs, out)}


def general(body: bytes, sigs: dict[str, SignatureSpec], max_batch: int = 64) -> PredictCall | RequestError:
    try:
        return parse_predict(parse_json(body), sigs, max_batch)
    except RequestError as error:
        return error


def assert_same(body: bytes, sigs: dict[str, SignatureSpec], max_batch: int = 64) -> PredictCall | None:
    fast = tensor_json.parse_predict(body, sigs, max_batch)
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
    assert tensor_json.parse_predict(body, signatures(), 64) is None
    assert_same(body, signatures())


def test_a_batch_over_the_limit_is_left_to_the_general_refusal() -> None:
    body = json.dumps({"instances": np.zeros((5, 2, 3)).tolist()}).encode()
    assert tensor_json.parse_predict(body, signatures(), 4) is None
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
    assert tensor_json.parse_predict(body, signatures(shape=(None, None, 3)), 64) is None  # dynamic dimension
    assert tensor_json.parse_predict(body, signatures(inputs=2), 64) is None


def test_scalar_rows() -> None:
    call = assert_same(b'{"instances": [1.5, 2, -3e2]}', signatures(shape=(None,)))
    assert call is not None and call.inputs["x0"].tolist() == [1.5, 2.0, -300.0]


def test_the_parser_is_reusable_after_a_refusal() -> None:
    good = json.dumps({"instances": np.ones((2, 2, 3)).tolist()}).encode()
    assert tensor_json.parse_predict(b'{"instances": [[[1,2,3],[4,5,[6]]]]}', signatures(), 64) is None
    assert tensor_json.parse_predict(good, signatures(), 64) is not None
    assert tensor_json.parse_predict(good, signatures(), 64) is not None


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
    assert isinstance(taken, PredictCall) and np.isfinite(taken.inputs["x0"]).all()


# --- v2 (Open Inference Protocol) JSON bodies --------------------------------------------------------------

from builder.server import v2  # noqa: E402


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
    document = tensor_json.v2_document(body, v2.DATATYPES)
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
    document = tensor_json.v2_document(body, v2.DATATYPES)
    assert isinstance(document["inputs"][0]["data"], np.ndarray)
    two = json.dumps({"inputs": [{"name": n, "shape": [1, 3], "datatype": "INT32", "data": [1, 2, -3]}
                                 for n in ("a", "b")]}, indent=1).encode()
    assert v2_same(two, v2_signature("int32", ("a", "b")))
    named_data = json.dumps({"inputs": [{"name": "data", "shape": [1, 3], "datatype": "FP32",
                                         "data": [1, 2, 3]}]}).encode()
    assert v2_same(named_data, v2_signature(inputs=("data",)))  # an input called "data" is still a string


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
    document = tensor_json.v2_document(body, v2.DATATYPES)
    assert document is None or not isinstance(document["inputs"][0]["data"], np.ndarray)


def test_v2_bodies_with_escapes_or_stray_data_keys_take_the_general_path() -> None:
    escaped = b'{"inputs": [{"name": "x\\u0020", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}'
    assert tensor_json.v2_document(escaped, v2.DATATYPES) is None
    stray = b'{"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3], ' \
            b'"parameters": {"d1ata": [[1]]}}]}'
    assert tensor_json.v2_document(stray, v2.DATATYPES) is None
    assert v2_general(stray, v2_signature()).startswith("error:")


@settings(max_examples=300, deadline=None)
@given(data=st.lists(numbers, max_size=8) | leaf_lists, datatype=st.sampled_from(["FP32", "FP64", "INT32", "UINT8",
                                                                               "FP16", "INT64", "BOOL"]),
       shape=st.sampled_from([[2, 3], [1, 3], [0, 3]]), indent=st.sampled_from([None, 2]))
def test_v2_any_body_gets_the_general_answer(data: Any, datatype: str, shape: list[int], indent: int | None) -> None:
    body = json.dumps({"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}]},
                      indent=indent).encode()
    v2_same(body, v2_signature(v2.DATATYPES[datatype]))


# --- a large body read in two halves at once ------------------------------------------------------------------

class InlineHalves:
    """A `HalfReader` that reads its part in this thread (the helper process's work, `read_half`): the
    decisions around it are `tensor_json`'s, and those are what these tests are about. It checks that it is
    used one body at a time and always freed."""

    def __init__(self, accept: bool = True, answer: bool = True) -> None:
        self.accept, self.answer = accept, answer
        self.memory = bytearray()
        self.busy = False
        self.text: bytes | None = None
        self.floats, self.first = True, False
        self.submitted = 0

    def reserve(self, length: int) -> bytearray | None:
        if not self.accept or self.busy:
            return None
        self.busy, self.memory = True, bytearray(length)
        return self.memory

    def start(self, offset: int, length: int, floats: bool, first: bool) -> bool:
        assert self.busy, "started without a reservation"
        self.text, self.floats, self.first = bytes(self.memory[offset:offset + length]), floats, first
        self.submitted += 1
        return True

    def release(self) -> None:
        assert self.busy and self.text is None, "released what was not reserved, or was started"
        self.busy = False

    def submit(self, text: bytes, floats: bool) -> bool:
        memory = self.reserve(len(text))
        if memory is None:
            return False
        memory[:] = text
        return self.start(0, len(text), floats, first=False)

    def collect(self) -> tuple[np.ndarray, bytes] | None:
        assert self.text is not None, "collected without a started text"
        text, self.text, self.busy = self.text, None, False
        if not self.answer:
            return None
        try:
            return tensor_json.read_half(text, self.floats, first=self.first)
        except tensor_json.READ_ERRORS:  # what the helper answers -1 for
            return None


@pytest.fixture
def split_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small bodies are read in halves too, so generated bodies exercise the cut."""
    monkeypatch.setattr(tensor_json, "SPLIT_MIN_BYTES", 0)


def assert_same_in_halves(body: bytes, sigs: dict[str, SignatureSpec], max_batch: int = 64
                          ) -> tuple[PredictCall | None, InlineHalves]:
    """The halves' answer equals the general path's (as `assert_same`), and the one-core fast path's."""
    halves = InlineHalves()
    fast = tensor_json.parse_predict(body, sigs, max_batch, halves=halves)
    whole = tensor_json.parse_predict(body, sigs, max_batch)
    assert not halves.busy, "reserved but never freed"
    if fast is None:
        return None, halves
    slow = general(body, sigs, max_batch)
    assert not isinstance(slow, RequestError), f"halves took a body the general path refuses: {slow}"
    for other in (slow, whole):
        if other is None:
            continue
        assert (fast.signature, fast.row_format, fast.batch) == (other.signature, other.row_format, other.batch)
        for name, array in fast.inputs.items():
            assert array.dtype == other.inputs[name].dtype and array.shape == other.inputs[name].shape
            np.testing.assert_array_equal(array, other.inputs[name])
    return fast, halves


@pytest.mark.usefixtures("split_everything")
def test_a_rectangular_body_is_read_in_halves_with_the_general_answer() -> None:
    x = np.random.default_rng(7).standard_normal((3, 2, 3)).astype(np.float32)
    for body in ({"instances": x.tolist()}, {"inputs": x.tolist()},
                 {"signature_name": "other", "instances": x.tolist()},
                 {"signature_name": "", "inputs": x.tolist()}):
        for indent in (None, 2):
            call, halves = assert_same_in_halves(json.dumps(body, indent=indent).encode(), signatures())
            assert call is not None and halves.submitted == 1, (body.keys(), indent)
            np.testing.assert_array_equal(call.inputs["x0"], x)
    tokens = json.dumps({"instances": [[[1, 2, 3], [4, 5, -6]]] * 4}).encode()
    call, halves = assert_same_in_halves(tokens, signatures("int32"))
    assert call is not None and halves.submitted == 1 and call.inputs["x0"].dtype == np.int32


def test_the_real_size_is_read_in_halves_with_the_one_core_answer() -> None:
    x = np.random.default_rng(8).random((2, 128, 128, 3), dtype=np.float32)
    body = json.dumps({"instances": x.tolist()}).encode()
    assert len(body) >= tensor_json.SPLIT_MIN_BYTES
    call, halves = assert_same_in_halves(body, signatures(shape=(None, 128, 128, 3)))
    assert call is not None and halves.submitted == 1
    np.testing.assert_array_equal(call.inputs["x0"], x)
    small = json.dumps({"instances": x[:, :8, :8].tolist()}).encode()
    call, halves = assert_same_in_halves(small, signatures(shape=(None, 8, 8, 3)))
    assert call is not None and halves.submitted == 0  # below SPLIT_MIN_BYTES: read whole


@pytest.mark.usefixtures("split_everything")
@pytest.mark.parametrize("body", [
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5,6]]], "signature_name": "other"}',  # tensor not last
    b'{"\\u0069nstances": [[[1,2,3],[4,5,6]]]}',                  # escaped key: the standard library reads it
    b'{"signature_name": "a[b", "instances": [[[1,2,3],[4,5,6]]]}',  # a bracket before the tensor
    b'{"signature_name": "x]", "instances": [[[1,2,3],[4,5,6]]]}',  # unknown signature (the general refusal)
])
def test_what_halves_cannot_read_still_gets_the_general_answer(body: bytes) -> None:
    assert_same_in_halves(body, signatures())
    assert_same(body, signatures())


@pytest.mark.usefixtures("split_everything")
@pytest.mark.parametrize("body", [
    b'{"instances": -[[[1,2,3],[4,5,6]]]}',                        # a sign before the tensor
    b'{"instances": [[[1,2,3],[4,5,6]]]}\x0c',                     # a blank JSON does not allow
    b'{"instances": [[[1,2,3],[4,5,6]]]} x',
    b'{"instances": [[[1,2,3],[4,5,6]]]}}',
    b'{"instances": [[[1,2,3],[4,5,6]]]',
    b'{"instances": [[[1,2,3],[4,,6]]]}',                          # an empty slot at the cut
    b'{"instances": [[[1,2,3],[4,5 6]]]}',
    b'{"instances": [[[1,2,3],[4],[5,6]]]}',                       # ragged across the cut, same count
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
def test_halves_take_nothing_the_general_path_refuses(body: bytes) -> None:
    call, _ = assert_same_in_halves(body, signatures())
    assert call is None or not isinstance(general(body, signatures()), RequestError)


@pytest.mark.usefixtures("split_everything")
def test_a_reader_that_is_busy_or_fails_leaves_the_body_to_one_core() -> None:
    x = np.random.default_rng(9).random((2, 2, 3))
    body = json.dumps({"instances": x.tolist()}).encode()
    for halves in (InlineHalves(accept=False), InlineHalves(answer=False)):
        call = tensor_json.parse_predict(body, signatures("float64"), 64, halves=halves)
        assert call is not None and np.array_equal(call.inputs["x0"], x)
        assert not halves.busy


@pytest.mark.usefixtures("split_everything")
@settings(max_examples=400, deadline=None)
@given(value=leaf_lists, key=st.sampled_from(["instances", "inputs"]), indent=st.sampled_from([None, 1]),
       dtype=st.sampled_from(["float32", "float64", "int32", "uint8", "float16"]),
       shape=st.sampled_from([(None,), (None, 2), (None, 2, 3), (None, 1, 1)]), named=st.booleans())
def test_any_body_read_in_halves_gets_the_general_answer(value: Any, key: str, indent: int | None, dtype: str,
                                                        shape: tuple[int | None, ...], named: bool) -> None:
    body = {"signature_name": "serving_default", key: value} if named else {key: value}
    assert_same_in_halves(json.dumps(body, indent=indent).encode(), signatures(dtype, shape))


@pytest.mark.usefixtures("split_everything")
@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 4), seed=st.integers(0, 2**16), shape=st.sampled_from([(2,), (2, 3), (1, 4, 2), (3, 1)]),
       dtype=st.sampled_from(["float32", "float64", "float16", "int32"]), indent=st.sampled_from([None, 1]))
def test_rectangular_numbers_are_always_read_in_halves(rows: int, seed: int, shape: tuple[int, ...], dtype: str,
                                                       indent: int | None) -> None:
    x = np.random.default_rng(seed).standard_normal((rows, *shape)) * 100
    values = x.round().astype(int).tolist() if dtype == "int32" else x.tolist()
    body = json.dumps({"instances": values}, indent=indent).encode()
    call, halves = assert_same_in_halves(body, signatures(dtype, (None, *shape)))
    if rows * int(np.prod(shape)) > 1:  # one number has no comma to cut at
        assert call is not None and halves.submitted == 1


# --- the Open Inference Protocol's `data` list read in two halves ---------------------------------------------

def assert_same_document(fast: Any, whole: Any) -> None:
    """Two v2 documents are the same: equal values, and arrays of one dtype holding the same numbers."""
    if isinstance(whole, np.ndarray):
        assert isinstance(fast, np.ndarray) and fast.dtype == whole.dtype
        np.testing.assert_array_equal(fast, whole)
    elif isinstance(whole, dict):
        assert isinstance(fast, dict) and list(fast) == list(whole)
        for key in whole:
            assert_same_document(fast[key], whole[key])
    elif isinstance(whole, list):
        assert isinstance(fast, list) and len(fast) == len(whole)
        for a, b in zip(fast, whole):
            assert_same_document(a, b)
    else:
        assert type(fast) is type(whole) and fast == whole


def v2_in_halves(body: bytes, signature: SignatureSpec, halves: InlineHalves | None = None) -> tuple[Any, InlineHalves]:
    """The document read with a reader for halves equals the one-core document (and, through `v2_same`, the
    general path's answer); the reader is free afterwards."""
    halves = halves or InlineHalves()
    fast = tensor_json.v2_document(body, v2.DATATYPES, halves)
    assert not halves.busy, "reserved but never freed"
    whole = tensor_json.v2_document(body, v2.DATATYPES)
    assert (fast is None) == (whole is None)
    if whole is not None:
        assert_same_document(fast, whole)
        v2_same(body, signature)
    return fast, halves


def v2_body(data: Any, datatype: str = "FP32", name: str = "x", indent: int | None = None, **more: Any) -> bytes:
    rows = len(data) // 3 if len(data) % 3 == 0 else 2
    return json.dumps({"inputs": [{"name": name, "shape": [rows, 3], "datatype": datatype, "data": data}], **more},
                      indent=indent).encode()


@pytest.mark.usefixtures("split_everything")
def test_a_v2_data_list_is_read_in_halves_with_the_one_core_document() -> None:
    x = np.random.default_rng(5).standard_normal(6)
    document, halves = v2_in_halves(v2_body(x.tolist(), id="a", outputs=[{"name": "y"}]), v2_signature("float64"))
    assert halves.submitted == 1 and np.array_equal(document["inputs"][0]["data"], x)
    document, halves = v2_in_halves(v2_body(list(range(-30, 30)), "INT32", indent=2), v2_signature("int32"))
    assert halves.submitted == 1 and document["inputs"][0]["data"].tolist() == list(range(-30, 30))
    # blanks between the key, its colon and the list
    numbers = ", ".join(map(str, range(60))).encode()
    spaced = b'{"inputs": [{"name": "x", "shape": [20, 3], "datatype": "FP32", "data" :\n [' + numbers + b"]}]}"
    _, halves = v2_in_halves(spaced, v2_signature())
    assert halves.submitted == 1


@pytest.mark.usefixtures("split_everything")
def test_the_longest_of_several_data_lists_is_read_in_halves_and_stays_with_its_input() -> None:
    short, long = [7.0, 8.0, 9.0], np.random.default_rng(6).random(40).tolist()
    for first, second in ((short, long), (long, short)):
        body = json.dumps({"inputs": [{"name": "a", "shape": [1, len(first)], "datatype": "FP64", "data": first},
                                      {"name": "b", "shape": [1, len(second)], "datatype": "FP64", "data": second}],
                           "parameters": {"note": "data"}}).encode()
        document, halves = v2_in_halves(body, v2_signature("float64", ("a", "b")))
        assert halves.submitted == 1
        assert document["inputs"][0]["data"].tolist() == first and document["inputs"][1]["data"].tolist() == second


#: A v2 body whose `data` list (60 numbers) is most of it, and damage put at that list's middle (`{}`).
V2_DAMAGED = ('{{"inputs": [{{"name": "x", "shape": [20, 3], "datatype": "FP32", "data": [' + ", ".join(
    map(str, range(30))) + "{}, " + ", ".join(map(str, range(30, 60))) + ']}}]{}}}')


@pytest.mark.usefixtures("split_everything")
@pytest.mark.parametrize("damage, after", [
    (", [30]", ""),           # nested
    (", [30, 31]", ""),
    (", true", ""),
    (', "30"', ""),
    (", null", ""),
    (", 1152921504606846976", ""),  # 2**60: beyond what a double holds exactly
    (", 0.5", ""),            # a fraction: taken for FP32 here, refused for an integer type below
    (",", ""),               # an empty slot
    (" 29", ""),             # two numbers without a comma
    ("]", ""),
    ("], [", ""),
    (", {}", ""),
    ("", ', "parameters": {"data": [1]}'),   # a stray data key
    ("", ', "inputs": []'),                  # a repeated key
    ("", ', "data": 1'),
    ("", "}"),
])
def test_v2_bodies_in_doubt_are_not_taken_in_halves(damage: str, after: str) -> None:
    clean = V2_DAMAGED.format("", "").encode()
    taken, halves = v2_in_halves(clean, v2_signature())
    assert taken is not None and halves.submitted == 1  # undamaged, it is read in halves
    damaged = V2_DAMAGED.format(damage, after).encode()
    for body in (damaged, damaged.replace(b'"FP32"', b'"INT32"')):
        halves = InlineHalves()
        try:
            in_halves = tensor_json._v2_in_halves(body, v2.DATATYPES, halves)
        except tensor_json.READ_ERRORS:
            in_halves = None
        assert not halves.busy
        # still flat lists of numbers of the type: a fraction for FP32, 2**60 for INT32 (as int64, which
        # the general path then refuses for int32, as it does the one-core document)
        assert (in_halves is not None) == ((damage, b'"FP32"' in body) in {(", 0.5", True),
                                                                          (", 1152921504606846976", False)})
        v2_in_halves(body, v2_signature("int32" if b'"INT32"' in body else "float32"))


@pytest.mark.usefixtures("split_everything")
def test_a_reader_that_is_busy_or_fails_leaves_a_v2_body_to_one_core() -> None:
    x = np.random.default_rng(8).random(6)
    for halves in (InlineHalves(accept=False), InlineHalves(answer=False)):
        document, _ = v2_in_halves(v2_body(x.tolist()), v2_signature("float64"), halves)
        assert np.array_equal(document["inputs"][0]["data"], x)


def test_a_v2_list_that_is_not_most_of_the_body_is_read_whole() -> None:
    halves = InlineHalves()
    body = v2_body(list(range(6)), parameters={"padding": "x" * tensor_json.SPLIT_MIN_BYTES})
    assert tensor_json.v2_document(body, v2.DATATYPES, halves) is not None and halves.submitted == 0


@pytest.mark.usefixtures("split_everything")
@settings(max_examples=400, deadline=None)
@given(data=st.lists(numbers, max_size=40) | leaf_lists,
       datatype=st.sampled_from(["FP32", "FP64", "INT32", "UINT8", "FP16", "INT64", "BOOL"]),
       indent=st.sampled_from([None, 2]), others=st.integers(0, 2))
def test_any_v2_body_read_in_halves_gets_the_one_core_document(data: Any, datatype: str, indent: int | None,
                                                              others: int) -> None:
    tensors = [{"name": "x", "shape": [2, 3], "datatype": datatype, "data": data}]
    tensors += [{"name": f"o{i}", "shape": [1, 2], "datatype": "FP32", "data": [i, 0.5]} for i in range(others)]
    body = json.dumps({"inputs": tensors}, indent=indent).encode()
    v2_in_halves(body, v2_signature(v2.DATATYPES[datatype], tuple(t["name"] for t in tensors)))


# --- the first part read ahead while the rest arrives -----------------------------------------------------------

def read_ahead(body: bytes, sigs: dict[str, SignatureSpec], pieces: int, halves: InlineHalves, *,
               declared: int | None = None, encoding: str | None = None) -> PredictCall | None:
    """What the REST lane does: begin with the declared length, feed the body in `pieces`, finish (or close)."""
    ahead = tensor_json.ReadAhead.begin(halves, str(len(body) if declared is None else declared), encoding, sigs, None)
    if ahead is None:
        return None
    size = -(-len(body) // pieces)
    for at in range(0, len(body), size):
        ahead.feed(body[at:at + size])
    call = ahead.finish(body, sigs, 64, None)
    ahead.close()
    assert not halves.busy and not ahead.pending, "the reader was not freed"
    return call


@pytest.mark.usefixtures("split_everything")
@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 4), seed=st.integers(0, 2**16), shape=st.sampled_from([(2, 3), (1, 4, 2), (5,), (3, 1)]),
       dtype=st.sampled_from(["float32", "float64", "int32"]), pieces=st.integers(1, 9),
       named=st.booleans(), indent=st.sampled_from([None, 1]))
def test_a_body_read_ahead_gets_the_general_answer(rows: int, seed: int, shape: tuple[int, ...], dtype: str,
                                                   pieces: int, named: bool, indent: int | None) -> None:
    x = np.random.default_rng(seed).standard_normal((rows, *shape)) * 100
    values = x.round().astype(int).tolist() if dtype == "int32" else x.tolist()
    body = json.dumps({"signature_name": "serving_default", "inputs": values} if named else {"instances": values},
                      indent=indent).encode()
    halves = InlineHalves()
    call = read_ahead(body, signatures(dtype, (None, *shape)), pieces, halves)
    if call is not None:
        assert halves.submitted == 1 and halves.first
        slow = general(body, signatures(dtype, (None, *shape)))
        assert isinstance(slow, PredictCall) and slow.row_format == call.row_format and slow.batch == call.batch
        np.testing.assert_array_equal(call.inputs["x0"], slow.inputs["x0"])
        assert call.inputs["x0"].dtype == slow.inputs["x0"].dtype


def test_a_large_body_is_read_ahead_in_the_pieces_it_arrives_in() -> None:
    x = np.random.default_rng(4).random((1, 160, 160, 3), dtype=np.float32)
    body = json.dumps({"instances": x.tolist()}).encode()
    halves = InlineHalves()
    call = read_ahead(body, signatures(shape=(None, 160, 160, 3)), 3, halves)
    assert call is not None and halves.submitted == 1 and np.array_equal(call.inputs["x0"], x)


@pytest.mark.usefixtures("split_everything")
@settings(max_examples=300, deadline=None)
@given(value=leaf_lists, key=st.sampled_from(["instances", "inputs"]), pieces=st.integers(1, 6),
       dtype=st.sampled_from(["float32", "int32", "uint8"]), shape=st.sampled_from([(None,), (None, 2), (None, 2, 3)]))
def test_any_body_read_ahead_gets_the_general_answer(value: Any, key: str, pieces: int, dtype: str,
                                                    shape: tuple[int | None, ...]) -> None:
    body = json.dumps({key: value}).encode()
    call = read_ahead(body, signatures(dtype, shape), pieces, InlineHalves())
    if call is not None:
        slow = general(body, signatures(dtype, shape))
        assert isinstance(slow, PredictCall), f"read ahead, refused whole: {slow}"
        np.testing.assert_array_equal(call.inputs["x0"], slow.inputs["x0"])


@pytest.mark.usefixtures("split_everything")
@pytest.mark.parametrize("body", [
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5,6]]], "signature_name": "other"}',
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5,6]]]}\x0c',
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4],[5,6]]]}',
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5,NaN]]]}',
    b'{"instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5,6]]]',
    b'{"instances": -[[[1,2,3],[4,5,6]], [[1,2,3],[4,5,6]]]}',
    b'{"signature_name": "nope", "instances": [[[1,2,3],[4,5,6]], [[1,2,3],[4,5,6]]]}',
])
def test_read_ahead_takes_nothing_in_doubt(body: bytes) -> None:
    for pieces in (1, 2, 5):
        assert read_ahead(body, signatures(), pieces, InlineHalves()) is None


@pytest.mark.usefixtures("split_everything")
def test_read_ahead_stands_aside_and_always_frees_the_reader() -> None:
    x = np.random.default_rng(5).random((2, 2, 3))
    body = json.dumps({"instances": x.tolist()}).encode()
    sigs = signatures("float64")
    assert tensor_json.ReadAhead.begin(InlineHalves(), str(len(body)), "gzip", sigs, None) is None
    assert tensor_json.ReadAhead.begin(InlineHalves(), None, None, sigs, None) is None
    assert tensor_json.ReadAhead.begin(InlineHalves(accept=False), str(len(body)), None, sigs, None) is None
    assert tensor_json.ReadAhead.begin(None, str(len(body)), None, sigs, None) is None
    # declared longer or shorter than it is: nothing is read ahead, and the reader is free again
    halves = InlineHalves()
    assert read_ahead(body, sigs, 2, halves, declared=len(body) - 5) is None and not halves.busy
    assert read_ahead(body, sigs, 2, halves, declared=len(body) + 500) is None and not halves.busy
    # a body that never reaches finish (refused, client gone): close frees the reader, started or not
    for pieces in (1, 9):
        halves = InlineHalves()
        ahead = tensor_json.ReadAhead.begin(halves, str(len(body)), None, sigs, None)
        assert ahead is not None
        ahead.feed(body[:len(body) // pieces])
        ahead.close()
        assert not halves.busy and not ahead.pending
    # a reader that cannot answer: the body is left to parse_predict
    assert read_ahead(body, sigs, 1, InlineHalves(answer=False)) is None


def test_small_bodies_are_not_read_ahead() -> None:
    body = json.dumps({"instances": np.zeros((1, 2, 3)).tolist()}).encode()
    assert tensor_json.ReadAhead.begin(InlineHalves(), str(len(body)), None, signatures(), None) is None
