"""serve_scaling's floors judged on results given as data, and how it deals a load to its load processes (the
benchmark itself runs under `make bench`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.benchmarks.serve_scaling import Target, _spans, auto_alternatives, buckets_for, judge


def run(layout: str, protocol: str, pool: int, rps: float, cpu: list[float] | None = None) -> dict[str, Any]:
    cpu = cpu if cpu is not None else []
    balance = max(cpu) / min(cpu) if len(cpu) > 1 else None
    return {"layout": layout, "protocol": protocol, "connections": pool, "streams": 1, "rps": rps,
            "cpu_balance": balance}


def results(cores: int, served: float, balanced: float, cpu: list[float], alone: float | None = None,
            auto: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    runs = []
    for protocol in ("rest", "v2", "grpc"):
        for pool in (4, 16):
            runs.append(run(f"--processes {cores}", protocol, pool, served, cpu))
            runs.append(run(f"{cores} one-process servers", protocol, pool, balanced))
    return {"cores": cores, "runs": runs, "costs": {}, "model_alone_per_s": alone, "auto": auto or []}


def verdicts(found: list[tuple[str, bool | None, str]], part: str) -> list[bool | None]:
    return [met for goal, met, _ in found if part in goal]


def test_balance_and_throughput_floors_follow_the_ratios() -> None:
    found = judge(results(2, served=95.0, balanced=100.0, cpu=[5.0, 4.5]))
    assert verdicts(found, "within 1.25x") == [True] * 6
    assert verdicts(found, "balanced one-process servers") == [True] * 6
    missed = judge(results(2, served=85.0, balanced=100.0, cpu=[5.0, 3.0]))
    assert verdicts(missed, "within 1.25x") == [False] * 6  # 1.67x
    assert verdicts(missed, "balanced one-process servers") == [False] * 6  # 0.85x


def test_the_many_core_floors_are_judged_only_on_eight_cores_or_more() -> None:
    auto = [{"model": "digits", "label": "auto", "rps": 17_000.0}, {"model": "digits", "label": "x", "rps": 15_000.0}]
    assert not verdicts(judge(results(2, 95.0, 100.0, [1.0, 1.0], alone=100.0, auto=auto)), "the model alone")
    many = judge(results(12, 900.0, 950.0, [1.0] * 12, alone=1_000.0, auto=auto))
    assert verdicts(many, "the model alone") == [True, True]  # 0.9x
    assert verdicts(many, "digits: --processes auto") == [True]


@pytest.mark.parametrize(("auto_rps", "best", "met"), [(898.0, 957.0, True), (6_199.0, 17_845.0, False)])
def test_auto_is_held_within_ten_percent_of_the_best_configuration(auto_rps: float, best: float, met: bool) -> None:
    auto = [{"model": "mobilenet_v2", "label": "auto", "rps": auto_rps},
            {"model": "mobilenet_v2", "label": "6 processes × 2 threads", "rps": best}]
    found = judge(results(12, 900.0, 950.0, [1.0] * 12, alone=1_000.0, auto=auto))
    assert verdicts(found, "mobilenet_v2: --processes auto") == [met]


def test_the_alternatives_cover_fewer_single_thread_processes_and_the_spans_read_as_ranges() -> None:
    labels = [label for label, _ in auto_alternatives(12)]
    assert labels[0] == "in-process" and "6 processes × 2 threads, pinned" in labels
    assert [x for x in labels if x.endswith("× 1 thread")] == [
        "12 processes × 1 thread", "6 processes × 1 thread", "4 processes × 1 thread", "3 processes × 1 thread"]
    assert [label for label, _ in auto_alternatives(2)] == ["in-process", "2 processes × 1 thread",
                                                           "2 processes × 1 thread, pinned"]
    assert _spans([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"


def test_a_pool_is_split_between_load_processes_and_one_channel_is_not() -> None:
    one = Target("http://127.0.0.1:1", 2)
    assert buckets_for([(one, 16, 1)], 4) == [[(one, 4, 1)]] * 4
    assert buckets_for([(one, 6, 1)], 4) == [[(one, 2, 1)], [(one, 2, 1)], [(one, 1, 1)], [(one, 1, 1)]]
    assert buckets_for([(one, 1, 16)], 4) == [[(one, 1, 16)]]  # one channel carrying 16 calls
    assert buckets_for([(one, 2, 1)], 4) == [[(one, 1, 1)], [(one, 1, 1)]]
    assert buckets_for([(one, 16, 1)], 1) == [[(one, 16, 1)]]


def test_servers_are_dealt_round_robin_when_there_are_more_than_processes() -> None:
    servers = [Target(f"http://127.0.0.1:{i}", i) for i in range(12)]
    buckets = buckets_for([(t, 1, 1) for t in servers], 4)
    assert [len(b) for b in buckets] == [3, 3, 3, 3]
    assert sorted(t.grpc_port for b in buckets for t, _, _ in b) == list(range(12))


def test_a_cost_goal_names_the_busy_figure_and_the_front_alones_floor_beside_it() -> None:
    found = judge({"cores": 2, "runs": [], "auto": [],
                   "costs": {"digits grpc in-process": {"beyond_us": 548.0, "server_us": 590.0, "model_us": 42.0,
                                                        "busy": {"beyond_us": 433.0}},
                             "digits v2 in-process": {"beyond_us": 140.0, "server_us": 180.0, "model_us": 40.0}},
                   "front_alone": {"digits grpc": {"at_once_us": 425.0, "after_gap_us": 475.0, "gap_us": 42.0}}})
    grpc = next(v for v in found if v[0].startswith("digits grpc"))
    assert grpc[1] is False and grpc[0] == "digits grpc server CPU beyond the model, in-process <= 300 us"
    assert "busy 433 us" in grpc[2]
    assert "the front alone, a fixed answer: 425 us at once, 475 us after 42 us idle" in grpc[2]
    v2 = next(v for v in found if v[0].startswith("digits v2"))
    assert v2[1] is True and v2[2] == "140 us (server 180, model 40)"
