"""The race (successive elimination) in the one timing loop, on synthetic samples: no wall clock, no sleeps.

The loop runs on a test clock that each call advances by its own synthetic latency, so every verdict here is
deterministic."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from builder.measure import stats
from builder.measure.loop import Withdraw, after_round, run
from builder.measure.race import BUDGET, SETTLED, Entrant, Lap, PerRunner, Race, Verdict


class Clock:
    """Seconds that pass only when a synthetic call says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def runner(self, latencies: Iterator[float], calls: list[float] | None = None) -> Callable[[], None]:
        def call() -> None:
            took = next(latencies)
            self.now += took
            if calls is not None:
                calls.append(took)

        return call


def jitter(base: float, spread: float = 0.05) -> Iterator[float]:
    """base +- spread, in a fixed repeating pattern (no randomness)."""
    return itertools.cycle(base * (1 + spread * f) for f in (-1.0, -0.5, 0.0, 0.5, 1.0, 0.25, -0.25))


def lap(samples: dict[str, list[float]], elapsed_s: float = 1.0, budget_s: float = 10.0, rounds: int = 10) -> Lap:
    return Lap(samples, tuple(samples), elapsed_s, budget_s, rounds)


def test_a_clearly_slower_candidate_is_dropped_with_its_reason() -> None:
    fast = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97]
    slow = [2.0, 2.1, 1.9, 2.05, 1.95, 2.0, 2.02, 1.98]
    verdict = Race({"fast": Entrant("fast"), "slow": Entrant("slow")})(lap({"fast": fast, "slow": slow}))
    assert verdict.drop == {"slow": "slower than fast beyond noise after 8 calls"}
    assert verdict.stop_all == SETTLED  # one choosable candidate left: the choice is known


def test_candidates_within_noise_are_kept() -> None:
    a = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.2, 0.8]
    b = [1.02, 1.12, 0.92, 1.07, 0.97, 1.02, 1.22, 0.82]
    verdict = Race({"a": Entrant("a"), "b": Entrant("b")})(lap({"a": a, "b": b}, elapsed_s=0.1, budget_s=100.0))
    assert verdict.drop == {}


def test_no_verdict_below_the_fewest_samples_a_confidence_interval_needs() -> None:
    few = stats.fewest_samples(0.95)
    assert few == 6  # the range of 6 samples covers the median 97% of the time, of 5 only 94%
    fast, slow = [1.0] * (few - 1), [100.0] * (few - 1)
    assert Race({"fast": Entrant("fast"), "slow": Entrant("slow")})(lap({"fast": fast, "slow": slow})) == Verdict()


def test_within_noise_is_settled_once_every_survivor_is_pinned_down() -> None:
    entrants = {"a": Entrant("a", size_bytes=1), "b": Entrant("b", size_bytes=2)}
    wide = [1.00 + 0.2 * f for f in (-1, -0.5, 0, 0.5, 1, 0.25, -0.25, 0.1, -0.1, 0)]  # +-20%: could go either way
    assert Race(entrants)(lap({"a": wide, "b": [x * 0.99 for x in reversed(wide)]})) == Verdict()
    narrow = [1.00 + 0.01 * f for f in (-1, -0.5, 0, 0.5, 1, 0.25, -0.25, 0.1, -0.1, 0)]  # +-1%, within noise
    both = {"a": narrow, "b": [x * 1.005 for x in narrow]}
    assert Race(entrants)(lap(both)) == Verdict({}, SETTLED)
    assert Race(entrants, settle_half_width=0.001)(lap(both)) == Verdict()  # a stricter width waits


def test_a_candidate_that_cannot_be_chosen_is_never_the_best() -> None:
    gate_failed = [0.1] * 8  # fastest, but rejected: timed for the report only
    ok = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97]
    slow = [3.0] * 8
    verdict = Race({"x": Entrant("x", eligible=False), "ok": Entrant("ok"), "slow": Entrant("slow")})(
        lap({"x": gate_failed, "ok": ok, "slow": slow}))
    assert verdict.drop == {"slow": "slower than ok beyond noise after 8 calls", "x": SETTLED}  # x: its figure is known
    assert verdict.stop_all == SETTLED
    wide = [0.1, 0.2, 0.05, 0.3, 0.02, 0.15, 0.25, 0.01]  # faster than ok, not known to +-10% yet: timed on
    ok_wide = [1.0, 1.3, 0.7, 1.2, 0.8, 1.0, 1.25, 0.75]
    keep = Race({"x": Entrant("x", eligible=False), "ok": Entrant("ok"), "b": Entrant("b")})(
        lap({"x": wide, "ok": ok_wide, "b": list(reversed(ok_wide))}))  # not as fast round by round either
    assert keep == Verdict()
    unknown = Race({"ok": Entrant("ok")})(lap({"ok": ok, "baseline": [9.0] * 8}))
    assert unknown.drop == {"baseline": "slower than ok beyond noise after 8 calls"}  # not an entrant: not chosen


def test_the_budget_stops_everyone_still_running() -> None:
    a, b = [1.0, 1.1, 0.9] * 3, [1.0, 1.1, 0.9] * 3
    entrants = {"a": Entrant("a"), "b": Entrant("b", size_bytes=5)}
    spent = Lap({"a": a, "b": b}, ("a", "b"), elapsed_s=10.0, budget_s=10.0, rounds=9)
    assert after_round(spent, Race(entrants)).stop_all in (BUDGET, SETTLED)
    assert after_round(spent, None) == Verdict({}, BUDGET)
    assert after_round(Lap({"a": a}, ("a",), 1.0, 10.0, rounds=7), None, max_rounds=7) == Verdict({}, BUDGET)
    assert after_round(Lap({"a": a}, ("a",), 1.0, 10.0, rounds=3), None) == Verdict()


