"""`tfsmith serve` speaking the Open Inference Protocol (KServe v2) to a real client (`tritonclient.http`):
health, metadata, readiness, infer with JSON and with the binary tensor data extension, gzip, errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from builder.model.backend import LiteRTBackend
from builder.model.inputs import sample_inputs
from tests.e2e.test_serve import HTTP, IN_FRONT, LAYOUTS, STOPPED, Server, expected, inputs, models  # noqa: F401 - models is a fixture

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def server(models: Path, request: pytest.FixtureRequest) -> Iterator[Server]:  # noqa: F811
    """The Open Inference Protocol's server, in each layout (binary tensors cross into model processes in place)."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", *LAYOUTS[request.param])
    yield running
    assert running.stop() in STOPPED


@pytest.fixture(scope="module")
def client(server: Server) -> object:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")


def test_health_metadata_and_readiness(client: object) -> None:
    assert client.is_server_live() and client.is_server_ready()  # type: ignore[attr-defined]
    assert client.is_model_ready("digits") and client.is_model_ready("digits", "1")  # type: ignore[attr-defined]
    assert not client.is_model_ready("nope")  # type: ignore[attr-defined]
    meta = client.get_model_metadata("digits")  # type: ignore[attr-defined]
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 8, 8, 1]}]
    assert meta["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [-1, 10]}]
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("binary_in", "binary_out", "gzip"), [(False, False, False), (True, True, False),
                                                               (True, False, True), (False, True, False)])
def test_infer_matches_the_interpreter(client: object, models: Path, binary_in: bool, binary_out: bool,  # noqa: F811
                                       gzip: bool) -> None:
    x = inputs(3, seed=31)
    tensor = httpclient.InferInput("pixels", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary_in)
    wanted = httpclient.InferRequestedOutput("probs", binary_data=binary_out)
    result = client.infer("digits", [tensor], outputs=[wanted], model_version="1", request_id="r-1",  # type: ignore[attr-defined]
                          request_compression_algorithm="gzip" if gzip else None)
    assert np.allclose(result.as_numpy("probs"), expected(LiteRTBackend(models / "image.tflite"), x),
                       rtol=1e-5, atol=1e-6)
    answer = result.get_response()
    assert answer["model_name"] == "digits" and answer["model_version"] == "1" and answer["id"] == "r-1"
    assert ("parameters" in answer["outputs"][0]) == binary_out


def test_integer_model_takes_its_own_datatype(models: Path) -> None:  # noqa: F811
    local = LiteRTBackend(models / "int8.tflite")
    x = sample_inputs(local.signatures["serving_default"], batch=2, seed=4)["pixels"]
    running = Server(str(models / "int8.tflite"), "--model-name", "q", *IN_FRONT)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{running.port}")
        tensor = httpclient.InferInput("pixels", list(x.shape), "INT8")
        tensor.set_data_from_numpy(x, binary_data=True)
        result = client.infer("q", [tensor])
        assert np.array_equal(result.as_numpy("probs"), local.predict("serving_default", {"pixels": x})["probs"])
        floats = httpclient.InferInput("pixels", list(x.shape), "FP32")
        floats.set_data_from_numpy(x.astype(np.float32))
        with pytest.raises(InferenceServerException, match="datatype FP32 does not match the model's INT8"):
            client.infer("q", [floats])
    finally:
        assert running.stop() in STOPPED


@pytest.mark.parametrize(
    ("body", "headers", "status", "needle"),
    [
        (b'{"inputs": []}', {}, 400, "non-empty 'inputs'"),
        (b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}', {}, 400, "unknown input"),
        (b'{"inputs": [{"name": "pixels", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [1, 2]}]}', {}, 400,
         "2 values"),
        (b'{"inputs": [{"name": "pixels", "shape": [1, 8, 8, 1], "datatype": "FP32", '
         b'"parameters": {"binary_data_size": 256}}]}', {"inference-header-content-length": "all"}, 400,
         "past the end"),
        (b'{"inputs": [{"name": "pixels", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}', {}, 400,
         "expected rank"),
        (b"{", {"inference-header-content-length": "9"}, 400, "does not fit"),
    ],
)
def test_infer_errors(server: Server, body: bytes, headers: dict[str, str], status: int, needle: str) -> None:
    if headers.get("inference-header-content-length") == "all":  # the whole body is the JSON header
        headers = {"inference-header-content-length": str(len(body))}
    answer = HTTP.post(f"{server.url}/v2/models/digits/infer", content=body, headers=headers)
    assert answer.status_code == status, answer.text
    assert needle in answer.json()["error"]


def test_unknown_models_and_versions_are_404(server: Server) -> None:
    body = {"inputs": [{"name": "pixels", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0.0] * 64}]}
    for path in ("/v2/models/nope/infer", "/v2/models/digits/versions/2/infer"):
        answer = HTTP.post(server.url + path, json=body)
        assert answer.status_code == 404 and "Servable not found" in answer.json()["error"]
    assert HTTP.get(f"{server.url}/v2/models/nope").status_code == 404
    ok = HTTP.post(f"{server.url}/v2/models/digits/versions/1/infer", json=body)
    assert ok.status_code == 200 and len(ok.json()["outputs"][0]["data"]) == 10
