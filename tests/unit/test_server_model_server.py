"""The model server (`builder.server.model_server.ModelServer`): the handler every request reaches, in the front's own process
and in each model process, over a real model (the recorded `tiny_conv.tflite` fixture on LiteRT).

Driven as the front drives it, with the `Request`s it hands over: TF Serving's predict and the Open Inference
Protocol's infer from the data plane, gRPC's methods with their status codes, every other route through the
route table, its own failures answered 500 / INTERNAL, readiness after a drain; and once more behind the real channel
to a model process (both ends on one socket pair here), as a model process answers."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.model.backend import LiteRTBackend
from builder.server.core.dataplane import ServedModel
from builder.server.process.channel import FrontEnd, ModelEnd
from builder.server.config import ServerConfig
from builder.server.process.messages import GRPC, HTTP, Answer, Request
from builder.server.model_server import ModelServer
from builder.wire import tfs_proto as pb
from builder.wire.tensors import fill_proto, to_array

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "serve" / "tiny_conv.tflite"
X = np.random.default_rng(7).random((2, 8, 8, 1), dtype=np.float32)
JSON = ((b"content-type", b"application/json"),)
PREDICT = f"/{pb.PREDICTION_SERVICE}/Predict"


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    yield running
    running.close()


@pytest.fixture(scope="module")
def server(loop: asyncio.AbstractEventLoop) -> Iterator[ModelServer]:
    config = ServerConfig(model_path=TINY, model_name="tiny", workers=1, threads=1, max_body_bytes=1 << 16)
    built = ModelServer(config)
    loop.run_until_complete(built.start())
    yield built
    loop.run_until_complete(built.stop())


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    backend = LiteRTBackend(TINY)
    return np.concatenate([backend.predict("serving_default", {"input_1": X[i:i + 1]})["dense"] for i in range(len(X))])


def answer(loop: asyncio.AbstractEventLoop, server: ModelServer, request: Request) -> Answer:
    return loop.run_until_complete(server.answer(request))


def post(path: str, document: Any) -> Request:
    return Request(HTTP, "POST", json.dumps(document).encode(), path, headers=JSON, client="127.0.0.1:5000")


def predict_call(name: str) -> bytes:
    message = pb.PredictRequest()
    message.model_spec.name = name
    fill_proto(message.inputs["input_1"], X, True)
    return message.SerializeToString()


def test_tf_serving_predict_is_answered_from_the_data_plane(loop: asyncio.AbstractEventLoop, server: ModelServer,
                                                            expected: np.ndarray) -> None:
    got = answer(loop, server, post("/v1/models/tiny:predict", {"instances": X.tolist()}))
    assert got.status == 200 and dict(got.headers)[b"content-type"] == b"application/json"
    assert np.allclose(json.loads(bytes(got.body))["predictions"], expected, rtol=1e-5, atol=1e-6)


def test_v2_infer_is_answered_from_the_data_plane(loop: asyncio.AbstractEventLoop, server: ModelServer,
                                                  expected: np.ndarray) -> None:
    document = {"inputs": [{"name": "input_1", "shape": list(X.shape), "datatype": "FP32",
                            "data": X.ravel().tolist()}]}
    got = answer(loop, server, post("/v2/models/tiny/infer", document))
    assert got.status == 200, got.body
    output = json.loads(bytes(got.body))["outputs"][0]
    assert output["name"] == "dense" and np.allclose(np.reshape(output["data"], output["shape"]), expected,
                                                     rtol=1e-5, atol=1e-6)


def test_grpc_predict_answers_with_status_codes(loop: asyncio.AbstractEventLoop, server: ModelServer,
                                                expected: np.ndarray) -> None:
    got = answer(loop, server, Request(GRPC, PREDICT, predict_call("tiny"), client="ipv4:127.0.0.1:1"))
    assert got.status == 0  # OK
    reply = pb.PredictResponse.FromString(bytes(got.body))
    assert np.allclose(to_array(reply.outputs["dense"], "dense"), expected, rtol=1e-5, atol=1e-6)
    unknown = answer(loop, server, Request(GRPC, PREDICT, predict_call("nope")))
    assert unknown.status == 5 and "nope" in unknown.message  # NOT_FOUND
    malformed = answer(loop, server, Request(GRPC, PREDICT, b"\xff\xff\xff"))
    assert malformed.status == 3 and malformed.message == "malformed request message"  # INVALID_ARGUMENT


def test_every_other_route_goes_through_the_route_table(loop: asyncio.AbstractEventLoop, server: ModelServer) -> None:
    status = answer(loop, server, Request(HTTP, "GET", b"", "/v1/models/tiny"))
    assert status.status == 200
    assert json.loads(bytes(status.body))["model_version_status"][0]["state"] == "AVAILABLE"
    missing = answer(loop, server, Request(HTTP, "GET", b"", "/nothing/here"))
    assert missing.status == 404 and "error" in json.loads(bytes(missing.body))
    wrong = answer(loop, server, Request(HTTP, "PUT", b"", "/v1/models/tiny:predict"))
    assert wrong.status == 405 and dict(wrong.headers)[b"allow"] == b"POST"
    health = json.loads(bytes(answer(loop, server, Request(HTTP, "GET", b"", "/healthz")).body))
    assert health["interpreters"] == health["workers"] == 1 and health["model"] == "tiny"


def test_bad_requests_are_answered_not_raised(loop: asyncio.AbstractEventLoop, server: ModelServer) -> None:
    broken = answer(loop, server, Request(HTTP, "POST", b"{not json", "/v1/models/tiny:predict", headers=JSON))
    assert broken.status == 400 and json.loads(bytes(broken.body))["error"].startswith("malformed JSON")
    unknown = answer(loop, server, post("/v2/models/nope/infer", {"inputs": []}))
    assert unknown.status == 404


def test_a_failure_of_its_own_is_answered_500_or_internal(loop: asyncio.AbstractEventLoop, server: ModelServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(ServedModel, "predict", broken)
    rest = answer(loop, server, post("/v1/models/tiny:predict", {"instances": X.tolist()}))
    assert rest.status == 500 and json.loads(bytes(rest.body)) == {"error": "internal error: RuntimeError: a bug of ours"}
    call = answer(loop, server, Request(GRPC, PREDICT, predict_call("tiny")))
    assert call.status == 13  # INTERNAL


def test_the_same_answers_behind_the_channel_to_a_model_process(loop: asyncio.AbstractEventLoop, server: ModelServer,
                                                               expected: np.ndarray) -> None:
    async def scenario() -> list[Answer]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        front, model_side = FrontEnd(ours, 2, (1 << 16) + 4096), ModelEnd(theirs)
        await front.start()
        model_side.hello()
        serving = asyncio.ensure_future(model_side.serve(server.answer))
        answers = await asyncio.gather(
            front.answer(post("/v1/models/tiny:predict", {"instances": X.tolist()})),
            front.answer(Request(GRPC, PREDICT, predict_call("tiny"))))
        assert model_side.stopped is not None
        model_side.stopped.set()
        await serving
        front.close()
        theirs.close()
        return answers

    rest, call = loop.run_until_complete(scenario())
    assert rest.status == 200 and call.status == 0
    assert np.allclose(json.loads(bytes(rest.body))["predictions"], expected, rtol=1e-5, atol=1e-6)
    reply = pb.PredictResponse.FromString(bytes(call.body))
    assert np.allclose(to_array(reply.outputs["dense"], "dense"), expected, rtol=1e-5, atol=1e-6)


def test_a_drained_host_reports_not_ready_and_still_answers(loop: asyncio.AbstractEventLoop, server: ModelServer,
                                                            expected: np.ndarray) -> None:
    assert answer(loop, server, Request(HTTP, "GET", b"", "/v2/health/ready")).status == 200
    server.drain()
    try:
        assert answer(loop, server, Request(HTTP, "GET", b"", "/v2/health/ready")).status == 503
        got = answer(loop, server, post("/v1/models/tiny:predict", {"instances": X.tolist()}))
        assert got.status == 200  # requests in flight while draining are still answered
    finally:
        server.plane.set_ready(True)


def test_a_request_through_the_real_front_reaches_the_host(loop: asyncio.AbstractEventLoop, server: ModelServer,
                                                           expected: np.ndarray) -> None:
    """Raw HTTP/1.1 bytes into the front's connection, answered by the server as `--model-processes 1` serves them."""
    from builder.server.front.http_front import HttpFront, _Connection

    class Transport:
        def __init__(self) -> None:
            self.out = bytearray()

        def write(self, data: bytes) -> None:
            self.out += data

        def writelines(self, parts: list[bytes]) -> None:
            for part in parts:
                self.out += part

        def get_extra_info(self, name: str) -> object:
            return ("127.0.0.1", 40000) if name == "peername" else None

    async def scenario() -> bytes:
        connection = _Connection(HttpFront(server.answer, 1 << 16))
        transport = Transport()
        connection.connection_made(transport)
        body = json.dumps({"instances": X.tolist()}).encode()
        data = (b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        room = connection.get_buffer(len(data))
        room[:len(data)] = data
        connection.buffer_updated(len(data))
        deadline = loop.time() + 30
        while b"\r\n\r\n" not in transport.out and loop.time() < deadline:
            await asyncio.sleep(0.001)
        connection.connection_lost(None)
        return bytes(transport.out)

    out = loop.run_until_complete(scenario())
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert np.allclose(json.loads(body)["predictions"], expected, rtol=1e-5, atol=1e-6)


def test_the_start_up_self_test_times_the_model(server: ModelServer, loop: asyncio.AbstractEventLoop) -> None:
    """Every interpreter warmed and the model's call timed at start: what `--dispatch auto` and `/healthz` read
    (a self-test that fails is logged and the model served without it, so only its figure shows it ran)."""
    answer = loop.run_until_complete(server.answer(Request(HTTP, "GET", b"", "/healthz")))
    said = json.loads(bytes(answer.body))
    assert said["model_p50_us"] is not None and said["model_p50_us"] > 0, said
