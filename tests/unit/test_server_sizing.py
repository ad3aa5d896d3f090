"""The server's self-sizing decision (`builder.server.sizing.choose`) and the cores it reads, on measured
figures given as data: what a many-core host, a quota-limited container and a tiny or large model get."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.measure.cores import Cores, cgroup_cpu_limit
from builder.measure.stats import summarize
from builder.server.sizing import Asked, Measured, choose, choose_batching, choose_threads, pin, thread_counts


def timed(ms: float, spread: float = 0.01, n: int = 60) -> object:
    """A summary of `n` calls around `ms` milliseconds (a narrow, stable spread)."""
    return summarize([ms / 1e3 * (1 + spread * ((i % 7) - 3) / 3) for i in range(n)])


def measured(by_threads: dict[int, float], batched_ms: float | None = None, batch: int = 8) -> Measured:
    return Measured({t: timed(ms) for t, ms in by_threads.items()}, batch if batched_ms else 0,  # type: ignore[misc]
                    timed(batched_ms) if batched_ms else None)  # type: ignore[arg-type]


def test_thread_counts_are_powers_of_two_and_the_cores() -> None:
    assert thread_counts(1) == [1]
    assert thread_counts(2) == [1, 2]
    assert thread_counts(16) == [1, 2, 4, 8, 16]
    assert thread_counts(12) == [1, 2, 4, 8, 12]


def test_cores_are_the_affinity_cut_by_the_quota_rounded_down() -> None:
    assert Cores(tuple(range(16))).count == 16
    assert Cores(tuple(range(16)), quota=4.0).count == 4
    assert Cores(tuple(range(16)), quota=2.5).count == 2  # a third busy thread would wait for time slices
    assert Cores(tuple(range(2)), quota=0.5).count == 1
    assert Cores((0, 1, 2, 3, 8)).describe() == "5 cores (affinity 0-3,8, no CPU quota)"


def test_a_cgroup_v2_quota_is_read_from_cpu_max(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/pod\n")
    (tmp_path / "sys/fs/cgroup/pod").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/pod/cpu.max").write_text("400000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 4.0


def test_throughput_takes_the_fewest_core_seconds_per_call() -> None:
    # MobileNetV2 on the 16-core Xeon: 6.9 ms at 1 thread, 1.63 ms at 8 (13 core-ms): one thread each wins
    threads, why = choose_threads(measured({1: 6.9, 2: 3.8, 4: 2.3, 8: 1.63}), "throughput", 16)
    assert threads == 1 and "core-seconds" in why and "6.9 ms at 1" in why


def test_latency_takes_the_fewest_threads_no_slower_beyond_noise_than_the_fastest() -> None:
    assert choose_threads(measured({1: 6.9, 2: 3.8, 4: 2.3, 8: 1.63}), "latency", 16)[0] == 8
    assert choose_threads(measured({1: 6.9, 2: 3.8, 4: 2.3, 8: 2.3}), "latency", 16)[0] == 4  # 8 buys nothing


def test_superlinear_threads_win_throughput_too() -> None:
    assert choose_threads(measured({1: 10.0, 2: 4.0}), "throughput", 2)[0] == 2


def test_many_cores_get_one_single_interpreter_process_each() -> None:
    sizing = choose(Cores(tuple(range(16))), measured({1: 6.9, 2: 3.8, 4: 2.3, 8: 1.63, 16: 1.5}), Asked())
    assert (sizing.processes, sizing.interpreters, sizing.threads) == (16, 1, 1)
    assert sizing.busy_threads == 16  # never more busy threads than cores
    assert "16 model processes × 1 interpreter × 1 thread" in sizing.describe()


def test_one_core_keeps_the_model_in_the_front_s_process() -> None:
    sizing = choose(Cores((0, 1, 2, 3), quota=1.0), measured({1: 6.9}), Asked())
    assert (sizing.processes, sizing.interpreters, sizing.threads) == (0, 1, 1)
    assert "the front's own process" in sizing.describe()


def test_latency_on_many_cores_gives_fewer_wider_processes() -> None:
    sizing = choose(Cores(tuple(range(16))), measured({1: 6.9, 2: 3.8, 4: 2.3, 8: 1.63, 16: 1.7}),
                    Asked(preference="latency"))
    assert sizing.threads == 8 and sizing.processes == 2 and sizing.busy_threads == 16


def test_what_the_user_gave_is_kept() -> None:
    sizing = choose(Cores(tuple(range(8))), measured({1: 6.9, 2: 3.8}), Asked(processes=3, threads=2))
    assert (sizing.processes, sizing.threads, sizing.interpreters) == (3, 2, 1)
    assert any("as asked" in line for line in sizing.why)
    assert choose(Cores(tuple(range(8))), None, Asked(processes=1)).processes == 0  # one: in the front


def test_a_model_that_cannot_be_timed_is_sized_by_the_cores() -> None:
    sizing = choose(Cores(tuple(range(4))), None, Asked())
    assert (sizing.processes, sizing.threads, sizing.max_batch) == (4, 1, 1)


def test_natural_batching_only_where_a_batch_is_cheaper_per_example_beyond_noise() -> None:
    assert choose_batching(measured({1: 6.9}, batched_ms=8 * 4.0))[0] == 8  # 4 ms an example against 6.9
    assert choose_batching(measured({1: 6.9}, batched_ms=8 * 7.2))[0] == 1  # no cheaper: off
    assert choose_batching(measured({1: 6.9}))[0] == 1  # a fixed batch: not measured, off


def test_a_model_faster_than_a_thread_hand_off_runs_inline_without_batching() -> None:
    max_batch, why = choose_batching(measured({1: 0.03}, batched_ms=8 * 0.01))
    assert max_batch == 1 and "event loop" in why


def test_tensorflow_takes_the_cores_in_one_process() -> None:
    sizing = choose(Cores(tuple(range(8))), None, Asked(), tensorflow=True)
    assert (sizing.processes, sizing.threads) == (0, 8)


@pytest.mark.parametrize(("ids", "processes", "each", "expected"), [
    ((0, 1, 2, 3), 2, 2, ((0, 1), (2, 3))),
    ((4, 5, 6, 7, 8, 9), 3, 1, ((4,), (5,), (6,))),
    ((0, 1), 3, 1, None),
])
def test_pinning_gives_each_process_cores_of_its_own(ids: tuple[int, ...], processes: int, each: int,
                                                     expected: object) -> None:
    assert pin(ids, processes, each) == expected


def test_pinning_is_asked_for_and_said() -> None:
    sizing = choose(Cores((0, 1, 2, 3)), measured({1: 5.0, 2: 2.8, 4: 1.6}), Asked(pin=True))
    assert sizing.cpus == ((0,), (1,), (2,), (3,)) and "pinned" in sizing.describe()


def test_a_model_faster_than_a_hand_over_stays_in_the_front_s_process_on_few_cores() -> None:
    # 35 us a call: one process serves ~1e6 / (130 + 35) = 6,061/s; model processes on 2 cores ~2e6 / 495 = 4,040
    sizing = choose(Cores((0, 1)), measured({1: 0.035, 2: 0.03}), Asked())
    assert (sizing.processes, sizing.interpreters) == (0, 2)
    assert "shorter than handing" in " ".join(sizing.why) and "6,061 requests/s against ~4,040" in " ".join(sizing.why)


def test_a_model_faster_than_a_hand_over_goes_apart_where_the_cores_outrun_one_process() -> None:
    # on 12 cores model processes serve up to what the front hands over, ~1e6 / 60 = 16,667/s, against 6,061 in
    # one process; the front is the limit, and half the cores' processes measured the most through it
    sizing = choose(Cores(tuple(range(12))), measured({1: 0.035, 2: 0.03}), Asked())
    assert (sizing.processes, sizing.interpreters, sizing.threads) == (6, 1, 1)
    why = " ".join(sizing.why)
    assert "~6,061 requests/s" in why and "~16,667" in why and "half the 12 that fit" in why
    assert choose(Cores(tuple(range(5))), measured({1: 0.035}), Asked()).processes == 2


def test_for_latency_a_fast_model_stays_in_the_front_s_process_on_any_cores() -> None:
    sizing = choose(Cores(tuple(range(12))), measured({1: 0.035, 2: 0.03}), Asked(preference="latency"))
    assert (sizing.processes, sizing.interpreters) == (0, 2) and "for latency" in " ".join(sizing.why)
    slow = choose(Cores(tuple(range(12))), measured({1: 6.9, 2: 3.8}), Asked(preference="latency"))
    assert slow.processes > 0  # a hand-over is small beside a 7 ms call


@pytest.mark.parametrize("cores", [2, 3, 4, 8, 16, 64])
def test_a_fast_model_goes_apart_only_where_that_serves_more(cores: int) -> None:
    from builder.server.sizing import apart_per_s, in_process_per_s

    sizing = choose(Cores(tuple(range(cores))), measured({1: 0.035}), Asked())
    apart = apart_per_s(35.0, cores) > in_process_per_s(35.0, cores, min(cores, 2))
    assert (sizing.processes > 0) == apart
    # 3 cores: 3e6 / 495 = 6,061/s apart, the same as one process serves, and a tie stays in one process
    assert apart == (cores >= 4)


def test_no_more_processes_than_the_front_can_feed() -> None:
    # 0.5 ms a call: the front hands over a request in ~60 us, so about (500 + 150) / 60 = 11 processes keep busy
    sizing = choose(Cores(tuple(range(64))), measured({1: 0.5, 2: 0.45}), Asked())
    assert sizing.processes == 11 and "would only wait" in " ".join(sizing.why)
    large = choose(Cores(tuple(range(64))), measured({1: 6.9, 2: 3.8}), Asked())
    assert large.processes == 64  # a 7 ms call: the front feeds far more than 64
