"""A model host: the served models answering the requests the front hands over, in the front's own process
(`--processes 1`) or in a model process of its own (`model_process`).

The hot paths go straight into the data plane, with nothing between the request and the codec: TF Serving's
predict, the Open Inference Protocol's infer and the three gRPC methods. Every other HTTP request (status,
metadata, health, readiness, the API document, wrong methods and unknown paths) goes through the FastAPI
app (`app.create_app`) as the ASGI request it would have been, so those answers stay written once. A host
always answers: a failure of its own becomes a 500 (gRPC INTERNAL), never an exception into the front.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import grpc

from builder.server import grpc_service, jsoncodec, tfs_rest, v2
from builder.server.answers import error_body, failure
from builder.server.app import create_app
from builder.server.bodies import decoded
from builder.server.config import ServerConfig
from builder.server.dataplane import Address
from builder.server.messages import GRPC, Answer, Request
from builder.wire import tfs_proto as pb
from builder.wire.predict_split import parse_predict

log = logging.getLogger("tfsmith.serve")

V2_INFER_PATH = re.compile(r"/v2/models/([^/:]+)(?:/versions/([^/:]+))?/infer")
JSON_HEADERS = ((b"content-type", b"application/json"),)


class Aborted(grpc.aio.AbortError):
    """What `_Context.abort` raises: the status a gRPC call ends with."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    """The part of grpc.aio's servicer context the servicer uses, for a call the front received."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Aborted(code, details)


def _parser(kind: Any) -> Callable[[Any], tuple[Any, dict[str, Any]]]:
    return lambda body: (kind.FromString(body), {})


def _predict_parts(body: Any) -> tuple[Any, dict[str, Any]]:
    """A PredictRequest, its large tensors read where they lie (`predict_split`)."""
    message, contents = parse_predict(body)
    return message, {"contents": contents}


