"""The front's side of `--model-processes N`: N model processes started, handed requests (`balancer`) and
supervised. Their metrics are summed by `metrics_sum` and the versions they serve switched together by
`version_switch`; the routes the front answers itself (health, metrics, and a path or method no route takes:
404/405) are answered by the route table's own handlers through the front's own router, from the front's view
of its processes (this class is that view: `routes.Health`), so none of them crosses to a model process.

Supervision (`supervision`): a model process's channel closing unasked means the process died. At once
nothing new goes to it (its window is paused) and the requests it held fail with 503 / UNAVAILABLE and a
one-line reason (`FrontEnd` fails them as the channel closes); every other request goes on untouched. Then
a new process is started in its place, with the same models and versions and on the same cores, and takes
requests once it has loaded and warmed them. The server stays ready while any process can answer. Several
deaths within a minute are a crash loop: the server stops with the cause (status 1).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import multiprocessing
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from builder.errors import TfsmithError
from builder.server import routes
from builder.server.config import ServerConfig, config_to_json
from builder.server.core.metrics import Metrics
from builder.server.front.balancer import Balancer, window
from builder.server.front.metrics_sum import front_only, merge_expositions
from builder.server.front.supervision import CrashLoop, exit_reason
from builder.server.front.version_switch import VersionSwitch
from builder.server.process.channel import META_ROOM, ChannelClosed, FrontEnd
from builder.server.process.messages import HTTP, Answer, Drain, Ready, Refused, Request, Stop

log = logging.getLogger("tfsmith.serve")

#: How long stopped model processes get to exit before they are killed.
STOP_SECONDS = 10.0
#: How long a process whose channel closed gets to finish exiting before it is killed (its exit status is read).
EXIT_SECONDS = 5.0


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
        self._serving = False
        self.restarts = 0
        self.slot_count = window(config.workers, config.batching.max_batch_size)
        self.slot_bytes = config.max_body_bytes + META_ROOM
        sources = config.sources if config.poll_seconds > 0 else ()
        #: the front decides which versions every process serves, and when they switch (None: not polled)
        self.versions = VersionSwitch(sources) if sources else None
        if config.dispatch == "auto" and config.workers == 1 and not config.batching.enabled:
            # one interpreter and nothing to batch: the process has nothing else to do while its model runs,
            # so it runs the model on its event loop and saves a thread hand-off (~140 us a request on a
            # 2-core guest); the front answers health checks itself, so none waits behind a model call
            config = replace(config, dispatch="inline")
        self._process_config = config
        self._spawn, self._crash_loop, self._clock = spawn, crash_loop, clock
        self._deaths: tuple[float, ...] = ()
        self._supervising = False
        self.changing = asyncio.Lock()  # a version switch and a replacement never overlap
        self._tasks: set[asyncio.Future[Any]] = set()
        self._poller: asyncio.Future[None] | None = None
        self._healthz: dict[str, Any] = {}
        self.processes = [self._start_process(index) for index in range(count)]
        #: what the front answers itself is counted here, and summed with the processes' counts when scraped
        self.metrics = Metrics()
        self.balancer: Balancer[FrontEnd] = Balancer([p.end for p in self.processes],
                                                           [self.slot_count] * count)
        #: Every request's first stop: the front's routes answered here, every other request handed straight to
        #: the least busy live process (`Balancer.run`), so this class is not on a request's path.
        self.router = routes.Router(routes.Context(None, config, health=self, metrics=self.metrics),
                                    forward=functools.partial(self.balancer.run, FrontEnd.answer))
        self.answer = self.router.answer

    def _start_process(self, index: int) -> _Process:
        """Model process `index` started with the versions served now (a replacement loads what the others serve)."""
        config = self._process_config
        if self.versions is not None:
            active = self.versions.active
            config = replace(config, poll_seconds=0.0, sources=tuple(
                replace(s, policy="specific", specific=active[s.name]) for s in config.sources))
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
        await self.refresh_healthz()
        if self.versions is not None:
            self._poller = asyncio.ensure_future(self.versions.poll(self, self.config.poll_seconds))
        self._supervising = True
        self._serving = True

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
        async with self.changing:
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

    # --- health, as the front sees it (`routes.Health`: what its router's health and metrics routes answer) ----

    @property
    def ready(self) -> bool:
        """Ready: loaded, not draining, and at least one process can answer."""
        return self.answering

    @property
    def answering(self) -> bool:
        """Ready: loaded, not draining, and at least one process can answer."""
        return self._serving and self.balancer.live > 0

    def served(self) -> dict[str, Any]:
        """What a process said of its models (`/healthz`), with the server's own readiness and processes."""
        return {**self._healthz, "ready": self.answering, "processes": len(self.processes),
                "processes_live": self.balancer.live}

    async def exposition(self) -> bytes:
        """Every live process's metrics summed with the front's own (counters, histograms, in flight;
        readiness as the least ready), plus what only the front knows (`metrics_sum`)."""
        scrape = Request(HTTP, "GET", b"", "/monitoring/prometheus/metrics")
        answers = await asyncio.gather(*(self.balancer.run_on(i, lambda end: end.answer(scrape))
                                         for i in self.live()), return_exceptions=True)
        texts = [bytes(a.body) for a in answers if isinstance(a, Answer) and a.status == 200]
        texts.append(self.metrics.exposition())
        return merge_expositions(texts) + front_only(self.balancer.answered, self.balancer.queued, self.restarts,
                                                     self.balancer.live)

    def live(self) -> list[int]:
        return [i for i in range(len(self.processes)) if self.balancer.is_live(i)]

    async def refresh_healthz(self) -> None:
        """What /healthz says of the models (a live process's answer), kept for the front to answer with."""
        for index in self.live()[:1]:
            answer = await self.balancer.run_on(
                index, lambda end: end.answer(Request(HTTP, "GET", b"", "/healthz")))
            if answer.status == 200:
                self._healthz = json.loads(bytes(answer.body))

    def describe(self) -> str:
        pids = ", ".join(str(p.ready.pid if p.ready else p.process.pid) for p in self.processes)
        return f"in {len(self.processes)} model processes (pids {pids})"

    # --- stopping ------------------------------------------------------------------------------------------

    async def drain(self) -> None:
        self._serving = False
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
