"""`tfsmith bench` end to end on a TINY model: every runtime adapter loads and agrees with the float model, or
reports why it cannot; a whole run with a very small budget writes parseable bench.json / bench.md / bench.png.

The model is the example CNN (`tfsmith example`'s architecture, made tiny) trained for a few epochs on
scikit-learn's bundled digits, so its accuracy is real (if modest) and int8 agreement means something. The
.tflite files come from optimize's converter. No wall-clock assertions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf

REPO = Path(__file__).resolve().parents[2]
TFSMITH = [str(REPO / ".venv" / "bin" / "tfsmith")] if (REPO / ".venv" / "bin" / "tfsmith").exists() else [
    sys.executable, "-m", "builder.cli"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """MODEL (.h5, tf_keras) + DATA (.npz) for a tiny digits CNN, the way `tfsmith example` writes them."""
    pytest.importorskip("tf_keras")
    from builder.bench.runtimes import configure_tf_threads
    from builder.optimize.example import build_cnn, digits_arrays

    configure_tf_threads(2)
    folder = tmp_path_factory.mktemp("tiny")
    data = digits_arrays()
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    model = build_cnn(width=8, dense=32)
    model.fit(data["x_train"], data["y_train"], epochs=4, batch_size=32, verbose=0)
    model.save(str(folder / "tiny.h5"))
    np.savez(folder / "digits.npz", **data)
    return {"model": folder / "tiny.h5", "data": folder / "digits.npz", "dir": folder}


@pytest.fixture(scope="module")
def bench_model(tiny: dict[str, Path]):  # -> BenchModel
    from builder.bench.models import resolve

    model = resolve(str(tiny["model"]), tiny["data"], tiny["dir"] / "artifacts")
    assert model.trained and model.y_eval is not None
    return model


def test_every_adapter_agrees_with_the_float_model_or_says_why(bench_model, tiny: dict[str, Path]) -> None:
    from builder.bench.runtimes import ALL_RUNTIMES, build_adapters
    from builder.bench.harness import _predict

    adapters, missing = build_adapters(list(ALL_RUNTIMES), bench_model, 2, tiny["dir"] / "adapters")
    assert not missing, missing  # a Keras file + DATA gives every runtime its artifact
    x = bench_model.x_eval[:64]
    reference = None
    for adapter in adapters:
        adapter.load()
        scores = _predict(adapter, x, 8)
        assert scores.shape == (64, 10), adapter.name
        if adapter.name == "savedmodel":
            reference = scores
    assert reference is not None
    for adapter in adapters:
        scores = _predict(adapter, x, 8)
        agreement = float(np.mean(scores.argmax(-1) == reference.argmax(-1)))
        if adapter.name.endswith(("fp32", "keras", "savedmodel", "xla")):
            np.testing.assert_allclose(scores, reference, atol=2e-4, err_msg=adapter.name)
        else:  # quantized / fp16: same decisions on nearly every input
            assert agreement >= 0.9, (adapter.name, agreement)


def test_a_runtime_that_cannot_load_is_reported_not_dropped(bench_model, tiny: dict[str, Path]) -> None:
    from builder.bench.harness import Settings, run_bench

    broken = type(bench_model)(**{**bench_model.__dict__,
                                  "tflite": {**bench_model.tflite, "fp16": tiny["dir"] / "missing.tflite"}})
    run = run_bench(broken, ["savedmodel", "litert-fp16", "litert-int8"],
                    Settings(threads=2, batch=8, budget_s=0.2, min_rounds=1), tiny["dir"] / "w")
    by_name = {r.name: r for r in run.results}
    assert set(by_name) == {"savedmodel", "litert-fp16", "litert-int8"}
    assert not by_name["litert-fp16"].ok and by_name["litert-fp16"].reason
    assert by_name["litert-int8"].ok and by_name["litert-int8"].latency.n >= 1
    assert run.recommendation.runtime == "litert-int8"


def test_bench_cli_writes_parseable_reports_and_a_profile(tiny: dict[str, Path], tmp_path: Path) -> None:
    out, profile = tmp_path / "out", tmp_path / "profile"
    done = subprocess.run(
        [*TFSMITH, "bench", str(tiny["model"]), "--data", str(tiny["data"]), "--threads", "2", "--batch", "1,8",
         "--budget-s", "0.5", "--out", str(out), "--profile", str(profile)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-3000:]
    from builder.bench.results import BenchRun
    from builder.bench.runtimes import ALL_RUNTIMES

    run = BenchRun.from_dict(json.loads((out / "bench.json").read_text()))
    assert [r.name for r in run.results] == list(ALL_RUNTIMES)
    for result in run.results:
        assert result.ok or result.reason, result.name  # loaded, or says why
        if result.ok:
            assert result.latency.n >= 1 and result.batch_size == 8 and result.gzip_bytes > 0
            assert result.accuracy is not None and 0.0 <= result.accuracy <= 1.0
    assert sum(r.recommended for r in run.results) == 1
    assert run.recommendation.runtime in done.stdout and "★ recommended" in done.stdout
    assert "| runtime |" in (out / "bench.md").read_text()
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert list(profile.rglob("*.xplane.pb")), "no profiler trace written"
    assert any("profile:" in note for note in run.notes)


def test_recommend_tflite_runtime_measures_both_here(bench_model) -> None:
    from builder.bench.recommend import recommend_tflite_runtime

    name, reason, numbers = recommend_tflite_runtime(bench_model.tflite["int8"], threads=2, budget_s=0.5)
    assert name in ("litert", "openvino") and reason
    assert numbers["litert"]["n"] >= 1 and numbers["threads"] == 2
    assert "openvino" in numbers or "openvino_error" in numbers


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([*TFSMITH, "bench", "no-such-model"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tfsmith: error: MODEL 'no-such-model' is neither a file, a folder, nor a built-in "
        "(example, mobilenet_v2, resnet50)"]
    assert not (tmp_path / "bench-out").exists()


def test_bench_times_the_files_optimize_converts(bench_model) -> None:
    """Every .tflite bench made is byte for byte what optimize's converter makes from the same SavedModel."""
    from builder.optimize.quantize import convert_saved_model

    modes = {"fp32": "fp32", "dynamic": "dynamic", "fp16": "float16", "int8": "int8"}
    assert set(bench_model.tflite) == set(modes)
    for variant, mode in modes.items():
        expected = convert_saved_model(bench_model.saved_model, mode, bench_model.x_calib if mode == "int8" else None)
        assert bench_model.tflite[variant].read_bytes() == expected, variant


