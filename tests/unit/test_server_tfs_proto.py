"""Our TensorFlow Serving messages against the real ones: same fields, same numbers, same bytes.

The real classes come from `tensorflow-serving-api` (dev extra; it imports TensorFlow, hence only here).
"""

from __future__ import annotations

import numpy as np
import pytest

from builder.wire import tfs_proto as ours
from builder.wire.tensors import WireError, fill_proto, read_tensor, to_array

apis = pytest.importorskip("tensorflow_serving.apis.predict_pb2", reason="tensorflow-serving-api not installed")
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2, model_pb2, predict_pb2  # noqa: E402

REAL = {
    "tensorflow.serving.ModelSpec": model_pb2.ModelSpec,
    "tensorflow.serving.PredictRequest": predict_pb2.PredictRequest,
    "tensorflow.serving.PredictResponse": predict_pb2.PredictResponse,
    "tensorflow.serving.SignatureDefMap": get_model_metadata_pb2.SignatureDefMap,
    "tensorflow.serving.GetModelMetadataRequest": get_model_metadata_pb2.GetModelMetadataRequest,
    "tensorflow.serving.GetModelMetadataResponse": get_model_metadata_pb2.GetModelMetadataResponse,
    "tensorflow.serving.GetModelStatusRequest": get_model_status_pb2.GetModelStatusRequest,
    "tensorflow.serving.GetModelStatusResponse": get_model_status_pb2.GetModelStatusResponse,
}
#: Real fields we leave out on purpose (the server neither reads nor writes them; unknown fields survive).
LEFT_OUT = {"predict_streamed_options", "client_id", "request_options", "resource_handle_val", "variant_val",
            "coo_sparse", "composite_tensor"}


def _compare(mine: object, real: object, seen: set[str]) -> None:
    if real.full_name in seen:  # type: ignore[attr-defined]
        return
    seen.add(real.full_name)  # type: ignore[attr-defined]
    assert mine.full_name == real.full_name  # type: ignore[attr-defined]
    mine_fields = {f.name: f for f in mine.fields}  # type: ignore[attr-defined]
    for field in real.fields:  # type: ignore[attr-defined]
        if field.name in LEFT_OUT:
            assert field.name not in mine_fields
            continue
        ours_field = mine_fields.pop(field.name)
        where = f"{real.full_name}.{field.name}"  # type: ignore[attr-defined]
        assert (ours_field.number, ours_field.type, ours_field.is_repeated) == (
            field.number, field.type, field.is_repeated), where
        assert (ours_field.containing_oneof and ours_field.containing_oneof.name) == (
            field.containing_oneof and field.containing_oneof.name), where
        if field.enum_type is not None:
            real_values = {v.name: v.number for v in field.enum_type.values}
            mine_values = {v.name: v.number for v in ours_field.enum_type.values}
            assert all(real_values[k] == n for k, n in mine_values.items()), where
            assert set(mine_values) >= {k for k, n in real_values.items() if n < 24 and not k.startswith("DO_NOT_USE")}, where
        if field.message_type is not None and field.message_type.full_name.startswith("tensorflow"):
            _compare(ours_field.message_type, field.message_type, seen)
    assert not mine_fields, f"fields the real {real.full_name} lacks: {sorted(mine_fields)}"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(REAL))
def test_every_declared_field_matches_tensorflow_serving(name: str) -> None:
    _compare(ours.POOL.FindMessageTypeByName(name), REAL[name].DESCRIPTOR, set())


def _real_request() -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    request.model_spec.version.value = 7
    request.model_spec.signature_name = "serving_default"
    request.output_filter.append("probs")
    x = request.inputs["pixels"]
    x.dtype = 1
    for size in (2, 3):
        x.tensor_shape.dim.add(size=size)
    x.float_val.extend([0.5, 1.5, -2.0, 3.25, 0.0, 1e-3])
    y = request.inputs["ids"]
    y.dtype = 9
    y.tensor_shape.dim.add(size=2)
    y.tensor_content = np.array([1, -1], "<i8").tobytes()
    request.inputs["flags"].bool_val.extend([True, False])
    request.inputs["half"].half_val.extend([15360, 49152])
    return request


def test_requests_and_responses_round_trip_byte_for_byte() -> None:
    real = _real_request()
    wire = real.SerializeToString(deterministic=True)
    mine = ours.PredictRequest.FromString(wire)
    assert mine.SerializeToString(deterministic=True) == wire
    assert np.allclose(to_array(mine.inputs["pixels"], "x"), [[0.5, 1.5, -2.0], [3.25, 0.0, 1e-3]])
    assert to_array(mine.inputs["ids"], "x").tolist() == [1, -1]
    response = ours.PredictResponse()
    response.model_spec.name = "digits"
    response.model_spec.version.value = 7
    fill_proto(response.outputs["probs"], np.arange(6, dtype=np.float32).reshape(2, 3), content=True)
    fill_proto(response.outputs["ids"], np.array([1, 2], np.int64), content=False)
    wire = response.SerializeToString(deterministic=True)
    real_response = predict_pb2.PredictResponse.FromString(wire)
    assert real_response.SerializeToString(deterministic=True) == wire
    assert list(real_response.outputs["ids"].int64_val) == [1, 2]
    status = ours.GetModelStatusResponse()
    status.model_version_status.add(version=3, state=ours.MODEL_STATES["AVAILABLE"])
    real_status = get_model_status_pb2.GetModelStatusResponse.FromString(status.SerializeToString())
    assert real_status.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE


def test_tensor_protos_decode_as_tensorflow_reads_them() -> None:
    tf = pytest.importorskip("tensorflow")
    cases = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[1, -2]], np.int8),
             np.array([True, False]), np.array([1.5, -0.25], np.float16), np.array([2**40], np.int64),
             np.array([[3.0]], np.float64), np.array([7, 9], np.uint8)]
    for array in cases:
        for content in (True, False):
            real = tf.make_tensor_proto(array)
            if not content:
                real = tf.make_tensor_proto(array.tolist() if array.dtype != np.float16 else array, dtype=real.dtype)
            decoded, raw = read_tensor(ours.TensorProto.FromString(real.SerializeToString()), "x")
            assert decoded.dtype == array.dtype and np.array_equal(decoded, array), (array, content)
            assert raw == bool(real.tensor_content), (array, content)  # the form a reply is written in
            written = fill_proto(ours.TensorProto(), array, content)
            back = tf.make_ndarray(type(real).FromString(written.SerializeToString()))
            assert back.dtype == array.dtype and np.array_equal(back, array), (array, content)


def test_typed_values_follow_tensorflow_fill_rules() -> None:
    one = ours.TensorProto(dtype=1)
    one.tensor_shape.dim.add(size=3)
    one.float_val.append(2.0)
    assert to_array(one, "x").tolist() == [2.0, 2.0, 2.0]
    empty = ours.TensorProto(dtype=3)
    empty.tensor_shape.dim.add(size=2)
    assert to_array(empty, "x").tolist() == [0, 0]
    wrong = ours.TensorProto(dtype=1)
    wrong.tensor_shape.dim.add(size=3)
    wrong.float_val.extend([1.0, 2.0])
    with pytest.raises(WireError, match="2 values"):
        to_array(wrong, "x")
    short = ours.TensorProto(dtype=1, tensor_content=b"\0" * 8)
    short.tensor_shape.dim.add(size=3)
    with pytest.raises(WireError, match="tensor_content has 8 bytes"):
        to_array(short, "x")
    with pytest.raises(WireError, match="unsupported dtype DataType 11"):  # DT_QINT8
        to_array(ours.TensorProto(dtype=11), "x")
