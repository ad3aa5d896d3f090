"""Every route the server answers, declared once: each REST route and each gRPC method, with its handler.

One table (`ROUTES`, `RPCS`) says what the server serves; everything else is derived from it: the model host's
answering (`Router`, the same in the front's own process and in each model process), the OpenAPI document
(`openapi.document`), the `Allow` header of a 405, which routes the front answers itself when the models run
in processes of their own (`Route.front`), and the gRPC methods the front accepts (`grpc_front`).

A handler is `async (Context, Request, **path parameters) -> Answer` over the data plane; it lives in the module
of its protocol (`tfs_rest`, `v2`, `tfs_grpc`) or of what it answers (`health`, `metrics`, `openapi`) and is
named here as "module.function", resolved when a `Router` is built, so this table imports nothing of the
model stack and the front can read it. A handler raises what went wrong; the router writes every failure
(`answers.error_answer`: `{"error": ...}` with the status, or the gRPC code), 404 for an unknown path and
405 with `Allow` for a wrong method.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from builder.server.process.messages import GRPC, Answer, Request

if TYPE_CHECKING:
    from builder.server.config import ServerConfig
    from builder.server.core.dataplane import DataPlane

#: TF Serving's gRPC services (`builder.wire.tfs_proto` names them the same; kept here so the table imports no
#: protobuf).
PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"


@dataclass(frozen=True)
class Route:
    """One REST route: `path` is a template whose `{parameters}` match one path segment without ':' (so
    `/v1/models/{name}` never takes TF Serving's `/v1/models/m:predict`)."""

    method: str
    path: str
    handler: str  # "module.function" under builder.server
    summary: str
    front: bool = False  # answered by the front itself when the models run in processes of their own

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.path)


@dataclass(frozen=True)
class Rpc:
    """One gRPC method of TF Serving's services, and its handler (given the serialized message)."""

    service: str
    method: str
    handler: str

    @property
    def name(self) -> str:
        """The full method name, as gRPC sends it."""
        return f"/{self.service}/{self.method}"


ROUTES: tuple[Route, ...] = (
    # TensorFlow Serving's REST API
    Route("GET", "/v1/models/{name}", "protocols.tfs_rest.status", "Model status: every served version"),
    Route("GET", "/v1/models/{name}/versions/{version}", "protocols.tfs_rest.status", "Model version status"),
    Route("GET", "/v1/models/{name}/labels/{label}", "protocols.tfs_rest.status", "Status of a labelled version"),
    Route("GET", "/v1/models/{name}/metadata", "protocols.tfs_rest.metadata", "Signatures: inputs, outputs, dtypes, shapes"),
    Route("GET", "/v1/models/{name}/versions/{version}/metadata", "protocols.tfs_rest.metadata", "Signatures of a version"),
    Route("GET", "/v1/models/{name}/labels/{label}/metadata", "protocols.tfs_rest.metadata",
          "Signatures of a labelled version"),
    Route("POST", "/v1/models/{name}:predict", "protocols.tfs_rest.predict", "Predict (row or columnar)"),
    Route("POST", "/v1/models/{name}/versions/{version}:predict", "protocols.tfs_rest.predict", "Predict with a version"),
    Route("POST", "/v1/models/{name}/labels/{label}:predict", "protocols.tfs_rest.predict", "Predict with a version label"),
    # the Open Inference Protocol (KServe v2)
    Route("GET", "/v2/health/live", "protocols.v2.live", "Open Inference Protocol: server liveness", front=True),
    Route("GET", "/v2/health/ready", "protocols.v2.ready", "Open Inference Protocol: server readiness", front=True),
    Route("GET", "/v2", "protocols.v2.server_metadata", "Open Inference Protocol: server metadata"),
    Route("GET", "/v2/models/{name}", "protocols.v2.metadata", "Open Inference Protocol: model metadata"),
    Route("GET", "/v2/models/{name}/versions/{version}", "protocols.v2.metadata",
          "Open Inference Protocol: model version metadata"),
    Route("GET", "/v2/models/{name}/ready", "protocols.v2.model_ready", "Open Inference Protocol: model readiness"),
    Route("GET", "/v2/models/{name}/versions/{version}/ready", "protocols.v2.model_ready",
          "Open Inference Protocol: model version readiness"),
    Route("POST", "/v2/models/{name}/infer", "protocols.v2.infer", "Open Inference Protocol: inference"),
    Route("POST", "/v2/models/{name}/versions/{version}/infer", "protocols.v2.infer",
          "Open Inference Protocol: inference (version)"),
    # the server's own
    Route("GET", "/healthz", "protocols.health.healthz", "Liveness and what is served", front=True),
    Route("GET", "/monitoring/prometheus/metrics", "protocols.monitoring.scrape",
          "Prometheus metrics (TensorFlow Serving's names and ours)", front=True),
    Route("GET", "/openapi.json", "protocols.openapi.openapi_json", "This document"),
    Route("GET", "/docs", "protocols.openapi.docs", "The API, browsable (one page, nothing fetched from elsewhere)"),
)

