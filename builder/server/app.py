"""The ASGI app and the process: TensorFlow Serving's REST API (plus the Open Inference Protocol, gRPC and
metrics started with it) over pools of .tflite backends (FastAPI + uvicorn).

Routes:
  /v1/models/...                                 TensorFlow Serving's REST API (`tfs_rest`)
  /v2/...                                        the Open Inference Protocol (`v2`)
  GET  /monitoring/prometheus/metrics            Prometheus metrics (`metrics`)
  GET  /healthz                                  liveness + what is served
  GET  /openapi.json, /docs                      the API described, exactly (`contract`)
gRPC (`grpc_service`) shares the event loop and the models. The three protocols only translate; what a
request does once translated (resolve, readiness, batching, metrics, in-flight) is `dataplane`'s. Every error is `{"error": "..."}` with a 4xx
status for what the client got wrong (400 malformed body or wrong shape/dtype, 404 unknown model/version/
label/route, 405 wrong method with `Allow`, 413 body too large, 415 unknown Content-Encoding, 503 not ready)
and 500 for our own failures; no request, however malformed, stops the server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

from builder.errors import InputError
from builder.server import grpc_service, reload, tfs_rest, v2
from builder.server.answers import add_error_answers
from builder.server.access_log import AccessLog
from builder.server.pool import BackendPool, measure_pool
from builder.server.batching import BatchingConfig, DynamicBatcher, run_inline
from builder.server.contract import finish_document
from builder.server.dataplane import DataPlane
from builder.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from builder.server.metrics import PATH as METRICS_PATH
from builder.server.metrics import Metrics
from builder.server.options import DEFAULT_MAX_BODY_BYTES
from builder.server.protocol import SignatureSpec, batched, default_signature
from builder.server.model_config import ModelSource, version_folders
from builder.server.served import ModelSet, ServedModel
from builder.server.tfs_rest import JSONBody

log = logging.getLogger("tfsmith.serve")


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to know; built by the CLI (or the container's entry point)."""

    model_path: Path
    model_name: str
    version: int = 1
    runtime: str = "litert"
    runtime_reason: str = "requested"
    workers: int = 2
    threads: int = 1
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_request_batch: int = 4096
    dispatch: str = "auto"  # auto (inline for models faster than a thread hop) | inline | threads
    samples_path: Path | None = None  # the model's own example inputs (optimize's samples.npz), for warm-up
    sources: tuple[ModelSource, ...] = ()  # models from a config file or a base path (instead of model_path)
    poll_seconds: float = 0.0  # look for new versions this often (0 = never)
    grpc_port: int = 0  # 0 = no gRPC
    host: str = "127.0.0.1"  # where gRPC listens (REST's address is uvicorn's)
    access_log: bool = False
    drain_seconds: float = 30.0
    shutdown_delay_seconds: float = 0.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: the signature a request naming none gets: --signature-name (required to exist) or the report's choice
    #: (used when the model has it); None: serving_default, else the model's only signature
    signature_name: str | None = None
    signature_required: bool = False

    @property
    def tls(self) -> tuple[Path, Path] | None:
        return None if self.tls_cert is None or self.tls_key is None else (self.tls_cert, self.tls_key)


def load_model(config: ServerConfig, pool: BackendPool | None, metrics: Metrics) -> ServedModel:
    """Interpreters created, warmed and timed (the start-up self-test), behind a batcher: ready to serve."""
    start = time.perf_counter()
    pool = pool or BackendPool.create(config.runtime, config.model_path, config.workers, config.threads)
    default = served_signature(config, pool.signatures)
    executor = ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="tfsmith-infer")
    batchable = all(s.inputs and batched(s.inputs[0]) for s in pool.signatures.values())
    model_p50_us = measure_pool(pool, config.samples_path, signature_name=default)
    inline = run_inline(model_p50_us, config.batching) if config.dispatch == "auto" else config.dispatch == "inline"
    batcher = DynamicBatcher(pool, config.batching, executor, batchable, inline)
    batcher.on_batch = metrics.batch
    metrics.load_seconds.labels(config.model_name, str(config.version)).set(time.perf_counter() - start)
    return ServedModel(name=config.model_name, version=config.version, signatures=pool.signatures,
                       batcher=batcher, runtime=pool.runtime, max_request_batch=config.max_request_batch,
                       default_signature=default, platform=pool.platform, model_p50_us=model_p50_us, pool=pool,
                       ready=True)


