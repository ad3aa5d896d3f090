"""What the ORIGINAL model accepts of each integer input, measured: the range of ids its tables take.

Why: an id outside an `Embedding`, a `Gather` or a lookup table is refused by the original on TensorFlow
(`InvalidArgumentError: indices[0,0] = 7 is not in [0, 3)`), and TF Serving answers that request 400 /
INVALID_ARGUMENT. A converted file need not keep that refusal: OpenVINO's IR answers 200 with a row the model
does not have (an id past the table as a row of zeros, -4 of a 3-row table as row 2), and LiteRT refuses in its
own words with some kernels only. So optimize asks the original itself, with a copy of one DATA row whose integer
input is set out of range, and records the range it accepts in the contract; the server refuses values outside
it before any runtime sees them (`builder.server.core.ranges`).

How (a few calls per integer input): values climb a ladder away from DATA's own values (16, 256, ... up to
int32's limit; -1, -16, ... down) until the original refuses one. The bound is then read from TensorFlow's
message and confirmed by two calls (the last value accepted, the first refused), so what is recorded is
measured, not parsed. Below zero the candidates are 0 and -rows (a Keras 3 `Embedding` counts negative ids from
the table's end, as numpy does: its original accepts -3..2 of a 3-row table); where no candidate is confirmed
(a message without a bound, LiteRT's), the boundary is found by bisection between an accepted and a refused
value. A value that makes the original slow (an input that is a length or a count, not an id) stops the climb:
nothing is recorded for that side. A probe failing for any other reason records nothing for that input, with a
one-line note; the run goes on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from builder.model.signature import is_integer
from builder.report import InputRange, TensorSpec

#: TensorFlow's CPU kernels (Gather, ResourceGather, embedding lookups): "indices[0,0] = 7 is not in [0, 3)".
_BOUND = re.compile(r"is not in \[(-?\d+), (-?\d+)\)")
#: The ladder of probe values above DATA's largest (and, negated, below its smallest): each 16 times the last,
#: so a table of any size is passed in a few calls, and an input that drives the model's work (a length) is
#: seen getting slow before a value that would take minutes or all memory.
_LADDER = (16, 256, 4096, 65536, 2 ** 20, 2 ** 24, 2 ** 28)
#: The farthest probe: int32's limit, also for int64 (no table has more rows, and a value past it asked of an
#: input that is a size would ask for more memory than any host has).
_FARTHEST = 2 ** 31 - 1
#: A probe slower than this many times the plain row's call (plus `_SLOW_FLOOR_S`, for noise) ends the climb:
#: the value drives the model's work (a length of a loop, say), and the next rung would cost 16 times more.
_SLOW_FACTOR = 4.0
_SLOW_FLOOR_S = 0.05
#: The most calls a bisection makes (an int64 range needs 64).
_MAX_BISECT = 64


class ProbeFailed(Exception):
    """The original failed on a probe for another reason than refusing the value (one line: why)."""


def parse_bound(message: str) -> tuple[int, int] | None:
    """The accepted range [low, high) a TensorFlow kernel names when it refuses an index, or None."""
    found = _BOUND.search(message)
    return (int(found.group(1)), int(found.group(2))) if found else None


def is_refusal(error: BaseException) -> bool:
    """Whether the original refused the values it was given (TensorFlow's InvalidArgumentError; a runtime's
    refusal of the request's values as the server names it, `ModelInputError`), not failed for another cause."""
    from builder.model.failures import ModelInputError

    return isinstance(error, ModelInputError) or any(
        kind.__name__ == "InvalidArgumentError" for kind in type(error).__mro__)


@dataclass
class Prober:
    """Calls of the original on one row with one integer input set to one value (every position), each value
    asked once: True when accepted, False when refused (`is_refusal`), ProbeFailed otherwise."""

    predict: Callable[[dict[str, np.ndarray]], object]
    row: Mapping[str, np.ndarray]
    spec: TensorSpec
    plain_s: float = 0.0  # the plain row's call time (slowness is judged against it)
    seen: dict[int, bool] = field(default_factory=dict)
    messages: dict[int, str] = field(default_factory=dict)
    last_s: float = 0.0  # the latest call's time
    clock: Callable[[], float] = time.perf_counter  # seconds, for the calls' times

    def __call__(self, value: int) -> bool:
        if value in self.seen:
            self.last_s = 0.0
            return self.seen[value]
        feed = dict(self.row)
        feed[self.spec.name] = np.full(np.shape(self.row[self.spec.name]), value, dtype=self.spec.dtype)
        start = self.clock()
        try:
            self.predict(feed)
            accepted = True
        except Exception as error:  # noqa: BLE001 - refused (the answer sought) or failed (said in one line)
            if not is_refusal(error):
                first = (str(error).strip().splitlines() or [""])[0][:200]
                raise ProbeFailed(f"{type(error).__name__}: {first}" if first else type(error).__name__) from error
            accepted = False
            self.messages[value] = str(error)
        self.last_s = self.clock() - start
        self.seen[value] = accepted
        return accepted

    def slow(self) -> bool:
        """Whether the latest call took much longer than the plain row's."""
        return self.last_s > _SLOW_FACTOR * self.plain_s + _SLOW_FLOOR_S


def first_refused(ask: Callable[[int], bool], accepted: int, refused: int, candidates: tuple[int, ...]) -> int:
    """The first value refused going from `accepted` towards `refused` (either direction): a candidate (a bound
    the original's message named) when two calls confirm it, else found by bisection (the values in between
    taken as one accepted stretch and one refused one, as a table's bounds make them)."""
    step = 1 if refused > accepted else -1
    for candidate in candidates:
        if (candidate - accepted) * step <= 0 or (refused - candidate) * step < 0:
            continue  # not between the two values known
        before = candidate - step
        if (before == accepted or ask(before)) and (candidate == refused or not ask(candidate)):
            return candidate
    low, high = accepted, refused  # ask(low) is True, ask(high) is False, along `step`
    for _ in range(_MAX_BISECT):
        if abs(high - low) <= 1:
            break
        middle = (low + high) // 2
        if ask(middle):
            low = middle
        else:
            high = middle
    return high


def _climb(ask: Prober, start: int, ladder: list[int]) -> tuple[int, int] | None:
    """(last accepted, first refused) along `ladder` from `start` (accepted), or None: every value accepted,
    or the original got slow on one (then the climb stops there)."""
    accepted = start
    for value in ladder:
        if not ask(value):
            return accepted, value
        if ask.slow():
            return None
        accepted = value
    return None


def measure_range(predict: Callable[[dict[str, np.ndarray]], object], row: Mapping[str, np.ndarray],
                  spec: TensorSpec, values: np.ndarray, clock: Callable[[], float] = time.perf_counter
                  ) -> tuple[InputRange | None, str | None]:
    """(the range the original accepts of `spec`'s input, a note or None). `row`: one row the original answers;
    `values`: that input's values in DATA (accepted). The range is None when the original refuses nothing.
    `clock`: seconds, for the calls' times (whether a value made the original slow)."""
    info = np.iinfo(np.dtype(spec.dtype))
    seen_max = int(np.max(values)) if np.size(values) else 0
    seen_min = int(np.min(values)) if np.size(values) else 0
    start = clock()
    try:
        predict(dict(row))
    except Exception as error:  # noqa: BLE001 - the row itself is not answered: nothing can be measured
        return None, (f"what input {spec.name!r} accepts was not measured: the original fails on a DATA row "
                      f"({type(error).__name__})")
    ask = Prober(predict, row, spec, plain_s=clock() - start, clock=clock)
    high = low = None
    try:
        top, bottom = min(int(info.max), _FARTHEST), max(int(info.min), -_FARTHEST - 1)
        rungs = {min(seen_max + step, top) for step in _LADDER} | {top}
        up = _climb(ask, seen_max, sorted(v for v in rungs if v > seen_max))
        if up is not None:
            named = parse_bound(ask.messages.get(up[1], ""))
            high = first_refused(ask, *up, candidates=(named[1],) if named else ())
        if info.min < 0:
            rungs = {max(seen_min - step, bottom) for step in (1, *_LADDER)} | {bottom}
            down = _climb(ask, seen_min, sorted((v for v in rungs if v < seen_min), reverse=True))
            if down is not None:
                named = parse_bound(ask.messages.get(down[1], ""))
                candidates = tuple(c for c in ((named[0] - 1) if named else None,
                                               (-high - 1) if high is not None and high > 0 else None)
                                   if c is not None)
                low = first_refused(ask, *down, candidates=candidates) + 1
    except ProbeFailed as failed:
        return None, f"what input {spec.name!r} accepts was not measured: a probe failed ({failed})"
    if high is None and low is None:
        return None, None
    return InputRange(spec.name, low, high), None


def measure_ranges(predict: Callable[[dict[str, np.ndarray]], object], inputs: tuple[TensorSpec, ...],
                   x: Mapping[str, np.ndarray]) -> tuple[tuple[InputRange, ...], list[str]]:
    """The accepted range of every integer input of the contract whose values the original refuses, and a note
    for each input that could not be measured. `x`: rows the original answers (the gate's)."""
    integers = [s for s in inputs if is_integer(s.dtype)]
    if not integers or not x:
        return (), []
    row = {k: (np.asarray(v)[:1] if np.ndim(v) else np.asarray(v)) for k, v in x.items()}
    ranges, notes = [], []
    for spec in integers:
        found, note = measure_range(predict, row, spec, np.asarray(x[spec.name]))
        if found is not None:
            ranges.append(found)
        if note:
            notes.append(note)
    return tuple(ranges), notes


def range_note(ranges: tuple[InputRange, ...]) -> str | None:
    """One line for the report's notes: what the server refuses, as the original does."""
    if not ranges:
        return None
    said = ", ".join(f"{r.name!r} in [{'-inf' if r.low is None else r.low}, {'inf' if r.high is None else r.high})"
                     for r in ranges)
    return f"the original refuses integer values outside {said} (measured); the server refuses them too, with 400"
