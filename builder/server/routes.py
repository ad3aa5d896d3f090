"""Every route the server answers, declared once: each REST route and each gRPC method, with its handler.

One table (`ROUTES`, `RPCS`) says what the server serves; everything else is derived from it: the model server's
answering (`Router`, the same in the front's own process and in each model process), the OpenAPI document
(`openapi.document`), the `Allow` header of a 405, which routes the front answers itself when the models run
in processes of their own (`Route.front`), and the gRPC methods the front accepts (`grpc_front`).

A handler is `async (Context, Request, **path parameters) -> Answer` over the data plane; it lives in the module
of its protocol (`tfs_rest`, `v2`, `tfs_grpc`) or of what it answers (`health`, `monitoring`, `openapi`) and is
named here as "module.function", resolved when a `Router` is built, so this table imports nothing of the
model stack and the front can read it. A gRPC method also names how its serialized message is read (`read`:
the model it names, and the message). A handler raises what went wrong; the router is where every request
ends: its outcome (`core.outcome`: HTTP status, gRPC code, metric label, reason) counted under the route's
`api` and `entrypoint`, and a failure answered from it (`messages.refusal`), 404 for an unknown path and 405
with `Allow` for a wrong method.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from builder.server.process.messages import GRPC, HTTP, Answer, Request, refusal

if TYPE_CHECKING:
    from builder.server.config import ServerConfig
    from builder.server.core.dataplane import DataPlane
    from builder.server.core.metrics import Metrics

log = logging.getLogger("tfsmith.serve")

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
    api: str | None  # what the metrics count it as (TF Serving's `API` label: predict, metadata, status...);
    #                  None: not counted (the metrics scrape itself, the API document)
    front: bool = False  # answered by the front itself when the models run in processes of their own

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.path)

    @property
    def entrypoint(self) -> str:
        """The metrics' `entrypoint` label: the Open Inference Protocol's routes V2, every other REST."""
        return "V2" if self.path.startswith("/v2") else "REST"


@dataclass(frozen=True)
class Rpc:
    """One gRPC method of TF Serving's services, and its handler (given the serialized message)."""

    service: str
    method: str
    read: str  # "module.function": the serialized message -> (the model it names, the message)
    handler: str  # "module.function": (context, request, message) -> Answer
    api: str
    entrypoint = "GRPC"

    @property
    def name(self) -> str:
        """The full method name, as gRPC sends it."""
        return f"/{self.service}/{self.method}"


