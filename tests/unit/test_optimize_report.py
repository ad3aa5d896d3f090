"""The typed report (builder/report.py) and the choice of artifact x runtime (select.select_step): pure, no
TensorFlow. report.json round-trips through `Report.load`; the server can import the module (standard library
only); the choice never takes a rejected artifact, measures only on this host, and breaks ties by size."""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import builder.report as report_module
from builder.optimize.contract import contract_kept
from builder.optimize.select import pick_fastest, select_step
from builder.optimize.target import TargetFacts
from builder.optimize.recipe import auto_recipe, recipe_from_mapping
from builder.report import (ArtifactResult, Candidate, DataInfo, Gate, Latency, ModelContract, ModelInfo,
                            OutputMetric, OutputSpec, Report, ReportError, Selection, TensorSpec)

CONTRACT = ModelContract(
    inputs=(TensorSpec("tokens", "int32", (None, 16)), TensorSpec("extra", "float32", (None, 3))),
    outputs=(OutputSpec("label", "float32", (None, 4), "classification", "probabilities"),
             OutputSpec("score", "float32", (None, 1), "regression", "one column")))
HOST = TargetFacts("host (sapphirerapids)", "x86_64", frozenset({"avx512_vnni", "amx_int8"}), ())
OTHER = replace(HOST, name="x86-64-v3", features=frozenset({"avx2"}), is_host=False)


def artifact(path: str, format: str, size: int, accepted: bool = True) -> ArtifactResult:
    metrics = (OutputMetric("label", "classification", "accuracy_drop", 0.0 if accepted else 0.2, 0.01, accepted, "w",
                            accuracy=0.9, original_accuracy=0.9, agreement=1.0, relative_error=0.0, max_abs_error=0.0),
               OutputMetric("score", "regression", "relative_error", 0.01, 0.05, True, "w", relative_error=0.01,
                            max_abs_error=0.3, mae=1.0, rmse=1.2, original_mae=1.0))
    return ArtifactResult(path=path, format=format, runtime="litert", size_bytes=size, gzip_bytes=size // 2, threads=2,
                          latency_us=Latency(10.0, 20.0, 100), throughput={"batch": 32, "samples_per_s": 1000.0},
                          inputs=CONTRACT.inputs, outputs=tuple(o.tensor() for o in CONTRACT.outputs),
                          metrics=metrics, contract_kept=True, accepted=accepted, reason="r")


def candidate(path: str, runtime: str, p50: float | None, size: int, error: str = "",
              signature: str = "serving_default", noise: float = 0.05) -> Candidate:
    """A timed candidate whose median's 95% CI is +-`noise` of its p50."""
    low, high = (None, None) if p50 is None else (p50 * (1 - noise), p50 * (1 + noise))
    return Candidate(path, runtime, p50, 100, size, error, signature, low, high)


def at(c: Candidate, p50: float, noise: float = 0.05) -> Candidate:
    return replace(c, p50_us=p50, ci_low_us=p50 * (1 - noise), ci_high_us=p50 * (1 + noise))


def make_report() -> Report:
    arts = (artifact("saved_model", "saved_model", 9000), artifact("model_int8.tflite", "tflite_int8", 1000))
    return Report(
        tfsmith="0.1.0", created="2026-11-22T18:00:00+00:00",
        model=ModelInfo("m.keras", "keras2", "2.21.0", 1234, CONTRACT),
        data=DataInfo("d.npz", 100, 20, "x_calib", 40, ("label",)),
        recipe={"name": "auto"}, reasons=("why",), notes=("note",), target={"name": "host"},
        host={"threads": 2}, baseline=artifact("baseline", "saved_model", 9000), sparsity=None, artifacts=arts,
        chosen="model_int8.tflite", chosen_runtime="litert", samples="samples.npz",
        gate=Gate(0.01, 0.05, "original", True, "ok"),
        selection=Selection(True, "measured", (candidate("model_int8.tflite", "litert", 10.0, 1000),)))


def test_report_round_trips_through_json(tmp_path: Path) -> None:
    report = make_report()
    report.write(tmp_path)
    loaded = Report.load(tmp_path)
    assert loaded == report
    assert loaded.chosen_artifact.metric("score").mae == 1.0
    assert loaded.contract.output("label").task == "classification"
    raw = json.loads((tmp_path / "report.json").read_text())
    assert raw["schema"] == 2 and raw["chosen"] == "model_int8.tflite" and raw["chosen_runtime"] == "litert"
    assert raw["model"]["contract"]["outputs"][0]["name"] == "label"  # readers without builder.report still can