RPCS: tuple[Rpc, ...] = (
    Rpc(PREDICTION_SERVICE, "Predict", "protocols.tfs_grpc.predict"),
    Rpc(PREDICTION_SERVICE, "GetModelMetadata", "protocols.tfs_grpc.get_model_metadata"),
    Rpc(MODEL_SERVICE, "GetModelStatus", "protocols.tfs_grpc.get_model_status"),
)

#: Routes left out of the OpenAPI document (the document itself and its browser), as FastAPI left them out.
UNDOCUMENTED = ("/openapi.json", "/docs")
SEGMENT = "[^/:]+"


def _compile(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", template)
    regex = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>{SEGMENT})" for i, part in enumerate(parts))
    return re.compile(regex)


def parameters(template: str) -> list[str]:
    """The path parameters of a route's template, in order."""
    return re.findall(r"\{(\w+)\}", template)


def _methods(route: Route) -> tuple[str, ...]:
    return ("GET", "HEAD") if route.method == "GET" else (route.method,)


def find(method: str, path: str) -> Route | None:
    """The route that answers `method` at `path` (HEAD: the GET route), or None."""
    for route, pattern in _COMPILED:
        if method in _methods(route) and pattern.fullmatch(path):
            return route
    return None


def allowed(path: str) -> list[str]:
    """Every method some route serves at `path` (the `Allow` header of a 405); empty for an unknown path."""
    return sorted({m for route, pattern in _COMPILED if pattern.fullmatch(path) for m in _methods(route)})


_COMPILED = tuple((route, route.pattern) for route in ROUTES)

Handler = Callable[..., Awaitable[Answer]]


@dataclass
class Context:
    """What every handler is given: the data plane, the configuration, and the OpenAPI document once built
    (None again after a version switch: versions are path parameter values in it)."""

    plane: DataPlane
    config: ServerConfig
    document: dict[str, Any] | None = field(default=None)


def resolve(handler: str) -> Handler:
    """The function a table entry names ("module.function" under builder.server)."""
    module, _, function = handler.rpartition(".")
    return getattr(importlib.import_module(f"builder.server.{module}"), function)  # type: ignore[no-any-return]


class Router:
    """The table bound to its handlers: answers every request the front hands over, in either layout. Always
    answers: a failure becomes its error answer (500 / INTERNAL for the server's own), never an exception."""

    def __init__(self, context: Context) -> None:
        self.context = context
        by_method: dict[str, list[Route]] = {}
        for route in ROUTES:
            for method in _methods(route):
                by_method.setdefault(method, []).append(route)
        #: Per method, one regex matching every route's path (one search a request, whichever route), and for each
        #: alternative its handler and (parameter, group) names.
        self._http = {method: _alternation(taking) for method, taking in by_method.items()}
        self._rpcs = {rpc.name: resolve(rpc.handler) for rpc in RPCS}
        from builder.server.protocols.answers import error_answer  # here, not at import: it needs the data plane

        self._error_answer = error_answer

    async def answer(self, request: Request) -> Answer:
        try:
            if request.kind == GRPC:
                rpc = self._rpcs.get(request.method)
                if rpc is None:
                    return Answer(12, message=f"method {request.method} is not served")  # UNIMPLEMENTED
                return await rpc(self.context, request)
            table = self._http.get(request.method)
            match = None if table is None else table[0].fullmatch(request.path)
            if match is None:
                return not_routed(request.path)
            handler, names = table[1][match.lastgroup]
            return await handler(self.context, request, **{name: match.group(group) for name, group in names})
        except Exception as error:  # noqa: BLE001 - every failure is answered; the server keeps serving
            return self._error_answer(error, request.kind)


def _alternation(taking: list[Route]) -> tuple[re.Pattern[str], dict[str | None, tuple[Handler, tuple[tuple[str, str], ...]]]]:
    """One regex for these routes: each an alternative whose groups are named `p<i>_<parameter>`, closed by an
    empty group `r<i>` (the last group a match closes, so `lastgroup` says which route matched)."""
    alternatives, found = [], {}
    for index, route in enumerate(taking):
        parts = re.split(r"\{(\w+)\}", route.path)
        alternatives.append("".join(re.escape(part) if i % 2 == 0 else f"(?P<p{index}_{part}>{SEGMENT})"
                                    for i, part in enumerate(parts)) + f"(?P<r{index}>)")
        found[f"r{index}"] = (resolve(route.handler),
                              tuple((name, f"p{index}_{name}") for name in parameters(route.path)))
    return re.compile("|".join(alternatives)), found


def not_routed(path: str) -> Answer:
    """The answer to a path no route takes (404), or a method no route at that path serves (405 + Allow)."""
    from builder.server.protocols.answers import json_error

    methods = allowed(path)
    if not methods:
        return json_error(404, "Not Found")
    return json_error(405, "Method Not Allowed", ((b"allow", ", ".join(methods).encode()),))
