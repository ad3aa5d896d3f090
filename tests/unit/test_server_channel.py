"""The front's channel to a model process (`builder.server.process.channel`), both ends on one socket pair in this
process: requests and answers cross through the shared slots (a body larger than a slot through an area of
its own), control values arrive whole, a closed end fails what waits on it, and the metrics of several
processes merge into one exposition."""

from __future__ import annotations

import asyncio
import socket

import pytest

from builder.server.process.channel import ChannelClosed, FrontEnd, ModelEnd
from builder.server.process.messages import GRPC, HTTP, Activate, Answer, Drain, Load, Loaded, Ready, Request
from builder.server.front.metrics_sum import merge_expositions


def ends(slots: int = 2, slot_bytes: int = 4096) -> tuple[FrontEnd, ModelEnd]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return FrontEnd(ours, slots, slot_bytes), ModelEnd(theirs)


async def echo(request: Request) -> Answer:
    """A model server that answers with what it got: the body reversed, the path and a header in the headers."""
    await asyncio.sleep(0)
    if request.kind == GRPC:
        return Answer(0, bytes(request.body)[::-1], message=request.method)
    return Answer(200, bytes(request.body)[::-1], ((b"x-path", request.path.encode()),
                                                   (b"x-type", dict(request.headers).get(b"content-type", b""))))


def test_requests_and_answers_cross_both_ways_with_more_in_flight_than_slots() -> None:
    async def scenario() -> list[Answer]:
        front, model_end = ends(slots=2)
        await front.start()
        model_end.hello()  # the HELLO is already waiting: the area arrives
        serving = asyncio.ensure_future(model_end.serve(echo))
        small = Request(HTTP, "POST", b"abc", "/v2/models/m/infer", b"", ((b"content-type", b"x/y"),), "1.2.3.4:5")
        large = Request(HTTP, "POST", bytes(range(256)) * 40, "/big")  # 10 KB: more than a 4 KB slot
        call = Request(GRPC, "/tensorflow.serving.PredictionService/Predict", b"\x01\x02", client="ipv4:1")
        answers = []
        for group in ([small, call], [large, small]):  # two slots, two at a time
            answers += await asyncio.gather(*(front.answer(r) for r in group))
        await front.tell(Drain())  # told, nothing to answer
        model_end.stopped.set()  # type: ignore[union-attr]
        await serving
        front.close()
        return answers

    answers = asyncio.run(scenario())
    assert answers[0] == Answer(200, b"cba", ((b"x-path", b"/v2/models/m/infer"), (b"x-type", b"x/y")))
    assert answers[1] == Answer(0, b"\x02\x01", (), "/tensorflow.serving.PredictionService/Predict")
    assert answers[2].body == (bytes(range(256)) * 40)[::-1] and answers[2].headers[0] == (b"x-path", b"/big")


def test_control_values_arrive_whole() -> None:
    async def scenario() -> tuple[object, object, tuple[str, tuple[int, ...], bool]]:
        front, model_end = ends()
        await front.start()
        model_end.hello()
        model_end.say(Ready(7, {"m": 1}, (12.5, None)))
        ready = await front.control()
        activated: list[tuple[str, tuple[int, ...], bool]] = []

        async def load(name: str, versions: tuple[int, ...]) -> tuple[bool, str]:
            return True, ""

        model_end.on_load = load
        model_end.on_activate = lambda name, versions, commit: activated.append((name, versions, commit))
        serving = asyncio.ensure_future(model_end.serve(echo))
        await front.tell(Load("m", (2, 3)))
        loaded = await front.control()
        await front.tell(Activate("m", (2, 3), True))
        while not activated:
            await asyncio.sleep(0.001)
        model_end.stopped.set()  # type: ignore[union-attr]
        await serving
        front.close()
        return ready, loaded, activated[0]

    ready, loaded, activated = asyncio.run(scenario())
    assert ready == Ready(7, {"m": 1}, (12.5, None))
    assert loaded == Loaded("m", (2, 3), True, "")
    assert activated == ("m", (2, 3), True)


