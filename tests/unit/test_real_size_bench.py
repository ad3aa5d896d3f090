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


def _latency(p50: float):  # noqa: ANN202 - a Summary at one median
    from builder.measure.stats import Summary

    return Summary(n=30, p50=p50, p90=p50, p99=p50, mean=p50, std=0.0, minimum=p50, maximum=p50, iqr=0.0, mad=0.0,
                   ci_low=p50, ci_high=p50, cov=0.0, robust_cov=0.0, rel_ci_width=0.0, stable=True, noisy=False,
                   noise_reason="")


def test_the_zoo_compares_the_choice_with_the_fastest_runtime_bench_ran(tmp_path: Path) -> None:
    import json

    from builder.bench.results import BenchRun, Recommendation, RuntimeResult
    from tests.benchmarks.real_size import Row, read_bench, table

    results = (RuntimeResult("tensorflow", "baseline", "saved_model", True, latency=_latency(0.145)),
               RuntimeResult("litert", "tfsmith", "model_dynamic.tflite", True, latency=_latency(0.044)),
               RuntimeResult("openvino", "peer", "openvino_int8.xml", True, latency=_latency(0.040)),
               RuntimeResult("onnxruntime", "peer", "model.onnx", False, reason="not installed"))
    run = BenchRun("out", True, 2, (1,), results, Recommendation("openvino", "openvino_int8.xml", "fastest"),
                   shipped="litert")
    (tmp_path / "bench.json").write_text(json.dumps(run.to_dict()))
    found = read_bench(tmp_path / "bench.json")
    assert found["bench_fastest"] == "openvino_int8.xml on openvino"  # a runtime that did not run is not fastest
    assert abs(found["bench_fastest_p50_us"] - 40_000) < 1e-6 and abs(found["bench_chosen_p50_us"] - 44_000) < 1e-6
    row = Row("bert_base", 109_100_000, 436_000_000, 8 * 2**30, "cgroup limit", 415.0, 4_990_000_000, True, "",
              chosen="model_dynamic.tflite", chosen_runtime="litert", **found)
    assert "| 1.10x of openvino_int8.xml on openvino |" in table([row])
    missing = read_bench(tmp_path / "bench.json") | {"bench_chosen_p50_us": None}
    assert "| - |" in table([Row("m", 1, 4, None, "machine", 1.0, 1, True, "", **missing)])
