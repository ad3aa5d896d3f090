"""The one rule for "faster", and the one way ties break.

A is faster than B beyond noise only when A's median is lower AND the two medians' 95% confidence intervals do
not overlap (`stats.median_ci`): a fixed tie band would call a real 14% difference a tie on a quiet host and a
noise-sized one a win on a busy host; the measured intervals say how much each run can be trusted.

Among the candidates within noise of the fastest (their interval overlaps the fastest's), the choice is the
smaller file, then the runtime's tie rank (`builder.model.registry`: LiteRT first, exact before approximate,
TensorFlow last), then a caller's
preference, then the name: never the noisy order of two p50s, so identical runs choose the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from builder.measure.stats import Summary, summarize
from builder.model import registry



@dataclass(frozen=True)
class Timed:
    """One timed candidate: its median and the median's confidence interval (any one unit), and what breaks a
    tie (`size_bytes` of the file it serves, its `runtime`, `preference`: lower first, then `name`)."""

    name: str
    p50: float
    ci_low: float
    ci_high: float
    size_bytes: int = 0
    runtime: str = ""
    preference: int = 0

    @classmethod
    def of(cls, name: str, summary: Summary, **tie: object) -> "Timed":
        return cls(name, summary.p50, summary.ci_low, summary.ci_high, **tie)  # type: ignore[arg-type]


def runtime_rank(runtime: str) -> int:
    """The runtime's tie rank in the registry (unknown names last)."""
    return registry.rank(runtime)


def faster_beyond_noise(a: Timed, b: Timed) -> bool:
    """Whether `a` is faster than `b` by more than the noise both were measured with."""
    return a.p50 < b.p50 and a.ci_high < b.ci_low


def within_noise(a: Timed, b: Timed) -> bool:
    """Neither is faster beyond noise: their medians' confidence intervals overlap."""
    return not faster_beyond_noise(a, b) and not faster_beyond_noise(b, a)


def tie_key(item: Timed) -> tuple[int, int, int, str]:
    return item.size_bytes, runtime_rank(item.runtime), item.preference, item.name


def fastest(items: Sequence[Timed]) -> Timed:
    """The lowest median (ties of exactly equal medians by `tie_key`)."""
    if not items:
        raise ValueError("no timed candidates")
    return min(items, key=lambda i: (i.p50, tie_key(i)))


def tied_with_fastest(items: Sequence[Timed]) -> list[Timed]:
    """Every candidate the fastest is not faster than beyond noise (the fastest included)."""
    best = fastest(items)
    return [i for i in items if not faster_beyond_noise(best, i)]


def pick(items: Sequence[Timed]) -> Timed:
    """The candidate to serve: among those within noise of the fastest, the first by `tie_key`."""
    return min(tied_with_fastest(items), key=tie_key)


def choose_fastest_runtime(samples: Mapping[str, Sequence[float]], errors: Mapping[str, str] | None = None,
                           sizes: Mapping[str, int] | None = None) -> tuple[str, str]:
    """Batch-1 latencies in seconds per runtime -> (runtime, reason), by `pick` (runtime names are their own
    `runtime`; `sizes`: bytes of the file each serves, when they differ). Runtimes that could not be measured
    are named with their error."""
    sizes = dict(sizes or {})
    measured = {name: summarize(s, min_samples=1) for name, s in samples.items() if s}
    if not measured:
        raise ValueError("no runtime was measured")
    items = [Timed.of(name, s, size_bytes=sizes.get(name, 0), runtime=name) for name, s in measured.items()]
    chosen, best = pick(items), fastest(items)
    failed = "; ".join(f"{name} unavailable ({why or 'not measured'})" for name, why in (errors or {}).items())
    timings = ", ".join(f"{i.name} {i.p50 * 1e3:.3f} ms [{i.ci_low * 1e3:.3f}-{i.ci_high * 1e3:.3f}]"
                        for i in sorted(items, key=lambda i: (i.p50, tie_key(i))))
    tail = f" [batch-1 p50, 95% CI: {timings}{'; ' + failed if failed else ''}]"
    if len(items) == 1:
        return chosen.name, f"{failed or 'no other runtime measured'}; {chosen.name} p50 {chosen.p50 * 1e3:.3f} ms"
    if chosen is best:
        runner_up = fastest([i for i in items if i is not chosen])
        if faster_beyond_noise(chosen, runner_up):
            why = f"faster beyond noise than {runner_up.name} ({runner_up.p50 / chosen.p50:.2f}x)"
        else:
            why = f"fastest; within noise of {runner_up.name}, and first in the tie order (smaller file, runtime)"
    else:
        why = (f"within noise of the fastest, {best.name} ({chosen.p50 / best.p50:.2f}x its p50), and first in the "
               "tie order (smaller file, then the smaller runtime)")
    return chosen.name, f"{chosen.name} p50 {chosen.p50 * 1e3:.3f} ms on this host: {why}{tail}"