def test_each_artifact_is_written_with_its_format(tmp_path: Path) -> None:
    make_report().write(tmp_path)
    raw = json.loads((tmp_path / "report.json").read_text())
    assert [a["format"] for a in raw["artifacts"]] == ["saved_model", "tflite_int8"]
    assert raw["baseline"]["format"] == "saved_model"
    assert not any("kind" in a for a in [*raw["artifacts"], raw["baseline"]])


def test_a_report_of_an_earlier_tfsmith_naming_the_format_kind_still_reads(tmp_path: Path) -> None:
    """Reports written before the key was `format` (in images already built, in users' folders) say `kind`."""
    report = make_report()
    raw = report.to_dict()
    for entry in [*raw["artifacts"], raw["baseline"]]:
        entry["kind"] = entry.pop("format")
    (tmp_path / "report.json").write_text(json.dumps(raw))
    loaded = Report.load(tmp_path)
    assert loaded == report
    assert [a.format for a in loaded.artifacts] == ["saved_model", "tflite_int8"]
    assert loaded.baseline is not None and loaded.baseline.format == "saved_model"


def test_format_wins_over_kind_and_a_report_with_neither_names_the_missing_key() -> None:
    entry = make_report().to_dict()["artifacts"][1]
    assert ArtifactResult.from_dict({**entry, "kind": "tflite_fp32"}).format == "tflite_int8"
    del entry["format"]
    with pytest.raises(ReportError, match="artifact model_int8.tflite: missing key 'format'"):
        ArtifactResult.from_dict(entry)


