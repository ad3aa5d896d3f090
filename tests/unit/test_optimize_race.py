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
