"""The bench harness's statistics: percentiles, the median's CI, the noisy flag, repeat adaptation, ratios."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.measure import stats

floats = st.floats(min_value=1e-6, max_value=10.0, allow_nan=False, allow_infinity=False)


@given(st.lists(floats, min_size=1, max_size=200), st.floats(min_value=0, max_value=100))
@settings(max_examples=200, deadline=None)
def test_percentile_matches_numpy_linear(samples: list[float], q: float) -> None:
    assert stats.percentile(samples, q) == pytest.approx(float(np.percentile(samples, q)), rel=1e-12, abs=1e-15)


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


@given(st.lists(floats, min_size=1, max_size=300))
@settings(max_examples=100, deadline=None)
def test_median_ci_brackets_the_median(samples: list[float]) -> None:
    low, high = stats.median_ci(samples)
    assert low <= stats.median(samples) <= high
    assert min(samples) <= low and high <= max(samples)


def test_median_ci_known_order_statistics() -> None:
    # n=20: P(Binom(20, 1/2) <= 5) = 0.0207 <= 0.025 < P(<= 6) -> ranks 6 and 15 (textbook table value).
    samples = [float(i) for i in range(1, 21)]
    assert stats.median_ci(samples) == (6.0, 15.0)
    # n=5 is too few for a 95% interval: the whole range is returned.
    assert stats.median_ci([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0)


def test_median_ci_covers_the_true_median_about_95_percent() -> None:
    rng = random.Random(7)
    trials, covered = 400, 0
    true_median = math.log(2)  # exponential(1)
    for _ in range(trials):
        low, high = stats.median_ci([rng.expovariate(1.0) for _ in range(61)])
        covered += low <= true_median <= high
    assert 0.92 <= covered / trials <= 0.995


def test_median_ci_normal_approximation_agrees_with_exact_for_large_n() -> None:
    rng = random.Random(1)
    samples = [rng.gauss(1.0, 0.1) for _ in range(1001)]
    exact_like = stats.median_ci(samples[:1000])
    approx = stats.median_ci(samples)
    assert approx[0] == pytest.approx(exact_like[0], rel=0.01)
    assert approx[1] == pytest.approx(exact_like[1], rel=0.01)


def test_ci_narrows_with_more_samples() -> None:
    rng = random.Random(3)
    few = [rng.lognormvariate(0, 0.3) for _ in range(30)]
    many = few + [rng.lognormvariate(0, 0.3) for _ in range(3000)]
    assert stats.summarize(many).rel_ci_width < stats.summarize(few).rel_ci_width


def test_summary_fields_match_numpy() -> None:
    rng = np.random.default_rng(0)
    samples = list(rng.lognormal(-7, 0.2, 500))
    summary = stats.summarize(samples)
    assert summary.n == 500
    assert summary.p50 == pytest.approx(np.median(samples))
    assert summary.p90 == pytest.approx(np.percentile(samples, 90))
    assert summary.p99 == pytest.approx(np.percentile(samples, 99))
    assert summary.iqr == pytest.approx(np.percentile(samples, 75) - np.percentile(samples, 25))
    assert summary.mad == pytest.approx(np.median(np.abs(np.array(samples) - np.median(samples))))
    assert summary.std == pytest.approx(np.std(samples, ddof=1))


def test_tight_samples_are_stable_and_not_noisy() -> None:
    rng = random.Random(5)
    summary = stats.summarize([1e-3 * (1 + rng.uniform(-0.01, 0.01)) for _ in range(400)])
    assert summary.stable and not summary.noisy and summary.noise_reason == ""


def test_wide_samples_are_flagged_noisy_with_a_reason() -> None:
    rng = random.Random(5)
    summary = stats.summarize([rng.choice([1e-3, 3e-3]) * rng.uniform(0.5, 1.5) for _ in range(40)])
    assert summary.noisy and not summary.stable
    assert "CI" in summary.noise_reason or "CoV" in summary.noise_reason


def test_too_few_samples_are_noisy_and_never_stable() -> None:
    summary = stats.summarize([1.0] * 5)
    assert summary.noisy and not summary.stable and "only 5 samples" in summary.noise_reason


def test_thresholds_are_parameters() -> None:
    rng = random.Random(11)
    samples = [rng.uniform(0.9, 1.1) for _ in range(100)]
    assert stats.summarize(samples, noisy_robust_cov=0.01).noisy
    assert not stats.summarize(samples, noisy_robust_cov=1.0, noisy_rel_ci_width=1.0).noisy


def test_is_stable_agrees_with_the_summary_verdict() -> None:
    rng = random.Random(9)
    for spread, n in ((0.001, 400), (0.5, 40), (0.0, 5), (0.05, 3000)):
        samples = [1.0 + rng.uniform(-spread, spread) for _ in range(n)]
        assert stats.is_stable(samples) == stats.summarize(samples).stable


def test_keep_going_until_min_rounds_then_until_stable_within_budget() -> None:
    assert stats.keep_going([True], elapsed_s=0, budget_s=10, rounds_done=1, min_rounds=3)
    assert not stats.keep_going([True], elapsed_s=0, budget_s=10, rounds_done=3, min_rounds=3)
    assert stats.keep_going([True, False], elapsed_s=1, budget_s=10, rounds_done=10)
    assert not stats.keep_going([True, False], elapsed_s=10, budget_s=10, rounds_done=10)
    assert not stats.keep_going([False], elapsed_s=0, budget_s=10, rounds_done=5, max_rounds=5)


def test_ratio_and_overlap() -> None:
    assert stats.ratio(1.0, 4.0) == 0.25
    assert stats.ratio(None, 4.0) is None and stats.ratio(1.0, 0.0) is None
    a = stats.summarize([1.0 + 0.001 * i for i in range(50)])
    b = stats.summarize([1.005 + 0.001 * i for i in range(50)])
    c = stats.summarize([2.0 + 0.001 * i for i in range(50)])
    assert stats.overlaps(a, b) and not stats.overlaps(a, c)
