"""The route table (`builder.server.routes`): every REST route and gRPC method declared once, each handler
found, the OpenAPI document derived from it, 404/405 from it, and the same handler reached whether the models
run in the front's own process or in a model process (behind the channel)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from builder.server.protocols import openapi

from builder.server import routes
from builder.server.config import ServerConfig
from builder.server.process.channel import FrontEnd, ModelEnd
from builder.server.process.messages import GRPC, HTTP, Answer, Request
from tests.unit.test_server_routes import plane_with, router


def test_every_route_and_method_is_declared_once_and_its_handler_exists() -> None:
    declared = [(route.method, route.path) for route in routes.ROUTES]
    assert len(declared) == len(set(declared))
    assert len({rpc.name for rpc in routes.RPCS}) == len(routes.RPCS)
    for entry in (*routes.ROUTES, *routes.RPCS):
        handler = routes.resolve(entry.handler)
        assert asyncio.iscoroutinefunction(handler), entry
        assert handler.__module__ == f"builder.server.{entry.handler.rpartition('.')[0]}"
    for route in routes.ROUTES:  # a handler takes exactly the route's path parameters (beyond context, request)
        code = routes.resolve(route.handler).__code__
        taken = set(code.co_varnames[2:code.co_argcount])
        assert set(routes.parameters(route.path)) <= taken, route


def test_the_table_imports_nothing_of_the_model_stack() -> None:
    """The table names its handlers; at import it needs only the messages (the front's gRPC reads it)."""
    import ast

    tree = ast.parse(Path(routes.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    assert {m for m in imported if m and m.startswith("builder")} == {"builder.server.process.messages"}


@pytest.mark.parametrize(("path", "predict"), [
    ("/v1/models/m:predict", True), ("/v1/models/m/versions/3:predict", True),
    ("/v1/models/m/labels/stable:predict", True), ("/v1/models/m.v-2_x:predict", True),
    ("/v1/models/m/versions/abc:predict", True),  # taken; a 404 from the data plane
    ("/v1/models/m", False), ("/v1/models/m:classify", False), ("/v1/models/m/metadata", False),
    ("/v1/models/:predict", False), ("/v1/models/a:b:predict", False),
    ("/v1/models/m/versions/3/labels/x:predict", False), ("/v1/models/m:predict/", False),
    ("/v2/models/m/infer", False), ("/v1/models/m/versions/:predict", False), ("/v1/models/m/x:predict", False),
])
def test_the_predict_routes_take_exactly_their_paths(path: str, predict: bool) -> None:
    route = routes.find("POST", path)
    assert (route is not None and route.handler == "protocols.tfs_rest.predict") == predict, path


def test_a_path_no_route_takes_is_404_and_a_wrong_method_405_with_allow() -> None:
    assert routes.allowed("/v1/models/m:predict") == ["POST"]
    assert routes.allowed("/v1/models/m") == ["GET", "HEAD"]
    assert routes.find("HEAD", "/v2/health/live") is not None
    missing, wrong = routes.not_routed("/nothing"), routes.not_routed("/v2/models/m/infer")
    assert missing.status == 404 and json.loads(missing.body) == {"error": "Not Found"}
    assert wrong.status == 405 and dict(wrong.headers)[b"allow"] == b"POST"


def test_the_openapi_document_is_derived_from_the_table() -> None:
    plane = plane_with()  # with a version label: the label routes are part of this server's API
    try:
        document = openapi.document(router(plane).context)
    finally:
        plane.close()
    documented = {(path, method.upper()) for path, operations in document["paths"].items() for method in operations}
    assert documented == {(r.path, r.method) for r in routes.ROUTES if r.path not in routes.UNDOCUMENTED}
    for route in routes.ROUTES:
        if route.path in routes.UNDOCUMENTED:
            continue
        operation = document["paths"][route.path][route.method.lower()]
        assert operation["summary"] == route.summary
        assert [p["name"] for p in operation.get("parameters", [])] == routes.parameters(route.path)
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def test_the_front_answers_only_routes_of_the_table() -> None:
    async def forward(request: Request) -> Answer:
        raise AssertionError("not forwarded")

    config = ServerConfig(model_path=Path("m.tflite"), model_name="m")
    front = routes.Router(routes.Context(None, config), forward=forward)
    answered = {route.path: route.handler for route in front._handlers}
    assert answered == {"/v2/health/live": "protocols.health.live", "/v2/health/ready": "protocols.health.ready",
                            "/healthz": "protocols.health.healthz", "/monitoring/prometheus/metrics": "protocols.monitoring.scrape"}


def test_an_unknown_rpc_is_unimplemented() -> None:
    plane = plane_with()
    try:
        answer = asyncio.run(router(plane).answer(Request(GRPC, "/tensorflow.serving.PredictionService/Classify", b"")))
    finally:
        plane.close()
    assert answer.status == 12  # UNIMPLEMENTED


def test_the_same_handler_answers_in_the_front_and_behind_the_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    """One handler, reached from the front's own process (the router answering directly, as `LocalModels`
    has it) and from a model process (the router serving the channel's far end)."""
    from builder.server.protocols import tfs_rest

    reached: list[tuple[str, Any]] = []
    real = tfs_rest.status

    async def spy(context: Any, request: Request, name: str, version: str | None = None,
                  label: str | None = None) -> Answer:
        reached.append((request.path, version))
        return await real(context, request, name, version, label)

    monkeypatch.setattr(tfs_rest, "status", spy)
    plane = plane_with()
    table = router(plane)

    async def scenario() -> list[Answer]:
        direct = await table.answer(Request(HTTP, "GET", b"", "/v1/models/m"))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        front, far = FrontEnd(ours, 2, 1 << 16), ModelEnd(theirs)
        await front.start()
        far.hello()
        serving = asyncio.ensure_future(far.serve(table.answer))
        behind = await front.answer(Request(HTTP, "GET", b"", "/v1/models/m/versions/2"))
        assert far.stopped is not None
        far.stopped.set()
        await serving
        front.close()
        theirs.close()
        return [direct, behind]

    try:
        direct, behind = asyncio.run(scenario())
    finally:
        plane.close()
    assert reached == [("/v1/models/m", None), ("/v1/models/m/versions/2", "2")]
    assert [v["version"] for v in json.loads(direct.body)["model_version_status"]] == ["1", "2"]
    assert [v["version"] for v in json.loads(bytes(behind.body))["model_version_status"]] == ["2"]
