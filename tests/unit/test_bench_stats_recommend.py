"""The recommendation, the report and the pure helpers of `tfsmith bench`, on a recorded bench table.

tests/fixtures/bench/digits_cnn_bench.json is a real bench run of the example digits CNN on this 2-core host
(13 runtimes, 2 threads); the tests re-derive the decision from its measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.bench import images, report
from builder.bench.recommend import choose_tflite_runtime, recommend
from builder.bench.results import ROLE_TFSMITH, BenchRun, RuntimeResult
from builder.measure.stats import summarize
from builder.commands.bench import parse_batches, parse_runtimes
from builder.errors import InputError


@pytest.fixture()
def recorded(fixtures_dir: Path) -> BenchRun:
    return BenchRun.from_dict(json.loads((fixtures_dir / "bench" / "digits_cnn_bench.json").read_text()))


def _by_name(results: tuple[RuntimeResult, ...]) -> dict[str, RuntimeResult]:
    return {r.name: r for r in results}


def test_recorded_run_round_trips(recorded: BenchRun) -> None:
    again = BenchRun.from_dict(json.loads(json.dumps(recorded.to_dict())))
    assert again == recorded


def test_recommends_the_fastest_tflite_runtime_that_keeps_quality(recorded: BenchRun) -> None:
    results, rec = recommend(recorded.results, trained=True)
    tfsmith = [r for r in results if r.role == ROLE_TFSMITH and r.ok]
    fastest = min(tfsmith, key=lambda r: r.p50)  # every tflite variant kept accuracy in this recording
    assert rec.runtime == fastest.name
    assert [r.name for r in results if r.recommended] == [fastest.name]
    peers = [r for r in results if r.role != ROLE_TFSMITH and r.ok]
    best_peer = min(peers, key=lambda r: r.p50)
    assert rec.fastest_peer == best_peer.name
    assert rec.ratio_vs_fastest_peer == pytest.approx(fastest.p50 / best_peer.p50)
    baseline = _by_name(results)["savedmodel"]
    assert rec.speedup_vs_baseline == pytest.approx(baseline.p50 / fastest.p50)
    assert _by_name(results)["savedmodel"].ratio_vs_baseline == pytest.approx(1.0)
    assert rec.within_noise_of_peer or rec.ratio_vs_fastest_peer < 1


def test_a_variant_that_loses_accuracy_is_rejected_with_its_reason(recorded: BenchRun) -> None:
    _, first = recommend(recorded.results, trained=True)
    damaged = tuple(r.with_(accuracy=r.accuracy - 0.05) if r.name == first.runtime else r for r in recorded.results)
    _, rec = recommend(damaged, trained=True)
    assert rec.runtime != first.runtime and rec.runtime is not None
    assert f"rejected for quality: {first.runtime}" in rec.reason


def test_random_weights_are_judged_on_latency_only(recorded: BenchRun) -> None:
    damaged = tuple(r.with_(accuracy=0.1, agreement=0.1) if r.role == ROLE_TFSMITH else r
                    for r in recorded.results)
    _, trained = recommend(damaged, trained=True)
    assert trained.runtime is None and "lost quality" in trained.reason
    _, untrained = recommend(damaged, trained=False)
    assert untrained.runtime is not None and "latency only" in untrained.reason


def test_agreement_is_used_when_no_labels(recorded: BenchRun) -> None:
    no_labels = tuple(r.with_(accuracy=None) for r in recorded.results)
    _, rec = recommend(no_labels, trained=True, min_agreement=0.999)
    kept = [r for r in no_labels if r.role == ROLE_TFSMITH and r.ok and r.agreement >= 0.999]
    assert rec.runtime == (min(kept, key=lambda r: r.p50).name if kept else None)


def _result(name: str, role: str, centre: float) -> RuntimeResult:
    return RuntimeResult(name=name, role=role, artifact="a", ok=True,
                         latency=summarize([centre * (1 + 0.001 * i) for i in range(50)]))


def test_slower_than_peer_is_said_with_the_measured_ratio() -> None:
    rows = (_result("savedmodel", "baseline", 10.0), _result("openvino-int8", "peer", 1.0),
            _result("litert-int8", ROLE_TFSMITH, 2.0),
            RuntimeResult(name="onnxruntime-fp32", role="peer", artifact="", ok=False, reason="ImportError: x"))
    annotated, rec = recommend(rows, trained=False)
    assert rec.runtime == "litert-int8" and rec.fastest_peer == "openvino-int8"
    assert not rec.within_noise_of_peer and "slower than the fastest peer openvino-int8 (2.00x its time)" in rec.reason
    run = BenchRun(model="m", trained=False, threads=2, batch_sizes=(1, 8), results=annotated, recommendation=rec)
    text = report.markdown(run)
    assert report.headline(run) == ("m: tfsmith recommends litert-int8; 5.0x faster than the SavedModel signature; "
                                    "2.00x the time of the fastest peer (openvino-int8)")
    for word in ("goal", "MET", "MISSED", "issue"):  # what users see speaks of their model, not of our targets
        assert word not in text
    failed = _by_name(annotated)["onnxruntime-fp32"]
    assert not failed.ok and failed.reason == "ImportError: x" and failed.ratio_vs_baseline is None


def test_optimize_choice_is_compared_with_the_fastest_runtime_measured() -> None:
    from builder.bench.recommend import versus_fastest, versus_fastest_line

    rows = (_result("savedmodel", "baseline", 10.0), _result("openvino-tflite-int8", ROLE_TFSMITH, 1.0),
            _result("litert-dynamic", ROLE_TFSMITH, 3.0), _result("litert-fp32", ROLE_TFSMITH, 1.003))
    slow = versus_fastest(rows, "litert-dynamic")
    assert slow is not None and slow.fastest == "openvino-tflite-int8"
    assert slow.ratio == pytest.approx(3.0) and not slow.within_noise
    assert "3.00x the time of the fastest runtime measured here (openvino-tflite-int8" in versus_fastest_line(
        rows, "litert-dynamic")
    close = versus_fastest(rows, "litert-fp32")
    assert close is not None and close.within_noise and close.ratio == pytest.approx(1.003)
    assert versus_fastest(rows, "openvino-tflite-int8").ratio == 1.0  # type: ignore[union-attr]
    assert versus_fastest(rows, "litert-int8") is None
    assert "was not measured" in versus_fastest_line(rows, "litert-int8")


@pytest.mark.parametrize(("chosen", "runtime", "expected"), [
    ("model_int8.tflite", "litert", "litert-int8"),
    ("model_int8.tflite", None, "litert-int8"),
    ("model_dynamic.tflite", "openvino", "openvino-tflite-dynamic"),
    ("model_fp32.tflite", "openvino-bf16", "openvino-tflite-bf16"),
    ("openvino_int8.xml", "openvino", "openvino-ir-int8"),
    ("openvino_fp32.xml", None, "openvino-ir-fp32"),
    ("openvino_fp32.xml", "openvino-bf16", "openvino-ir-bf16"),
    ("model_fp32.tflite", "openvino-nncf", None),  # a runtime earlier tfsmith versions had: no row now
    ("model_float16.tflite", "litert", "litert-fp16"),
    ("saved_model", None, "savedmodel"),
    ("model_int8.tflite", "tensorrt", None),
    (None, "litert", None),
])
def test_optimize_report_maps_to_the_bench_runtime(chosen: str | None, runtime: str | None,
                                                   expected: str | None) -> None:
    from builder.bench.models import shipped_runtime

    assert shipped_runtime(chosen, runtime) == expected


def test_bench_rows_map_to_the_servers_runtime_names_and_back() -> None:
    from builder.bench.runtimes import (ALL_RUNTIMES, IR_VARIANT_FORMATS, SERVED_ROWS, VARIANT_FORMATS, bench_row,
                                        role_of, serving_runtime)
    from builder.model import registry

    assert len(set(ALL_RUNTIMES)) == len(ALL_RUNTIMES)
    served = {row: serving_runtime(row) for row in ALL_RUNTIMES}
    assert {runtime for runtime in served.values() if runtime} == set(registry.NAMES)  # every runtime has a row
    assert served["openvino-ir-int8"] == "openvino" and served["openvino-tflite-int8"] == "openvino"
    assert served["openvino-ir-bf16"] == "openvino-bf16" and served["openvino-ir-fp32"] == "openvino"
    assert served["openvino-tflite-bf16"] == "openvino-bf16" and served["savedmodel-bf16"] == "tensorflow-bf16"
    # peers: OpenVINO on the SavedModel (its bf16 row is what OpenVINO's default gives a user), eager Keras, ORT
    assert {row for row, runtime in served.items() if runtime is None} == {
        "keras", "openvino-fp32", "openvino-bf16", "openvino-int8", "onnxruntime-fp32", "onnxruntime-int8"}
    for row in SERVED_ROWS:  # each row is found again from what optimize's report says: runtime x file x signature
        assert bench_row(row.runtime, row.variant, row.signature, ir=row.ir) == row.name
        entry = registry.runtime(row.runtime)
        formats = IR_VARIANT_FORMATS if row.ir else VARIANT_FORMATS
        assert entry.serves(formats[row.variant] if row.variant else registry.SAVED_MODEL_FORMAT), row
    for row, runtime in served.items():
        assert role_of(row) == ("baseline" if row == "savedmodel" else ROLE_TFSMITH if runtime else "peer")
    assert bench_row("openvino-bf16", "int8") == "openvino-tflite-bf16"  # it only computes the float file
    assert bench_row("openvino-bf16", "fp32") == "openvino-tflite-bf16"
    assert bench_row("openvino", "int8", ir=True) == "openvino-ir-int8"
    assert bench_row("litert", "int8", ir=True) is None
    assert bench_row("tensorflow", None, "serving_xla") == "savedmodel-xla"
    assert bench_row("tensorflow", None, "predict") == "savedmodel"
    assert bench_row("tensorflow-bf16", None) == "savedmodel-bf16"
    assert bench_row("tensorflow", "fp32") is None and bench_row("no-such-runtime", "fp32") is None


def test_a_saved_model_served_by_serving_xla_is_benchs_xla_runtime() -> None:
    from builder.bench.models import shipped_runtime

    assert shipped_runtime("saved_model", "tensorflow", "serving_xla") == "savedmodel-xla"
    assert shipped_runtime("saved_model", "tensorflow", "serving_default") == "savedmodel"
    assert shipped_runtime("model_select_tf.tflite", "tensorflow", "serving_default") is None  # no bench adapter


def test_no_tflite_runtime_means_no_recommendation() -> None:
    rows = (RuntimeResult(name="savedmodel", role="baseline", artifact="a", ok=True,
                          latency=summarize([1.0] * 30)),)
    _, rec = recommend(rows, trained=True)
    assert rec.runtime is None and "no runtime a tfsmith image serves ran" in rec.reason


def test_choose_tflite_runtime_needs_an_openvino_win_beyond_noise() -> None:
    lite = [1e-3 * (1 + 0.001 * i) for i in range(100)]
    assert choose_tflite_runtime(lite, [0.5e-3 * (1 + 0.001 * i) for i in range(100)])[0] == "openvino"
    name, reason = choose_tflite_runtime(lite, [0.995e-3 * (1 + 0.001 * i) for i in range(100)])
    assert name == "litert" and "within noise of the fastest, openvino" in reason
    # no fixed band: 3% faster with intervals that do not overlap is faster
    assert choose_tflite_runtime(lite, [0.97e-3 * (1 + 0.001 * i) for i in range(100)])[0] == "openvino"
    name, reason = choose_tflite_runtime(lite, None, "ImportError: no openvino")
    assert name == "litert" and "ImportError: no openvino" in reason


def test_report_rows_mark_the_pick_and_keep_failures(recorded: BenchRun) -> None:
    failed = RuntimeResult(name="onnxruntime-int8", role="peer", artifact="", ok=False, reason="ValueError: bad")
    run = BenchRun(**{**recorded.__dict__, "results": (*recorded.results[:-1], failed)})
    text = report.markdown(run)
    assert "FAILED: ValueError: bad" in text
    assert text.count("★ recommended") == 1
    assert report.headline(run).startswith("digits-cnn: tfsmith recommends")
    assert "goal" not in text
    assert len(report.row(failed, True)) == len(report.COLUMNS) == len(report.row(run.results[0], True))


def test_report_files_are_written_and_parse(recorded: BenchRun, tmp_path: Path) -> None:
    paths = report.write(recorded, tmp_path / "out")
    assert BenchRun.from_dict(json.loads(paths["bench.json"].read_text())) == recorded
    assert paths["bench.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (tmp_path / "out").iterdir()] and not list((tmp_path / "out").glob(".bench-*"))


def test_cli_flag_parsing() -> None:
    assert parse_batches("1,32") == 32 and parse_batches("1") == 1 and parse_batches("64,1") == 64
    for bad in ("", "0,8", "a", "8,16", "1,8,16"):
        with pytest.raises(InputError):
            parse_batches(bad)
    assert parse_runtimes("savedmodel,litert-int8,savedmodel") == ["savedmodel", "litert-int8"]
    assert "onnxruntime-int8" in parse_runtimes("all")
    with pytest.raises(InputError, match="unknown runtime"):
        parse_runtimes("tensorrt")


def test_images_helpers(tmp_path: Path) -> None:
    assert images.parse_images("a:1, b:2") == ("a:1", "b:2")
    for bad in ("a", "a,a", "a,,b", ",b"):
        with pytest.raises(InputError):
            images.parse_images(bad)
    with pytest.raises(InputError, match="SavedModel"):
        images.find_saved_model(tmp_path)
    (tmp_path / "x" / "saved_model").mkdir(parents=True)
    (tmp_path / "x" / "saved_model" / "saved_model.pb").write_bytes(b"")
    assert images.find_saved_model(tmp_path) == tmp_path / "x" / "saved_model"
    spec = images.bench_container("img:tag", tmp_path, threads=2, batch=8, budget_s=5, name="tfsmith-bench-x")
    assert (spec.image, spec.name, spec.entrypoint) == ("img:tag", "tfsmith-bench-x", ("python3",))
    assert all(mount.read_only for mount in spec.mounts)
    assert {str(m.source): m.target for m in spec.mounts}[str(tmp_path.resolve())] == "/model"
    assert spec.command[-6:] == ("--threads", "2", "--batch", "8", "--budget-s", "5")
    assert images.parse_inner_output('noise\n{"latency": {"p50": 1}}\n') == {"latency": {"p50": 1}}
    with pytest.raises(ValueError):
        images.parse_inner_output("Traceback\nModuleNotFoundError: No module named 'numpy'")
    assert images.failure_reason(1, "Traceback\nModuleNotFoundError: x\n\n") == "exit 1: ModuleNotFoundError: x"


def test_image_comparison_ratio_and_summary() -> None:
    a = images.ImageRuns("stock", runs=[{"latency": {"p50": 2e-3}, "tensorflow": "2.21.0"},
                                        {"latency": {"p50": 4e-3}, "tensorflow": "2.21.0"}])
    b = images.ImageRuns("host", runs=[{"latency": {"p50": 1.5e-3}, "tensorflow": "2.21.0"}])
    comparison = images.ImageComparison(a, b, threads=2, batch=32)
    assert a.p50 == pytest.approx(3e-3) and comparison.ratio == pytest.approx(0.5)
    assert a.spread == pytest.approx(1.0) and b.spread == 0.0
    assert "host is 2.00x faster here; within the run-to-run spread" in comparison.summary()
    steady = images.ImageRuns("stock", runs=[{"latency": {"p50": 2e-3}}, {"latency": {"p50": 2.1e-3}}])
    assert "larger than the run-to-run spread" in images.ImageComparison(steady, b, threads=2, batch=32).summary()
    broken = images.ImageComparison(a, images.ImageRuns("bare", error="exit 1: no numpy"), threads=2, batch=32)
    assert broken.ratio is None and "bare: could not run the bench (exit 1: no numpy)" in broken.summary()
    assert json.loads(broken.to_json())["ratio_b_over_a"] is None


def test_the_reason_says_how_the_tflite_is_served() -> None:
    from builder.bench.recommend import how_served

    from builder.model import registry

    assert how_served("litert-int8").startswith("LiteRT")
    assert how_served("openvino-ir-int8") == registry.runtime("openvino").summary
    assert "bf16" in how_served("openvino-tflite-bf16") and "bf16" in how_served("savedmodel-bf16")
    assert "bf16" in how_served("openvino-ir-bf16")
    assert how_served("openvino-bf16") == ""  # the peer: OpenVINO reading the SavedModel, no image serves it
    row = RuntimeResult(name="openvino-ir-int8", role=ROLE_TFSMITH, artifact="openvino_int8.xml", ok=True,
                        latency=summarize([1e-3] * 30))
    _, rec = recommend((row,), trained=False)
    assert rec.runtime == "openvino-ir-int8" and "own IR" in rec.reason


def test_optimize_choice_is_marked_and_round_trips(recorded: BenchRun, tmp_path: Path) -> None:
    run = BenchRun(**{**recorded.__dict__, "shipped": "litert-dynamic"})
    text = report.markdown(run)
    assert text.count("◆ optimize's choice") == 1
    marked = next(line for line in text.splitlines() if "◆ optimize's choice" in line)
    assert marked.startswith("| litert-dynamic |")
    assert BenchRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    older = recorded.to_dict()
    older["recommendation"]["goal_no_slower_than_peer"] = True  # bench.json written by an earlier version
    assert BenchRun.from_dict(older).recommendation == recorded.recommendation


def test_data_in_either_npz_form_is_read_and_several_inputs_refused(tmp_path: Path) -> None:
    import numpy as np

    from builder.bench.models import load_data

    x, y = np.zeros((4, 3), np.float32), np.arange(4)
    np.savez(tmp_path / "plain.npz", x_val=x, y_val=y)
    np.savez(tmp_path / "named.npz", **{"x_val/features": x, "y_val/target": y, "x_calib/features": x[:2]})
    np.savez(tmp_path / "ids.npz", **{"x_val/tokens": np.ones((4, 16), np.int32)})
    np.savez(tmp_path / "two.npz", **{"x_val/pixels": x, "x_val/meta": x})
    assert set(load_data(tmp_path / "plain.npz")) == {"x_val", "y_val"}
    named = load_data(tmp_path / "named.npz")
    assert set(named) == {"x_val", "y_val", "x_calib"} and named["x_calib"].shape == (2, 3)
    assert load_data(tmp_path / "ids.npz")["x_val"].dtype == np.int32
    with pytest.raises(InputError, match=r"names 2 inputs under x_val/ \(meta, pixels\)"):
        load_data(tmp_path / "two.npz")
    np.savez(tmp_path / "nox.npz", y_val=y)
    with pytest.raises(InputError, match="has no x_val"):
        load_data(tmp_path / "nox.npz")


def test_our_speed_goals_are_judged_outside_the_product(recorded: BenchRun) -> None:
    from tests.benchmarks.bench_goals import judge

    peer, speed = judge(recorded)
    assert peer.met is True and speed.met is True  # the recorded example run met both
    rows = (_result("savedmodel", "baseline", 10.0), _result("openvino-int8", "peer", 1.0),
            _result("litert-int8", ROLE_TFSMITH, 2.0))
    annotated, rec = recommend(rows, trained=False)
    untrained = BenchRun(model="m", trained=False, threads=2, batch_sizes=(1, 8), results=annotated,
                         recommendation=rec)
    peer, speed = judge(untrained)
    assert peer.met is False and "2.00x the time of openvino-int8" in peer.detail
    assert speed.met is None and "random weights" in speed.detail
    peer, speed = judge(BenchRun(**{**untrained.__dict__, "trained": True}))
    assert speed.met is False and speed.detail == "5.0x"


def test_deploy_choice_compares_recorded_optimize_and_bench_runs(fixtures_dir: Path) -> None:
    from tests.benchmarks.deploy_choice import accepted_candidates, compare, quantized_row, table, verdict_lines

    recorded = json.loads((fixtures_dir / "bench" / "deploy_choice_recorded.json").read_text())
    mobilenet = recorded["mobilenet_v2"]
    row = compare("mobilenet_v2", "auto", mobilenet["report"], mobilenet["bench"], host_bf16=True)
    assert row.shipped == "litert-int8" and row.fastest_passing == "openvino-int8"
    results = {r["name"]: r for r in mobilenet["bench"]["results"]}
    assert row.ratio_vs_fastest_passing == pytest.approx(
        results["litert-int8"]["latency"]["p50"] / results["openvino-int8"]["latency"]["p50"])
    assert row.within_noise_of_fastest_passing is False and row.fastest_deployable == "openvino-tflite-nncf"
    assert row.fastest_candidate == "litert-int8" and row.within_noise_of_fastest_candidate is True
    assert not row.failed and row.bf16_verdict.startswith("n/a: the rule is for resnet50")
    rendered = table([row])  # slower than a peer beyond noise, yet the fastest of its own candidates
    assert "x (beyond noise)" in rendered and "1.00x (within noise)" in rendered
    assert verdict_lines([row])[0].startswith("mobilenet_v2 / auto: ok")
    resnet = recorded["resnet50"]
    # the gate rejected int8 (random weights change the top-1 answer): it is timed by optimize but no candidate
    assert "litert-int8" not in accepted_candidates(resnet["report"])
    assert "litert-dynamic" in accepted_candidates(resnet["report"])
    row = compare("resnet50", "auto", resnet["report"], resnet["bench"], host_bf16=True)
    assert row.shipped == "litert-dynamic" and row.fastest_candidate == "litert-dynamic"
    assert row.fastest_passing == "openvino-int8"  # litert-int8 and openvino-tflite-int8 lost the top-1 answer
    floats = compare("resnet50", "float-only", resnet["report"], resnet["bench"], host_bf16=True)
    assert floats.fastest_passing and not quantized_row(floats.fastest_passing)  # the recipe asked for float answers
    assert quantized_row("openvino-ir-int8") and quantized_row("onnxruntime-int8") and not quantized_row("openvino-ir-bf16")
    assert row.bf16_verdict.startswith("n/a") and "openvino-bf16" in row.bf16_verdict  # not in this recording


def test_deploy_choice_holds_a_resnet50_to_openvinos_bf16_only_where_bf16_applies(fixtures_dir: Path) -> None:
    """The bf16 rule: on a bf16 host, a ResNet50 whose bf16 answers agree deploys within 1.25x of OpenVINO's bf16."""
    from tests.benchmarks.deploy_choice import MAX_RATIO_VS_BF16_PEER, compare

    resnet = json.loads((fixtures_dir / "bench" / "deploy_choice_recorded.json").read_text())["resnet50"]
    shipped = next(r for r in resnet["bench"]["results"] if r["name"] == "litert-dynamic")

    def with_peer(factor: float, agreement: float) -> dict:
        peer = {**shipped, "name": "openvino-bf16", "role": "peer", "agreement": agreement,
                "latency": {**shipped["latency"], **{k: shipped["latency"][k] / factor
                                                     for k in ("p50", "p90", "p99", "ci_low", "ci_high")}}}
        return {**resnet["bench"], "results": [*resnet["bench"]["results"], peer]}

    slow = compare("resnet50", "float-only", resnet["report"], with_peer(2.0, 1.0), host_bf16=True)
    assert slow.ratio_vs_bf16_peer == pytest.approx(2.0) and slow.bf16_verdict == "FAIL" and slow.failed
    close = compare("resnet50", "float-only", resnet["report"], with_peer(MAX_RATIO_VS_BF16_PEER - 0.05, 1.0),
                    host_bf16=True)
    assert close.bf16_verdict == "pass" and not close.failed
    differs = compare("resnet50", "auto", resnet["report"], with_peer(2.0, 0.5), host_bf16=True)
    assert differs.bf16_verdict.startswith("n/a: the bf16 answers do not agree")
    no_bf16 = compare("resnet50", "auto", resnet["report"], with_peer(2.0, 1.0), host_bf16=False)
    assert no_bf16.bf16_verdict == "n/a: this CPU has no bf16 compute" and not no_bf16.failed


