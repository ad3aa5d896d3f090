"""Latency statistics: pure functions over lists of seconds (what every timing in tfsmith reports).

Why these choices:
- Latency distributions are skewed with long tails (GC, other tenants, frequency changes), so the centre is
  the MEDIAN and its uncertainty is a distribution-free confidence interval from order statistics (no
  normality assumption, no random resampling, reproducible).
- Spread is reported robustly (IQR, MAD) next to the coefficient of variation, so one outlier does not hide
  or fake a difference.
- A run is flagged NOISY when the median's CI is wide relative to the median or the robust spread is large:
  ratios between such runs deserve less trust, and the report says so instead of pretending.
- The harness keeps repeating until every median is stable (narrow CI) or the time budget is spent; the
  decision is `keep_going`, a pure function so it can be tested on recorded samples.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Iterable, Sequence

#: Relative half-width of the median's 95% CI under which a median counts as stable.
STABLE_REL_HALF_WIDTH = 0.02
#: Relative CI width (high-low)/median above which a run is flagged noisy.
NOISY_REL_CI_WIDTH = 0.10
#: Robust coefficient of variation (1.4826*MAD/median) above which a run is flagged noisy (sub-10 us
#: kernels on a shared 2-core host routinely show 30-45% while their medians stay within 1%).
NOISY_ROBUST_COV = 0.50
#: Fewer samples than this never count as stable.
MIN_SAMPLES = 20
#: No timing loop runs more rounds than this, whatever its budget.
MAX_ROUNDS = 10_000


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default)."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50.0)


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI for the median from order statistics (exact binomial, p=1/2).

    The interval [x_(k), x_(n-k+1)] covers the true median with probability >= `confidence` when k is the
    largest rank with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2. With too few samples for any such k
    the interval is the whole sample range (honestly wide).
    """
    n = len(samples)
    if n == 0:
        raise ValueError("confidence interval of no samples")
    ordered = sorted(samples)
    k = lower_rank(n, confidence)
    if k < 1:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


@lru_cache(maxsize=4096)
def lower_rank(n: int, confidence: float = 0.95) -> int:
    """The 1-based rank k of the lower bound of the median's CI over n samples (0: no such rank, the interval
    is the whole range). Cached: it depends on n alone, and the exact binomial sums cost milliseconds at n ~ 1000,
    which a loop judging every round after each slice would pay for every runner."""
    tail = (1.0 - confidence) / 2.0
    if n > 1000:  # normal approximation of the binomial: exact sums get slow and the two agree closely
        z = _z_for_tail(tail)
        return int(math.floor(n / 2.0 - z * math.sqrt(n) / 2.0))
    threshold = tail * (2**n)
    cumulative = 0
    for i in range(n + 1):
        cumulative += math.comb(n, i)
        if cumulative > threshold:
            return i  # P(X < i) <= tail, P(X <= i) > tail -> rank i (1-based) is the lower bound
    return 0


def fewest_samples(confidence: float = 0.95) -> int:
    """The fewest samples whose median has a confidence interval at `confidence` at all (6 at 95%: the range of
    six samples covers the median 97% of the time, of five only 94%). Below it no verdict about the median is
    honest at that confidence, so no candidate is judged on fewer."""
    n = 1
    while lower_rank(n, confidence) < 1:
        n += 1
    return n