def test_a_closed_end_fails_what_waits_on_it() -> None:
    async def scenario() -> None:
        front, model_end = ends()
        closed: list[bool] = []
        front.on_closed = lambda: closed.append(True)
        await front.start()
        model_end.hello()
        waiting = asyncio.ensure_future(front.answer(Request(HTTP, "GET", b"", "/")))
        for _ in range(1000):  # until the request is sent and its answer awaited
            if front._waiting:
                break
            await asyncio.sleep(0)
        model_end.sock.close()  # the model process is gone
        with pytest.raises(ChannelClosed):
            await waiting
        assert closed == [True]
        front.close()
        front.close()  # twice is harmless

    asyncio.run(scenario())


def test_expositions_of_several_processes_merge_into_one() -> None:
    one = (b'# HELP :tensorflow:serving:request_count The total number of requests.\n'
           b'# TYPE :tensorflow:serving:request_count untyped\n'
           b':tensorflow:serving:request_count{model_name="m",status="OK"} 3.0\n'
           b'# HELP tfsmith_model_ready 1 while ready.\n# TYPE tfsmith_model_ready gauge\n'
           b'tfsmith_model_ready{model_name="m"} 1.0\n'
           b'# HELP tfsmith_batch_size Examples per call.\n# TYPE tfsmith_batch_size histogram\n'
           b'tfsmith_batch_size_bucket{le="1.0"} 2.0\ntfsmith_batch_size_bucket{le="+Inf"} 2.0\n'
           b'tfsmith_batch_size_count 2.0\ntfsmith_batch_size_sum 2.0\n')
    two = one.replace(b"} 3.0", b"} 4.0").replace(b'tfsmith_model_ready{model_name="m"} 1.0',
                                                    b'tfsmith_model_ready{model_name="m"} 0.0')
    text = merge_expositions([one, two]).decode()
    assert ':tensorflow:serving:request_count{model_name="m",status="OK"} 7.0' in text  # summed
    assert 'tfsmith_model_ready{model_name="m"} 0.0' in text  # the least ready process
    assert 'tfsmith_batch_size_bucket{le="+Inf"} 4.0' in text and "tfsmith_batch_size_count 4.0" in text
    assert "# TYPE :tensorflow:serving:request_count untyped" in text
    from prometheus_client.parser import text_string_to_metric_families

    assert {f.name for f in text_string_to_metric_families(text)} >= {":tensorflow:serving:request_count",
                                                                       "tfsmith_model_ready", "tfsmith_batch_size"}


def test_an_exchange_beyond_the_slots_waits_for_one_instead_of_failing() -> None:
    """A metrics scrape beside a full window (`Balancer.run_on`) waits for a slot; it never takes one that a
    request the balancer let through was promised (a server under load lost requests to 500s that way)."""
    release = asyncio.Event()

    async def held(request: Request) -> Answer:
        if request.path == "/hold":
            await release.wait()
        return Answer(200, request.path.encode())

    async def scenario() -> list[bytes]:
        front, model_end = ends(slots=1)
        await front.start()
        model_end.hello()
        serving = asyncio.ensure_future(model_end.serve(held))
        first = asyncio.ensure_future(front.answer(Request(HTTP, "GET", b"", "/hold")))
        second = asyncio.ensure_future(front.answer(Request(HTTP, "GET", b"", "/metrics")))
        for _ in range(1000):  # until the second is waiting for the one slot
            if front._slot_waiters:
                break
            await asyncio.sleep(0)
        assert front._slot_waiters and not second.done()
        release.set()
        answers = [bytes((await call).body) for call in (first, second)]
        model_end.stopped.set()  # type: ignore[union-attr]
        await serving
        front.close()
        return answers

    assert asyncio.run(scenario()) == [b"/hold", b"/metrics"]
