"""The front's side of `--model-processes N`: N model processes started, handed requests (`balancer`), supervised,
their metrics summed and the versions they serve switched together.

Supervision (`supervision`): a model process's channel closing unasked means the process died. At once
nothing new goes to it (its window is paused) and the requests it held fail with 503 / UNAVAILABLE and a
one-line reason (`FrontEnd` fails them as the channel closes); every other request goes on untouched. Then
a new process is started in its place, with the same models and versions and on the same cores, and takes
requests once it has loaded and warmed them. The server stays ready while any process can answer. Several
deaths within a minute are a crash loop: the server stops with the cause (status 1).
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from builder.errors import TfsmithError
from builder.server.process.channel import META_ROOM, ChannelClosed, FrontEnd
from builder.server.config import ServerConfig, config_to_json
from builder.server.front.balancer import Balancer, window
from builder.server.process.messages import HTTP, Activate, Answer, Drain, Load, Loaded, Ready, Refused, Request, Stop
from builder.server.core.metrics import CONTENT_TYPE, merge_expositions
from builder.server.core import reload
from builder.server import routes
from builder.server.core.model_config import ModelSource, version_folders
from builder.server.front.supervision import CrashLoop, exit_reason

log = logging.getLogger("tfsmith.serve")

#: The routes the front answers itself when the models run in processes of their own (`routes.Route.front`:
#: health, never queued behind a long model call; metrics, every process's summed), by path -> handler.
FRONT_ROUTES = {route.path: route.handler for route in routes.ROUTES if route.front}
JSON = ((b"content-type", b"application/json"),)
#: How long stopped model processes get to exit before they are killed.
STOP_SECONDS = 10.0
#: How long a process whose channel closed gets to finish exiting before it is killed (its exit status is read).
EXIT_SECONDS = 5.0
#: What a request held by a process that died is told.
LOST = "the model process answering this request stopped; the server is starting another"


class ModelRefused(TfsmithError):
    """A model process refused what it was given; its message and exit code are the ones to report."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ModelProcess(Protocol):
    """What the front needs of a started model process (`multiprocessing.Process` is one)."""

    pid: int | None
    exitcode: int | None
    sentinel: int

    def is_alive(self) -> bool: ...

    def kill(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...


#: Starts model process `index` with this configuration (JSON); the process and the front's end of its socket.
Spawn = Callable[[int, str], tuple[ModelProcess, socket.socket]]


def spawner(log_level: str, cpus: Sequence[Sequence[int]] | None) -> Spawn:
    """Model processes as fresh interpreters (spawned: nothing inherited but the channel's socket), process
    `index` pinned to `cpus[index]` when given."""
    context = multiprocessing.get_context("spawn")

    def spawn(index: int, config_json: str) -> tuple[ModelProcess, socket.socket]:
        from builder.server.process import model_process

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pinned = None if cpus is None else tuple(cpus[index])
        process = context.Process(target=model_process.run, name=f"tfsmith-model-{index}",
                                  args=(config_json, theirs, index, os.getpid(), log_level, pinned))
        process.start()
        theirs.close()
        return process, ours

    return spawn


@dataclass
class _Process:
    process: ModelProcess
    end: FrontEnd
    ready: Ready | None = None


class ModelProcesses:
    """N model processes behind a balancer, each replaced when it dies; the front's metrics answer sums theirs."""

    def __init__(self, config: ServerConfig, count: int, spawn: Spawn, crash_loop: CrashLoop = CrashLoop(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.died = asyncio.Event()  # set when the server must stop: a crash loop, or a replacement refused
        self.stopping = False
        self.ready = False
        self.restarts = 0
        self.slot_count = window(config.workers, config.batching.max_batch_size)
        self.slot_bytes = config.max_body_bytes + META_ROOM
        self.sources = config.sources if config.poll_seconds > 0 else ()
        self.active: dict[str, tuple[int, ...]] = {}
        if self.sources:  # the front decides which versions every process serves, and when they switch
            self.active = {s.name: tuple(s.wanted(list(version_folders(s.base_path)))) for s in self.sources}
        if config.dispatch == "auto" and config.workers == 1 and not config.batching.enabled:
            # one interpreter and nothing to batch: the process has nothing else to do while its model runs,
            # so it runs the model on its event loop and saves a thread hand-off (~140 us a request on a
            # 2-core guest); the front answers health checks itself, so none waits behind a model call
            config = replace(config, dispatch="inline")
        self._process_config = config
        self._spawn, self._crash_loop, self._clock = spawn, crash_loop, clock
        self._deaths: tuple[float, ...] = ()
        self._supervising = False
        self._changing = asyncio.Lock()  # a version switch and a replacement never overlap
        self._tasks: set[asyncio.Future[Any]] = set()
        self._poller: asyncio.Future[None] | None = None
        self._healthz: dict[str, Any] = {}
        self.processes = [self._start_process(index) for index in range(count)]
        self._own_metrics = CollectorRegistry()
        ProcessCollector(registry=self._own_metrics)
        self.balancer: Balancer[FrontEnd] = Balancer([p.end for p in self.processes],
                                                           [self.slot_count] * count)

    def _start_process(self, index: int) -> _Process:
        """Model process `index` started with the versions served now (a replacement loads what the others serve)."""
        config = self._process_config
        if self.sources:
            config = replace(config, poll_seconds=0.0, sources=tuple(
                replace(s, policy="specific", specific=self.active[s.name]) for s in config.sources))
        process, sock = self._spawn(index, config_to_json(config))
        return _Process(process, FrontEnd(sock, self.slot_count, self.slot_bytes))

    async def start(self) -> None:
        """Every process loaded and ready; ModelRefused (the first refusal) otherwise, the others stopped."""
        for index, entry in enumerate(self.processes):
            entry.end.on_closed = self._watch(index, entry.end)
            await entry.end.start()
        outcomes = await asyncio.gather(*(self._ready(p) for p in self.processes), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                self.kill()
                raise outcome
        await self._refresh_healthz()
        if self.sources:
            self._poller = asyncio.ensure_future(self._poll())
        self._supervising = True
        self.ready = True

    async def _ready(self, entry: _Process) -> None:
        try:
            said = await entry.end.control()
        except ChannelClosed:
            raise TfsmithError(f"model process {entry.process.pid} exited while loading the model (status "
                               f"{entry.process.exitcode}); see the log above") from None
        if isinstance(said, Refused):
            raise ModelRefused(said.message, said.exit_code)
        if isinstance(said, Ready):
            entry.ready = said

    # --- supervision ---------------------------------------------------------------------------------------

    def _watch(self, index: int, end: FrontEnd) -> Callable[[], None]:
        """What happens when `end`'s channel closes: nothing while stopping (or before the server serves:
        `start` reports that), else process `index` is mourned and replaced."""

        def closed() -> None:
            if self.stopping or not self._supervising or self.processes[index].end is not end:
                return
            self.balancer.pause(index)  # nothing new goes to it; what it held has just failed
            self._deaths, looping = self._crash_loop.record(self._deaths, self._clock())
            self._run(self._after_death(index, self.processes[index], looping))

        return closed

    def _run(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after_death(self, index: int, entry: _Process, looping: bool) -> None:
        await _exited(entry.process, EXIT_SECONDS)
        entry.end.close()
        how = f"model process {index} (pid {entry.process.pid}) {exit_reason(entry.process.exitcode)} unasked"
        if looping:
            self._stop_server(f"{how}: {len(self._deaths)} model processes died within "
                              f"{self._crash_loop.window_s:.0f} s, a crash loop; stopping the server")
            return
        log.warning("%s; starting another with the same models (requests it held were answered 503)", how)
        async with self._changing:
            if self.stopping:
                return
            replacement = self.processes[index] = self._start_process(index)
            replacement.end.on_closed = self._watch(index, replacement.end)
            try:
                await replacement.end.start()
                await self._ready(replacement)
            except (ChannelClosed, TfsmithError) as error:
                if isinstance(error, ModelRefused):  # it would refuse again: nothing left to try
                    self._stop_server(f"model process {index} could not be replaced: {error}; stopping the server")
                return  # it died while loading: its own death is mourned (and counted) like any other
            self.restarts += 1
            self.balancer.resume(index, replacement.end)
        log.warning("model process %d replaced (pid %s); %d of %d answering", index, replacement.process.pid,
                    self.balancer.live, len(self.processes))

    def _stop_server(self, why: str) -> None:
        log.error("%s", why)
        self.stopping = True
        if self.balancer.live == 0:
            self.balancer.abandon(ChannelClosed())
        self.died.set()

    # --- answering -----------------------------------------------------------------------------------------

    async def respond(self, request: Request) -> Answer:
        if request.kind == HTTP and request.method in ("GET", "HEAD"):
            answered_here = FRONT_ROUTES.get(request.path)
            if answered_here == "protocols.monitoring.scrape":
                return await self._metrics(request)
            if answered_here is not None:
                return self._health(request.path)
        try:
            index = await self.balancer.acquire()  # the least busy live process, once one has room
        except ChannelClosed:  # none will: the server stops
            return _unavailable(request)
        try:
            return await self.balancer.hosts[index].exchange(request)
        except ChannelClosed:  # the process died holding it
            return _unavailable(request)
        finally:
            self.balancer.release(index)

    @property
    def answering(self) -> bool:
        """Ready: loaded, not draining, and at least one process can answer."""
        return self.ready and self.balancer.live > 0

    def _live(self) -> list[int]:
        return [i for i in range(len(self.processes)) if self.balancer.is_live(i)]

    async def _refresh_healthz(self) -> None:
        """What /healthz says of the models (a live process's answer), kept for the front to answer with."""
        for index in self._live()[:1]:
            answer = await self.balancer.run_on(
                index, lambda end: end.exchange(Request(HTTP, "GET", b"", "/healthz")))
            if answer.status == 200:
                self._healthz = json.loads(bytes(answer.body))

    async def _metrics(self, request: Request) -> Answer:
        """Every live process's metrics summed (counters, histograms, in flight; readiness as the least ready),
        plus how many requests each process answered, restarts and live processes."""
        answers = await asyncio.gather(*(self.balancer.run_on(i, lambda end: end.exchange(request))
                                         for i in self._live()), return_exceptions=True)
        texts = [bytes(a.body) for a in answers if isinstance(a, Answer) and a.status == 200]
        texts.append(generate_latest(self._own_metrics))  # the front's own CPU and memory, summed in
        counts = "".join(f'tfsmith_process_requests_total{{process="{i}"}} {n}\n'
                         for i, n in enumerate(self.balancer.answered))
        front = os.times()
        extra = ("# HELP tfsmith_process_requests_total Requests each model process answered.\n"
                 "# TYPE tfsmith_process_requests_total counter\n" + counts +
                 "# HELP tfsmith_front_cpu_seconds_total CPU time of the front alone (one process, which every "
                 "request passes through: near 1 second a second, it is what limits the server).\n"
                 "# TYPE tfsmith_front_cpu_seconds_total counter\n"
                 f"tfsmith_front_cpu_seconds_total {front.user + front.system}\n" +
                 "# HELP tfsmith_model_process_queue Requests waiting for a model process with room (the balancer's one queue).\n"
                 f"# TYPE tfsmith_model_process_queue gauge\ntfsmith_model_process_queue {self.balancer.queued}\n"
                 "# HELP tfsmith_model_process_restarts_total Model processes that died unasked and were replaced.\n"
                 "# TYPE tfsmith_model_process_restarts_total counter\n"
                 f"tfsmith_model_process_restarts_total {self.restarts}\n"
                 "# HELP tfsmith_model_processes_live Model processes answering requests now.\n"
                 f"# TYPE tfsmith_model_processes_live gauge\ntfsmith_model_processes_live {self.balancer.live}\n")
        return Answer(200, merge_expositions(texts) + extra.encode(), ((b"content-type", CONTENT_TYPE.encode()),))

    def _health(self, path: str) -> Answer:
        """The server's liveness, and its readiness: the processes have loaded and warmed their models, one at
        least can answer, and the server is not draining (the answers of the routes' own handlers, `health`,
        answered here: a process may be in a model call)."""
        from builder.server.protocols import health, jsoncodec

        handler = FRONT_ROUTES[path]
        if handler == "protocols.health.healthz":  # what a process said of its models, with the server's own readiness
            return Answer(200, jsoncodec.dumps({**self._healthz, "ready": self.answering,
                                                "processes": len(self.processes),
                                                "processes_live": self.balancer.live}), JSON)
        status, body = health.live() if handler == "protocols.v2.live" else health.readiness(self.answering)
        return Answer(status, body, JSON)

    def describe(self) -> str:
        pids = ", ".join(str(p.ready.pid if p.ready else p.process.pid) for p in self.processes)
        return f"in {len(self.processes)} model processes (pids {pids})"

    # --- versions ------------------------------------------------------------------------------------------

    async def _poll(self) -> None:
        """Every poll interval (`reload.poll`): a version set on disk that differs from the one served is staged
        in every process, then served by all at once (or by none, when one cannot load it: tried again next
        time)."""

        async def bring(source: ModelSource, wanted: tuple[int, ...]) -> None:
            async with self._changing:
                await self._switch(source.name, wanted)

        await reload.poll(self.sources, self.config.poll_seconds, lambda name: self.active.get(name, ()), bring)

    async def _switch(self, name: str, versions: tuple[int, ...]) -> None:
        """Every live process stages `versions`, then all serve them, or none (a process that dies meanwhile
        counts as one that could not load them; its replacement loads what is served after)."""
        taking = [self.processes[i] for i in self._live()]
        await asyncio.gather(*(p.end.tell(Load(name, versions)) for p in taking))
        failures = []
        for entry in taking:
            try:
                said = await entry.end.control()
            except ChannelClosed:
                failures.append(f"model process (pid {entry.process.pid}) stopped")
                continue
            if not isinstance(said, Loaded):
                failures.append(f"model process (pid {entry.process.pid}) said {type(said).__name__}")
            elif not said.ok or said.versions != versions:
                failures.append(said.error or f"versions {list(said.versions)} staged")
        commit = not failures
        await asyncio.gather(*(p.end.tell(Activate(name, versions, commit)) for p in taking))
        if commit:
            self.active[name] = versions
            await self._refresh_healthz()
            log.info("%s: every model process serves versions %s", name, list(versions))
        else:
            log.warning("%s: versions %s not served: %s; still serving %s", name, list(versions), failures[0],
                        list(self.active.get(name, ())))

    # --- stopping ------------------------------------------------------------------------------------------

    async def drain(self) -> None:
        self.ready = False
        await asyncio.gather(*(p.end.tell(Drain()) for p in self.processes))

    async def stop(self) -> None:
        """Each process finishes what it holds and exits; any still there after STOP_SECONDS is killed."""
        self.stopping = True
        self._cancel_work()
        await asyncio.gather(*(p.end.tell(Stop()) for p in self.processes))
        await asyncio.gather(*(_exited(p.process, STOP_SECONDS) for p in self.processes))
        self.kill()

    def _cancel_work(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        for task in list(self._tasks):
            task.cancel()

    def kill(self) -> None:
        self.stopping = True
        self._cancel_work()
        self.balancer.abandon(ChannelClosed())
        for entry in self.processes:
            if entry.process.is_alive():
                entry.process.kill()
                entry.process.join(STOP_SECONDS)
            entry.end.close()


async def _exited(process: ModelProcess, timeout: float) -> None:
    """Wait (without blocking the loop) until `process` has exited, up to `timeout`; killed if it has not.
    Its exit status is read either way."""
    loop = asyncio.get_running_loop()
    if process.is_alive():
        gone: asyncio.Future[None] = loop.create_future()
        loop.add_reader(process.sentinel, lambda: gone.done() or gone.set_result(None))
        try:
            await asyncio.wait_for(gone, timeout)
        except asyncio.TimeoutError:
            process.kill()
        finally:
            loop.remove_reader(process.sentinel)
    process.join(STOP_SECONDS)


def _unavailable(request: Request) -> Answer:
    if request.kind == HTTP:
        from builder.server.protocols.answers import error_body

        return Answer(503, error_body(LOST), JSON)
    return Answer(14, message=LOST)  # UNAVAILABLE
