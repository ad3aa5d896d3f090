"""The server as a process: the front speaks HTTP and gRPC to clients and hands every request to a model server.

    clients ──HTTP/1.1──▶ front (`http_front`) ──┐             ┌──▶ model server in this process   (--model-processes 1)
    clients ──gRPC──────▶ front (`grpc_front`) ───┴▶ balancer ─┼──▶ model process 1 ┐ shared memory
                                                               └──▶ model process N ┘ (`channel`)

With `--model-processes N` the front hands each request to the least busy model process (`balancer`): requests,
not connections, are spread, so one client connection, a pool of four or hundreds of them, and one gRPC
channel alike keep every process busy. The front holds the only listening sockets: the REST port is bound
before any model loads (a taken port is refused at once) and the gRPC port is ours alone (no SO_REUSEPORT),
so no other process can join either (`ports`).

Lifecycle:
- start: the models load and warm; the front listens once every one is ready. A model
  process that refuses its model hands its one-line reason to the front, which prints it and exits with
  its code (the same line one process would print).
- SIGTERM/SIGINT: every model server reports not-ready, the front keeps answering for `shutdown_delay_seconds` (load
  balancers see the readiness change; a second signal skips the wait), then stops taking connections and
  calls, lets the requests in flight finish (up to `drain_seconds`) and stops the models.
- A model process that dies is replaced with the same models; only the requests it held fail. Several deaths
  within a minute stop the server with status 1 and the cause (`model_processes`, `supervision`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from builder.measure.cores import keep_request_memory
from builder.server.front import access_log, grpc_front, ports
from builder.server.config import ServerConfig
from builder.server.core.outcome import Outcome
from builder.server.process.messages import Answer, Request
from builder.server.front.model_processes import ModelProcesses, spawner

log = logging.getLogger("tfsmith.serve")

#: How a model's calls run in the front's own process (`runner.dispatch_mode`), for the start-up line.
CALLS_RUN = {"inline": "on the event loop", "turns": "on the event loop, one per turn of it",
             "threads": "on worker threads"}


@dataclass(frozen=True)
class Layout:
    """How the server is laid out: model processes (0: the models in the front's own process) and the cores
    each is pinned to (None: not pinned)."""

    processes: int = 0
    cpus: tuple[tuple[int, ...], ...] | None = None


def run(config: ServerConfig, address: str = "127.0.0.1", port: int = 8501, log_level: str = "info",
        layout: Layout = Layout(), banner: Sequence[str] = ()) -> None:
    """Serve until SIGTERM/SIGINT, then drain; SystemExit(1) when model processes died in a crash loop. Ports
    another process holds are refused (`ports.PortTaken`) before any model loads. `banner`: lines said
    once the server listens (the configuration it chose and why)."""
    import uvloop

    keep_request_memory()
    sock = ports.bind_rest(address, port)  # ours from here on
    try:
        if config.grpc_port:
            ports.check_free(config.address, config.grpc_port)
        status = uvloop.run(_serve(config, sock, address, log_level, layout, banner))
    finally:
        sock.close()
    if status:
        raise SystemExit(status)


# --- where the models run ---------------------------------------------------------------------------------------


class LocalModels:
    """The models in this process: one model server, answering directly."""

    def __init__(self, config: ServerConfig) -> None:
        from builder.server.model_server import ModelServer

        self.server = ModelServer(config)
        self.answer = self.server.answer  # the model server's router itself: nothing between the front and it
        self.router = self.server.router
        self.metrics = self.server.plane.metrics  # the front's own refusals are counted with the model server's requests
        self.died = asyncio.Event()  # never set: nothing to lose

    async def start(self) -> None:
        await self.server.start()

    def describe(self) -> str:
        modes = sorted({served.batcher.mode for served in self.server.plane.models.all()})
        return f"in this process, model calls {' / '.join(CALLS_RUN[mode] for mode in modes)}"

    async def drain(self) -> None:
        self.server.drain()

    async def stop(self) -> None:
        await self.server.stop()

    def kill(self) -> None:
        pass


# --- the front ---------------------------------------------------------------------------------------------


def _tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    if config.tls is None:
        return None
    cert, key = config.tls
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return context


async def _serve(config: ServerConfig, sock: socket.socket, address: str, log_level: str, layout: Layout,
                 banner: Sequence[str]) -> int:
    from builder.server.front.http_front import HttpFront

    loop = asyncio.get_running_loop()
    asked, hurry = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        if asked.is_set():
            hurry.set()  # a second signal: skip the shutdown delay
        asked.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    models: LocalModels | ModelProcesses = (LocalModels(config) if layout.processes == 0
                                          else ModelProcesses(config, layout.processes,
                                                              spawner(log_level, layout.cpus)))
    try:
        starting = asyncio.ensure_future(models.start())
        await asyncio.wait([starting, asyncio.ensure_future(asked.wait())], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # asked to stop while loading
            models.kill()
            starting.cancel()
            return 0
        starting.result()
    except BaseException:
        models.kill()
        raise
    answer: Callable[[Request], Awaitable[Answer]] = models.answer
    if config.access_log:  # one line per request, whichever protocol and wherever the models run
        answer = access_log.logged(answer)

    def refused_by(protocol: str) -> Callable[[Outcome, str, str, str], None]:
        entrypoint = "GRPC" if protocol == "grpc" else "REST"

        def refused(result: Outcome, method: str, path: str, client: str) -> None:
            """A request the front refused itself (malformed, a head, body or message too large, a coding it
            does not read): counted like any other, and logged when access lines are asked for."""
            models.router.count("", "", entrypoint, result.label, 0.0)
            if config.access_log:
                access_log.log_refusal(result, protocol, method, path, client)

        return refused

    tls = _tls_context(config)
    http = HttpFront(answer, config.max_body_bytes, "https" if tls else "http", ssl=tls,
                     refused=refused_by("http"))
    grpc_server = None
    try:
        await http.start(sock)
        if config.grpc_port:
            grpc_server, _ = await grpc_front.start(answer, config.address, config.grpc_port, config.max_body_bytes,
                                                      config.tls, refused_by("grpc"))
    except BaseException:
        await models.stop()
        raise
    for line in banner:
        log.info("%s", line)
    log.info("serving %s v%s from %s on http%s://%s:%d%s, models %s", config.model_name, config.version,
             config.model_path, "s" if tls else "", address, sock.getsockname()[1],
             f" and gRPC on {config.address}:{config.grpc_port}" if config.grpc_port else "", models.describe())
    await asyncio.wait([asyncio.ensure_future(asked.wait()), asyncio.ensure_future(models.died.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    status = 0 if asked.is_set() else 1
    await models.drain()
    if asked.is_set() and config.shutdown_delay_seconds > 0:
        try:
            await asyncio.wait_for(hurry.wait(), config.shutdown_delay_seconds)
        except asyncio.TimeoutError:
            pass
    stopping = [http.shutdown(config.drain_seconds)]
    if grpc_server is not None:
        stopping.append(grpc_server.stop(config.drain_seconds))
    await asyncio.gather(*stopping)
    await models.stop()
    return status
