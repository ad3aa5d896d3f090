"""The predict lane answers exactly the requests the TF Serving predict routes would have taken."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI
from starlette.routing import Match

from builder.server import contract, tfs_rest

assert contract.SegmentConvertor  # registers the `segment` path convertor the routes use

PREDICT_ROUTES = {"/v1/models/{name:segment}:predict", "/v1/models/{name:segment}/versions/{version:segment}:predict",
                  "/v1/models/{name:segment}/labels/{label:segment}:predict"}


def routes_taking(path: str, method: str = "POST") -> set[str]:
    app = FastAPI()
    tfs_rest.add_routes(app, plane=None, max_body_bytes=1, max_request_batch=1)  # type: ignore[arg-type]
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}
    return {route.path for route in app.router.routes if route.matches(scope)[0] == Match.FULL}


@pytest.mark.parametrize("path", [
    "/v1/models/m:predict", "/v1/models/m/versions/3:predict", "/v1/models/m/labels/stable:predict",
    "/v1/models/m.v-2_x:predict", "/v1/models/m/versions/abc:predict",          # taken; a 404 from the data plane
    "/v1/models/m", "/v1/models/m:classify", "/v1/models/m/metadata", "/v1/models/:predict",
    "/v1/models/a:b:predict", "/v1/models/m/versions/3/labels/x:predict", "/v1/models/m:predict/",
    "/v2/models/m/infer", "/v1/models/m/versions/:predict", "/v1/models/m%2Fx:predict",
])
def test_the_lane_takes_exactly_the_predict_routes_paths(path: str) -> None:
    lane = tfs_rest.PREDICT_PATH.fullmatch(path) is not None
    assert lane == bool(routes_taking(path) & PREDICT_ROUTES), path


def test_other_methods_and_root_paths_go_to_the_app() -> None:
    seen: list[str] = []

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        seen.append(scope["method"])

    lane = tfs_rest.PredictLane(app, plane=None, max_body_bytes=1, max_request_batch=1)  # type: ignore[arg-type]
    for method, root in (("GET", ""), ("PUT", ""), ("POST", "/prefix")):
        asyncio.run(lane({"type": "http", "method": method, "path": "/v1/models/m:predict", "root_path": root,
                          "headers": []}, None, None))  # type: ignore[arg-type]
    assert seen == ["GET", "PUT", "POST"]
