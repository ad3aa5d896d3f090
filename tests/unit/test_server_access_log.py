"""Access lines written in one place (`builder.server.front.access_log.logged`): one JSON record per answered request,
HTTP as it came, a gRPC call as the HTTP/2 POST it is (its path the method, its status gRPC's code)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from builder.server.front.access_log import access, logged
from builder.server.process.messages import GRPC, HTTP, Answer, Request


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))


@pytest.fixture
def records() -> object:
    handler = Records()
    access.addHandler(handler)
    yield handler
    access.removeHandler(handler)


def test_each_answered_request_gets_one_record(records: Records) -> None:
    async def respond(request: Request) -> Answer:
        return Answer(404 if request.kind == HTTP else 5, b"{}" if request.kind == HTTP else b"", message="no")

    answer = logged(respond)

    async def scenario() -> None:
        await answer(Request(HTTP, "GET", b"", "/v1/models/nope", client="127.0.0.1:5000"))
        await answer(Request(GRPC, "/tensorflow.serving.PredictionService/Predict", b"x", client="ipv4:10.0.0.1:7"))

    asyncio.run(scenario())
    http, grpc = records.lines
    assert {k: http[k] for k in ("protocol", "method", "path", "status", "bytes_out", "remote")} == {
        "protocol": "http", "method": "GET", "path": "/v1/models/nope", "status": 404, "bytes_out": 2,
        "remote": "127.0.0.1:5000"}
    assert {k: grpc[k] for k in ("protocol", "method", "path", "status", "remote")} == {
        "protocol": "grpc", "method": "POST", "path": "/tensorflow.serving.PredictionService/Predict", "status": 5,
        "remote": "ipv4:10.0.0.1:7"}
    assert float(http["duration_ms"]) >= 0 and float(http["time"]) > 0  # type: ignore[arg-type]
