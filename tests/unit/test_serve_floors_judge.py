"""The serving floors `make bench` judges: each verdict can fail, and a peer not measured is not judged."""

from __future__ import annotations

from typing import Any

from tests.benchmarks.serve_peers import judge_floors


def row(server: str, model: str, p50: float = 1.0, rps: float = 1.0, cpu: float = 1.0) -> dict[str, Any]:
    return {"server": server, "model": model, "p50_ms": p50, "rps": rps, "cpu_ms_per_request": cpu}


def test_each_floor_is_met_or_missed_by_the_ratio() -> None:
    good = [row("tfsmith REST", "mobilenet_v2", p50=10), row("MLServer v2 JSON", "mobilenet_v2", p50=24),
            row("tfsmith REST", "digits", rps=4000, cpu=0.25), row("MLServer v2 JSON", "digits", rps=1700),
            row("bare Starlette", "digits", cpu=0.7), row("tfsmith v2 binary", "mobilenet_v2", p50=5.5)]
    assert [met for _, met, _ in judge_floors(good)] == [True, True, True, True]
    bad = [row("tfsmith REST", "mobilenet_v2", p50=17), row("MLServer v2 JSON", "mobilenet_v2", p50=24),
           row("tfsmith REST", "digits", rps=3000, cpu=1.0), row("MLServer v2 JSON", "digits", rps=1700),
           row("bare Starlette", "digits", cpu=0.7), row("tfsmith v2 binary", "mobilenet_v2", p50=8)]
    verdicts = judge_floors(bad)
    assert [met for _, met, _ in verdicts] == [False, False, False, False]
    assert "2.12x" in verdicts[3][2]
    assert "0.71x" in verdicts[0][2]


def test_without_mlserver_its_floors_are_not_judged() -> None:
    rows = [row("tfsmith REST", "digits", cpu=0.25), row("bare Starlette", "digits", cpu=0.7),
            row("tfsmith REST", "mobilenet_v2")]
    assert [met for _, met, _ in judge_floors(rows)] == [None, None, True, None]
