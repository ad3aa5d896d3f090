"""`tfsmith optimize --recipe auto` on every zoo model (tests/zoo.py): ordinary user models no part of tfsmith was
written around — a CNN, two inputs, two heads, regression, token ids, Keras 3, a tf.Module SavedModel and a
ready .tflite; and those only TensorFlow serves or that need the user's help to load — a Keras 3 GRU over
variable-length sequences (the plain converter fails: Select TF ops), a TextVectorization string classifier, a
custom registered layer (`--import`) and a tf.Module with only a `predict` signature (`--signature`).

For each: the contract is preserved (every .tflite's signature — names, dtypes, shapes — equals the original's),
every output has its metric (classification: accuracy/agreement; regression: relative error, MAE with labels),
the gate judged every artifact against the original model, the choice was measured on this host among accepted
candidates, and samples.npz holds the original's answers under named keys. The CLI runs in-process (TensorFlow
imported once) with little timing effort: correctness here, timings are the benchmark's job.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "tf_keras", "tensorflow_model_optimization",
                                                     "ai_edge_litert", "sklearn")):
    pytest.skip("needs the optimize extra (tensorflow, tf_keras, tfmot, ai-edge-litert) and scikit-learn",
                allow_module_level=True)

from builder.model import registry  # noqa: E402
from tests import zoo, zoo_runs  # noqa: E402
from tests.e2e.inprocess import run_cli  # noqa: E402  (imports builder.optimize.tfenv only; TensorFlow loads lazily)


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> pytest.TempPathFactory:
    """Where the zoo models come from: built once per test run for every file that reads them (tests/zoo_runs)."""
    return tmp_path_factory


@pytest.fixture(scope="module")
def built(zoo_dir: pytest.TempPathFactory) -> dict[str, zoo.ZooModel]:
    return {}


def _model(name: str, zoo_dir: pytest.TempPathFactory, built: dict[str, zoo.ZooModel]) -> zoo.ZooModel:
    if name not in built:
        built[name] = zoo_runs.model(name, zoo_dir)
    return built[name]


def assert_every_step_said(report: object) -> None:
    """The ledger's promise, read from the report as a user would: every step the recipe asked for beyond the
    SavedModel has an entry (done, dropped or skipped), and each one that dropped out or was skipped has its
    line among the notes, naming its cause (and its log in OUT/logs where the library said more)."""
    from builder.optimize.ledger import DONE, DROPPED, SKIPPED, UNACCOUNTED

    attempts = report.attempts  # type: ignore[attr-defined]
    assert attempts, "the report has no attempts"
    assert not [a.step for a in attempts if a.outcome == UNACCOUNTED], [a.line for a in attempts]
    assert {a.outcome for a in attempts} <= {DONE, DROPPED, SKIPPED}
    for attempt in attempts:
        if attempt.outcome == DROPPED:
            assert attempt.line in report.notes and attempt.cause and attempt.cause in attempt.line  # type: ignore[attr-defined]
            if attempt.log:
                assert (Path(attempt.log)).is_file(), attempt.log
        if attempt.outcome == SKIPPED and attempt.line:
            assert attempt.line in report.notes  # type: ignore[attr-defined]


def _litert_signature(path: Path) -> tuple[dict, dict]:
    """{name: (dtype, shape with None for dynamic)} of a .tflite's serving signature, as LiteRT lists it."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    runner = it.get_signature_runner(next(iter(it.get_signature_list())))

    def side(details: dict) -> dict:
        return {n: (np.dtype(d["dtype"]).name, tuple(None if int(x) < 0 else int(x) for x in d["shape_signature"]))
                for n, d in details.items()}

    return side(runner.get_input_details()), side(runner.get_output_details())