def served_signature(config: ServerConfig, signatures: Mapping[str, SignatureSpec]) -> str | None:
    """The default signature of a loaded model: --signature-name must exist (InputError naming those that
    do); the report's choice is taken where the model has it; else serving_default or the only one."""
    chosen = default_signature(signatures, config.signature_name)
    if chosen is None and config.signature_name and config.signature_required:
        raise InputError(f"--signature-name {config.signature_name!r}: {config.model_path.name} has no such "
                         f"signature; it has: {', '.join(sorted(signatures))}")
    return chosen or default_signature(signatures)


def load_models(config: ServerConfig, pool: BackendPool | None, metrics: Metrics) -> ModelSet:
    """Every model version to serve at start, loaded and warmed: the one model file, or each source's versions."""
    models = ModelSet()
    if not config.sources:
        models.set(config.model_name, {config.version: load_model(config, pool, metrics)})
        return models
    for source in config.sources:
        folders = version_folders(source.base_path)
        wanted = source.wanted(list(folders))
        if not wanted:
            raise InputError(f"{source.name}: no version folder with a .tflite or a SavedModel under "
                             f"{source.base_path}")
        versions = {v: load_version(config, source, v, folders[v], metrics) for v in wanted}
        models.set(source.name, versions, source.labels)
    return models


def load_version(config: ServerConfig, source: ModelSource, version: int, folder: Path, metrics: Metrics) -> ServedModel:
    """One version folder (`<base>/<version>/`: a .tflite or an optimize output) loaded and warmed."""
    from builder.model.artifact import resolve_artifact

    artifact = resolve_artifact(folder, source.name, config.runtime)
    return load_model(replace(config, model_path=artifact.model_path, model_name=source.name, version=version,
                              samples_path=artifact.samples_path,
                              signature_name=config.signature_name or artifact.signature,
                              signature_required=config.signature_required), None, metrics)


def create_app(config: ServerConfig, pool: BackendPool | None = None) -> FastAPI:
    """The app serving the configured models over REST (and gRPC, started with the app); the pool is created
    here unless given (tests share one). Every protocol is an adapter over one `DataPlane`."""
    metrics = Metrics()
    models = load_models(config, pool, metrics)
    first_name = next(iter(models.models))  # only the name: holding a version would keep it in memory
    plane = DataPlane(models, metrics, config.access_log)
    servicer = grpc_service.Servicer(plane)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if config.grpc_port:
            server, port = await grpc_service.start(servicer, config.host, config.grpc_port, config.max_body_bytes,
                                                    config.tls)
            app.state.grpc_server, app.state.grpc_port = server, port
        poller = None
        if config.sources and config.poll_seconds > 0:
            def changed() -> None:
                app.openapi_schema = None  # versions are path parameter values in the document

            poller = asyncio.get_running_loop().create_task(reload.poll(
                models, config.sources, lambda s, v, f: load_version(config, s, v, f, metrics),
                config.poll_seconds, config.drain_seconds, changed))
        plane.set_ready(True)
        yield
        plane.set_ready(False)
        if poller is not None:
            poller.cancel()
        if app.state.grpc_server is not None:
            await app.state.grpc_server.stop(config.drain_seconds)
        plane.close()

    app = FastAPI(
        title="tfsmith model server",
        version="1",
        description="TensorFlow Serving-compatible REST API (and the Open Inference Protocol) serving "
        + ", ".join(f"`{name}`" for name in models.models) + ".",
        lifespan=lifespan,
    )
    app.state.models = models
    app.state.plane = plane
    app.state.metrics = metrics
    app.state.grpc_server = None
    app.state.grpc_port = 0
    app.state.config = config

    add_error_answers(app)

    @app.get("/healthz", summary="Liveness and what is served")
    async def healthz() -> JSONBody:
        async with plane.request("REST", "health"):
            return JSONBody(_health(plane.lookup(first_name)))

    def _health(primary: ServedModel) -> dict[str, Any]:
        p50 = primary.model_p50_us
        return (
            {
                "status": "ok",
                "model": primary.name,
                "version": str(primary.version),
                "runtime": primary.runtime,
                "runtime_reason": config.runtime_reason,
                "workers": None if primary.pool is None else primary.pool.size,
                "max_batch_size": config.batching.max_batch_size,
                "inline": primary.batcher.inline,
                "model_p50_us": None if p50 is None else round(p50, 1),
                "ready": models.ready,
                "grpc_port": app.state.grpc_port or None,
                "models": {name: [str(v) for v in sorted(versions)] for name, versions in models.models.items()},
            }
        )

    @app.get(METRICS_PATH, summary="Prometheus metrics (TensorFlow Serving's names and ours)")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=METRICS_CONTENT_TYPE)

    tfs_rest.add_routes(app, plane, config.max_body_bytes, config.max_request_batch)
    v2.add_routes(app, plane, config.max_body_bytes)
    app.add_middleware(tfs_rest.PredictLane, plane=plane, max_body_bytes=config.max_body_bytes,
                       max_request_batch=config.max_request_batch)
    if config.access_log:  # outside the predict lane: it logs those requests too
        app.add_middleware(AccessLog)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            document = get_openapi(title=app.title, version=app.version, description=app.description,
                                   routes=app.routes)
            app.openapi_schema = finish_document(document, models, config.max_request_batch, v2.DATATYPE_OF)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def set_ready(app: FastAPI, ready: bool) -> None:
    """Readiness (the v2 health endpoint, HEALTHCHECK, the metric): true once warmed, false when draining."""
    app.state.plane.set_ready(ready)


