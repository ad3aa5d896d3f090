"""The real batcher over a stand-in interpreter: what each request gets back when the model refuses a merged
batch because of one request's values."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import uvloop

from builder.model.failures import ModelInputError
from builder.server.core.runner import BatchingConfig, DynamicBatcher
from builder.server.core.call import Call


class _Lookup:
    """A pool of one interpreter that looks token ids up in a table of 10 rows, as an embedding does, and
    refuses a batch holding an id outside it (as LiteRT's GATHER does); it records each call's ids."""

    size = 1

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def predict(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids = inputs["ids"]
        self.calls.append(ids.reshape(-1).tolist())
        if ids.min() < 0 or ids.max() >= 10:
            raise ModelInputError("gather index out of bounds")
        return {"y": ids.astype(np.float32) * 2.0}


def _call(*ids: int) -> Call:
    x = np.array([[i] for i in ids], dtype=np.int32)
    return Call(signature="serving_default", inputs={"ids": x}, batch=len(ids))


def _answer_all(model: _Lookup, calls: list[Call]) -> list[np.ndarray | BaseException]:
    executor = ThreadPoolExecutor(max_workers=1)
    # the first request waits up to 2 s for company, so the others join its batch however slow the machine
    batcher = DynamicBatcher(model, BatchingConfig(max_batch_size=8, timeout_us=2_000_000), executor,  # type: ignore[arg-type]
                             batchable=True)

    async def run() -> list[np.ndarray | BaseException]:
        answers = await asyncio.gather(*(batcher.predict(call) for call in calls), return_exceptions=True)
        return [a if isinstance(a, BaseException) else a["y"] for a in answers]

    try:
        return uvloop.run(run())
    finally:
        executor.shutdown(wait=False)


def test_one_requests_bad_ids_fail_only_that_request_and_its_batch_mates_are_answered() -> None:
    model = _Lookup()
    good, bad, other = _answer_all(model, [_call(1, 2), _call(3, 500), _call(4)])
    assert isinstance(bad, ModelInputError) and "gather index out of bounds" in str(bad)
    np.testing.assert_array_equal(good, [[2.0], [4.0]])
    np.testing.assert_array_equal(other, [[8.0]])
    assert model.calls == [[1, 2, 3, 500, 4], [1, 2], [3, 500], [4]]  # merged, refused, then each alone


def test_a_refused_request_alone_is_not_run_twice() -> None:
    model = _Lookup()
    (bad,) = _answer_all(model, [_call(-1)])
    assert isinstance(bad, ModelInputError)
    assert model.calls == [[-1]]


@pytest.mark.parametrize("error", [RuntimeError("interpreter crashed")])
def test_a_failure_that_is_not_the_requests_fault_reaches_every_request_of_the_batch(error: Exception) -> None:
    model = _Lookup()

    def broken(signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        model.calls.append(inputs["ids"].reshape(-1).tolist())
        raise error

    model.predict = broken  # type: ignore[method-assign]
    answers = _answer_all(model, [_call(1), _call(2)])
    assert answers == [error, error] and model.calls == [[1, 2]]  # not retried: no request is to blame


def test_a_partial_batch_leaves_as_soon_as_it_fills_not_at_its_timeout() -> None:
    model = _Lookup()
    executor = ThreadPoolExecutor(max_workers=1)
    batcher = DynamicBatcher(model, BatchingConfig(max_batch_size=3, timeout_us=600_000_000), executor,  # type: ignore[arg-type]
                             batchable=True)

    async def run() -> list[dict[str, np.ndarray]]:
        first = asyncio.ensure_future(batcher.predict(_call(1)))
        await asyncio.sleep(0)  # the first waits for company alone
        others = [asyncio.ensure_future(batcher.predict(_call(i))) for i in (2, 3)]
        # a ten-minute timeout: answered at all within the minute only because the full batch left at once
        return await asyncio.wait_for(asyncio.gather(first, *others), 60)

    try:
        answers = uvloop.run(run())
    finally:
        executor.shutdown(wait=False)
    assert [a["y"].tolist() for a in answers] == [[[2.0]], [[4.0]], [[6.0]]]
    assert model.calls == [[1, 2, 3]]


# --- one call per turn of the event loop (`--dispatch turns`) -------------------------------------------------


def _turns_batcher(model: _Lookup) -> DynamicBatcher:
    return DynamicBatcher(model, BatchingConfig(), None, batchable=True, turns=True)  # type: ignore[arg-type]


def test_calls_on_turns_run_on_the_loop_one_per_turn_in_the_order_they_came() -> None:
    model = _Lookup()
    batcher = _turns_batcher(model)
    ticks: list[str] = []

    async def ticker() -> None:  # one mark per turn of the loop: the loop polls between model calls
        for _ in range(12):
            ticks.append("turn")
            await asyncio.sleep(0)

    def counted(signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ticks.append("call")
        return _Lookup.predict(model, signature, inputs)

    model.predict = counted  # type: ignore[method-assign]

    async def run() -> list[dict[str, np.ndarray]]:
        ticking = asyncio.ensure_future(ticker())
        answers = await asyncio.gather(*(batcher.predict(_call(i)) for i in (1, 2, 3, 4)))
        await ticking
        return answers

    answers = uvloop.run(run())
    assert [a["y"].tolist() for a in answers] == [[[2.0]], [[4.0]], [[6.0]], [[8.0]]]
    assert model.calls == [[1], [2], [3], [4]]  # in arrival order, each alone
    calls = [i for i, tick in enumerate(ticks) if tick == "call"]
    assert all(b - a > 1 and "turn" in ticks[a:b] for a, b in zip(calls, calls[1:])), ticks  # never two in a turn
    assert batcher.mode == "turns"


@pytest.mark.parametrize("handed", [False, True], ids=["while-waiting", "just-handed-the-turn"])
def test_a_caller_gone_before_its_turn_is_passed_over_and_the_turn_goes_on(handed: bool) -> None:
    model = _Lookup()
    batcher = _turns_batcher(model)

    async def run() -> list[object]:
        first = asyncio.ensure_future(batcher.predict(_call(1)))
        gone = asyncio.ensure_future(batcher.predict(_call(2)))
        last = asyncio.ensure_future(batcher.predict(_call(3)))
        await asyncio.sleep(0)  # the first has run; the other two wait for turns
        if handed:  # the moment the first passes the turn on, before its taker resumes to take it
            turn = batcher._turn_waiters[0]  # noqa: SLF001
            while not turn.done():
                await asyncio.sleep(0)
        gone.cancel()
        return await asyncio.wait_for(asyncio.gather(first, gone, last, return_exceptions=True), 60)

    first, gone, last = uvloop.run(run())
    assert isinstance(gone, asyncio.CancelledError)
    assert model.calls == [[1], [3]]
    assert last["y"].tolist() == [[6.0]]  # type: ignore[index]
