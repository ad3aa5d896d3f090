"""The model host's predict path (`tfs_rest.PREDICT_PATH`, which `host.ModelHost` answers straight from the data
plane) takes exactly the requests the TF Serving predict routes of the API document would have taken."""

from __future__ import annotations

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
def test_the_predict_path_takes_exactly_the_predict_routes_paths(path: str) -> None:
    lane = tfs_rest.PREDICT_PATH.fullmatch(path) is not None
    assert lane == bool(routes_taking(path) & PREDICT_ROUTES), path