#: How much of a request body uvicorn buffers before it stops reading and waits for the app (its own
#: default is 64 KiB). The server reads every body whole anyway (up to --max-body-bytes), and at 64 KiB a
#: 3.2 MB JSON image arrives in ~50 pause/resume round trips through the event loop.
BODY_READ_AHEAD_BYTES = 1 << 20


def read_bodies_in_large_pieces() -> None:
    """Raise uvicorn's read-ahead for request bodies to `BODY_READ_AHEAD_BYTES` (a module setting of its
    HTTP protocol implementations; each imports the value under the same name)."""
    from uvicorn.protocols.http import flow_control, h11_impl, httptools_impl

    for module in (flow_control, h11_impl, httptools_impl):
        module.HIGH_WATER_LIMIT = BODY_READ_AHEAD_BYTES  # type: ignore[attr-defined]


class DrainingServer:
    """uvicorn's Server, told on SIGTERM/SIGINT to report not-ready first, stop gRPC from taking new calls,
    wait `shutdown_delay_seconds` (load balancers see the readiness change) and then shut down gracefully:
    listeners close, requests in flight finish (up to `drain_seconds`), the process exits."""

    @staticmethod
    def create(app: FastAPI, uvicorn_config: Any) -> Any:
        import asyncio

        import uvicorn

        read_bodies_in_large_pieces()

        class _Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                if self.should_exit or getattr(self, "_draining", False):
                    return super().handle_exit(sig, frame)
                self._draining = True
                set_ready(app, False)
                config: ServerConfig = app.state.config
                grpc_server = app.state.grpc_server
                loop = asyncio.get_event_loop()
                if grpc_server is not None:
                    loop.call_later(config.shutdown_delay_seconds,
                                    lambda: asyncio.ensure_future(grpc_server.stop(config.drain_seconds)))
                loop.call_later(config.shutdown_delay_seconds, super().handle_exit, sig, frame)

        return _Server(uvicorn_config)


def run_server(
    config: ServerConfig, host: str = "127.0.0.1", port: int = 8501, log_level: str = "info", processes: int = 1
) -> None:
    """Serve until SIGTERM/SIGINT, then drain. One process by default (concurrency from the interpreter pool's
    threads); `processes` > 1 runs that many copies of the one-process server on the same socket (`workers`;
    gRPC shares its port the same way, SO_REUSEPORT), each with its own pool and each draining as one process
    does, for throughput beyond one core (Python's GIL caps one process at about one core of HTTP handling).
    Ports another process holds are refused (`ports.PortTaken`) before any model loads; only our own workers
    share them."""
    import os

    import uvicorn

    from builder.server import ports, workers

    sock = ports.bind_rest(host, port)  # ours from here on: the workers inherit it
    try:
        if config.grpc_port:
            ports.check_free(config.host, config.grpc_port)
        common: dict[str, Any] = {"host": host, "port": port, "log_level": log_level, "access_log": False,
                                  "timeout_graceful_shutdown": max(1, round(config.drain_seconds))}
        if config.tls is not None:
            common.update(ssl_certfile=str(config.tls_cert), ssl_keyfile=str(config.tls_key))
        if processes <= 1:
            app = create_app(config)
            log.info("serving %s v%s from %s on http%s://%s:%d%s", config.model_name, config.version,
                     config.model_path, "s" if config.tls else "", host, sock.getsockname()[1],
                     f" and gRPC on {config.host}:{config.grpc_port}" if config.grpc_port else "")
            DrainingServer.create(app, uvicorn.Config(app, **common)).run(sockets=[sock])
            return
        os.environ[CONFIG_ENV] = config_to_json(config)
        ports.share_with_workers()
        status = workers.run_workers(processes, functools.partial(serve_worker, common), sock)
        if status:
            raise SystemExit(status)
    finally:
        sock.close()


