"""Model processes supervised by the front (`builder.server.front.model_processes`, `supervision`): a process that dies
is replaced with the same configuration, only the requests it held fail (503 / UNAVAILABLE, one line), requests
waiting for room and those on other processes are answered, readiness is false only while no process can
answer, restarts and live processes are counted, and a crash loop (or a replacement that refuses its model)
stops the server with the cause.

The model processes here are stand-ins on the test's own event loop: the real channel (`channel.ModelEnd` over
a socket pair and shared memory) answering with a small function, "killed" by closing their end of the socket,
as the kernel does when a process dies. No process is started; every wait is for a condition."""

from __future__ import annotations

import asyncio
import json
import itertools
import logging
import os
import re
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from builder.server.process.channel import LOST, ModelEnd
from builder.server.config import ServerConfig, config_from_json
from builder.server.process.messages import GRPC, HTTP, Answer, Ready, Refused, Request
from builder.server.front.model_processes import ModelProcesses
from builder.server.front.supervision import CrashLoop, exit_reason

CONFIG = ServerConfig(model_path=Path("/models/digits.tflite"), model_name="digits", workers=1)
DEADLINE_S = 30.0
PREDICT = "/v1/models/digits:predict"
#: A route of the table whose requests the stand-ins hold until told (`Fleet.hold`): the front hands it over.
HOLD = "/v2/models/hold/infer"


class StandIn:
    """A model process on this event loop: says READY (once `gate` opens) or REFUSED, then answers requests
    with `answer` until killed."""

    pids = itertools.count(1000)

    def __init__(self, sock: socket.socket, answer: Callable[[Request, int], Awaitable[Answer]],
                 gate: asyncio.Event, refuse: str | None) -> None:
        self.pid = next(self.pids)
        self.exitcode: int | None = None
        self.sock = sock
        self.end = ModelEnd(sock)
        self._read, self._write = os.pipe()
        self.sentinel = self._read  # readable once "exited", as a process's sentinel is
        self.task = asyncio.ensure_future(self._life(answer, gate, refuse))

    async def _life(self, answer: Callable[[Request, int], Awaitable[Answer]], gate: asyncio.Event,
                    refuse: str | None) -> None:
        loop = asyncio.get_running_loop()
        hello: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self.sock.fileno(), lambda: hello.done() or hello.set_result(None))
        try:
            await hello
        finally:
            loop.remove_reader(self.sock.fileno())
        self.end.hello()
        await gate.wait()
        if refuse is not None:
            self.end.say(Refused(refuse, 2))
            self._exit(2)
            return
        self.end.say(Ready(self.pid, {"digits": 1}, (None,)))
        await self.end.serve(lambda request: answer(request, self.pid))

    def kill(self) -> None:
        self._exit(-signal.SIGKILL)

    def _exit(self, code: int) -> None:
        if self.exitcode is not None:
            return
        self.exitcode = code
        if asyncio.current_task() is not self.task:
            self.task.cancel()
        for task in list(getattr(self.end, "_tasks", ())):
            task.cancel()
        if self.end._end is not None:
            self.end._end.close()
        self.sock.close()  # the front reads end of stream: the channel closed
        os.close(self._write)

    def is_alive(self) -> bool:
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        pass