class ModelHost:
    """The app (models loaded and warmed when this is built), answering forwarded requests."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.app = create_app(config)
        self.plane = self.app.state.plane
        self.servicer = grpc_service.Servicer(self.plane)
        #: Each RPC's parse (a message, and what else its method is given) and method.
        self._rpcs: dict[str, tuple[Callable[[Any], tuple[Any, dict[str, Any]]], Callable[..., Awaitable[Any]]]] = {
            f"/{pb.PREDICTION_SERVICE}/Predict": (_predict_parts, self.servicer.predict),
            f"/{pb.PREDICTION_SERVICE}/GetModelMetadata": (_parser(pb.GetModelMetadataRequest),
                                                           self.servicer.get_model_metadata),
            f"/{pb.MODEL_SERVICE}/GetModelStatus": (_parser(pb.GetModelStatusRequest), self.servicer.get_model_status),
        }
        self._lifespan: AbstractAsyncContextManager[None] | None = None
        self._staged: dict[str, tuple[tuple[int, ...], dict[int, Any]]] = {}

    # --- life ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """The app's start-up: the version poller, then ready."""
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()

    def drain(self) -> None:
        """Not ready from now on (readiness answers 503; requests are still answered)."""
        self.plane.set_ready(False)

    async def stop(self) -> None:
        if self._lifespan is not None:
            await self._lifespan.__aexit__(None, None, None)
            self._lifespan = None

    # --- versions decided by the front (model processes) ---------------------------------------------------

    async def stage(self, name: str, versions: tuple[int, ...]) -> tuple[bool, str]:
        """Load (off the event loop) and warm the `versions` of model `name` not served yet, to serve them once
        the front says every process has; (False, why) when one cannot be loaded."""
        from builder.server import reload
        from builder.server.loading import load_version

        source = self._source(name)
        try:
            self._staged[name] = (versions, await reload.stage(
                self.plane.models, source, versions,
                lambda s, v, f: load_version(self.config, s, v, f, self.plane.metrics)))
        except Exception as error:  # noqa: BLE001 - the front keeps the versions served now, and says why
            log.warning("%s: versions %s could not be loaded (%s: %s)", name, list(versions), type(error).__name__,
                        error)
            return False, f"{type(error).__name__}: {error}"
        return True, ""

    def activate(self, name: str, versions: tuple[int, ...], commit: bool) -> None:
        """Serve the staged versions (commit), or let them go (another process could not load them)."""
        from builder.server import reload

        staged = self._staged.pop(name, None)
        if staged is None or staged[0] != versions:
            return
        if commit:
            reload.switch(self.plane.models, self._source(name), staged[1], self.config.drain_seconds)
            self.app.openapi_schema = None  # versions are path parameter values in the document
        else:
            reload.discard(self.plane.models, self._source(name), staged[1])

    def _source(self, name: str) -> Any:
        return next(source for source in self.config.sources if source.name == name)

    @property
    def info(self) -> dict[str, Any]:
        """What this host loaded, for the front's start-up line."""
        served = self.plane.models.all()
        return {"models": {s.name: s.version for s in served},
                "model_p50_us": tuple(s.model_p50_us for s in served)}

    # --- answering --------------------------------------------------------------------------------------

    async def answer(self, request: Request) -> Answer:
        try:
            if request.kind == GRPC:
                return await self._grpc(request)
            if request.method == "POST":
                match = tfs_rest.PREDICT_PATH.fullmatch(request.path)
                if match is not None:
                    return await self._predict(request, *match.groups())
                match = V2_INFER_PATH.fullmatch(request.path)
                if match is not None:
                    return await self._infer(request, *match.groups())
            return await self._asgi(request)
        except Exception as error:  # noqa: BLE001 - a host always answers; the front keeps serving
            log.error("answering %s %s failed", request.method, request.path, exc_info=error)
            if request.kind == GRPC:
                return Answer(grpc.StatusCode.INTERNAL.value[0], message="internal error")
            return Answer(500, error_body("internal error"), JSON_HEADERS)

    async def _predict(self, request: Request, name: str, version: str | None, label: str | None) -> Answer:
        """TF Serving's predict: the body (as it lies) through `tfs_rest.PredictCodec` into the data plane."""
        body = bytes(request.body) if not isinstance(request.body, bytes) else request.body
        try:
            content = await self.plane.infer(
                tfs_rest.ENTRYPOINT, Address(name, version, label), self._reader(request, body),
                tfs_rest.PredictCodec(self.config.max_request_batch))
            return Answer(200, jsoncodec.dumps(content), JSON_HEADERS)
        except Exception as error:  # noqa: BLE001 - answered as the routes answer it
            answer = failure(error)
            return Answer(answer.status, error_body(answer.message), JSON_HEADERS)

    async def _infer(self, request: Request, name: str, version: str | None) -> Answer:
        """The Open Inference Protocol's infer: JSON, or the binary extension (whose tensors stay where they
        lie: in a model process, in the shared memory the front wrote them to)."""
        length = request.header(v2.HEADER_LENGTH.encode())
        header_length = None if length is None else length.decode("latin-1")
        body = request.body
        if header_length is None and not isinstance(body, bytes):
            body = bytes(body)  # all of it is JSON
        try:
            answer: v2.InferAnswer = await self.plane.infer(v2.ENTRYPOINT, Address(name, version),
                                                            self._reader(request, body), v2.InferCodec(header_length))
            return Answer(200, answer.body, answer.headers)
        except Exception as error:  # noqa: BLE001 - answered as the routes answer it
            answer = failure(error)
            return Answer(answer.status, error_body(answer.message), JSON_HEADERS)

    def _reader(self, request: Request, body: Any) -> Callable[[], Awaitable[Any]]:
        encoding = request.header(b"content-encoding")
        limit = self.config.max_body_bytes

        async def read() -> Any:
            if encoding is None:
                return body
            return decoded(bytes(body), limit, encoding.decode("latin-1"))

        return read

    async def _grpc(self, request: Request) -> Answer:
        parse, method = self._rpcs[request.method]
        try:
            message, extra = parse(request.body)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError: not a message of this kind
            return Answer(grpc.StatusCode.INVALID_ARGUMENT.value[0], message="malformed request message")
        try:
            reply = await method(message, _Context(), **extra)
        except Aborted as aborted:
            return Answer(aborted.code.value[0], message=aborted.details)
        return Answer(0, reply.SerializeToString())

    async def _asgi(self, request: Request) -> Answer:
        """Any other HTTP request, through the app."""
        host, _, port = request.client.rpartition(":")
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": request.method, "scheme": request.scheme, "path": request.path,
            "raw_path": request.path.encode("utf-8"), "query_string": request.query, "root_path": "",
            "headers": list(request.headers), "client": (host, int(port)) if port.isdigit() else None,
            "server": (self.config.host, 0), "state": {},
        }
        body = bytes(request.body)
        sent = False
        gone = asyncio.get_running_loop().create_future()
        status, headers, parts = 500, [], []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await gone  # the front answers only once the app has; nobody disconnects mid-request here

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status, headers = message["status"], [(k.lower(), v) for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return Answer(status, b"".join(parts), tuple(headers))