CONFIG_ENV = "TFSMITH_SERVE_CONFIG"


def config_to_json(config: ServerConfig) -> str:
    """The config for worker processes (they start fresh and read it from the environment)."""
    return json.dumps({
        **{k: getattr(config, k) for k in ("model_name", "version", "runtime", "runtime_reason", "workers",
                                            "threads", "max_body_bytes", "max_request_batch", "dispatch",
                                            "grpc_port", "host", "access_log", "drain_seconds",
                                            "shutdown_delay_seconds", "poll_seconds", "signature_name",
                                            "signature_required")},
        "sources": [{**asdict(s), "base_path": str(s.base_path)} for s in config.sources],
        "model_path": str(config.model_path),
        "tls_cert": None if config.tls_cert is None else str(config.tls_cert),
        "tls_key": None if config.tls_key is None else str(config.tls_key),
        "samples_path": None if config.samples_path is None else str(config.samples_path),
        "batching": [config.batching.max_batch_size, config.batching.timeout_us],
    })


def config_from_json(text: str) -> ServerConfig:
    data = json.loads(text)
    data["model_path"] = Path(data["model_path"])
    for key in ("samples_path", "tls_cert", "tls_key"):
        data[key] = None if data[key] is None else Path(data[key])
    data["batching"] = BatchingConfig(*data["batching"])
    data["sources"] = tuple(ModelSource(**{**s, "base_path": Path(s["base_path"]), "specific": tuple(s["specific"])})
                            for s in data["sources"])
    return ServerConfig(**data)


def app_from_env() -> FastAPI:
    """The app of a worker process, from the configuration its supervisor left in the environment."""
    import os

    return create_app(config_from_json(os.environ[CONFIG_ENV]))


def serve_worker(uvicorn_options: dict[str, Any], sock: Any) -> None:
    """One worker of `--processes N`: the one-process server, draining included, on the shared socket."""
    import os

    import uvicorn

    logging.basicConfig(level=str(uvicorn_options["log_level"]).upper(), format="%(levelname)s: %(message)s")
    app = app_from_env()
    config: ServerConfig = app.state.config
    log.info("serving %s v%s from %s on http%s://%s:%d (process %d)", config.model_name, config.version,
             config.model_path, "s" if config.tls else "", uvicorn_options["host"], sock.getsockname()[1], os.getpid())
    DrainingServer.create(app, uvicorn.Config(app, **uvicorn_options)).run(sockets=[sock])