def _z_for_tail(tail: float) -> float:
    """Standard normal quantile z with P(Z > z) = tail (bisection on erfc; no scipy needed)."""
    low, high = 0.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2.0
        if 0.5 * math.erfc(mid / math.sqrt(2.0)) > tail:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def mad(samples: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    centre = median(samples)
    return median([abs(x - centre) for x in samples])


@dataclass(frozen=True)
class Summary:
    """What the report says about one runtime's latencies at one batch size (seconds)."""

    n: int
    p50: float
    p90: float
    p99: float
    mean: float
    std: float
    minimum: float
    maximum: float
    iqr: float
    mad: float
    ci_low: float
    ci_high: float
    cov: float
    robust_cov: float
    rel_ci_width: float
    stable: bool
    noisy: bool
    noise_reason: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def summarize(
    samples: Sequence[float],
    *,
    confidence: float = 0.95,
    noisy_rel_ci_width: float = NOISY_REL_CI_WIDTH,
    noisy_robust_cov: float = NOISY_ROBUST_COV,
    stable_rel_half_width: float = STABLE_REL_HALF_WIDTH,
    min_samples: int = MIN_SAMPLES,
) -> Summary:
    """Percentiles, spread, the median's CI, and the stable / noisy verdicts for one list of latencies."""
    if not samples:
        raise ValueError("summary of no samples")
    n = len(samples)
    p50 = median(samples)
    mean = sum(samples) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in samples) / (n - 1)) if n > 1 else 0.0
    ci_low, ci_high = median_ci(samples, confidence)
    spread_mad = mad(samples)
    iqr = percentile(samples, 75.0) - percentile(samples, 25.0)
    rel_width = (ci_high - ci_low) / p50 if p50 > 0 else math.inf
    cov = std / mean if mean > 0 else math.inf
    robust_cov = 1.4826 * spread_mad / p50 if p50 > 0 else math.inf
    reasons = []
    if n < min_samples:
        reasons.append(f"only {n} samples (< {min_samples})")
    if rel_width > noisy_rel_ci_width:
        reasons.append(f"median 95% CI is {rel_width:.0%} of the median (> {noisy_rel_ci_width:.0%})")
    if robust_cov > noisy_robust_cov:
        reasons.append(f"robust CoV {robust_cov:.0%} (> {noisy_robust_cov:.0%})")
    stable = n >= min_samples and max(p50 - ci_low, ci_high - p50) <= stable_rel_half_width * p50
    return Summary(
        n=n,
        p50=p50,
        p90=percentile(samples, 90.0),
        p99=percentile(samples, 99.0),
        mean=mean,
        std=std,
        minimum=min(samples),
        maximum=max(samples),
        iqr=iqr,
        mad=spread_mad,
        ci_low=ci_low,
        ci_high=ci_high,
        cov=cov,
        robust_cov=robust_cov,
        rel_ci_width=rel_width,
        stable=stable,
        noisy=bool(reasons),
        noise_reason="; ".join(reasons),
    )


def is_stable(samples: Sequence[float], *, min_samples: int = MIN_SAMPLES,
              rel_half_width: float = STABLE_REL_HALF_WIDTH, confidence: float = 0.95) -> bool:
    """Whether the median is pinned down: enough samples and a 95% CI within +-rel_half_width of it.

    The cheap check the harness runs after every round (a full `summarize` of ~10^5 samples per runtime
    per round would eat the budget)."""
    if len(samples) < min_samples:
        return False
    centre = median(samples)
    low, high = median_ci(samples, confidence)
    return max(centre - low, high - centre) <= rel_half_width * centre


def keep_going(
    stable: Iterable[bool],
    *,
    elapsed_s: float,
    budget_s: float,
    rounds_done: int,
    min_rounds: int = 3,
    max_rounds: int = MAX_ROUNDS,
) -> bool:
    """Whether the harness should run another interleaved round.

    Stop when the time budget is spent or the round cap is hit; otherwise go on until at least `min_rounds`
    rounds ran and every runtime's median is stable (`stable`: one verdict per runtime).
    """
    if elapsed_s >= budget_s or rounds_done >= max_rounds:
        return False
    if rounds_done < min_rounds:
        return True
    return not all(stable)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def overlaps(a: Summary, b: Summary) -> bool:
    """Whether the two medians' confidence intervals overlap (the difference is within the noise)."""
    return a.ci_low <= b.ci_high and b.ci_low <= a.ci_high
