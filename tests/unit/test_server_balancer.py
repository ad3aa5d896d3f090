"""Requests, not connections, spread over model processes (`builder.server.front.balancer`): the least busy takes the
next request, ties in turn, and a full server queues requests in arrival order for the first window that frees."""

from __future__ import annotations

import asyncio

from builder.server.front.balancer import Balancer, choose, window


def test_the_least_busy_below_its_window_is_chosen_ties_in_turn() -> None:
    assert choose([0, 0], [2, 2], start=0) == 0
    assert choose([0, 0], [2, 2], start=1) == 1
    assert choose([1, 0], [2, 2], start=0) == 1
    assert choose([2, 2], [2, 2], start=0) is None
    assert choose([2, 1, 1], [2, 2, 2], start=2) == 2


def test_a_window_holds_a_batch_for_each_interpreter_and_one_ahead() -> None:
    assert window(1, 1) == 2
    assert window(2, 8) == 17


def test_one_client_s_sequential_requests_alternate_over_the_processes() -> None:
    balancer: Balancer[str] = Balancer(["a", "b", "c"], [2, 2, 2])
    seen: list[str] = []

    async def call(end: str) -> str:
        seen.append(end)
        return end

    async def scenario() -> None:
        for _ in range(6):
            await balancer.run(call)

    asyncio.run(scenario())
    assert seen == ["a", "b", "c", "a", "b", "c"]
    assert balancer.answered == [2, 2, 2]


def test_a_full_server_queues_in_arrival_order_and_no_window_idles_while_work_waits() -> None:
    balancer: Balancer[int] = Balancer([0, 1], [1, 1])
    started: list[tuple[str, int]] = []
    gates: dict[str, asyncio.Event] = {}

    def make(name: str):  # noqa: ANN202 - a call that holds its window until released
        async def call(end: int) -> str:
            started.append((name, end))
            await gates[name].wait()
            return name
        return call

    async def scenario() -> list[str]:
        for name in "wxyz":
            gates[name] = asyncio.Event()
        tasks = [asyncio.ensure_future(balancer.run(make(name))) for name in "wxyz"]
        await asyncio.sleep(0)
        assert [n for n, _ in started] == ["w", "x"] and balancer.queued == 2  # both windows full
        gates["x"].set()  # process 1 frees first: the oldest waiting request takes it
        for _ in range(1000):  # until the next request has started (the loop's turns, no clock)
            if len(started) == 3:
                break
            await asyncio.sleep(0)
        assert started[2] == ("y", 1)
        for name in "wyz":
            gates[name].set()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(scenario()) == ["w", "x", "y", "z"]
    assert sum(balancer.answered) == 4 and balancer.out == [0, 0] and balancer.queued == 0


def test_a_waiting_request_cancelled_gives_its_place_up() -> None:
    balancer: Balancer[int] = Balancer([0], [1])

    async def scenario() -> None:
        gate = asyncio.Event()

        async def hold(end: int) -> None:
            await gate.wait()

        async def quick(end: int) -> str:
            return "served"

        first = asyncio.ensure_future(balancer.run(hold))
        waiting = asyncio.ensure_future(balancer.run(quick))
        await asyncio.sleep(0)
        waiting.cancel()
        gate.set()
        await first
        assert await balancer.run(quick) == "served"
        assert balancer.out == [0]

    asyncio.run(scenario())


def test_a_paused_host_gets_nothing_until_its_replacement_takes_its_place() -> None:
    balancer: Balancer[str] = Balancer(["a", "b"], [1, 1])
    seen: list[str] = []
    release = asyncio.Event()

    async def call(end: str) -> str:
        seen.append(end)
        await release.wait()
        return end

    async def scenario() -> list[str]:
        balancer.pause(0)  # "a" died
        assert balancer.live == 1 and not balancer.is_live(0)
        first = asyncio.ensure_future(balancer.run(call))
        second = asyncio.ensure_future(balancer.run(call))  # "b" is full: this one waits for room
        for _ in range(3):
            await asyncio.sleep(0)
        assert seen == ["b"] and balancer.queued == 1
        balancer.resume(0, "a2")  # the replacement: the waiting request goes to it at once
        for _ in range(3):
            await asyncio.sleep(0)
        assert seen == ["b", "a2"] and balancer.queued == 0
        release.set()
        return list(await asyncio.gather(first, second))

    assert asyncio.run(scenario()) == ["b", "a2"]


def test_abandon_fails_every_request_waiting_for_room() -> None:
    balancer: Balancer[str] = Balancer(["a"], [1])
    release = asyncio.Event()

    async def call(end: str) -> str:
        await release.wait()
        return end

    async def scenario() -> tuple[str, BaseException | str]:
        running = asyncio.ensure_future(balancer.run(call))
        waiting = asyncio.ensure_future(balancer.run(call))
        for _ in range(3):
            await asyncio.sleep(0)
        balancer.abandon(RuntimeError("no end left"))
        outcome = (await asyncio.gather(waiting, return_exceptions=True))[0]
        release.set()
        return await running, outcome

    answered, failed = asyncio.run(scenario())
    assert answered == "a" and isinstance(failed, RuntimeError) and str(failed) == "no end left"