def configure(
    artifact: Path | None,
    *,
    model_name: str | None = None,
    version: int = 1,
    runtime: str | None = None,
    runtime_reason: str = "requested",
    workers: int = 2,
    threads: int = 1,
    max_batch: int = 1,
    batch_timeout_us: int = 0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    dispatch: str = "auto",
    grpc_port: int = 0,
    host: str = "127.0.0.1",
    access_log: str = "off",
    drain_seconds: float = 30.0,
    shutdown_delay_seconds: float = 0.0,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    model_base_path: Path | None = None,
    model_config_file: Path | None = None,
    poll_seconds: float = 1.0,
    signature_name: str | None = None,
) -> ServerConfig:
    """A validated ServerConfig from user-facing options; the runtime is named (auto is resolved by the caller)
    or None: what the model needs (tensorflow for a SavedModel, or where optimize measured it there), else
    litert. With runtime tensorflow, TensorFlow is prepared here (threads, the one-line device report, the
    GPU requirement) so a server that cannot serve as asked refuses before it listens."""
    from builder.errors import InputError
    from builder.model.artifact import resolve_artifact
    from builder.model import registry
    from builder.model.create import model_for_runtime
    from builder.model.openvino import nncf_inputs

    if workers < 1 or threads < 1:
        raise InputError("--workers and --threads must be at least 1")
    if version < 0:
        raise InputError("--model-version must be a non-negative integer")
    if dispatch not in ("auto", "inline", "threads"):
        raise InputError(f"unknown --dispatch {dispatch!r}; choose auto, inline or threads")
    if max_body_bytes < 1024:
        raise InputError("--max-body-bytes must be at least 1024")
    if not 0 <= grpc_port <= 65535:
        raise InputError("--grpc-port must be a port number (0 = no gRPC)")
    if drain_seconds < 0 or shutdown_delay_seconds < 0:
        raise InputError("--drain-seconds and --shutdown-delay-seconds must not be negative")
    if (tls_cert is None) != (tls_key is None):
        raise InputError("--tls-cert and --tls-key go together")
    for tls_file in (tls_cert, tls_key):
        if tls_file is not None and not tls_file.is_file():
            raise InputError(f"{tls_file}: no such TLS certificate/key file")
    if runtime is not None:
        registry.check(runtime)
    if signature_name is not None and not signature_name:
        raise InputError("--signature-name must not be empty")
    try:
        batching = BatchingConfig(max_batch, batch_timeout_us)
    except ValueError as error:
        raise InputError(str(error)) from None
    given = [a for a in (artifact, model_base_path, model_config_file) if a is not None]
    if len(given) != 1:
        raise InputError("serve one of: a MODEL (.tflite or optimize folder), --model-base-path DIR (integer version "
                         "folders) or --model-config-file FILE (TF Serving's model_config_list)")
    if poll_seconds < 0:
        raise InputError("--file-system-poll-wait-seconds must not be negative")
    if artifact is None:
        from builder.model.artifact import model_name_for
        from builder.server.model_config import ModelSource, check_sources, read_config_file

        if model_config_file is not None:
            sources = read_config_file(model_config_file)
        else:
            assert model_base_path is not None
            sources = check_sources([ModelSource(model_name or model_name_for(model_base_path), model_base_path)],
                                    str(model_base_path))
        if runtime is not None and registry.calibrates(runtime):
            raise InputError(f"runtime {runtime} serves one model file; name it instead of a base path")
        runtime = runtime or sources_runtime(sources)
        if registry.on_tensorflow(runtime):
            prepare(threads, workers)
        return ServerConfig(
            model_path=sources[0].base_path, model_name=sources[0].name, runtime=runtime,
            runtime_reason=runtime_reason, workers=workers, threads=threads, batching=batching,
            max_body_bytes=max_body_bytes, dispatch=dispatch, grpc_port=grpc_port, host=host,
            access_log=access_log == "json", drain_seconds=drain_seconds,
            shutdown_delay_seconds=shutdown_delay_seconds, tls_cert=tls_cert, tls_key=tls_key,
            sources=tuple(sources), poll_seconds=poll_seconds,
            signature_name=signature_name, signature_required=signature_name is not None,
        )
    resolved = resolve_artifact(artifact, model_name, runtime)
    if runtime is None:
        runtime = resolved.runtime or "litert"
    elif resolved.saved_model and not registry.runtime(runtime).serves(registry.SAVED_MODEL_KIND):
        serving = ", ".join(r.name for r in registry.serving(registry.SAVED_MODEL_KIND))
        raise InputError(f"{resolved.model_path}: a SavedModel runs only on TensorFlow; use --runtime "
                         f"{serving} (not {runtime})")
    if registry.calibrates(runtime):
        nncf_inputs(resolved.model_path)  # refused up front without calibration samples
    if registry.on_tensorflow(runtime):
        prepare(threads, workers)
    return ServerConfig(
        model_path=model_for_runtime(runtime, resolved.model_path),
        model_name=resolved.name,
        version=version,
        runtime=runtime,
        runtime_reason=runtime_reason,
        workers=workers,
        threads=threads,
        batching=batching,
        max_body_bytes=max_body_bytes,
        dispatch=dispatch,
        samples_path=resolved.samples_path,
        grpc_port=grpc_port,
        host=host,
        access_log=access_log == "json",
        drain_seconds=drain_seconds,
        shutdown_delay_seconds=shutdown_delay_seconds,
        tls_cert=tls_cert,
        tls_key=tls_key,
        signature_name=signature_name or resolved.signature,
        signature_required=signature_name is not None,
    )


def prepare(threads: int, workers: int) -> None:
    """TensorFlow set up before the server listens (tensorflow_backend.prepare_tensorflow)."""
    from builder.model.tensorflow import prepare_tensorflow

    prepare_tensorflow(threads, workers)


def sources_runtime(sources: Sequence[ModelSource]) -> str:
    """tensorflow when a served version folder holds a SavedModel (TF Serving's usual layout), else litert."""
    from builder.model.artifact import is_saved_model

    for source in sources:
        if any(is_saved_model(folder) for folder in version_folders(source.base_path).values()):
            return "tensorflow"
    return "litert"
