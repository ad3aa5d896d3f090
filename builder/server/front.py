"""The server as a process: the front speaks HTTP and gRPC to clients and hands every request to a model host.

    clients ──HTTP/1.1──▶ front (`http_front`) ──┐            ┌──▶ model host in this process   (--processes 1)
    clients ──gRPC──────▶ front (`grpc_service`) ─┴▶ dispatch ─┼──▶ model process 1 ┐ shared memory
                                                              └──▶ model process N ┘ (`channel`)

With `--processes N` the front hands each request to the least busy model process (`dispatch`): requests,
not connections, are spread, so one client connection, a pool of four or hundreds of them, and one gRPC
channel alike keep every process busy. The front holds the only listening sockets: the REST port is bound
before any model loads (a taken port is refused at once) and the gRPC port is ours alone (no SO_REUSEPORT),
so no other process can join either (`ports`).

Lifecycle:
- start: the model hosts load and warm their models; the front listens once every one is ready. A model
  process that refuses its model hands its one-line reason to the front, which prints it and exits with
  its code (the same line one process would print).
- SIGTERM/SIGINT: every host reports not-ready, the front keeps answering for `shutdown_delay_seconds` (load
  balancers see the readiness change; a second signal skips the wait), then stops taking connections and
  calls, lets the requests in flight finish (up to `drain_seconds`) and stops the hosts.
- A model process that exits unasked stops the server with status 1: an orchestrator restarts the whole
  server, where a smaller one would answer slower with nobody told.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from builder.errors import TfsmithError
from builder.measure.cores import keep_request_memory
from builder.server import grpc_service, ports
from builder.server.channel import (ACTIVATE, DRAIN, LOAD, LOADED, META_ROOM, READY, REFUSED, STOP, ChannelClosed,
                                    FrontEnd)
from builder.server.config import ServerConfig, config_to_json
from builder.server.dispatch import Dispatcher, window
from builder.server.forward import HTTP, Answer, Request
from builder.server.metrics import CONTENT_TYPE, PATH as METRICS_PATH, merge_expositions
from builder.server.model_config import version_folders

log = logging.getLogger("tfsmith.serve")

#: Health checks the front answers itself when the models run in processes of their own.
HEALTH_PATHS = ("/v2/health/live", "/v2/health/ready", "/healthz")
JSON = ((b"content-type", b"application/json"),)
#: How a model's calls run in the front's own process (`batching.dispatch_mode`), for the start-up line.
CALLS_RUN = {"inline": "on the event loop", "turns": "on the event loop, one per turn of it",
             "threads": "on worker threads"}
#: How long stopped model processes get to exit before they are killed.
STOP_SECONDS = 10.0


class Refused(TfsmithError):
    """A model process refused what it was given; its message and exit code are the ones to report."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Layout:
    """How the server is laid out: model processes (0: the models in the front's own process) and the cores
    each is pinned to (None: not pinned)."""

    processes: int = 0
    cpus: tuple[tuple[int, ...], ...] | None = None


def run(config: ServerConfig, host: str = "127.0.0.1", port: int = 8501, log_level: str = "info",
        layout: Layout = Layout(), banner: Sequence[str] = ()) -> None:
    """Serve until SIGTERM/SIGINT, then drain; SystemExit(1) when a model process died unasked. Ports
    another process holds are refused (`ports.PortTaken`) before any model loads. `banner`: lines said
    once the server listens (the configuration it chose and why)."""
    import uvloop

    keep_request_memory()
    sock = ports.bind_rest(host, port)  # ours from here on
    try:
        if config.grpc_port:
            ports.check_free(config.host, config.grpc_port)
        status = uvloop.run(_serve(config, sock, host, log_level, layout, banner))
    finally:
        sock.close()
    if status:
        raise SystemExit(status)


# --- model hosts --------------------------------------------------------------------------------------------


