"""How optimize enters its candidates in the timing race and reports it (pure: no runtimes, no clocks)."""

from __future__ import annotations

from builder.measure.loop import Stop
from builder.measure.race import BUDGET, SETTLED, slower
from builder.optimize.candidates import dropped, entrant, key, race_line
from builder.report import ArtifactResult, Latency, ModelContract, TensorSpec

CONTRACT = ModelContract((TensorSpec("x", "float32", (None, 4)),), (), "serving_default")


def artifact(path: str, accepted: bool = True, size: int = 100) -> ArtifactResult:
    return ArtifactResult(path=path, format="tflite_int8", runtime="litert", size_bytes=size, gzip_bytes=size,
                          threads=2, latency_us=Latency(0.0, 0.0, 0), throughput={}, inputs=(), outputs=(),
                          metrics=(), contract_kept=True, accepted=accepted, reason="")


def test_an_entrant_carries_selects_tie_order_and_whether_it_can_be_chosen() -> None:
    saved = artifact("saved_model", size=900)
    plain = entrant(saved, "tensorflow", "serving_default", CONTRACT, rejected=False)
    xla = entrant(saved, "tensorflow", "serving_xla", CONTRACT, rejected=False)
    assert plain.name == key("saved_model", "tensorflow", "serving_default") and plain.size_bytes == 900
    assert (plain.preference, xla.preference) == (0, 1)  # the contract's own signature first, as select breaks ties
    assert plain.eligible and xla.eligible
    assert not entrant(artifact("model.tflite", accepted=False), "litert", "", CONTRACT, rejected=False).eligible
    assert not entrant(artifact("model.tflite"), "openvino-bf16", "", CONTRACT, rejected=True).eligible  # gate
    named = artifact("model_int8.tflite")
    assert entrant(named, "litert", "", CONTRACT, False, only="model_int8.tflite").eligible
    assert not entrant(artifact("model_fp32.tflite"), "litert", "", CONTRACT, False, only="model_int8.tflite").eligible


def test_the_race_line_says_how_long_and_why_each_stopped() -> None:
    stops = {"a": Stop(900, 1.5, SETTLED), "b": Stop(40, 0.2, slower("a", 40)), "c": Stop(35, 0.2, slower("a", 35)),
             "d": Stop(3, 0.1, "failed: RuntimeError")}
    line = race_line(stops, 45.0)
    assert line.startswith("timing: 4 candidates raced in one interleaved loop for 2.0 s of calls (at most 45 s; "
                           "the longest timed 1.5 s)")
    assert "2 stopped once slower than the best beyond noise, 1 settled, 1 failed while timed" in line
    assert "1 at the budget" in race_line({"a": Stop(10, 45.0, BUDGET)}, 45.0)
    assert dropped(stops["b"]) and not dropped(stops["a"]) and not dropped(None)


def _judging(latencies: dict[str, Latency], verdicts: dict[str, bool], cross: list[tuple[str, str, str]]
             ) -> tuple[dict[tuple[str, str, str], str], list[str]]:
    """judge_contenders over made-up latencies: (errors, the runners the gate was asked about, in order)."""
    import contextlib

    from builder.measure.race import Entrant
    from builder.optimize.candidates import judge_contenders

    asked: list[str] = []
    entrants = {k: Entrant(k, 100, k.split("@")[1].split("#")[0]) for k in latencies}
    errors: dict[tuple[str, str, str], str] = {}

    def judge(runner: str) -> tuple[bool, str]:
        asked.append(runner)
        return verdicts[runner], "" if verdicts[runner] else "acc 0.5000 < 0.9700"

    judge_contenders(cross, latencies, entrants, errors, {k: k for k in latencies}, judge, str,
                     lambda _: contextlib.nullcontext())
    return errors, asked


def test_runtimes_other_than_a_files_own_are_judged_after_the_race_only_where_they_could_be_chosen() -> None:
    own = key("model_int8.tflite", "litert", "")
    fast = ("model_fp32.tflite", "openvino", "")
    slow = ("model_int8.tflite", "openvino", "")
    latencies = {own: Latency(20.0, 30.0, 100, 19.0, 21.0),
                 key(*fast): Latency(10.0, 15.0, 100, 9.5, 10.5),   # faster than the file's own runtime
                 key(*slow): Latency(80.0, 90.0, 100, 78.0, 82.0)}  # slower than a passing one beyond noise
    errors, asked = _judging(latencies, {key(*fast): True, key(*slow): True}, [fast, slow])
    assert asked == [key(*fast)]  # the slow one could not be chosen whatever the gate said
    assert errors == {slow: f"slower than {key(*fast)} beyond noise, so not judged"}

    errors, asked = _judging(latencies, {key(*fast): False, key(*slow): True}, [fast, slow])
    assert asked == [key(*fast)] and errors[fast].startswith("fails the gate on this runtime (acc 0.5000")
    assert errors[slow] == f"slower than {own} beyond noise, so not judged"  # measured against one that passes


def test_a_contender_within_noise_of_the_best_passing_one_is_judged() -> None:
    own = key("model_int8.tflite", "litert", "")
    near = ("model_dynamic.tflite", "openvino", "")
    latencies = {own: Latency(20.0, 30.0, 100, 18.0, 22.0), key(*near): Latency(21.0, 30.0, 100, 19.0, 23.0)}
    errors, asked = _judging(latencies, {key(*near): True}, [near])
    assert asked == [key(*near)] and errors == {}  # it may win the tie (by size, runtime): it must pass the gate