def test_the_loop_drops_the_slower_and_the_dropped_keep_their_own_statistics() -> None:
    clock = Clock()
    calls: dict[str, list[float]] = {"fast": [], "slow": [], "tie": []}
    runners = {"fast": clock.runner(jitter(0.010), calls["fast"]),
               "slow": clock.runner(jitter(0.030), calls["slow"]),
               "tie": clock.runner(jitter(0.0101), calls["tie"])}
    entrants = {"fast": Entrant("fast", size_bytes=10), "slow": Entrant("slow", size_bytes=1),
                "tie": Entrant("tie", size_bytes=20)}
    done = run(runners, budget_s=1000.0, policy=Race(entrants), warmup=2, slice_s=0.05, clock=clock)
    slow = done.stopped["slow"]
    assert slow.why == f"slower than fast beyond noise after {slow.calls} calls"
    assert slow.calls == len(done.samples["slow"]) == len(calls["slow"]) - 2  # warm-up calls are not samples
    assert done.samples["slow"] == pytest.approx(calls["slow"][2:])  # its own samples, nothing after the drop
    assert slow.seconds == pytest.approx(sum(done.samples["slow"]))
    assert stats.median(done.samples["slow"]) == pytest.approx(0.030, rel=0.06)
    # the survivors got the time the dropped one left, and stopped when more time would not change the choice
    assert done.stopped["fast"].calls > slow.calls and done.stopped["tie"].calls > slow.calls
    assert done.stopped["fast"].why == done.stopped["tie"].why == SETTLED
    assert done.elapsed_s < 1000.0


def test_the_loop_stops_at_the_budget_when_nothing_is_known() -> None:
    clock = Clock()
    runners = {"a": clock.runner(jitter(0.01)), "b": clock.runner(jitter(0.01))}
    done = run(runners, budget_s=0.5, policy=Race({"a": Entrant("a"), "b": Entrant("b")}), warmup=0,
               slice_s=0.05, clock=clock)
    assert {s.why for s in done.stopped.values()} == {BUDGET}
    assert 0.5 <= done.elapsed_s < 0.5 + 2 * 0.06


def test_a_runner_that_withdraws_stops_alone() -> None:
    clock = Clock()
    ok = clock.runner(jitter(0.01))
    count = itertools.count()

    def breaks() -> None:
        clock.now += 0.001
        if next(count) >= 3:
            raise Withdraw("failed: RuntimeError")

    done = run({"ok": ok, "broken": breaks}, budget_s=0.3, warmup=1, slice_s=0.01, clock=clock)
    assert done.stopped["broken"].why == "failed: RuntimeError" and len(done.samples["broken"]) == 2
    assert done.stopped["ok"].why == BUDGET and len(done.samples["ok"]) > 2


def test_per_runner_stops_each_once_its_median_is_pinned_down() -> None:
    steady = [1.0] * 30
    noisy = [1.0, 2.0, 0.5, 3.0, 0.2] * 6
    verdict = PerRunner(rel_half_width=0.05)(lap({"steady": steady, "noisy": noisy}))
    assert verdict == Verdict({"steady": SETTLED})


def test_two_candidates_as_fast_round_by_round_settle_however_noisy_the_host() -> None:
    """The same network read from two files: each round's load moves both alike, so neither median is pinned to
    +-2%, but their ratio is."""
    entrants = {"tflite": Entrant("tflite", size_bytes=1), "ir": Entrant("ir", size_bytes=2)}
    load = [1.00 + 0.3 * f for f in (-1, -0.5, 0, 0.5, 1, 0.25, -0.25, 0.1, -0.1, 0)]  # +-30% from round to round
    twins = {"tflite": load, "ir": [x * (1.004 if i % 2 else 0.996) for i, x in enumerate(load)]}
    assert not any(stats.is_stable(r, min_samples=6, rel_half_width=0.02) for r in twins.values())
    assert Race(entrants)(lap(twins)) == Verdict({}, SETTLED)
    assert Race(entrants).equivalent(["tflite", "ir"], twins.__getitem__)


def test_a_steady_difference_beyond_the_width_is_not_equivalent() -> None:
    entrants = {"a": Entrant("a"), "b": Entrant("b")}
    load = [1.00 + 0.3 * f for f in (-1, -0.5, 0, 0.5, 1, 0.25, -0.25, 0.1, -0.1, 0)]
    apart = {"a": load, "b": [x * 1.04 for x in load]}  # 4% slower in every round: within noise of each median
    assert Race(entrants)(lap(apart)) == Verdict()
    assert not Race(entrants).equivalent(["a", "b"], apart.__getitem__)
    few = {"a": load[:5], "b": load[:5]}  # too few rounds for an interval
    assert not Race(entrants).equivalent(["a", "b"], few.__getitem__)


def test_rounds_are_paired_from_the_latest() -> None:
    """A candidate that joined later has fewer rounds: its latest rounds are the best's latest."""
    entrants = {"a": Entrant("a"), "late": Entrant("late")}
    early = [5.0, 0.2, 7.0]  # rounds `late` did not run: not compared
    load = [1.00 + 0.3 * f for f in (-1, -0.5, 0, 0.5, 1, 0.25, -0.25, 0.1, -0.1, 0)]
    rounds = {"a": early + load, "late": [x * 1.001 for x in load]}
    assert Race(entrants).equivalent(["a", "late"], rounds.__getitem__)
