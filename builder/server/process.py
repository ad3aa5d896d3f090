"""Running the server as a process: the app under uvicorn on a socket bound before any model loads, draining
on SIGTERM/SIGINT (not-ready first, then the requests in flight), and `--processes N` worker processes, each
a whole one-process server rebuilt from the configuration its supervisor leaves in the environment.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from fastapi import FastAPI

from builder.server.app import create_app, set_ready
from builder.server.config import ServerConfig, config_from_json, config_to_json

log = logging.getLogger("tfsmith.serve")

#: The environment variable that carries the configuration (`config_to_json`) to worker processes.
CONFIG_ENV = "TFSMITH_SERVE_CONFIG"

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