@pytest.mark.parametrize("name", zoo.NAMES)
def test_auto_keeps_the_contract_and_judges_every_output(name: str, zoo_dir: pytest.TempPathFactory, built: dict, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    from builder.report import Report

    model = _model(name, zoo_dir, built)
    run = zoo_runs.auto(name, "host", zoo_dir)  # the run test_zoo_serving serves: made once, read by both
    out, code, stdout, stderr = run.out, run.code, run.stdout, run.stderr
    assert code == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    report = Report.load(out)
    assert_every_step_said(report)

    # The contract is the original's: names, dtypes, shapes, and the task of every output.
    want_in = {n: (dtype, shape) for n, (dtype, shape) in model.inputs.items()}
    want_out = {n: (dtype, shape) for n, (dtype, shape, _) in model.outputs.items()}
    contract = report.contract
    assert {t.name: (t.dtype, t.shape) for t in contract.inputs} == want_in
    assert {t.name: (t.dtype, t.shape) for t in contract.outputs} == want_out
    assert {t.name: t.task for t in contract.outputs} == {n: task for n, (_, _, task) in model.outputs.items()}
    assert all(t.task_why for t in contract.outputs)
    for output in contract.outputs:
        assert f"output {output.name}: {output.task}" in stdout

    tflites = [a for a in report.artifacts if a.path.endswith(".tflite")]
    assert tflites
    if model.kind == "tflite":
        assert [a.path for a in report.artifacts] == ["model.tflite"] and report.baseline is None
    else:
        assert {"saved_model", "tflite_fp32", "tflite_int8"} <= {a.format for a in report.artifacts}
    for artifact in tflites:
        assert _litert_signature(out / artifact.path) == (want_in, want_out), artifact.path
        assert artifact.contract_kept

    # One metric per output, the right one for its task and labels, and sane.
    labelled = set(report.data.labels)
    assert labelled == set(model.labels)
    for artifact in report.artifacts:
        assert {m.output for m in artifact.metrics} == set(want_out)
        for metric in artifact.metrics:
            task = contract.output(metric.output).task
            if task == "classification" and "agreement cannot judge" in metric.why:
                # the original answers one class for nearly every row: judged by the error vs its spread
                assert metric.metric == "relative_error" and 0.0 <= metric.agreement <= 1.0
            elif task == "classification":
                assert metric.metric == ("accuracy_drop" if metric.output in labelled else "disagreement")
                assert 0.0 <= metric.agreement <= 1.0
            else:
                assert metric.metric == "relative_error" and metric.agreement is None
                assert (metric.mae is not None) == (metric.output in labelled)
            assert metric.relative_error is not None and metric.relative_error >= 0
            assert metric.passed == (metric.value <= metric.limit + 1e-9)
        assert artifact.accepted == (all(m.passed for m in artifact.metrics) and artifact.contract_kept)
        if artifact.format in ("tflite_fp32", "tflite_original", "saved_model") and report.sparsity is None:
            # float32 files of the unpruned model answer like the original, almost bit for bit
            assert all((m.relative_error or 0) < 1e-3 for m in artifact.metrics), artifact.path

    # The gate judged against the original; the choice was measured here among accepted candidates.
    assert report.gate.judged_against == "original" and report.gate.passed
    chosen = report.chosen_artifact
    # the SavedModel on TensorFlow is a candidate too, but a .tflite on LiteRT answers these small models in a
    # few microseconds, far below TensorFlow's per-call cost
    assert chosen.accepted and chosen.path.endswith(".tflite")
    assert report.selection.measured and report.chosen_runtime in registry.TFLITE_RUNTIMES
    assert {c.runtime for c in report.selection.candidates if c.artifact == "saved_model"} <= set(
        registry.engine_runtimes("tensorflow"))
    _assert_measured_choice(report)

    # samples.npz: named keys, original dtypes, the ORIGINAL model's answers.
    with np.load(out / "samples.npz") as samples:
        keys = set(samples.files)
        assert keys == ({f"x/{n}" for n in want_in} | {f"expected/{n}" for n in want_out}
                        | {f"y/{n}" for n in model.labels})
        x = {n: samples[f"x/{n}"] for n in want_in}
        expected = {n: samples[f"expected/{n}"] for n in want_out}
    for n, (dtype, shape) in want_in.items():
        assert x[n].dtype == np.dtype(dtype) and x[n].shape == (min(32, report.data.held_out_rows), *shape[1:])
    original = zoo.predict(model, x)
    for n in want_out:
        np.testing.assert_allclose(expected[n], original[n], rtol=1e-4, atol=1e-5)


def _assert_measured_choice(report: object) -> None:
    """The chosen artifact x runtime x signature is a measured, accepted candidate: the fastest, or within noise
    of it (a smaller file, a smaller runtime, the contract's own signature)."""
    measured = [c for c in report.selection.candidates  # type: ignore[attr-defined]
                if c.p50_us is not None and not c.error and report.artifact(c.artifact).accepted]  # type: ignore[attr-defined]
    key = (report.chosen, report.chosen_runtime, report.chosen_signature)  # type: ignore[attr-defined]
    picked = next(c for c in measured if (c.artifact, c.runtime, c.signature) == key)
    fastest = min(measured, key=lambda c: c.p50_us)
    # within noise: the two medians' 95% confidence intervals overlap (no fixed band)
    assert picked is fastest or picked.ci_low_us <= fastest.ci_high_us, (picked, fastest)


def _samples_are_the_originals(out: Path, model: zoo.ZooModel, rows: int) -> None:
    """samples.npz: named keys, the original dtypes (strings as fixed-width bytes), the ORIGINAL's answers."""
    with np.load(out / "samples.npz", allow_pickle=False) as samples:
        assert set(samples.files) == ({f"x/{n}" for n in model.inputs} | {f"expected/{n}" for n in model.outputs}
                                      | {f"y/{n}" for n in model.labels})
        x = {n: samples[f"x/{n}"] for n in model.inputs}
        expected = {n: samples[f"expected/{n}"] for n in model.outputs}
    data = zoo.load_data(model)["x_val"]
    for n, (dtype, shape) in model.inputs.items():
        assert x[n].dtype.kind == "S" if dtype == "string" else x[n].dtype == np.dtype(dtype)
        assert x[n].shape == (min(32, rows), *data[n].shape[1:]) and len(shape) == x[n].ndim
        np.testing.assert_array_equal(x[n], data[n][: len(x[n])])
    original = zoo.predict(model, x)
    for n in model.outputs:
        np.testing.assert_allclose(expected[n], original[n], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", zoo.TF_NAMES)
def test_what_litert_cannot_serve_still_completes_with_what_can_be_served(
        name: str, zoo_dir: pytest.TempPathFactory, built: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    from builder.report import Report

    model = _model(name, zoo_dir, built)
    run = zoo_runs.auto(name, "host", zoo_dir)  # run from the model's folder: --import finds the user's module there
    out, code, stdout, stderr = run.out, run.code, run.stdout, run.stderr
    assert code == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    report = Report.load(out)
    assert_every_step_said(report)
    contract = report.contract
    assert {t.name: (t.dtype, t.shape) for t in contract.inputs} == model.inputs
    assert {t.name: (t.dtype, t.shape) for t in contract.outputs} == {n: (d, s) for n, (d, s, _) in model.outputs.items()}
    assert contract.signature == model.signature
    assert report.gate.passed and report.chosen_artifact.accepted and report.selection.measured
    _assert_measured_choice(report)
    formats = {a.format for a in report.artifacts}
    saved = report.artifact("saved_model")
    assert saved.accepted and saved.runtime == "tensorflow"
    if report.sparsity is None:  # not pruned (a model without a plain .tflite may be): the float model, unchanged
        assert all((m.relative_error or 0) < 1e-3 for m in saved.metrics)
    tf_rows = {(c.runtime, c.signature) for c in report.selection.candidates if c.artifact == "saved_model"}
    assert ("tensorflow", model.signature) in tf_rows
    if name in ("gru_sequence", "text_classifier"):
        # No plain .tflite: one note with the converter's own words, the whole text in OUT/logs.
        cause = {"gru_sequence": "'tf.TensorListReserve' op requires element_shape to be static",
                 "text_classifier": "'tf.StringLower' op is neither a custom op nor a flex op"}[name]
        note = next(n for n in report.notes if n.startswith("no plain .tflite"))
        assert cause in note and f"{out}/logs/convert-fp32.log" in note
        assert cause in (out / "logs" / "convert-fp32.log").read_text()
        assert f"note: {note}" in stdout
        assert formats - set(registry.IR_FORMATS) == {"saved_model", "tflite_select_tf"}
        assert not (out / "model_fp32.tflite").exists()
        if name == "text_classifier":  # OpenVINO's converter cannot take string ops either: one note says so
            assert not formats & set(registry.IR_FORMATS)
            assert any(n.startswith("openvino_fp32.xml") and "not written: OpenVINO's converter refused the model" in n
                       for n in report.notes) or importlib.util.find_spec("openvino") is None
        select = report.artifact("model_select_tf.tflite")
        assert select.runtime == "tensorflow" and (out / select.path).is_file()
        if select.extra.get("runnable_here") is False:  # a TensorFlow without the Flex delegate (stock wheel)
            assert not select.accepted and "Flex delegate" in select.reason and "logs/run-" in select.reason
        # TensorFlow serves what LiteRT cannot, or one of OpenVINO's IRs where its converter took the model (a
        # GRU's tensor lists), it passed the gate and it measured faster (float or int8: which one wins is timing)
        chosen = report.artifact(report.chosen)
        assert (report.chosen, report.chosen_runtime) == ("saved_model", "tensorflow") or (
            chosen.format in registry.IR_FORMATS and report.chosen_runtime in registry.IR_RUNTIMES)
        assert chosen.accepted
    else:
        assert {"saved_model", "tflite_fp32", "tflite_int8"} <= formats
    if name == "text_classifier":
        assert report.chosen_signature == "serving_default"  # string ops have no XLA kernels: no serving_xla
        assert ("tensorflow", "serving_xla") not in tf_rows
    else:
        assert ("tensorflow", "serving_xla") in tf_rows
    if report.chosen_signature == "serving_xla":  # only when measured faster beyond noise than the contract's
        rows = {c.signature: c for c in report.selection.candidates if c.artifact == "saved_model"}
        assert rows["serving_xla"].ci_high_us < rows[model.signature].ci_low_us  # the intervals do not overlap
    if name == "predict_module":
        assert report.chosen_signature == "predict"
        for artifact in report.artifacts:
            if artifact.path.endswith(".tflite"):
                assert _litert_signature_keys(out / artifact.path) == ["predict"], artifact.path
    _samples_are_the_originals(out, model, report.data.held_out_rows)


def _litert_signature_keys(path: Path) -> list[str]:
    from ai_edge_litert.interpreter import Interpreter

    return list(Interpreter(model_path=str(path)).get_signature_list())


def test_what_the_user_must_name_is_asked_for_in_one_line(zoo_dir: pytest.TempPathFactory, built: dict, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    """A custom layer without --import, a failing --import, a SavedModel without serving_default and no
    --signature: one line each, the library's cause whole, the whole text in the log it names, --out untouched."""
    custom, module = _model("custom_layer", zoo_dir, built), _model("predict_module", zoo_dir, built)
    out = tmp_path / "out"
    cases = [
        ([custom.model_path, "--data", custom.data_path], ["Keras 3 cannot load it: Could not locate class 'Gate'.",
                                                           "--import MODULE"]),
        ([custom.model_path, "--data", custom.data_path, "--import", "no_such_module_here"],
         ["--import no_such_module_here: cannot import it: ModuleNotFoundError: No module named 'no_such_module_here'"]),
        ([module.model_path, "--data", module.data_path], ["has no serving_default signature (it has: predict)",
                                                           "--signature predict"]),
        ([module.model_path, "--data", module.data_path, "--signature", "serve"], ["has no signature 'serve'"]),
    ]
    for args, expected in cases:
        zoo.forget_module(zoo.CUSTOM_MODULE)  # as in a fresh process: an earlier test imported it here
        code, _, stderr = run_cli(monkeypatch, capfd, "optimize", *args, "--out", out, "--latency-runs", "10")
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
        assert lines[-1].startswith("tfsmith: error: ") and all(e in lines[-1] for e in expected), lines[-1]
        if "(full text: " in lines[-1]:
            log = Path(lines[-1].split("(full text: ", 1)[1].split(")", 1)[0])
            assert log.is_file() and expected[0].split(": ")[-1].split(".")[0] in log.read_text()
    assert not out.exists()


def test_another_target_is_decided_by_rule_and_says_it_could_not_measure(
        zoo_dir: pytest.TempPathFactory, built: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    from builder.report import Report

    model = _model("regression", zoo_dir, built)
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", model.model_path, "--data", model.data_path,
                                     "--recipe", "auto", "--target", "x86-64-v3", "--out", out,
                                     "--latency-runs", "10")
    assert code == 0, stderr[-3000:]
    report = Report.load(out)
    assert not report.selection.measured and "could not be measured" in report.selection.how
    assert report.chosen == "model_dynamic.tflite" and report.chosen_runtime == "litert"  # no VNNI: the rule
    assert report.chosen_artifact.metric("target").metric == "relative_error"


def test_explain_loads_the_model_and_plans_for_it(zoo_dir: pytest.TempPathFactory, built: dict, monkeypatch: pytest.MonkeyPatch,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    model = _model("token_ids", zoo_dir, built)
    code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", model.model_path, "--data", model.data_path,
                                     "--explain")
    assert code == 0, stderr
    assert "contract: inputs tokens int32[?,16]; outputs sentiment float32[?,2]" in stdout
    assert "quality of sentiment: classification" in stdout


def test_a_string_model_is_served_by_tensorflow_and_the_converter_says_why_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """String inputs are no longer refused: --explain plans the SavedModel on TensorFlow and says why there is no
    plain .tflite, with the converter's own first error line (never cut, no MLIR location before it)."""
    from builder.optimize import tfenv
    from builder.report import Report

    tf = tfenv.tensorflow()

    class Echo(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def serve(self, text):  # type: ignore[no-untyped-def]
            return {"length": tf.cast(tf.strings.length(tf.strings.lower(text)), tf.float32)}

    module = Echo()
    saved = tmp_path / "strings"
    tf.saved_model.save(module, str(saved), signatures={"serving_default": module.serve})
    np.savez(tmp_path / "d.npz", x_val=np.array(["hi", "thére", "Hello world"]))  # str: stored as UTF-8 bytes
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", saved, "--data", tmp_path / "d.npz", "--explain")
    assert code == 0 and "Traceback" not in stderr, stderr[-2000:]
    assert "contract: inputs text string[?]" in stdout
    note = next(line for line in stdout.splitlines() if line.startswith("note: no plain .tflite"))
    assert "'tf.StringLower' op is neither a custom op nor a flex op" in note and "loc(" not in note
    log = Path(note.split("(full text: ", 1)[1].split(")", 1)[0])  # --explain writes it to a temp folder
    assert log.is_file() and "StringLower" in log.read_text() and not out.exists()
    code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", saved, "--data", tmp_path / "d.npz", "--out", out,
                                   "--latency-runs", "10")
    assert code == 0 and "Traceback" not in stderr, stderr[-2000:]
    report = Report.load(out)
    assert (report.chosen, report.chosen_runtime, report.chosen_signature) == ("saved_model", "tensorflow",
                                                                               "serving_default")
    with np.load(out / "samples.npz", allow_pickle=False) as samples:
        text = samples["x/text"]
        np.testing.assert_array_equal(samples["expected/length"], [2, 6, 11])  # UTF-8 bytes: "é" is two
    assert text.dtype.kind == "S" and list(np.char.decode(text, "utf-8")) == ["hi", "thére", "Hello world"]


def test_a_regression_int8_file_that_is_off_is_rejected_and_auto_serves_an_accepted_one(
        zoo_dir: pytest.TempPathFactory, built: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    """Calibration rows that are all zeros collapse int8's input ranges: the regression answers drift far more
    than argmax of one column could ever show. The gate must see it through the relative error."""
    from builder.report import Report

    model = _model("regression", zoo_dir, built)
    arrays = dict(np.load(model.data_path))
    arrays["x_calib/features"] = np.zeros_like(arrays["x_calib/features"])
    data = tmp_path / "zeros_calib.npz"
    np.savez(data, **arrays)
    out = tmp_path / "out"
    code, _, stderr = run_cli(monkeypatch, capfd, "optimize", model.model_path, "--data", data, "--recipe", "auto",
                                "--out", out, "--latency-runs", "10")
    assert code == 0, stderr[-3000:]
    report = Report.load(out)
    int8 = next(a for a in report.artifacts if a.format == "tflite_int8")
    metric = int8.metric("target")
    assert not int8.accepted and metric.metric == "relative_error" and metric.value > metric.limit
    assert metric.mae > metric.original_mae and "target: relative_error" in int8.reason
    assert report.chosen != int8.path and report.chosen_artifact.accepted
    assert all(c.artifact != int8.path for c in report.selection.candidates
               if (c.artifact, c.runtime) == (report.chosen, report.chosen_runtime))
