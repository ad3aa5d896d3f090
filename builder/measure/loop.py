"""THE timing loop: latencies of zero-argument calls taken in interleaved time slices.

Why interleaved: a drifting host load (other tenants, frequency changes) then hits every runner alike instead
of whichever runs last, so the runners' medians can be compared. Warm-up calls are excluded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from builder.measure import stats


def interleave(runners: Mapping[str, Callable[[], Any]], budget_s: float, *, warmup: int = 5, slice_s: float = 0.02,
               min_rounds: int = 1, min_samples: int | None = None,
               samples: Mapping[str, list[float]] | None = None) -> tuple[dict[str, list[float]], int]:
    """Latencies (seconds) of each runner; (samples, rounds).

    Every round visits every runner for `slice_s` (at least one call), in an order rotated each round. Rounds go
    on until `budget_s` is spent; with `min_samples`, they stop earlier once at least `min_rounds` ran and every
    runner's median is stable (narrow confidence interval, see `stats.is_stable`). `samples` continues lists
    from an earlier call.
    """
    for run in runners.values():
        for _ in range(warmup):
            run()
    names = list(runners)
    out: dict[str, list[float]] = {name: (samples[name] if samples and name in samples else []) for name in names}
    clock = time.perf_counter
    start = clock()
    rounds = 0
    while names:
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            run, bucket = runners[name], out[name]
            slice_end = clock() + slice_s
            while True:
                began = clock()
                run()
                now = clock()
                bucket.append(now - began)
                if now >= slice_end:
                    break
        rounds += 1
        stable = ([stats.is_stable(out[n], min_samples=min_samples) for n in names] if min_samples is not None
                  else [False] * len(names))
        if not stats.keep_going(stable, elapsed_s=clock() - start, budget_s=budget_s, rounds_done=rounds,
                                min_rounds=min_rounds):
            break
    return out, rounds


def time_interleaved(runners: Mapping[str, Callable[[], Any]], budget_s: float, warmup: int = 5,
                     slice_s: float = 0.02) -> dict[str, list[float]]:
    """`interleave` for the whole budget (no early stop): what `--runtime auto` and optimize's candidate timing
    call; `tfsmith bench` runs the same loop with early stopping once every median is stable."""
    return interleave(runners, budget_s, warmup=warmup, slice_s=slice_s)[0]