class LocalHosts:
    """The models in this process: one host, answering directly."""

    def __init__(self, config: ServerConfig) -> None:
        from builder.server.host import ModelHost

        self.host = ModelHost(config)
        self.died = asyncio.Event()  # never set: nothing to lose

    async def start(self) -> None:
        await self.host.start()

    async def respond(self, request: Request) -> Answer:
        return await self.host.answer(request)

    def describe(self) -> str:
        modes = sorted({served.batcher.mode for served in self.host.plane.models.all()})
        return f"in this process, model calls {' / '.join(CALLS_RUN[mode] for mode in modes)}"

    async def drain(self) -> None:
        self.host.drain()

    async def stop(self) -> None:
        await self.host.stop()

    def kill(self) -> None:
        pass


@dataclass
class _Process:
    process: Any  # multiprocessing.Process
    end: FrontEnd
    info: dict[str, Any] = field(default_factory=dict)


class ModelProcesses:
    """N model processes behind a dispatcher; the front's metrics answer sums theirs."""

    def __init__(self, config: ServerConfig, layout: Layout, log_level: str) -> None:
        from builder.server import model_process

        self.config = config
        self.died = asyncio.Event()
        self.stopping = False
        size = window(config.workers, config.batching.max_batch_size)
        slot_bytes = config.max_body_bytes + META_ROOM
        context = multiprocessing.get_context("spawn")
        self.sources = config.sources if config.poll_seconds > 0 else ()
        self.active: dict[str, tuple[int, ...]] = {}
        self._poller: asyncio.Future[None] | None = None
        if self.sources:  # the front decides which versions every process serves, and when they switch
            self.active = {s.name: tuple(s.wanted(list(version_folders(s.base_path)))) for s in self.sources}
            config = replace(config, poll_seconds=0.0, sources=tuple(
                replace(s, policy="specific", specific=self.active[s.name]) for s in config.sources))
        self.ready = False
        self._healthz: dict[str, Any] = {}
        if config.dispatch == "auto" and config.workers == 1 and not config.batching.enabled:
            # one interpreter and nothing to batch: the process has nothing else to do while its model runs,
            # so it runs the model on its event loop and saves a thread hand-off (~140 us a request on a
            # 2-core guest); the front answers health checks itself, so none waits behind a model call
            config = replace(config, dispatch="inline")
        text = config_to_json(config)
        self.processes: list[_Process] = []
        for index in range(layout.processes):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            cpus = None if layout.cpus is None else layout.cpus[index]
            process = context.Process(target=model_process.run, name=f"tfsmith-model-{index}",
                                      args=(text, theirs, index, os.getpid(), log_level, cpus))
            process.start()
            theirs.close()
            self.processes.append(_Process(process, FrontEnd(ours, size, slot_bytes)))
        self._own_metrics = CollectorRegistry()
        ProcessCollector(registry=self._own_metrics)
        self.dispatcher: Dispatcher[FrontEnd] = Dispatcher([p.end for p in self.processes],
                                                           [size] * len(self.processes))

    async def start(self) -> None:
        """Every process loaded and ready; Refused (the first refusal) otherwise, the others stopped."""
        for index, entry in enumerate(self.processes):
            entry.end.on_closed = lambda index=index: self._closed(index)
            await entry.end.start()
        outcomes = await asyncio.gather(*(self._ready(p) for p in self.processes), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                self.kill()
                raise outcome
        await self._refresh_healthz()
        if self.sources:
            self._poller = asyncio.ensure_future(self._poll())
        self.ready = True

    async def _refresh_healthz(self) -> None:
        """What /healthz says of the models (process 0's answer), kept for the front to answer with."""
        import json

        answer = await self.dispatcher.run_on(0, lambda end: end.exchange(Request(HTTP, "GET", b"", "/healthz")))
        if answer.status == 200:
            self._healthz = json.loads(bytes(answer.body))

    async def _poll(self) -> None:
        """Every poll interval: a version set on disk that differs from the one served is staged in every
        process, then served by all at once (or by none, when one cannot load it: tried again next time)."""
        while True:
            await asyncio.sleep(self.config.poll_seconds)
            for source in self.sources:
                try:
                    wanted = tuple(source.wanted(list(version_folders(source.base_path))))
                    if wanted and wanted != self.active.get(source.name):
                        await self._switch(source.name, wanted)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # noqa: BLE001 - a bad version must not stop serving the good ones
                    log.warning("%s: reload failed (%s: %s); still serving versions %s", source.name,
                                type(error).__name__, error, list(self.active.get(source.name, ())))

    async def _switch(self, name: str, versions: tuple[int, ...]) -> None:
        await asyncio.gather(*(p.end.tell(LOAD, (name, versions)) for p in self.processes))
        replies = [await p.end.control() for p in self.processes]
        failures = [values[3] for notice, values in replies
                    if notice.kind != LOADED or not values[2] or tuple(values[1]) != versions]
        commit = not failures
        await asyncio.gather(*(p.end.tell(ACTIVATE, (name, versions, commit)) for p in self.processes))
        if commit:
            self.active[name] = versions
            await self._refresh_healthz()
            log.info("%s: every model process serves versions %s", name, list(versions))
        else:
            log.warning("%s: versions %s not served: %s; still serving %s", name, list(versions), failures[0],
                        list(self.active.get(name, ())))

    async def _ready(self, entry: _Process) -> None:
        try:
            notice, values = await entry.end.control()
        except ChannelClosed:
            raise TfsmithError(f"model process {entry.process.pid} exited while loading the model (status "
                               f"{entry.process.exitcode}); see the log above") from None
        if notice.kind == REFUSED:
            message, code = values
            raise Refused(message, code)
        if notice.kind == READY:
            entry.info = values

    def _closed(self, index: int) -> None:
        if not self.stopping:
            entry = self.processes[index]
            entry.process.join(0.5)
            log.error("model process %d (pid %s) exited with status %s unasked; stopping the server", index,
                      entry.process.pid, entry.process.exitcode)
            self.died.set()

    async def respond(self, request: Request) -> Answer:
        if request.kind == HTTP and request.method in ("GET", "HEAD"):
            if request.path == METRICS_PATH:
                return await self._metrics(request)
            if request.path in HEALTH_PATHS:  # never queued behind a long model call
                return self._health(request.path)
        try:
            return await self.dispatcher.run(lambda end: end.exchange(request))
        except ChannelClosed:
            return _unavailable(request)

    async def _metrics(self, request: Request) -> Answer:
        """Every process's metrics summed (counters, histograms, in flight; readiness as the least ready),
        plus how many requests each process answered."""
        answers = await asyncio.gather(*(self.dispatcher.run_on(i, lambda end: end.exchange(request))
                                         for i in range(len(self.processes))), return_exceptions=True)
        texts = [bytes(a.body) for a in answers if isinstance(a, Answer) and a.status == 200]
        texts.append(generate_latest(self._own_metrics))  # the front's own CPU and memory, summed in
        counts = "".join(f'tfsmith_process_requests_total{{process="{i}"}} {n}\n'
                         for i, n in enumerate(self.dispatcher.answered))
        front = os.times()
        extra = ("# HELP tfsmith_process_requests_total Requests each model process answered.\n"
                 "# TYPE tfsmith_process_requests_total counter\n" + counts +
                 "# HELP tfsmith_front_cpu_seconds_total CPU time of the front alone (one process, which every "
                 "request passes through: near 1 second a second, it is what limits the server).\n"
                 "# TYPE tfsmith_front_cpu_seconds_total counter\n"
                 f"tfsmith_front_cpu_seconds_total {front.user + front.system}\n" +
                 "# HELP tfsmith_dispatch_queue Requests waiting for a model process.\n"
                 f"# TYPE tfsmith_dispatch_queue gauge\ntfsmith_dispatch_queue {self.dispatcher.queued}\n")
        return Answer(200, merge_expositions(texts) + extra.encode(), ((b"content-type", CONTENT_TYPE.encode()),))

    def _health(self, path: str) -> Answer:
        """The server's liveness, and its readiness: every process has loaded and warmed its models, and the
        server is not draining (the v2 routes' answers, answered here: a process may be in a model call)."""
        from builder.server import jsoncodec, v2

        if path == "/healthz":  # what process 0 said of its models, with the server's own readiness
            return Answer(200, jsoncodec.dumps({**self._healthz, "ready": self.ready,
                                                "processes": len(self.processes)}), JSON)
        if path.endswith("/live"):
            return Answer(200, jsoncodec.dumps({"live": True}), JSON)
        if self.ready:
            return Answer(200, jsoncodec.dumps({"ready": True}), JSON)
        return Answer(503, jsoncodec.dumps({"error": v2.NOT_READY}), JSON)

    def describe(self) -> str:
        pids = ", ".join(str(p.info.get("pid", p.process.pid)) for p in self.processes)
        return f"in {len(self.processes)} model processes (pids {pids})"

    async def drain(self) -> None:
        self.ready = False
        await asyncio.gather(*(p.end.tell(DRAIN) for p in self.processes))

    async def stop(self) -> None:
        """Each process finishes what it holds and exits; any still there after STOP_SECONDS is killed."""
        self.stopping = True
        if self._poller is not None:
            self._poller.cancel()
        await asyncio.gather(*(p.end.tell(STOP) for p in self.processes))
        loop = asyncio.get_running_loop()
        for entry in self.processes:
            await loop.run_in_executor(None, entry.process.join, STOP_SECONDS)
        self.kill()

    def kill(self) -> None:
        self.stopping = True
        if self._poller is not None:
            self._poller.cancel()
        for entry in self.processes:
            if entry.process.is_alive():
                entry.process.kill()
                entry.process.join(STOP_SECONDS)
            entry.end.close()


def _unavailable(request: Request) -> Answer:
    if request.kind == HTTP:
        from builder.server.answers import error_body

        return Answer(503, error_body("the model process answering this request stopped"),
                      ((b"content-type", b"application/json"),))
    return Answer(14, message="the model process answering this request stopped")  # UNAVAILABLE


# --- the front ---------------------------------------------------------------------------------------------


def _tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    if config.tls is None:
        return None
    cert, key = config.tls
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return context


async def _serve(config: ServerConfig, sock: socket.socket, host: str, log_level: str, layout: Layout,
                 banner: Sequence[str]) -> int:
    from builder.server.http_front import HttpFront

    loop = asyncio.get_running_loop()
    asked, hurry = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        if asked.is_set():
            hurry.set()  # a second signal: skip the shutdown delay
        asked.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    hosts: LocalHosts | ModelProcesses = (LocalHosts(config) if layout.processes == 0
                                          else ModelProcesses(config, layout, log_level))
    try:
        starting = asyncio.ensure_future(hosts.start())
        await asyncio.wait([starting, asyncio.ensure_future(asked.wait())], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # asked to stop while loading
            hosts.kill()
            starting.cancel()
            return 0
        starting.result()
    except BaseException:
        hosts.kill()
        raise
    respond: Callable[[Request], Awaitable[Answer]] = hosts.respond
    tls = _tls_context(config)
    http = HttpFront(respond, config.max_body_bytes, "https" if tls else "http", ssl=tls)
    grpc_server = None
    try:
        await http.start(sock)
        if config.grpc_port:
            grpc_server, _ = await grpc_service.start(respond, config.host, config.grpc_port, config.max_body_bytes,
                                                      config.tls)
    except BaseException:
        await hosts.stop()
        raise
    for line in banner:
        log.info("%s", line)
    log.info("serving %s v%s from %s on http%s://%s:%d%s, models %s", config.model_name, config.version,
             config.model_path, "s" if tls else "", host, sock.getsockname()[1],
             f" and gRPC on {config.host}:{config.grpc_port}" if config.grpc_port else "", hosts.describe())
    await asyncio.wait([asyncio.ensure_future(asked.wait()), asyncio.ensure_future(hosts.died.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    status = 0 if asked.is_set() else 1
    await hosts.drain()
    if asked.is_set() and config.shutdown_delay_seconds > 0:
        try:
            await asyncio.wait_for(hurry.wait(), config.shutdown_delay_seconds)
        except asyncio.TimeoutError:
            pass
    stopping = [http.shutdown(config.drain_seconds)]
    if grpc_server is not None:
        stopping.append(grpc_server.stop(config.drain_seconds))
    await asyncio.gather(*stopping)
    await hosts.stop()
    return status
