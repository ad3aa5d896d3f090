"""The real-size benchmark's reading of GNU `time -v` (a recorded report of `tfsmith optimize` on a 4-layer
BERT) and its cgroup wrapping: what the table's wall time, peak RSS and failures come from."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.real_size import limited, parse_time_v

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "gnu_time" / "optimize_bert_small.txt"


def test_wall_time_and_peak_rss_are_read_from_gnu_time() -> None:
    timed = parse_time_v(RECORDED.read_text(), 0)
    assert timed.wall_s == 6 * 60 + 51.56
    assert timed.peak_rss_bytes == 7653560 * 1024
    assert (timed.exit_status, timed.killed) == (0, "")


def test_a_killed_optimize_is_reported_as_such() -> None:
    text = "\tCommand terminated by signal 9\n" + RECORDED.read_text()
    timed = parse_time_v(text, -9)
    assert timed.killed.startswith("signal 9") and "OOM" in timed.killed


def test_a_limit_wraps_the_command_in_a_memory_cgroup() -> None:
    assert limited(["tfsmith", "optimize"], None) == ["tfsmith", "optimize"]
    wrapped = limited(["tfsmith", "optimize"], "9G")
    assert wrapped[:2] == ["bash", "-c"] and wrapped[-3:] == [str(9 * 2**30), "tfsmith", "optimize"]
    assert "memory.max" in wrapped[2] and "memory.limit_in_bytes" in wrapped[2] and 'exec "$@"' in wrapped[2]
