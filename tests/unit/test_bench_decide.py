"""The one rule for "faster" (`builder.measure.decide`), shared by bench, optimize and `--runtime auto`."""

from __future__ import annotations

import itertools

from builder.measure.decide import Timed, choose_fastest_runtime, faster_beyond_noise, pick, within_noise


def test_faster_only_when_the_intervals_do_not_overlap() -> None:
    a, b = Timed("a", 1.0, 0.99, 1.01), Timed("b", 1.05, 1.04, 1.06)
    assert faster_beyond_noise(a, b) and not faster_beyond_noise(b, a) and not within_noise(a, b)
    wide = Timed("b", 1.05, 0.95, 1.2)
    assert not faster_beyond_noise(a, wide) and within_noise(a, wide)


def test_ties_break_by_file_size_then_runtime_then_preference_then_name_in_any_order() -> None:
    items = [Timed("z-small", 1.00, 0.9, 1.1, size_bytes=100, runtime="tensorflow"),
             Timed("a-big", 0.98, 0.9, 1.1, size_bytes=400, runtime="litert"),
             Timed("m-small", 1.01, 0.9, 1.1, size_bytes=100, runtime="litert", preference=1),
             Timed("b-small", 1.02, 0.9, 1.1, size_bytes=100, runtime="litert")]
    assert {pick(list(order)).name for order in itertools.permutations(items)} == {"b-small"}
    from builder.model import registry

    ranks = [registry.rank(name) for name in registry.NAMES]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)  # one tie order, the registry's
    assert registry.rank("litert") < registry.rank("tensorflow") < registry.rank("no-such-runtime")
    exact = [r.rank for r in registry.RUNTIMES if not r.approximate and r.engine == "openvino"]
    assert all(e < r.rank for e in exact for r in registry.RUNTIMES if r.approximate and r.engine == "openvino")


def test_the_fastest_beyond_noise_wins_whatever_its_size() -> None:
    items = [Timed("small", 1.2, 1.19, 1.21, size_bytes=100), Timed("big", 1.0, 0.99, 1.01, size_bytes=900)]
    assert pick(items).name == "big"


def test_the_runtime_reason_names_every_timing_and_its_interval() -> None:
    tight = [1e-3 * (1 + 0.0001 * i) for i in range(101)]
    name, why = choose_fastest_runtime({"litert": tight, "openvino": [2 * t for t in tight]},
                                       {"openvino-nncf": "no calibration samples"})
    assert name == "litert" and "faster beyond noise than openvino (2.00x)" in why
    assert "95% CI" in why and "openvino-nncf unavailable (no calibration samples)" in why