@pytest.mark.parametrize(("text", "fragment"), [
    ('{"schema": 1, "chosen": "model_int8.tflite"}', "schema 1"),
    ("not json", "unreadable report"),
    ('{"schema": 2}', "missing key 'model'"),
])
def test_old_or_broken_reports_are_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / "report.json").write_text(text)
    with pytest.raises(ReportError) as error:
        Report.load(tmp_path / "report.json")
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_report_module_imports_only_the_standard_library() -> None:
    """The in-image server copies builder/report.py alone: it must not import numpy, TensorFlow or tfsmith."""
    tree = ast.parse(Path(report_module.__file__).read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert names and names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_contract_kept_compares_names_dtypes_and_shapes_in_any_order() -> None:
    outs = tuple(o.tensor() for o in CONTRACT.outputs)
    assert contract_kept(CONTRACT, tuple(reversed(CONTRACT.inputs)), outs) == (True, "")
    int8_io = (TensorSpec("tokens", "int32", (None, 16)), TensorSpec("extra", "int8", (None, 3)))
    kept, why = contract_kept(CONTRACT, int8_io, outs)
    assert not kept and "extra int8" in why
    renamed = (TensorSpec("output_0", "float32", (None, 4)), outs[1])
    assert not contract_kept(CONTRACT, CONTRACT.inputs, renamed)[0]


def test_fastest_wins_and_a_smaller_file_wins_within_noise() -> None:
    fp32, int8 = candidate("model_fp32.tflite", "litert", 10.0, 4000), candidate("model_int8.tflite", "litert", 11.0, 1000)
    assert pick_fastest([fp32, int8]) == int8  # the intervals overlap: the 4x smaller file wins
    slow_int8 = at(int8, 14.0)
    assert pick_fastest([fp32, slow_int8]) == fp32  # 40% slower is beyond noise
    ov = candidate("model_int8.tflite", "openvino", 10.5, 1000)
    assert pick_fastest([int8, ov]).runtime == "litert"  # same file within noise: the smaller runtime
    assert pick_fastest([int8, at(ov, 5.0)]).runtime == "openvino"


def test_a_difference_beyond_the_measured_noise_is_never_a_tie_whatever_its_size() -> None:
    # a 14% slower int8 file measured with tight (+-1%) intervals is slower, not a "tie" (no fixed band)
    fp32 = candidate("model_fp32.tflite", "litert", 10.0, 4000, noise=0.01)
    int8 = candidate("model_int8.tflite", "litert", 11.4, 1000, noise=0.01)
    assert pick_fastest([fp32, int8]) == fp32
    # the same two with wide intervals (a noisy host) do tie, and the smaller file wins
    assert pick_fastest([at(fp32, 10.0, 0.1), at(int8, 11.4, 0.1)]).artifact == "model_int8.tflite"


def test_tied_candidates_choose_the_same_file_every_run() -> None:
    # two files of the same size within noise: whichever measured a hair faster, the name decides
    a, b = candidate("model_a.tflite", "litert", 10.0, 1800), candidate("model_b.tflite", "litert", 10.0, 1800)
    runs = [[at(a, 10.0), at(b, 10.2)], [at(a, 10.2), at(b, 10.0)], [at(b, 10.1), at(a, 10.1)]]
    assert {pick_fastest(run).artifact for run in runs} == {"model_a.tflite"}


def test_auto_on_this_host_picks_the_fastest_accepted_candidate_never_a_rejected_one() -> None:
    recipe, _ = auto_recipe(HOST.features, (), "x86_64", HOST.name)
    results = [artifact("saved_model", "saved_model", 9000), artifact("model_fp32.tflite", "tflite_fp32", 4000),
               artifact("model_int8.tflite", "tflite_int8", 1000, accepted=False)]
    cands = [candidate("saved_model", "tensorflow", 400.0, 9000), candidate("model_fp32.tflite", "litert", 30.0, 4000),
             candidate("model_int8.tflite", "litert", 5.0, 1000),
             candidate("model_fp32.tflite", "openvino", None, 4000, "RuntimeError: no")]
    choice, _ = select_step(recipe, HOST, results, cands)
    assert (choice.artifact, choice.runtime, choice.signature) == ("model_fp32.tflite", "litert", "serving_default")
    assert choice.selection.measured
    assert "model_fp32.tflite on litert" in choice.selection.how and len(choice.selection.candidates) == 4


def test_tensorflow_is_a_runtime_like_the_others_and_serving_xla_must_be_faster_beyond_noise() -> None:
    recipe, _ = auto_recipe(HOST.features, (), "x86_64", HOST.name)
    results = [artifact("saved_model", "saved_model", 9000), artifact("model_select_tf.tflite", "tflite_select_tf",
                                                                      3000, accepted=False)]
    plain = candidate("saved_model", "tensorflow", 400.0, 9000)
    xla = candidate("saved_model", "tensorflow", 380.0, 9000, signature="serving_xla")
    unrunnable = candidate("model_select_tf.tflite", "tensorflow", None, 3000, "not run on this host")
    choice, _ = select_step(recipe, HOST, results, [plain, xla, unrunnable])
    assert (choice.artifact, choice.runtime, choice.signature) == ("saved_model", "tensorflow", "serving_default")
    choice, _ = select_step(recipe, HOST, results, [plain, at(xla, 200.0), unrunnable])
    assert choice.signature == "serving_xla" and "saved_model#serving_xla on tensorflow" in choice.selection.how
    judged_out = replace(xla, p50_us=1.0, error="fails the gate on this runtime (label: accuracy_drop 0.2 > 0.01)")
    assert select_step(recipe, HOST, results, [plain, judged_out])[0].signature == "serving_default"  # never an error
    # a model whose contract is another signature (a tf.Module's `predict`) is served under that name
    choice, _ = select_step(recipe, HOST, results[:1], [replace(plain, signature="predict")], "predict")
    assert (choice.artifact, choice.signature) == ("saved_model", "predict")
    # a .tflite within noise of the SavedModel wins: the smaller file and runtime
    lite = [artifact("model_fp32.tflite", "tflite_fp32", 4000)]
    choice, _ = select_step(recipe, HOST, results + lite, [plain, candidate("model_fp32.tflite", "litert", 440.0, 4000)])
    assert (choice.artifact, choice.runtime) == ("model_fp32.tflite", "litert")


def test_gpu_targets_choose_the_saved_model_on_tensorflow_by_rule() -> None:
    gpu = TargetFacts("gpu host", "x86_64", HOST.features, ("8.0",))
    recipe, _ = auto_recipe(gpu.features, gpu.gpu_capabilities, "x86_64", gpu.name)
    results = [artifact("saved_model", "saved_model", 9000), artifact("model_fp32.tflite", "tflite_fp32", 4000)]
    choice, _ = select_step(recipe, gpu, results, [candidate("model_fp32.tflite", "litert", 1.0, 4000)])
    assert (choice.artifact, choice.runtime, choice.signature) == ("saved_model", "tensorflow", "serving_default")
    assert not choice.selection.measured


def test_without_a_plain_tflite_the_rule_falls_back_to_the_saved_model() -> None:
    recipe, _ = auto_recipe(OTHER.features, (), "x86_64", OTHER.name)
    results = [artifact("saved_model", "saved_model", 9000),
               artifact("model_select_tf.tflite", "tflite_select_tf", 3000, accepted=False)]
    choice, notes = select_step(recipe, OTHER, results, [])
    assert (choice.artifact, choice.runtime) == ("saved_model", "tensorflow") and "saved_model" in notes[0]


def test_another_target_is_chosen_by_rule_and_says_it_was_not_measured() -> None:
    recipe, _ = auto_recipe(OTHER.features, (), "x86_64", OTHER.name)
    results = [artifact("model_fp32.tflite", "tflite_fp32", 4000), artifact("model_dynamic.tflite", "tflite_dynamic", 1100),
               artifact("model_int8.tflite", "tflite_int8", 1000)]
    choice, _ = select_step(recipe, OTHER, results, [])
    assert (choice.artifact, choice.runtime) == ("model_dynamic.tflite", "litert")
    assert not choice.selection.measured and "could not be measured" in choice.selection.how


def test_rejected_rule_choice_falls_back_for_auto_but_not_for_a_recipe_file() -> None:
    results = [artifact("model_fp32.tflite", "tflite_fp32", 4000),
               artifact("model_dynamic.tflite", "tflite_dynamic", 1100, accepted=False),
               artifact("model_int8.tflite", "tflite_int8", 1000, accepted=False)]
    recipe, _ = auto_recipe(OTHER.features, (), "x86_64", OTHER.name)
    choice, notes = select_step(recipe, OTHER, results, [])
    assert choice.artifact == "model_fp32.tflite" and "rejected by the gate" in notes[0]
    explicit = recipe_from_mapping({"choose": "tflite_int8", "quantization": {"modes": ["int8"]}}, "r.toml")
    choice, _ = select_step(explicit, HOST, results, [])
    assert choice.artifact == "model_int8.tflite"  # what the user asked for; the gate then fails (exit 3)


def test_auto_on_this_host_adds_serving_xla_to_measure_it_and_another_target_does_not() -> None:
    from pathlib import Path

    from builder.optimize.planning import choose_recipe, without_tflite
    from builder.optimize.target import measures_here

    here, reasons = choose_recipe("auto", HOST)
    assert here.export.xla and measures_here(here, HOST)
    assert any(r.startswith("xla:") and "faster beyond noise" in r for r in reasons)
    other, _ = choose_recipe("auto", OTHER)
    assert not other.export.xla and not measures_here(other, OTHER)
    gpu = TargetFacts("gpu host", "x86_64", HOST.features, ("9.0",))
    assert not measures_here(choose_recipe("auto", gpu)[0], gpu)  # tensor cores: the SavedModel by rule
    adapted, note = without_tflite(here, "'tf.X' op is neither a custom op nor a flex op", Path("out/logs/c.log"))
    # what LiteRT cannot run, TensorFlow serves; OpenVINO's converter is still tried on the SavedModel, and its
    # int8 IR too (NNCF quantizes the IR, not a .tflite); the pruned SavedModel is still what both serve
    assert adapted.formats == ("saved_model", "openvino_ir_fp32", "openvino_ir_int8") and adapted.choose == "saved_model"
    assert adapted.pruning == here.pruning and not adapted.quantization.qat
    assert adapted.export.xla and note.startswith("no plain .tflite: the TFLite converter says: 'tf.X' op")
    assert "(full text: out/logs/c.log)" in note and "\n" not in note


def test_rows_per_s_is_defined_beside_the_table_and_is_batch_over_the_median_batch_call(tmp_path: Path) -> None:
    from builder.optimize.evaluate import throughput_from
    from builder.optimize.report import TIMINGS, table_rows, write_markdown

    timed = replace(artifact("model_int8.tflite", "tflite_int8", 1000),
                    throughput=throughput_from(32, Latency(16000.0, 20000.0, 50)))
    report = replace(make_report(), artifacts=(make_report().artifacts[0], timed), host={"threads": 2, "tensorflow": "2.21"})
    row = next(r for r in table_rows(report) if r[0].startswith("model_int8.tflite"))
    assert row[8] == "2000 (batch 32)"  # 32 rows / 16 ms
    assert row[1] == "tflite_int8"  # the artifact's format, in the column of that name
    write_markdown(report, tmp_path / "report.md")
    text = (tmp_path / "report.md").read_text()
    assert TIMINGS in text and "rows/s: rows per second at batch B" in TIMINGS
    assert "| artifact | format | runtime (precision) |" in text
    assert "~: the rows/s pass ran out of time" in TIMINGS
    unsettled = replace(timed, throughput=throughput_from(32, Latency(16000.0, 20000.0, 50), settled=False))
    row = next(r for r in table_rows(replace(report, artifacts=(report.artifacts[0], unsettled)))
               if r[0].startswith("model_int8.tflite"))
    assert row[8] == "~2000 (batch 32)"  # stopped before its median was known to +-10%: marked, not hidden
    untimed = next(r for r in table_rows(make_report()) if r[0].startswith("model_int8.tflite"))
    assert untimed[8] == "-"  # a figure whose batch time is unknown is not shown


def test_the_baseline_and_an_unpruned_saved_model_are_one_row_with_one_set_of_numbers() -> None:
    report = make_report()
    baseline = replace(report.baseline, extra={"same_as": "saved_model"})
    rows = table_rows_of(replace(report, baseline=baseline))
    assert [r[0] for r in rows] == ["saved_model (= baseline: the original's weights)", "model_int8.tflite *"]
    assert rows[1][2] == "litert"
    pruned = table_rows_of(report)  # a pruned export is another model: both rows, each its own numbers
    assert pruned[0][0].startswith("baseline") and len(pruned) == 3


def table_rows_of(report: Report) -> list[list[str]]:
    from builder.optimize.report import table_rows

    return table_rows(report)


def test_the_gate_rows_end_with_one_all_zero_input_for_numeric_inputs_only() -> None:
    from builder.optimize.planning import gate_rows

    x = {"pixels": np.ones((5, 4, 4, 1), np.float32), "ids": np.arange(10, dtype=np.int32).reshape(5, 2)}
    rows = gate_rows(x)
    assert rows["pixels"].shape == (6, 4, 4, 1) and rows["ids"].shape == (6, 2)
    assert not rows["pixels"][-1].any() and not rows["ids"][-1].any() and rows["pixels"].dtype == np.float32
    assert np.array_equal(rows["pixels"][:5], x["pixels"])
    text = {"text": np.array([b"a", b"b"])}
    assert gate_rows(text)["text"].shape == (2,)  # text has no all-zero input
    # a model built for batches of exactly 2 rows gets a whole batch of zeros, so no call is cut short
    fixed = gate_rows({"x": np.ones((4, 3), np.float32)}, fixed=2)["x"]
    assert fixed.shape == (6, 3) and not fixed[4:].any() and fixed[:4].all()


def test_rows_per_s_batch_shrinks_for_slow_models_and_follows_a_fixed_batch() -> None:
    from types import SimpleNamespace

    from builder.optimize.evaluate import batch_for

    x = {"x": np.zeros((64, 4), np.float32)}
    dynamic = SimpleNamespace(inputs=(TensorSpec("x", "float32", (None, 4)),))
    assert batch_for(dynamic, x, 100.0) == 32  # 0.1 ms a row: 32 rows a call
    assert batch_for(dynamic, x, 140_000.0) == 1  # 140 ms a row: one row a call, the batch-1 timing itself
    assert batch_for(dynamic, {"x": x["x"][:5]}, 100.0) == 5
    assert batch_for(SimpleNamespace(inputs=(TensorSpec("x", "float32", (8, 4)),)), x, 140_000.0) == 8


def test_the_report_names_files_where_the_user_gets_them_not_in_the_staging_folder(tmp_path: Path) -> None:
    from builder.optimize.pipeline import relocated

    staging, out = tmp_path / ".opt.tfsmith-abc", tmp_path / "opt"
    report = make_report()
    failing = Candidate("model_int8.tflite", "openvino", None, 0, 10,
                        f"RuntimeError: {staging}/model_int8.tflite: cannot read it", precision="int8")
    report = replace(report, notes=(f"full text: {staging}/logs/convert.log",),
                     selection=replace(report.selection, candidates=(failing,)))
    moved = relocated(report, staging, out)
    assert str(staging) not in moved.to_json()
    assert moved.selection.candidates[0].error == f"RuntimeError: {out}/model_int8.tflite: cannot read it"
    assert moved.notes == (f"full text: {out}/logs/convert.log",)
    assert moved.selection.candidates[0].precision == "int8"  # everything else kept