def test_the_one_timing_loop_interleaves_rotates_and_stops_when_stable() -> None:
    from builder.measure.loop import interleave, time_interleaved

    import time

    order: list[str] = []

    def busy(name: str) -> None:  # a steady 0.2 ms call: its median settles within a few dozen samples
        order.append(name)
        end = time.perf_counter() + 2e-4
        while time.perf_counter() < end:
            pass

    runners = {name: (lambda name=name: busy(name)) for name in ("a", "b", "c")}
    samples, rounds = interleave(runners, budget_s=5.0, warmup=0, slice_s=0.0, min_rounds=3, min_samples=20)
    assert 20 <= rounds < 2000  # stopped once every median was stable, before the budget (~8000 rounds)
    assert all(len(s) == rounds for s in samples.values())  # slice 0: one call per runner per round
    assert order[:9] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # rotated each round
    warm: list[int] = []
    more = time_interleaved({"x": lambda: warm.append(1)}, budget_s=0.05, warmup=4, slice_s=0.01)
    assert len(warm) == 4 + len(more["x"]) and len(more["x"]) >= 1  # warm-up calls are not samples
    kept = {"a": [1.0, 2.0]}
    again, _ = interleave({"a": lambda: None}, budget_s=0.0, warmup=0, slice_s=0.0, samples=kept)
    assert again["a"] is kept["a"] and len(kept["a"]) == 3  # continues an earlier list
