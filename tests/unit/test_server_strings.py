"""String tensors through every protocol's pure parts: TF Serving's JSON (strings, `{"b64": ...}` in and
out), DT_STRING TensorProtos, the Open Inference Protocol's BYTES (JSON and the binary framing), and the
OpenAPI document describing string inputs."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from builder.wire import tfs_proto as ours
from builder.server.protocols.openapi import BASE64_PATTERN, STRING_SCHEMA, predict_body, v2_infer_body
from builder.server.protocols.tfs_rest import (
    SignatureSpec,
    TensorSpec,
    format_outputs,
    json_values,
    model_metadata,
    parse_predict,
    string_json,
)
from builder.server.protocols.jsoncodec import to_string_array, to_typed_array
from builder.server.core.call import RequestError
from builder.wire.tensors import fill_proto, to_array
from builder.server.protocols.v2 import DATATYPE_OF, json_data, parse_inputs
from builder.wire.tensors import WireError
from builder.wire.v2_binary import decode_bytes, encode_bytes

TEXT = SignatureSpec("serving_default", (TensorSpec("text", "object", (None,)),), (TensorSpec("probs", "float32", (None, 2)),))
MIXED = SignatureSpec(
    "predict",
    (TensorSpec("ids", "int64", (None,)), TensorSpec("words", "object", (None, 2))),
    (TensorSpec("label", "object", (None,)), TensorSpec("raw_bytes", "object", (None,))),
)


def objects(*values: bytes) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array


# --- TF Serving JSON ------------------------------------------------------------------------------------


def test_strings_and_b64_become_bytes_in_row_major_order() -> None:
    value = [["héllo", {"b64": base64.b64encode(b"\x00\xff").decode()}], ["", "z"]]
    array = to_string_array(value, "inputs.words")
    assert array.dtype == object and array.shape == (2, 2)
    assert array.tolist() == [["héllo".encode(), b"\x00\xff"], [b"", b"z"]]
    assert to_typed_array(["a", "b"], TensorSpec("t", "object", (None,)), "x").tolist() == [b"a", b"b"]
    assert to_string_array([], "x").shape == (0,)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ([["a", "b"], ["c"]], "not a rectangular tensor"),
        ([["a", "b"], "c"], "not a rectangular tensor"),
        (["a", 1], "expected strings"),
        (["a", True], "expected strings"),
        (["a", None], "expected strings"),
        ([{"b64": "%%%"}], "malformed Base64"),
        ([{"b64": "YQ=="[:3]}], "malformed Base64"),
        ([{"b64": "YQ==", "x": 1}], "one key"),
        ([{"b64": 5}], "one key"),
    ],
)
def test_bad_string_values_are_400s(value: object, needle: str) -> None:
    with pytest.raises(RequestError, match=needle) as refused:
        to_string_array(value, "inputs.text")
    assert refused.value.status == 400


def test_b64_stays_refused_for_numeric_inputs() -> None:
    with pytest.raises(RequestError, match="not supported for float32"):
        to_typed_array([{"b64": "AAAA"}], TensorSpec("x", "float32", (None,)), "inputs.x")


def test_outputs_are_text_or_b64_by_tf_serving_rules() -> None:
    assert string_json(b"plain", binary=False) == "plain"
    assert string_json(b"plain", binary=True) == {"b64": base64.b64encode(b"plain").decode()}
    assert string_json(b"\xff\x00", binary=False) == {"b64": "/wA="}  # not UTF-8: a JSON string cannot hold it
    assert json_values(objects(b"a", b"\xff").reshape(2, 1), "label") == [["a"], [{"b64": "/w=="}]]
    assert json_values(objects(b"a"), "raw_bytes") == [{"b64": "YQ=="}]  # `_bytes` suffix: always b64
    assert json_values(np.array([1.5], np.float16), "h") == [1.5]


def test_string_predict_rows_columns_and_answers() -> None:
    rows = parse_predict({"instances": ["good", {"b64": "YmFk"}]}, {"serving_default": TEXT})
    assert rows.row_format and rows.inputs["text"].tolist() == [b"good", b"bad"]  # a b64 row is a value
    columns = parse_predict({"inputs": {"ids": [1, 2], "words": [["a", "b"], ["c", "d"]]}}, {"predict": MIXED})
    assert columns.inputs["words"].shape == (2, 2) and columns.signature == "predict"
    named = parse_predict({"instances": [{"ids": 1, "words": ["a", {"b64": "Yg=="}]}]}, {"predict": MIXED})
    assert named.inputs["words"].tolist() == [[b"a", b"b"]]
    outputs = {"label": objects(b"x", b"y"), "raw_bytes": objects(b"\x01", b"\x02")}
    assert format_outputs(outputs, MIXED, row_format=True) == {
        "predictions": [{"label": "x", "raw_bytes": {"b64": "AQ=="}}, {"label": "y", "raw_bytes": {"b64": "Ag=="}}]}
    assert format_outputs(outputs, MIXED, row_format=False)["outputs"]["label"] == ["x", "y"]


def test_metadata_calls_strings_dt_string() -> None:
    meta = model_metadata("m", 1, {"predict": MIXED})["metadata"]["signature_def"]["signature_def"]["predict"]
    assert meta["inputs"]["words"]["dtype"] == "DT_STRING" and meta["inputs"]["ids"]["dtype"] == "DT_INT64"


# --- gRPC TensorProto -----------------------------------------------------------------------------------


def test_dt_string_protos_round_trip_through_string_val() -> None:
    array = objects(b"a", b"\xff\x00", b"").reshape(3, 1)
    proto = fill_proto(ours.TensorProto(), array)
    assert proto.dtype == 7 and list(proto.string_val) == [b"a", b"\xff\x00", b""] and not proto.tensor_content
    back = to_array(ours.TensorProto.FromString(proto.SerializeToString()), "x")
    assert back.dtype == object and back.shape == (3, 1) and back.tolist() == array.tolist()


def test_dt_string_fill_rules_and_refusals() -> None:
    one = ours.TensorProto(dtype=7, string_val=[b"z"])
    one.tensor_shape.dim.add(size=3)
    assert to_array(one, "x").tolist() == [b"z", b"z", b"z"]
    empty = ours.TensorProto(dtype=7)
    empty.tensor_shape.dim.add(size=2)
    assert to_array(empty, "x").tolist() == [b"", b""]
    wrong = ours.TensorProto(dtype=7, string_val=[b"a", b"b"])
    wrong.tensor_shape.dim.add(size=3)
    with pytest.raises(WireError, match="2 values in string_val"):
        to_array(wrong, "x")
    packed = ours.TensorProto(dtype=7, tensor_content=b"abc")
    packed.tensor_shape.dim.add(size=1)
    with pytest.raises(WireError, match="string_val, not tensor_content"):
        to_array(packed, "x")


def test_int64_bool_half_keep_their_values_in_typed_fields() -> None:
    for array in (np.array([2**40, -3], np.int64), np.array([True, False]), np.array([0.5, 65504], np.float16)):
        for content in (True, False):
            back = to_array(ours.TensorProto.FromString(fill_proto(ours.TensorProto(), array, content)
                                                        .SerializeToString()), "x")
            assert back.dtype == array.dtype and np.array_equal(back, array)


# --- Open Inference Protocol BYTES ----------------------------------------------------------------------


def test_bytes_framing_round_trips_and_refuses_bad_frames() -> None:
    values = objects(b"ab", b"", b"\xff" * 3)
    raw = encode_bytes(values)
    assert raw == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0) + struct.pack("<I", 3) + b"\xff" * 3
    assert decode_bytes(raw, 3, "x").tolist() == values.tolist()
    with pytest.raises(WireError, match="inside a 4-byte length prefix"):
        decode_bytes(raw + b"\x01", 3, "x")
    with pytest.raises(WireError, match="runs past"):
        decode_bytes(struct.pack("<I", 9) + b"ab", 1, "x")
    with pytest.raises(WireError, match="2 BYTES elements"):
        decode_bytes(encode_bytes(objects(b"a", b"b")), 3, "x")


def test_v2_bytes_inputs_in_json_and_binary() -> None:
    assert DATATYPE_OF["object"] == "BYTES"
    document = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["good", "bad"]}]}
    assert parse_inputs(document, TEXT, memoryview(b""))["text"].tolist() == [b"good", b"bad"]
    tail = encode_bytes(objects(b"good", b"\xff"))
    binary = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                          "parameters": {"binary_data_size": len(tail)}}]}
    assert parse_inputs(binary, TEXT, memoryview(tail))["text"].tolist() == [b"good", b"\xff"]
    with pytest.raises(RequestError, match="does not match"):
        parse_inputs({"inputs": [{"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}]}, TEXT,
                     memoryview(b""))


def test_v2_answers_bytes_that_are_not_utf8_as_binary_data() -> None:
    from builder.server.protocols.v2 import infer_response

    assert json_data(objects(b"ok", b"fine")) == ["ok", "fine"] and json_data(objects(b"\xff")) is None

    class Served:
        name = "m"

    outputs = {"label": objects(b"ok"), "blob": objects(b"\xff")}
    answer = infer_response(Served(), 1, {}, outputs, ["label", "blob"], set())  # type: ignore[arg-type]
    cut = int(dict(answer.headers)[b"inference-header-content-length"])
    header = json.loads(answer.body[:cut])
    assert header["outputs"][0]["data"] == ["ok"]  # text stays JSON
    assert header["outputs"][1]["parameters"] == {"binary_data_size": 5}  # JSON cannot hold b"\xff"
    assert decode_bytes(answer.body[cut:], 1, "blob").tolist() == [b"\xff"]


# --- the OpenAPI document -------------------------------------------------------------------------------


def test_contract_describes_string_inputs() -> None:
    body = predict_body(TEXT, ["serving_default"], 16)
    assert body["oneOf"][0]["properties"]["instances"]["items"] == STRING_SCHEMA
    mixed = predict_body(MIXED, ["predict"], 16)
    columns = mixed["oneOf"][1]["properties"]["inputs"]["properties"]
    assert columns["words"]["items"]["items"] == STRING_SCHEMA and columns["ids"]["items"]["type"] == "integer"
    v2 = v2_infer_body(TEXT, DATATYPE_OF)["properties"]["inputs"]["items"]["properties"]
    assert v2["datatype"]["enum"] == ["BYTES"] and v2["data"]["items"] == {"type": "string"}
    import re

    assert re.fullmatch(BASE64_PATTERN, base64.b64encode(b"\x00\x01\x02\x03x").decode())
    assert not re.fullmatch(BASE64_PATTERN, "YQ=")


# --- the start-up self-test -----------------------------------------------------------------------------


def test_self_test_uses_text_samples_and_never_invents_text(tmp_path: Path) -> None:
    from builder.model.inputs import example_inputs, sample_inputs

    samples = tmp_path / "samples.npz"
    np.savez(samples, **{"x/text": np.array(["good movie", "bad"]), "x/ids": np.array([1, 2])})
    got = example_inputs(TEXT, samples)["text"]
    assert got.dtype == object and got.tolist() == [b"good movie"]
    with pytest.raises(ValueError, match="takes strings; no text is made up"):
        sample_inputs(TEXT)
    with pytest.raises(ValueError, match="no text is made up"):
        example_inputs(TEXT, None)