ROUTES: tuple[Route, ...] = (
    # TensorFlow Serving's REST API
    Route("GET", "/v1/models/{name}", "protocols.tfs_rest.status", "Model status: every served version", "status"),
    Route("GET", "/v1/models/{name}/versions/{version}", "protocols.tfs_rest.status", "Model version status", "status"),
    Route("GET", "/v1/models/{name}/labels/{label}", "protocols.tfs_rest.status", "Status of a labelled version", "status"),
    Route("GET", "/v1/models/{name}/metadata", "protocols.tfs_rest.metadata", "Signatures: inputs, outputs, dtypes, shapes", "metadata"),
    Route("GET", "/v1/models/{name}/versions/{version}/metadata", "protocols.tfs_rest.metadata", "Signatures of a version", "metadata"),
    Route("GET", "/v1/models/{name}/labels/{label}/metadata", "protocols.tfs_rest.metadata",
          "Signatures of a labelled version", "metadata"),
    Route("POST", "/v1/models/{name}:predict", "protocols.tfs_rest.predict", "Predict (row or columnar)", "predict"),
    Route("POST", "/v1/models/{name}/versions/{version}:predict", "protocols.tfs_rest.predict", "Predict with a version", "predict"),
    Route("POST", "/v1/models/{name}/labels/{label}:predict", "protocols.tfs_rest.predict", "Predict with a version label", "predict"),
    # the Open Inference Protocol (KServe v2)
    Route("GET", "/v2/health/live", "protocols.health.live", "Open Inference Protocol: server liveness", "live", front=True),
    Route("GET", "/v2/health/ready", "protocols.health.ready", "Open Inference Protocol: server readiness", "ready", front=True),
    Route("GET", "/v2", "protocols.v2.server_metadata", "Open Inference Protocol: server metadata", "metadata"),
    Route("GET", "/v2/models/{name}", "protocols.v2.metadata", "Open Inference Protocol: model metadata", "metadata"),
    Route("GET", "/v2/models/{name}/versions/{version}", "protocols.v2.metadata",
          "Open Inference Protocol: model version metadata", "metadata"),
    Route("GET", "/v2/models/{name}/ready", "protocols.v2.model_ready", "Open Inference Protocol: model readiness", "ready"),
    Route("GET", "/v2/models/{name}/versions/{version}/ready", "protocols.v2.model_ready",
          "Open Inference Protocol: model version readiness", "ready"),
    Route("POST", "/v2/models/{name}/infer", "protocols.v2.infer", "Open Inference Protocol: inference", "predict"),
    Route("POST", "/v2/models/{name}/versions/{version}/infer", "protocols.v2.infer",
          "Open Inference Protocol: inference (version)", "predict"),
    # the server's own
    Route("GET", "/healthz", "protocols.health.healthz", "Liveness and what is served", "health", front=True),
    Route("GET", "/monitoring/prometheus/metrics", "protocols.monitoring.scrape",
          "Prometheus metrics (TensorFlow Serving's names and ours)", None, front=True),
    Route("GET", "/openapi.json", "protocols.openapi.openapi_json", "This document", None),
    Route("GET", "/docs", "protocols.openapi.docs", "The API, browsable (one page, nothing fetched from elsewhere)", None),
)

