"""THE timing loop: latencies of zero-argument calls taken in interleaved time slices.

Why interleaved: a drifting host load (other tenants, frequency changes) then hits every runner alike instead
of whichever runs last, so the runners' medians can be compared. Warm-up calls are excluded.

When to stop is a policy asked after every round (`builder.measure.race`: pure verdicts over the samples so
far): a runner whose answer is known stops, with its reason, and the rest share the time left. Without one,
the loop runs the whole budget. Every caller (optimize's race between candidates, its rows/s and one-core
passes, bench, `--runtime auto`, the server's self-test) goes through `run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from builder.measure import stats
from builder.measure.race import BUDGET, Lap, Verdict


class Withdraw(Exception):
    """Raised by a runner that can no longer be timed (its call failed and the caller recorded why): it stops
    here with `reason`, its earlier samples kept, and the others go on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Policy(Protocol):
    def __call__(self, lap: Lap) -> Verdict: ...


@dataclass(frozen=True)
class Stop:
    """How long one runner was timed and why it stopped: `calls` timed calls (warm-up excluded) over
    `seconds` of its own slices."""

    calls: int
    seconds: float
    why: str


@dataclass(frozen=True)
class Run:
    """What the loop measured: each runner's latencies (seconds, in call order), the rounds run, each runner's
    `Stop`, and the loop's whole time (warm-up excluded)."""

    samples: dict[str, list[float]]
    rounds: int
    stopped: dict[str, Stop]
    elapsed_s: float


def run(runners: Mapping[str, Callable[[], Any]], budget_s: float, policy: Policy | None = None, *,
        warmup: int = 5, slice_s: float = 0.02, samples: Mapping[str, list[float]] | None = None,
        max_rounds: int = stats.MAX_ROUNDS, clock: Callable[[], float] = time.perf_counter) -> Run:
    """Time `runners` in interleaved rounds until `policy` stops them all, the budget is spent or `max_rounds`
    ran.

    Every round visits every runner still running for `slice_s` (at least one call), in an order rotated each
    round; then the policy, shown a `Lap` (samples, each slice's median, who runs, time, budget, rounds), says who
    stops. `samples` continues lists from an earlier call (the same list objects are appended to). `clock`:
    seconds (a test's own clock makes the loop deterministic).
    """
    withdrawn: dict[str, str] = {}
    for name, call in runners.items():
        try:
            for _ in range(warmup):
                call()
        except Withdraw as gone:
            withdrawn[name] = gone.reason
    running = list(runners)
    out: dict[str, list[float]] = {name: (samples[name] if samples and name in samples else []) for name in running}
    spent = {name: 0.0 for name in running}
    slices: dict[str, list[float]] = {name: [] for name in running}  # each slice's median, for the policy
    stopped: dict[str, Stop] = {}
    for name, why in withdrawn.items():
        running.remove(name)
        stopped[name] = Stop(len(out[name]), 0.0, why)

    def stop(name: str, why: str) -> None:
        running.remove(name)
        stopped[name] = Stop(len(out[name]), spent[name], why)

    start = clock()
    rounds = 0
    while running:
        shift = rounds % len(running)
        for name in running[shift:] + running[:shift]:
            call, bucket = runners[name], out[name]
            first = len(bucket)
            began_slice = clock()
            slice_end = began_slice + slice_s
            try:
                while True:
                    began = clock()
                    call()
                    now = clock()
                    bucket.append(now - began)
                    if now >= slice_end:
                        break
            except Withdraw as gone:
                spent[name] += clock() - began_slice
                stop(name, gone.reason)
                continue
            spent[name] += now - began_slice
            slices[name].append(stats.median(bucket[first:]))
        rounds += 1
        if not running:
            break
        verdict = after_round(Lap(out, tuple(running), clock() - start, budget_s, rounds, slices), policy,
                              max_rounds)
        for name, why in verdict.drop.items():
            stop(name, why)
        for name in list(running) if verdict.stop_all else ():
            stop(name, verdict.stop_all)
    return Run(out, rounds, stopped, clock() - start)


def after_round(lap: Lap, policy: Policy | None, max_rounds: int = stats.MAX_ROUNDS) -> Verdict:
    """Who stops after a round (pure): the policy's verdict, and everyone left once the budget is spent or
    `max_rounds` ran ("budget"). Drops name only runners still running."""
    verdict = policy(lap) if policy is not None else Verdict()
    drop = {n: why for n, why in verdict.drop.items() if n in lap.running}
    over = lap.elapsed_s >= lap.budget_s or lap.rounds >= max_rounds
    return Verdict(drop, verdict.stop_all or (BUDGET if over else ""))


def interleave(runners: Mapping[str, Callable[[], Any]], budget_s: float, *, warmup: int = 5, slice_s: float = 0.02,
               min_rounds: int = 1, min_samples: int | None = None,
               samples: Mapping[str, list[float]] | None = None) -> tuple[dict[str, list[float]], int]:
    """Latencies (seconds) of each runner; (samples, rounds).

    `run` for the whole budget; with `min_samples`, every runner stops together once at least `min_rounds` ran
    and every runner's median is stable (narrow confidence interval, see `stats.is_stable`).
    """
    policy = AllStable(min_rounds, min_samples) if min_samples is not None else None
    done = run(runners, budget_s, policy, warmup=warmup, slice_s=slice_s, samples=samples)
    return done.samples, done.rounds


@dataclass(frozen=True)
class AllStable:
    """Everyone stops together once `min_rounds` ran and every median is stable (`stats.keep_going`): what
    bench and the server's self-test ask for, every runner's figures to the same precision."""

    min_rounds: int
    min_samples: int

    def __call__(self, lap: Lap) -> Verdict:
        stable = [stats.is_stable(lap.samples[n], min_samples=self.min_samples) for n in lap.running]
        go_on = stats.keep_going(stable, elapsed_s=lap.elapsed_s, budget_s=lap.budget_s, rounds_done=lap.rounds,
                                 min_rounds=self.min_rounds)
        return Verdict() if go_on else Verdict(stop_all="stable")


def time_interleaved(runners: Mapping[str, Callable[[], Any]], budget_s: float, warmup: int = 5,
                     slice_s: float = 0.02) -> dict[str, list[float]]:
    """`run` for the whole budget (no early stop): what `--runtime auto` calls; optimize races its candidates
    (`builder.measure.race`) and `tfsmith bench` stops once every median is stable, in the same loop."""
    return run(runners, budget_s, warmup=warmup, slice_s=slice_s).samples
