"""A step in a process of its own (`builder.optimize.isolated`): its result or its error comes back whole, and a
child that grows past the memory budget is stopped with both figures instead of the machine running out."""

from __future__ import annotations

import os
import pickle
import signal
import time

import pytest

from builder.measure import memory
from builder.optimize import isolated
from builder.optimize.quantize import ConversionFailed

MIB = 1024 * 1024


def add(a: int, b: int) -> tuple[int, int]:
    return a + b, os.getpid()


def refuse(what: str) -> None:
    raise ValueError(f"cannot take {what}")


def refuse_like_the_converter() -> None:
    raise ConversionFailed("TFLite int8 conversion failed: no kernel; drop int8", "no kernel", "the whole text")


def grow(step_mib: int, most_mib: int) -> int:
    """Take memory a step at a time (touched, so it is resident), then wait to be stopped."""
    held = []
    for _ in range(most_mib // step_mib):
        held.append(bytearray(os.urandom(1024)) * (step_mib * 1024))
        time.sleep(0.05)
    time.sleep(120)
    return len(held)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_result_comes_back_from_another_process() -> None:
    total, pid = isolated.call(add, 2, 3, limit=None)
    assert total == 5 and pid != os.getpid()


def test_an_error_comes_back_with_its_first_line_and_the_childs_traceback() -> None:
    with pytest.raises(ValueError, match="cannot take the model") as raised:
        isolated.call(refuse, "the model", limit=None)
    assert "Traceback" in raised.value.full_text and "in refuse" in raised.value.full_text  # type: ignore[attr-defined]


def test_a_converter_refusal_keeps_its_cause_and_log_text() -> None:
    again = pickle.loads(pickle.dumps(ConversionFailed("line", "cause", "full")))
    assert (str(again), again.cause, again.full_text) == ("line", "cause", "full")
    with pytest.raises(ConversionFailed) as raised:
        isolated.call(refuse_like_the_converter, limit=None)
    assert raised.value.cause == "no kernel" and raised.value.full_text == "the whole text"


@pytest.mark.skipif(memory.rss_bytes() is None, reason="needs /proc to read a process's memory")
def test_a_child_growing_past_the_budget_is_stopped_with_both_figures() -> None:
    limit = (memory.rss_bytes() or 0) + 300 * MIB
    with pytest.raises(isolated.OverBudget) as raised:
        isolated.call(grow, 20, 2000, limit=limit)
    line = str(raised.value)
    assert line.startswith("not enough memory: its process took ") and "in use, and" in line
    assert memory.text(limit) in line and raised.value.cause == line


def test_a_child_that_dies_without_a_word_is_said_so() -> None:
    with pytest.raises(isolated.ChildFailed, match="signal SIGKILL and no result") as raised:
        isolated.call(die, limit=None)
    assert "OOM killer" in str(raised.value)