RPCS: tuple[Rpc, ...] = (
    Rpc(PREDICTION_SERVICE, "Predict", "protocols.tfs_grpc.read_predict", "protocols.tfs_grpc.predict", "predict"),
    Rpc(PREDICTION_SERVICE, "GetModelMetadata", "protocols.tfs_grpc.read_metadata",
        "protocols.tfs_grpc.get_model_metadata", "metadata"),
    Rpc(MODEL_SERVICE, "GetModelStatus", "protocols.tfs_grpc.read_status", "protocols.tfs_grpc.get_model_status",
        "status"),
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
    found = INDEX.match(method, path)
    return None if found is None else found[0]


def allowed(path: str) -> list[str]:
    """Every method some route serves at `path` (the `Allow` header of a 405); empty for an unknown path."""
    return sorted({m for route, pattern in _COMPILED if pattern.fullmatch(path) for m in _methods(route)})


_COMPILED = tuple((route, route.pattern) for route in ROUTES)

Handler = Callable[..., Awaitable[Answer]]


class Index:
    """Per method, one regular expression matching every route's path: one search a request, whichever route.
    Each route is an alternative whose groups are named `p<i>_<parameter>`, closed by an empty group `r<i>` (the
    last group a match closes, so `lastgroup` says which route matched)."""

    def __init__(self, routes: tuple[Route, ...]) -> None:
        by_method: dict[str, list[Route]] = {}
        for route in routes:
            for method in _methods(route):
                by_method.setdefault(method, []).append(route)
        self._by_method = {method: self._alternation(taking) for method, taking in by_method.items()}

    @staticmethod
    def _alternation(taking: list[Route]) -> tuple[re.Pattern[str], dict[str | None, tuple[Route, tuple[tuple[str, str], ...]]]]:
        alternatives, found = [], {}
        for index, route in enumerate(taking):
            parts = re.split(r"\{(\w+)\}", route.path)
            alternatives.append("".join(re.escape(part) if i % 2 == 0 else f"(?P<p{index}_{part}>{SEGMENT})"
                                        for i, part in enumerate(parts)) + f"(?P<r{index}>)")
            found[f"r{index}"] = (route, tuple((name, f"p{index}_{name}") for name in parameters(route.path)))
        return re.compile("|".join(alternatives)), found

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route that takes `method` at `path` and its path parameters, or None."""
        table = self._by_method.get(method)
        match = None if table is None else table[0].fullmatch(path)
        if match is None:
            return None
        route, names = table[1][match.lastgroup]  # type: ignore[index]
        return route, {name: match.group(group) for name, group in names}


INDEX = Index(ROUTES)


class Health(Protocol):
    """What the health and metrics routes answer from: a model server's own state, or (model processes) the
    front's view of every process (`front/model_processes`)."""

    @property
    def ready(self) -> bool: ...

    def served(self) -> dict[str, Any]: ...

    async def exposition(self) -> bytes: ...


class ModelHealth:
    """Health as a model server knows it: its data plane's readiness, its models, its metrics."""

    def __init__(self, plane: DataPlane, config: ServerConfig) -> None:
        self.plane, self.config = plane, config

    @property
    def ready(self) -> bool:
        return self.plane.ready

    def served(self) -> dict[str, Any]:
        """What `/healthz` says of the models served here."""
        plane, config = self.plane, self.config
        models = plane.models
        primary = plane.lookup(next(iter(models.models)))
        p50 = primary.model_p50_us
        interpreters = None if primary.pool is None else primary.pool.size
        return {
            "status": "ok",
            "model": primary.name,
            "version": str(primary.version),
            "runtime": primary.runtime,
            "runtime_reason": config.runtime_reason,
            "interpreters": interpreters,
            "workers": interpreters,  # the same count under its first name, for readers written before
            "max_batch_size": config.batching.max_batch_size,
            "inline": primary.batcher.inline,
            "dispatch": primary.batcher.mode,
            "model_p50_us": None if p50 is None else round(p50, 1),
            "ready": models.ready,
            "grpc_port": config.grpc_port or None,
            "models": {name: [str(v) for v in sorted(versions)] for name, versions in models.models.items()},
        }

    async def exposition(self) -> bytes:
        return self.plane.metrics.exposition()


@dataclass
class Context:
    """What every handler is given: the data plane (None in the front, which answers only `Route.front` routes),
    the configuration, what health is answered from, the metrics requests are counted in, and the OpenAPI
    document once built (None again after a version switch: versions are path parameter values in it)."""

    plane: DataPlane | None
    config: ServerConfig
    health: Health | None = None
    metrics: Metrics | None = None
    document: dict[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.plane is not None:
            self.health = self.health or ModelHealth(self.plane, self.config)
            self.metrics = self.metrics or self.plane.metrics

    def known(self, name: str) -> bool:
        """Whether model `name` is served (the metrics count other names as "unknown")."""
        return self.plane is None or name in self.plane.models.models


def resolve(handler: str) -> Handler:
    """The function a table entry names ("module.function" under builder.server)."""
    module, _, function = handler.rpartition(".")
    return getattr(importlib.import_module(f"builder.server.{module}"), function)  # type: ignore[no-any-return]


class Router:
    """The table bound to its handlers: answers every request handed to it, in either layout, and counts it. Always
    answers: a failure becomes its outcome's answer (`core.outcome`: 500 / INTERNAL for the server's own, logged
    with its traceback), never an exception.

    `forward`: the front's router when the models run in processes of their own. It answers the `Route.front`
    routes and what no route takes (404, 405) itself, and hands every other request, and every gRPC call, to
    `forward` (the least busy model process), which answers and counts it; one that `forward` cannot deliver
    is answered and counted here (`core.outcome.Unavailable`: 503)."""

    def __init__(self, context: Context, forward: Callable[[Request], Awaitable[Answer]] | None = None) -> None:
        from builder.server.core import outcome  # here, not at import: the table imports no model stack

        self.context = context
        self.metrics = context.metrics
        self.forward = forward
        self._outcome = outcome
        self._index = INDEX
        answered = ROUTES if forward is None else tuple(route for route in ROUTES if route.front)
        self._handlers = {route: resolve(route.handler) for route in answered}
        self._rpcs = {rpc.name: (rpc, resolve(rpc.read), resolve(rpc.handler)) for rpc in RPCS} if forward is None else {}

    async def answer(self, request: Request) -> Answer:
        outcomes = self._outcome
        model, entrypoint, counted, parameters = "", "REST", "", {}
        handler: Handler | None = None
        if request.kind == GRPC:
            if self.forward is not None:
                return await self._forwarded(request, "", "", "GRPC")
            entrypoint = "GRPC"
            found = self._rpcs.get(request.method)
            if found is not None:
                counted = found[0].api
        else:
            match = self._index.match(request.method, request.path)
            if match is not None:
                route, parameters = match
                handler = self._handlers.get(route)
                if handler is None:
                    return await self._forwarded(request, parameters.get("name", ""), route.api, route.entrypoint)
                counted, entrypoint, model = route.api, route.entrypoint, parameters.get("name", "")
        metrics = self.metrics if counted is not None else None  # not counted: not in flight either
        if metrics is not None:
            metrics.active += 1
        start = time.perf_counter()
        result = outcomes.GONE  # unless the request is answered: a client gone, its task cancelled
        try:
            if request.kind == GRPC:
                if found is None:
                    answer = not_served(request.method)
                else:
                    model, message = found[1](request.body)
                    answer = await found[2](self.context, request, message)
                result = outcomes.OK if not answer.status else outcomes.of_grpc(answer.status, answer.message)
                return answer
            answer = not_routed(request.path) if handler is None else await handler(self.context, request,
                                                                                     **parameters)
            result = outcomes.OK if answer.status == 200 else outcomes.outcome(answer.status)
            return answer
        except Exception as error:  # noqa: BLE001 - every failure is answered; the server keeps serving
            result = outcomes.outcome_of(error)
            if result.http >= 500:
                log.error("request failed", exc_info=error)
            return refusal(result, request.kind)
        finally:
            if metrics is not None:
                metrics.active -= 1
                self.count(model, counted or "", entrypoint, result.label, time.perf_counter() - start)

    def count(self, model: str, api: str, entrypoint: str, label: str, seconds: float) -> None:
        """One request answered: counted under its model (a name not served as "unknown") and its outcome's
        `label`, its latency observed under (model, `api`: predict, metadata, status..., `entrypoint`: REST,
        V2 or GRPC). The one place requests are counted: this router's own, those the front refuses itself
        and those no model process could take."""
        if self.metrics is None:
            return
        if model and not self.context.known(model):
            model = "unknown"
        self.metrics.counts[(model, label)] += 1
        key = (model, api, entrypoint)
        child = self.metrics.latency.get(key) or self.metrics.latency_child(key)
        child.observe(seconds * 1e6)

    async def _forwarded(self, request: Request, model: str, api: str | None, entrypoint: str) -> Answer:
        """`forward`'s answer; one it cannot deliver (no process left to take it, or the one holding it gone)
        answered with its outcome and counted here, since no model process counted it."""
        assert self.forward is not None
        start = time.perf_counter()
        try:
            return await self.forward(request)
        except self._outcome.Unavailable as error:
            result = self._outcome.outcome_of(error)
            if api is not None:
                self.count(model, api, entrypoint, result.label, time.perf_counter() - start)
            return refusal(result, request.kind)


@functools.cache
def _unrouted(status: int, allow: str) -> Answer:
    from builder.server.core.outcome import outcome

    reason = "Not Found" if status == 404 else "Method Not Allowed"
    return refusal(outcome(status, reason), HTTP, ((b"allow", allow.encode()),) if allow else ())


def not_routed(path: str) -> Answer:
    """The answer to a path no route takes (404), or a method no route at that path serves (405 + Allow)."""
    methods = allowed(path)
    return _unrouted(405, ", ".join(methods)) if methods else _unrouted(404, "")


def not_served(method: str) -> Answer:
    """The answer to a gRPC method the table does not hold: UNIMPLEMENTED."""
    from builder.server.core.outcome import outcome

    return refusal(outcome(501, f"method {method} is not served"), GRPC)