class Fleet:
    """Spawns stand-ins; `hold` keeps requests to /hold waiting; replacements say READY once `gate` opens."""

    def __init__(self, refuse_from: int | None = None) -> None:
        self.spawned: list[tuple[int, str, StandIn]] = []
        self.hold = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()
        self.refuse_from = refuse_from
        self.seen: list[str] = []  # the path (gRPC: method) of every request a stand-in answered

    def spawn(self, index: int, config_json: str) -> tuple[StandIn, socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        refuse = None if self.refuse_from is None or len(self.spawned) < self.refuse_from else \
            "digits: not a loadable .tflite model"
        process = StandIn(theirs, self.answer, self.gate, refuse)
        self.spawned.append((index, config_json, process))
        return process, ours

    async def answer(self, request: Request, pid: int) -> Answer:
        self.seen.append(request.path or request.method)
        if request.path == HOLD or request.method == "/hold":
            await self.hold.wait()
        if request.path == "/monitoring/prometheus/metrics":
            return Answer(200, b"# TYPE tfsmith_x_total counter\ntfsmith_x_total 1.0\n")
        if request.path == "/healthz":
            return Answer(200, b'{"status": "ok"}')
        if request.kind == GRPC:
            return Answer(0, str(pid).encode())
        return Answer(200, str(pid).encode())

    def process(self, number: int) -> StandIn:
        return self.spawned[number][2]


async def until(condition: Callable[[], object], what: str) -> None:
    """Wait for `condition` on the loop, failing after a generous deadline."""
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not seen in {DEADLINE_S:.0f} s: {what}")
        await asyncio.sleep(0.001)


def get(path: str) -> Request:
    return Request(HTTP, "GET", b"", path)


def post(path: str = PREDICT) -> Request:
    return Request(HTTP, "POST", b"{}", path)


def metric(text: bytes, name: str) -> float:
    found = re.search(rb"^" + name.encode() + rb" (\S+)$", text, re.MULTILINE)
    assert found is not None, text
    return float(found.group(1))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def supervised(scenario: Callable[[Fleet, ModelProcesses, Clock], Awaitable[Any]], count: int = 2,
               crash_loop: CrashLoop = CrashLoop(), refuse_from: int | None = None) -> Any:
    """Run `scenario` against `count` supervised stand-ins, stopping them afterwards."""

    async def run() -> Any:
        fleet = Fleet(refuse_from)
        clock = Clock()
        processes = ModelProcesses(CONFIG, count, fleet.spawn, crash_loop, clock)
        await processes.start()
        try:
            return await scenario(fleet, processes, clock)
        finally:
            fleet.hold.set()
            fleet.gate.set()
            processes.kill()

    return asyncio.run(run())


def test_a_killed_process_is_replaced_with_the_same_configuration_and_only_its_requests_fail() -> None:
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        first, second = fleet.process(0), fleet.process(1)
        on_first = asyncio.ensure_future(processes.answer(post(HOLD)))  # ties go in turn: 0, then 1
        on_second = asyncio.ensure_future(processes.answer(post(HOLD)))
        await until(lambda: processes.balancer.out == [1, 1], "one request held by each process")
        first.kill()
        lost = await on_first
        assert lost.status == 503 and LOST.encode() in bytes(lost.body)
        assert "\n" not in LOST
        assert not on_second.done()  # the other process's request is untouched
        assert (await processes.answer(Request(HTTP, "GET", b"", "/v2/health/ready"))).status == 200  # one process still answers
        await until(lambda: processes.restarts == 1, "the replacement serving")
        index, config_json, replacement = fleet.spawned[2]
        assert index == 0 and config_from_json(config_json) == config_from_json(fleet.spawned[0][1])
        fleet.hold.set()
        assert (await on_second).status == 200 and (await on_second).body == str(second.pid).encode()
        answers = await asyncio.gather(*(processes.answer(post()) for _ in range(4)))
        assert {bytes(a.body) for a in answers} == {str(replacement.pid).encode(), str(second.pid).encode()}
        text = bytes((await processes.answer(get("/monitoring/prometheus/metrics"))).body)
        assert metric(text, "tfsmith_model_process_restarts_total") == 1
        assert metric(text, "tfsmith_model_processes_live") == 2
        assert not processes.died.is_set()

    supervised(scenario)


def test_a_grpc_call_held_by_a_dead_process_fails_unavailable() -> None:
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        held = asyncio.ensure_future(processes.answer(Request(GRPC, "/hold", b"")))
        await until(lambda: sum(processes.balancer.out) == 1, "the call held")
        fleet.process(0).kill()
        answer = await held
        assert answer.status == 14 and answer.message == LOST  # UNAVAILABLE
        assert processes.metrics.counts[("", "UNAVAILABLE")] == 1  # answered by the front, so counted there

    supervised(scenario, count=1)


def test_requests_waiting_for_room_are_answered_by_the_replacement() -> None:
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        window = processes.balancer.windows[0]
        held = [asyncio.ensure_future(processes.answer(post(HOLD))) for _ in range(window)]
        waiting = asyncio.ensure_future(processes.answer(post()))
        await until(lambda: processes.balancer.queued == 1, "a request waiting for room")
        fleet.gate.clear()  # the replacement loads until told
        fleet.process(0).kill()
        assert [(await h).status for h in held] == [503] * window
        await until(lambda: len(fleet.spawned) == 2, "a replacement started")
        assert (await processes.answer(Request(HTTP, "GET", b"", "/v2/health/ready"))).status == 503  # no process can answer now
        assert (await processes.answer(Request(HTTP, "GET", b"", "/v2/health/live"))).status == 200
        assert not waiting.done()  # not held by the dead process: it waits for the replacement
        fleet.gate.set()
        answer = await waiting
        assert answer.status == 200 and answer.body == str(fleet.process(1).pid).encode()
        assert (await processes.answer(Request(HTTP, "GET", b"", "/v2/health/ready"))).status == 200

    supervised(scenario, count=1)


def test_a_crash_loop_stops_the_server_with_the_cause(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        for death in range(2):
            clock.now += 10.0
            fleet.process(len(fleet.spawned) - 2).kill()  # the older of the two latest
            await until(lambda: processes.restarts == death + 1, f"replacement {death + 1}")
        clock.now += 10.0
        victim = fleet.process(len(fleet.spawned) - 1)
        victim.kill()
        await asyncio.wait_for(processes.died.wait(), DEADLINE_S)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors and "crash loop" in errors[-1] and "killed by SIGKILL" in errors[-1], errors
        assert f"pid {victim.pid}" in errors[-1]

    with caplog.at_level(logging.WARNING, logger="tfsmith.serve"):
        supervised(scenario, crash_loop=CrashLoop(deaths=3, window_s=60.0))


def test_deaths_further_apart_than_the_window_are_each_replaced() -> None:
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        for death in range(4):
            clock.now += 61.0
            fleet.process(len(fleet.spawned) - 1).kill()
            await until(lambda: processes.restarts == death + 1, f"replacement {death + 1}")
        assert not processes.died.is_set() and processes.balancer.live == 1

    supervised(scenario, count=1, crash_loop=CrashLoop(deaths=3, window_s=60.0))


def test_a_replacement_that_refuses_its_model_stops_the_server(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        fleet.process(0).kill()
        await asyncio.wait_for(processes.died.wait(), DEADLINE_S)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors and "could not be replaced: digits: not a loadable .tflite model" in errors[-1], errors

    with caplog.at_level(logging.WARNING, logger="tfsmith.serve"):
        supervised(scenario, refuse_from=2)


def test_a_process_stopped_with_the_server_is_not_replaced() -> None:
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        processes.stopping = True  # as `stop` sets it before telling the processes to exit
        fleet.process(0).kill()
        await until(lambda: processes.balancer.ends[0].closed, "the channel closed")
        assert not processes._tasks and processes.balancer.live == 2  # nothing mourned, nothing started
        assert len(fleet.spawned) == 2 and processes.restarts == 0

    supervised(scenario)


def test_a_crash_loop_is_several_deaths_within_the_window() -> None:
    loop = CrashLoop(deaths=3, window_s=60.0)
    deaths, looping = loop.record((), 0.0)
    assert deaths == (0.0,) and not looping
    deaths, looping = loop.record(deaths, 30.0)
    assert not looping
    assert loop.record(deaths, 59.0)[1]  # three within a minute
    deaths, looping = loop.record(deaths, 61.0)  # the first has left the window
    assert deaths == (30.0, 61.0) and not looping


def test_an_exit_is_said_as_a_signal_or_a_status() -> None:
    assert exit_reason(-9) == "was killed by SIGKILL"
    assert exit_reason(1) == "exited with status 1"
    assert exit_reason(None) == "stopped answering"


def test_the_front_answers_404_405_and_health_itself_with_the_tables_handlers_and_counts_them() -> None:
    """No model process sees a path no route takes, a wrong method, or a health probe: the front's own router
    answers them with the route table's handlers (the same `Route.front` handlers a model server uses), and its
    metrics count them beside the processes' counts."""
    async def scenario(fleet: Fleet, processes: ModelProcesses, clock: Clock) -> None:
        seen = fleet.seen
        seen.clear()  # what start-up asked the processes (/healthz)
        missing = await processes.answer(get("/nothing/here"))
        wrong = await processes.answer(get("/v2/models/digits/infer"))
        live = await processes.answer(get("/v2/health/live"))
        healthz = await processes.answer(get("/healthz"))
        assert missing.status == 404 and json.loads(bytes(missing.body)) == {"error": "Not Found"}
        assert wrong.status == 405 and dict(wrong.headers)[b"allow"] == b"POST"
        assert live.status == 200 and json.loads(bytes(healthz.body))["processes_live"] == 2
        assert seen == []  # none of them crossed to a model process
        assert (await processes.answer(post())).status == 200 and seen == [PREDICT]
        assert processes.metrics.counts == {("", "NOT_FOUND"): 1, ("", "UNIMPLEMENTED"): 1, ("", "OK"): 2}

    supervised(scenario)
