"""`tfsmith serve` over gRPC with the client TensorFlow Serving users have (`tensorflow-serving-api` stubs):
Predict with tensor_content and with float_val, GetModelMetadata, GetModelStatus, errors as status codes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from builder.model.backend import LiteRTBackend
from tests.e2e.test_serve import LAYOUTS, STOPPED, Server, expected, inputs, models  # noqa: F401 - models is a fixture

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
grpc = pytest.importorskip("grpc")
pytest.importorskip("tensorflow_serving.apis.predict_pb2", reason="tensorflow-serving-api not installed")
import tensorflow as tf  # noqa: E402
from tensorflow_serving.apis import (  # noqa: E402
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def server(models: Path, request: pytest.FixtureRequest) -> Iterator[Server]:  # noqa: F811
    """gRPC's server, in each layout."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", *LAYOUTS[request.param], grpc=True)
    yield running
    assert running.stop() in STOPPED


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[object]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as opened:
        yield opened


def _request(x: np.ndarray, name: str = "digits") -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = "serving_default"
    request.inputs["pixels"].CopyFrom(tf.make_tensor_proto(x))
    return request


def test_predict_with_tensor_content(channel: object, models: Path) -> None:  # noqa: F811
    x = inputs(4, seed=21)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = _request(x)
    assert request.inputs["pixels"].tensor_content  # make_tensor_proto's binary form
    answer = stub.Predict(request, timeout=10)
    got = tf.make_ndarray(answer.outputs["probs"])
    assert np.allclose(got, expected(LiteRTBackend(models / "image.tflite"), x), rtol=1e-5, atol=1e-6)
    assert answer.model_spec.name == "digits" and answer.model_spec.version.value == 1
    assert answer.outputs["probs"].tensor_content  # answered in kind


def test_a_large_predict_is_answered_as_a_small_one_is(channel: object, models: Path) -> None:  # noqa: F811
    """~300 KB of tensor_content, read where it lies in the message (and the same request with float_val)."""
    x = inputs(96, seed=23)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    want = expected(LiteRTBackend(models / "image.tflite"), x)
    raw = stub.Predict(_request(x), timeout=30)
    assert raw.outputs["probs"].tensor_content  # answered in kind
    assert np.allclose(tf.make_ndarray(raw.outputs["probs"]), want, rtol=1e-5, atol=1e-6)
    typed = _request(x)
    typed.inputs["pixels"].ClearField("tensor_content")
    typed.inputs["pixels"].float_val.extend(x.ravel().tolist())
    answer = stub.Predict(typed, timeout=30)
    assert not answer.outputs["probs"].tensor_content
    assert np.allclose(tf.make_ndarray(answer.outputs["probs"]), want, rtol=1e-5, atol=1e-6)


def test_predict_with_float_val_and_a_version(channel: object, models: Path) -> None:  # noqa: F811
    x = inputs(2, seed=22)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    request.model_spec.version.value = 1
    tensor = request.inputs["pixels"]
    tensor.dtype = tf.float32.as_datatype_enum
    for size in x.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.float_val.extend(x.ravel().tolist())
    answer = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=10)
    probs = answer.outputs["probs"]
    assert not probs.tensor_content and len(probs.float_val) == 20  # typed fields, as TF Serving answers
    assert np.allclose(np.reshape(probs.float_val, (2, 10)), expected(LiteRTBackend(models / "image.tflite"), x),
                       rtol=1e-5, atol=1e-6)


def test_model_metadata_and_status(channel: object) -> None:
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "digits"
    request.metadata_field.append("signature_def")
    answer = prediction_service_pb2_grpc.PredictionServiceStub(channel).GetModelMetadata(request, timeout=10)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert answer.metadata["signature_def"].Unpack(signatures)
    sig = signatures.signature_def["serving_default"]
    assert sig.method_name == "tensorflow/serving/predict"
    assert sig.inputs["pixels"].dtype == tf.float32.as_datatype_enum
    assert [d.size for d in sig.inputs["pixels"].tensor_shape.dim] == [-1, 8, 8, 1]
    assert [d.size for d in sig.outputs["probs"].tensor_shape.dim] == [-1, 10]
    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "digits"
    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status_request, timeout=10)
    assert [(s.version, s.state) for s in status.model_version_status] == [
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]


def _fails(call: object, request: object) -> tuple[object, str]:
    with pytest.raises(grpc.RpcError) as error:
        call(request, timeout=10)  # type: ignore[operator]
    return error.value.code(), error.value.details()


def test_errors_are_grpc_status_codes(channel: object) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    x = inputs(1, seed=23)
    assert _fails(stub.Predict, _request(x, "nope"))[0] == grpc.StatusCode.NOT_FOUND
    versioned = _request(x)
    versioned.model_spec.version.value = 9
    assert _fails(stub.Predict, versioned)[0] == grpc.StatusCode.NOT_FOUND
    code, details = _fails(stub.Predict, _request(x.astype(np.float64)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "float32" in details
    code, details = _fails(stub.Predict, _request(x[:, :4]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "shape" in details
    wrong_name = _request(x)
    wrong_name.inputs["other"].CopyFrom(wrong_name.inputs.pop("pixels"))
    code, details = _fails(stub.Predict, wrong_name)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "missing input" in details
    filtered = _request(x)
    filtered.output_filter.append("logits")
    assert _fails(stub.Predict, filtered)[0] == grpc.StatusCode.INVALID_ARGUMENT
    no_field = get_model_metadata_pb2.GetModelMetadataRequest()
    no_field.model_spec.name = "digits"
    assert _fails(stub.GetModelMetadata, no_field)[0] == grpc.StatusCode.INVALID_ARGUMENT
    classify = channel.unary_unary("/tensorflow.serving.PredictionService/Classify")  # type: ignore[attr-defined]
    assert _fails(classify, b"")[0] == grpc.StatusCode.UNIMPLEMENTED
    # and the server still answers
    assert stub.Predict(_request(x), timeout=10).outputs["probs"].tensor_content
