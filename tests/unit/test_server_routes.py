"""Every protocol's routes through one data plane: one lookup, every route counted, hang-ups not failures.

The adapters (TF Serving REST, the Open Inference Protocol, gRPC) run for real, through the route table's
router (`routes.Router`, what the model server answers every request with) over a data plane whose model is a
batcher stand-in answering `y = sum(x)` per example; the metrics are the real registry, read back as the
scrape would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.model.signature import SignatureSpec, TensorSpec
from builder.server.config import ServerConfig
from builder.wire import tfs_proto as pb
from builder.server.core.dataplane import DataPlane
from builder.server.process.messages import GRPC, HTTP, Answer, Request
from builder.server.routes import Context, Router
from builder.server.core.metrics import Metrics
from builder.server.core.call import Call, RequestError
from builder.server.core.dataplane import ModelSet, ServedModel
from builder.wire.tensors import fill_proto

SIGNATURE = SignatureSpec("serving_default", (TensorSpec("x", "float32", (None, 3)),),
                          (TensorSpec("y", "float32", (None, 1)),))


class SumBatcher:
    """The batcher's interface (`predict`) answering y = sum(x) for each example, and counting its calls."""

    inline = True

    def __init__(self) -> None:
        self.calls = 0

    async def predict(self, call: Call, on_start: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        self.calls += 1
        return {"y": call.inputs["x"].sum(axis=1, keepdims=True).astype(np.float32)}


def plane_with(versions: tuple[int, ...] = (1, 2)) -> DataPlane:
    models = ModelSet()
    models.set("m", {v: ServedModel(name="m", version=v, signatures={SIGNATURE.name: SIGNATURE},
                                    batcher=SumBatcher(), runtime="litert", ready=True)  # type: ignore[arg-type]
                     for v in versions}, {"stable": versions[0]})
    return DataPlane(models, Metrics())


def router(plane: DataPlane) -> Router:
    """The route table over `plane`, as a model server binds it."""
    config = ServerConfig(model_path=Path("m.tflite"), model_name="m", max_body_bytes=1 << 20, max_request_batch=64)
    return Router(Context(plane, config))


class Answered:
    """An answer, read as an HTTP client reads one."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.status_code = answer.status
        self.headers = {k.decode(): v.decode() for k, v in answer.headers}

    def json(self) -> Any:
        return json.loads(bytes(self.answer.body))


class Client:
    """Requests as the front hands them over, answered by the router."""

    def __init__(self, plane: DataPlane) -> None:
        self.router = router(plane)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def request(self, method: str, path: str, json: Any = None, content: bytes | None = None) -> Answered:
        body = content if content is not None else (b"" if json is None else _dumps(json))
        request = Request(HTTP, method, body, path, headers=((b"content-type", b"application/json"),))
        return Answered(asyncio.run(self.router.answer(request)))

    def get(self, path: str) -> Answered:
        return self.request("GET", path)

    def post(self, path: str, json: Any = None, content: bytes | None = None) -> Answered:
        return self.request("POST", path, json, content)


def _dumps(document: Any) -> bytes:
    return json.dumps(document).encode()


@pytest.fixture
def plane() -> Iterator[DataPlane]:
    plane = plane_with()
    yield plane
    plane.close()


def counted(plane: DataPlane) -> dict[tuple[str, str, str], int]:
    """(model, API, entrypoint) -> requests, from the latency histogram's count samples."""
    found: dict[tuple[str, str, str], int] = {}
    for family in plane.metrics.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("request_latency_count"):
                labels = sample.labels
                found[(labels["model_name"], labels["API"], labels["entrypoint"])] = int(sample.value)
    return found


def grpc_calls(plane: DataPlane) -> list[Answer]:
    """A gRPC predict, metadata and status call, and a predict of a version not served, as the front hands
    them over (the method's full name, the serialized message)."""
    table = router(plane)
    predict = pb.PredictRequest()
    predict.model_spec.name = "m"
    fill_proto(predict.inputs["x"], np.ones((2, 3), np.float32))
    metadata = pb.GetModelMetadataRequest()
    metadata.model_spec.name = "m"
    metadata.metadata_field.append("signature_def")
    status = pb.GetModelStatusRequest()
    status.model_spec.name = "m"
    status.model_spec.version_label = "stable"
    missing = pb.PredictRequest()
    missing.model_spec.name = "m"
    missing.model_spec.version.value = 7

    async def run() -> list[Answer]:
        calls = [(pb.PREDICTION_SERVICE, "Predict", predict), (pb.PREDICTION_SERVICE, "GetModelMetadata", metadata),
                 (pb.MODEL_SERVICE, "GetModelStatus", status), (pb.PREDICTION_SERVICE, "Predict", missing)]
        return [await table.answer(Request(GRPC, f"/{service}/{method}", message.SerializeToString()))
                for service, method, message in calls]

    answers = asyncio.run(run())
    predicted = pb.PredictResponse.FromString(answers[0].body)
    described = pb.GetModelMetadataResponse.FromString(answers[1].body)
    statuses = pb.GetModelStatusResponse.FromString(answers[2].body)
    assert [a.status for a in answers] == [0, 0, 0, 5]  # OK, OK, OK, NOT_FOUND
    assert np.frombuffer(predicted.outputs["y"].tensor_content, np.float32).tolist() == [3.0, 3.0]
    assert described.model_spec.version.value == 2
    assert [s.version for s in statuses.model_version_status] == [1]
    assert "Specific" in answers[3].message
    return answers


def test_every_route_of_every_protocol_is_counted(plane: DataPlane) -> None:
    with Client(plane) as client:
        body = {"instances": [[1, 2, 3]]}
        assert client.post("/v1/models/m:predict", json=body).json() == {"predictions": [[6.0]]}
        assert client.post("/v1/models/m/labels/stable:predict", json=body).status_code == 200
        assert client.get("/v1/models/m").json()["model_version_status"][0]["state"] == "AVAILABLE"
        assert client.get("/v1/models/m/versions/1").status_code == 200
        assert client.get("/v1/models/m/metadata").status_code == 200
        assert client.get("/v1/models/m/versions/9/metadata").status_code == 404
        v2_body = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
        assert client.post("/v2/models/m/infer", json=v2_body).json()["outputs"][0]["data"] == [6.0]
        for path in ("/v2/health/live", "/v2/health/ready", "/v2", "/v2/models/m", "/v2/models/m/ready",
                     "/v2/models/m/versions/1/ready"):
            assert client.get(path).status_code == 200, path
    grpc_calls(plane)
    assert counted(plane) == {
        ("m", "predict", "REST"): 2, ("m", "status", "REST"): 2, ("m", "metadata", "REST"): 2,
        ("m", "predict", "V2"): 1, ("m", "metadata", "V2"): 1, ("m", "ready", "V2"): 2,
        ("", "live", "V2"): 1, ("", "ready", "V2"): 1, ("", "metadata", "V2"): 1,
        ("m", "predict", "GRPC"): 2, ("m", "metadata", "GRPC"): 1, ("m", "status", "GRPC"): 1,
    }
    assert plane.metrics.counts[("m", "NOT_FOUND")] == 2  # REST metadata of version 9, gRPC predict of 7
    assert plane.metrics.in_flight._value.get() == 0


def test_every_route_finds_its_model_through_the_one_lookup(plane: DataPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    looked_up: list[tuple[str, Any, Any]] = []
    lookup = plane.lookup

    def spy(name: str, version: Any = None, label: Any = None) -> ServedModel:
        looked_up.append((name, version, label))
        return lookup(name, version, label)

    monkeypatch.setattr(plane, "lookup", spy)
    with Client(plane) as client:
        for method, path, body in [
            ("POST", "/v1/models/m/versions/1:predict", {"instances": [[1, 2, 3]]}),
            ("GET", "/v1/models/m/labels/stable/metadata", None),
            ("GET", "/v2/models/m/versions/1", None),
            ("GET", "/v2/models/m/versions/x/ready", None),  # no version number: 404 as TF Serving's REST
            ("POST", "/v2/models/m/versions/2/infer",
             {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}),
        ]:
            answer = client.request(method, path, json=body)
            assert answer.status_code == (404 if "/x/" in path else 200), (path, answer.text)
    grpc_calls(plane)
    assert looked_up == [("m", "1", None), ("m", None, "stable"), ("m", "1", None), ("m", "x", None),
                         ("m", "2", None), ("m", None, None), ("m", None, None), ("m", None, "stable"),
                         ("m", 7, None)]


def test_errors_are_written_alike_by_every_route(plane: DataPlane) -> None:
    with Client(plane) as client:
        lane = client.post("/v1/models/nope:predict", json={"instances": [[1, 2, 3]]})
        route = client.get("/v1/models/nope/metadata")
        v2_answer = client.post("/v2/models/nope/infer", json={"inputs": []})
        bad = client.post("/v1/models/m:predict", content=b"{")
    assert lane.status_code == route.status_code == v2_answer.status_code == 404
    assert lane.json() == route.json() == v2_answer.json() == {"error": "Servable not found for request: Latest(nope)"}
    assert bad.status_code == 400 and bad.json()["error"].startswith("malformed JSON body")


def test_a_route_whose_client_disconnects_mid_body_is_not_counted_as_a_failure(
        plane: DataPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.server.core.outcome import ClientGone

    def gone(*args: Any) -> bytes:
        raise ClientGone()

    monkeypatch.setattr(plane, "resolve", gone)  # the client went while its request was read
    with Client(plane) as client:
        client.post("/v2/models/m/infer", json={"inputs": []})
    assert plane.metrics.counts == {("m", "CANCELLED"): 1}


def test_a_bad_request_is_counted_with_its_status_and_the_batcher_is_not_called(plane: DataPlane) -> None:
    with Client(plane) as client:
        assert client.post("/v1/models/m:predict", json={"instances": [[1, 2]]}).status_code == 400
        assert client.post("/v2/models/m/infer", json={"inputs": [{"name": "x"}]}).status_code == 400
    assert plane.metrics.counts == {("m", "INVALID_ARGUMENT"): 2}
    assert all(served.batcher.calls == 0 for served in plane.models.all())
    with pytest.raises(RequestError):
        plane.metadata("m", "0")