def test_an_optimize_folder_is_timed_as_shipped_and_its_choice_compared(bench_model, tiny: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """Given an optimize --out folder, bench times ITS files and says how optimize's choice compares."""
    import shutil

    from builder.bench.harness import Settings, run_bench
    from builder.bench.models import resolve

    folder = tmp_path / "optimized"
    folder.mkdir()
    shutil.copytree(bench_model.saved_model, folder / "saved_model")
    shipped = folder / "model_dynamic.tflite"
    shutil.copy(bench_model.tflite["dynamic"], shipped)
    (folder / "report.json").write_text(json.dumps({
        "model": {"source": str(tiny["model"]), "format": "keras2"},
        "chosen": "model_dynamic.tflite", "chosen_runtime": "litert"}))
    model = resolve(str(folder), tiny["data"], tmp_path / "work")
    assert model.tflite["dynamic"] == shipped and model.shipped == "litert-dynamic"
    run = run_bench(model, ["savedmodel", "litert-dynamic", "litert-fp32"],
                    Settings(threads=2, batch=8, budget_s=0.3, min_rounds=1), tmp_path / "w")
    assert run.shipped == "litert-dynamic"
    assert run.notes[0].startswith("optimize's choice (litert-dynamic, p50 ")
    assert "fastest runtime measured here" in run.notes[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["keras3", "regression", "token_ids", "ready_tflite"])
def test_user_models_of_other_shapes_are_timed_and_judged(name: str, tmp_path: Path) -> None:
    """Zoo models bench was not written around: Keras 3, a regression output, int32 ids, a ready .tflite."""
    from builder.bench.harness import Settings, run_bench
    from builder.bench.models import resolve
    from tests import zoo

    model = zoo.build(name, tmp_path / "zoo")
    bench = resolve(str(model.model_path), model.data_path, tmp_path / "work")
    assert bench.tflite.get("fp32") is not None, bench.failures
    runtimes = ["litert-fp32"] + ([] if name == "ready_tflite" else ["savedmodel", "litert-int8"])
    run = run_bench(bench, runtimes, Settings(threads=2, batch=4, budget_s=0.2, min_rounds=1), tmp_path / "w")
    by_name = {r.name: r for r in run.results}
    assert all(r.ok for r in run.results), {r.name: r.reason for r in run.results}
    fp32 = by_name["litert-fp32"]
    if name == "regression":  # one column: judged by relative error, not by an argmax that always agrees
        assert fp32.accuracy is None and fp32.agreement is None and fp32.relative_error < 1e-4
        assert by_name["litert-int8"].relative_error is not None
    else:
        assert fp32.accuracy is not None and fp32.accuracy >= model.val_metric[next(iter(model.outputs))] - 0.02
    assert run.recommendation.runtime is not None, run.recommendation.reason


@pytest.mark.slow
@pytest.mark.parametrize("name", ["two_inputs", "tf_module"])
def test_several_inputs_or_outputs_are_refused_in_one_line(name: str, tmp_path: Path) -> None:
    from builder.bench.models import resolve
    from builder.errors import InputError
    from tests import zoo

    model = zoo.build(name, tmp_path / "zoo")
    with pytest.raises(InputError, match="measures models with one input and one output") as raised:
        resolve(str(model.model_path), None, tmp_path / "work")
    assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_a_saved_model_whose_only_signature_is_predict_is_timed_through_it(tmp_path: Path) -> None:
    """A tf.Module with only `predict`: the SavedModel runtimes call that signature and the converter converts it."""
    from builder.bench.harness import Settings, run_bench
    from builder.bench.models import resolve
    from tests import zoo

    model = zoo.build("predict_module", tmp_path / "zoo")
    bench = resolve(str(model.model_path), model.data_path, tmp_path / "work")
    assert bench.signature == "predict" and bench.tflite.get("fp32") is not None, bench.failures
    run = run_bench(bench, ["savedmodel", "litert-fp32"], Settings(threads=2, batch=4, budget_s=0.2, min_rounds=1),
                    tmp_path / "w")
    assert all(r.ok for r in run.results), {r.name: r.reason for r in run.results}
    fp32 = next(r for r in run.results if r.name == "litert-fp32")
    assert fp32.accuracy is not None and fp32.accuracy >= model.val_metric["malignant"] - 0.02


def test_string_or_variable_length_inputs_are_refused_in_one_line(tmp_path: Path) -> None:
    from builder.bench.models import resolve
    from builder.errors import InputError
    from builder.optimize import tfenv

    tf = tfenv.tensorflow()
    for dtype, shape in ((tf.string, [None, 1]), (tf.float32, [None, None, 3])):
        module = tf.Module()
        module.serve = tf.function(lambda x: {"y": tf.reduce_sum(tf.ones_like(tf.strings.length(x) if dtype == tf.string
                                                                              else x, dtype=tf.float32), axis=-1)},
                                   input_signature=[tf.TensorSpec(shape, dtype, name="x")])
        folder = tmp_path / f"m_{dtype.name}"
        tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
        with pytest.raises(InputError, match="bench times one fixed-shape numeric input") as raised:
            resolve(str(folder), None, tmp_path / "work")
        assert "\n" not in str(raised.value) and "tfsmith optimize's report" in str(raised.value)
