"""`tfsmith example` and `tfsmith optimize` as a user runs them, on a real (tiny) trained digits CNN.

One example model is trained per session (a real `tfsmith example` subprocess); the happy path runs as a real
subprocess too. The other runs call the console-script entry point (`builder.cli.main`) in this process, so
TensorFlow is imported once: same parsing, same one-line errors and exit codes, a fraction of the time.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from builder.model import registry

from tests.e2e.inprocess import run_cli

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "tf_keras", "tensorflow_model_optimization",
                                                     "ai_edge_litert")):
    pytest.skip("needs the optimize extra (tensorflow, tf_keras, tfmot, ai-edge-litert)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
GATE_FAILED = 3
#: OpenVINO's IR, written beside the .tflite files where OpenVINO is installed: float, and int8 where int8 is built
OPENVINO = importlib.util.find_spec("openvino") is not None
IR = {"openvino_ir_fp32"} if OPENVINO else set()
IR_INT8 = {*IR, "openvino_ir_int8"} if OPENVINO else set()


def _cli() -> list[str]:
    return [str(TFSMITH)] if TFSMITH.exists() else [sys.executable, "-m", "builder"]


@pytest.fixture(scope="session")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("example")
    proc = subprocess.run([*_cli(), "example", "--out", str(out), "--epochs", "6"], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "validation accuracy" in proc.stdout
    model, data = out / "digits_cnn.keras", out / "digits.npz"
    with zipfile.ZipFile(model) as archive:  # a Keras 2 (tf_keras) file: prunable
        assert json.loads(archive.read("metadata.json"))["keras_version"].startswith("2.")
    arrays = np.load(data)
    assert set(arrays.files) == {"x_train", "y_train", "x_val", "y_val", "x_calib"}
    return {"model": model, "data": data, "dir": out}


@pytest.fixture()
def tfsmith(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    """Run the console-script entry point in-process; returns (exit status, stdout, stderr)."""

    def run(*args: object) -> tuple[int, str, str]:
        argv = [*map(str, args)]
        if argv[0] == "optimize" and "--explain" not in argv:
            argv += ["--latency-runs", "30"]  # correctness here; timings are the benchmark's job
        return run_cli(monkeypatch, capfd, *argv)

    return run


def _report(out: Path):
    from builder.report import Report

    return Report.load(out)


def _formats(report) -> dict:
    return {a.format: a for a in report.artifacts}


def _signature(path: Path) -> tuple[dict, dict]:
    """A .tflite's serving signature as LiteRT lists it: {name: (dtype, shape)} for inputs and outputs."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    runner = it.get_signature_runner(next(iter(it.get_signature_list())))
    def side(details: dict) -> dict:
        return {n: (np.dtype(d["dtype"]).name, tuple(int(x) for x in d["shape_signature"])) for n, d in details.items()}
    return side(runner.get_input_details()), side(runner.get_output_details())


def _no_leftovers(out: Path) -> None:
    assert not out.exists(), f"{out} was created by a failed run"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "staging dir left behind"


def _write_recipe(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- the happy path, from a fresh process ---------------------------------------------------------------


def test_example_through_auto_recipe_produces_artifacts_report_and_plot(example: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    out = tmp_path / "optimized"
    proc = subprocess.run([*_cli(), "optimize", str(example["model"]), "--data", str(example["data"]),
                           "--recipe", "auto", "--out", str(out), "--latency-runs", "50"], capture_output=True, text=True, timeout=400,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "report:" in proc.stdout
    for name in ("saved_model/saved_model.pb", "model_fp32.tflite", "model_dynamic.tflite", "model_int8.tflite",
                 "report.json", "report.md", "report.png", "samples.npz"):
        assert (out / name).is_file(), name
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = _report(out)
    formats = _formats(report)
    assert {"saved_model", "tflite_fp32", "tflite_dynamic", "tflite_int8"} <= set(formats)
    assert report.chosen in {a.path for a in report.artifacts} and report.chosen.endswith(".tflite")
    assert report.chosen_runtime in registry.TFLITE_RUNTIMES and report.selection.measured
    assert report.gate.passed is True and report.chosen_artifact.accepted
    assert report.model.format == "keras2" and report.contract.input_names == ("image",)
    assert report.contract.output_names == ("probs",) and report.contract.outputs[0].task == "classification"
    if report.sparsity:  # kept only when the pruned model agrees with the original
        assert report.sparsity["achieved"] >= report.sparsity["target"] - 0.01
        assert any(n.startswith("pruning kept") for n in report.notes)
    else:
        assert any(n.startswith("pruning dropped") for n in report.notes)
    want = ({"image": ("float32", (-1, 8, 8, 1))}, {"probs": ("float32", (-1, 10))})
    for artifact in report.artifacts:
        assert artifact.size_bytes > artifact.gzip_bytes > 0
        assert artifact.latency_us.p99 >= artifact.latency_us.p50 > 0
        assert artifact.throughput["samples_per_s"] > 0 and artifact.threads == 2
        assert artifact.contract_kept
        metric = artifact.metric("probs")
        assert metric.metric == "accuracy_drop" and 0.0 <= metric.accuracy <= 1.0 and metric.agreement >= 0.9
        assert (out / artifact.path).exists()
        if artifact.path.endswith(".tflite"):  # float in, float out, the original names: int8 included
            assert _signature(out / artifact.path) == want, artifact.path
    # int8 weights against float ones: the dense float file (a pruned model's model_fp32.tflite stores its zeros sparse)
    dense_fp32 = report.sparsity["unpruned_fp32"]["size_bytes"] if report.sparsity else formats["tflite_fp32"].size_bytes
    assert formats["tflite_dynamic"].size_bytes < dense_fp32 / 3
    assert report.data.held_out_rows == len(np.load(example["data"])["x_val"])
    assert report.data.calibration_from == "x_calib" and report.data.labels == ("probs",)
    assert report.host["cpu_features"] and report.reasons
    timed = {(c.artifact, c.runtime) for c in report.selection.candidates if c.p50_us}
    assert {(a.path, "litert") for a in report.artifacts if a.path.endswith(".tflite")} <= timed
    assert (report.chosen, report.chosen_runtime) in timed
    md = (out / "report.md").read_text()
    assert report.chosen in md and "quality gate" in md.lower()
    raw = json.loads((out / "report.json").read_text())
    assert raw["schema"] == 2 and all("format" in a and "kind" not in a for a in raw["artifacts"])

    # samples.npz: named keys; the SavedModel's serving_default, called by keyword, reproduces `expected`.
    samples = np.load(out / "samples.npz")
    assert set(samples.files) == {"x/image", "expected/probs", "y/probs"}
    assert samples["x/image"].shape == (32, 8, 8, 1) and samples["expected/probs"].shape == (32, 10)
    check = subprocess.run([sys.executable, "-c", (
        "import os, sys, numpy as np; os.environ['TF_CPP_MIN_LOG_LEVEL']='3'; import tensorflow as tf\n"
        f"s = np.load({str(out / 'samples.npz')!r}); m = tf.saved_model.load({str(out / 'saved_model')!r})\n"
        "f = m.signatures['serving_default']; y = f(image=tf.constant(s['x/image']))['probs'].numpy()\n"
        "print(float(np.mean(y.argmax(1) == s['expected/probs'].argmax(1))))")],
        capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr[-2000:]
    assert float(check.stdout.strip().splitlines()[-1]) >= 0.9


# --- recipes ---------------------------------------------------------------------------------------------


def test_prune_80_with_pruning_preserving_qat(example: dict[str, Path], tmp_path: Path, tfsmith) -> None:
    recipe = _write_recipe(tmp_path / "p80.toml", (
        'choose = "tflite_qat_int8"\n[pruning]\nsparsity = 0.8\nepochs = 1\n'
        '[quantization]\nmodes = ["int8"]\nqat = true\nqat_epochs = 1\n[export]\ntflite_fp32 = false\n'))
    out = tmp_path / "out"
    code, stdout, stderr = tfsmith("optimize", example["model"], "--data", example["data"], "--recipe", recipe,
                                   "--out", out, "--max-accuracy-drop", "0.2")
    assert code == 0, stderr
    report = _report(out)
    assert report.sparsity["target"] == 0.8
    assert report.sparsity["achieved"] == pytest.approx(0.8, abs=0.01)
    assert set(_formats(report)) == {"saved_model", "tflite_int8", "tflite_qat_int8", *IR_INT8}
    assert report.chosen == "model_qat_int8.tflite"  # the recipe names it: its runtime and precision are measured
    assert report.selection.measured and "the recipe names model_qat_int8.tflite" in report.selection.how
    qat = _formats(report)["tflite_qat_int8"]
    assert qat.inputs[0].dtype == "float32" and qat.contract_kept and qat.metric("probs").accuracy > 0.8
    assert _signature(out / qat.path)[1] == {"probs": ("float32", (-1, 10))}
    # A recipe that asks for pruning gets it when the pruned model agrees with the original, and says so.
    assert any(n.startswith("pruning kept") for n in report.notes)
    saved = _formats(report)["saved_model"]
    # 80% zeros compress: the pruned SavedModel gzips well below the float baseline.
    assert saved.gzip_bytes < report.baseline.gzip_bytes * 0.6
    assert "sparsity: target 0.800" in stdout


def test_structured_2_4_with_dynamic_and_float16(example: dict[str, Path], tmp_path: Path, tfsmith) -> None:
    recipe = _write_recipe(tmp_path / "s24.yaml", (
        "pruning:\n  structured: '2:4'\n  epochs: 1\nquantization:\n  modes: [dynamic, float16]\n"
        "export:\n  xla: true\n"))
    out = tmp_path / "out"
    code, _, stderr = tfsmith("optimize", example["model"], "--data", example["data"], "--recipe", recipe,
                              "--out", out, "--max-accuracy-drop", "0.5")
    assert code == 0, stderr
    report = _report(out)
    assert report.sparsity["structured"] == "2:4"
    assert report.sparsity["layers"] and all(v == pytest.approx(0.5, abs=0.01)
                                             for v in report.sparsity["layers"].values())
    formats = _formats(report)
    assert set(formats) == {"saved_model", "tflite_fp32", "tflite_dynamic", "tflite_float16", *IR}
    dense = report.sparsity["unpruned_fp32"]["size_bytes"]  # the float .tflite of the original's weights
    assert formats["tflite_float16"].size_bytes < dense * 0.6
    assert formats["tflite_fp32"].size_bytes < dense * 0.9  # the pruned zeros are stored sparse
    assert report.chosen == "model_dynamic.tflite"
    assert formats["saved_model"].extra["signatures"] == ["serving_default", "serving_xla"]


def test_keras3_model_is_pruned_by_tfsmith_and_judged_by_the_gate(example: dict[str, Path], tmp_path: Path,
                                                                   tfsmith) -> None:
    """tfmot takes only tf_keras models: a Keras 3 model is pruned by tfsmith's own magnitude pruning (fine-tuned
    on x_train), judged against the original like any pruned model; only QAT (tfmot's) is skipped."""
    import keras  # Keras 3, next to tf_keras in the same process (TF_USE_LEGACY_KERAS only changes tf.keras)

    assert keras.__version__.startswith("3.")
    arrays = np.load(example["data"])
    keras.utils.set_random_seed(0)
    k3 = tmp_path / "k3.keras"
    model = keras.Sequential([keras.Input((8, 8, 1), name="image"), keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax", name="digit")])
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(arrays["x_train"], arrays["y_train"], epochs=5, verbose=0)
    model.save(k3)
    recipe = _write_recipe(tmp_path / "r.toml", 'choose = "tflite_int8"\n[pruning]\nsparsity = 0.6\nepochs = 2\n'
                                                '[quantization]\nmodes = ["int8"]\nqat = true\n[export]\nopenvino = false\n')
    code, stdout, _ = tfsmith("optimize", k3, "--data", example["data"], "--recipe", recipe, "--explain")
    assert code == 0 and "QAT skipped" in stdout and "only Keras 2" in stdout
    assert "pruning: 60% polynomial, 2 fine-tuning epochs" in stdout
    out = tmp_path / "out"
    code, stdout, stderr = tfsmith("optimize", k3, "--data", example["data"], "--recipe", recipe, "--out", out,
                                   "--max-accuracy-drop", "0.2")
    assert code == 0, stderr
    report = _report(out)
    assert report.model.format == "keras3" and report.model.keras_version.startswith("3.")
    pruning = next(a for a in report.attempts if a.step == "pruning")
    assert pruning.outcome == "done" and "keeps the original's answers within the gate" in pruning.line, pruning
    assert report.sparsity["target"] == 0.6 and report.sparsity["achieved"] == pytest.approx(0.6, abs=0.01)
    assert set(report.sparsity["layers"]) == {"conv2d", "digit"}
    assert report.sparsity["schedule"]["end_step"] > 0
    assert any(n.startswith("QAT skipped") for n in report.notes) and "QAT skipped" in stdout
    assert report.chosen == "model_int8.tflite" and all(a.accepted for a in report.artifacts)
    # the pruned weights are what was exported and converted: the served SavedModel's kernels hold the zeros
    import tensorflow as tf

    kernels = [v.numpy() for v in tf.saved_model.load(str(out / "saved_model")).variables if len(v.shape) > 1]
    assert len(kernels) == 2 and all(np.mean(k == 0) == pytest.approx(0.6, abs=0.01) for k in kernels)

def test_quality_gate_fails_but_keeps_artifacts_marked_rejected(example: dict[str, Path], tmp_path: Path,
                                                                tfsmith) -> None:
    # Calibration rows that are all zeros: int8 input ranges collapse and real inputs clip, so the int8
    # artifact loses far more than the 1-point allowance (the mistake the gate exists to catch).
    data = _bad_data(example, tmp_path / "zeros.npz", x_calib=np.zeros((20, 8, 8, 1), np.float32))
    # the recipe names the int8 file: without `choose`, the measured choice would be the accepted float file
    recipe = _write_recipe(tmp_path / "int8.toml", 'choose = "tflite_int8"\n[quantization]\nmodes = ["int8"]\n')
    out = tmp_path / "out"
    code, _, stderr = tfsmith("optimize", example["model"], "--data", data, "--recipe", recipe,
                              "--out", out, "--max-accuracy-drop", "0.01")
    assert code == GATE_FAILED
    assert stderr.strip().splitlines()[-1].startswith("tfsmith: error: quality gate failed: model_int8.tflite")
    report = _report(out)
    assert report.gate.passed is False and "accuracy_drop" in report.gate.chosen_reason
    assert report.gate.judged_against == "original"
    for artifact in report.artifacts:
        assert artifact.accepted is (artifact.metric("probs").value <= 0.01)
        assert (out / artifact.path).exists()  # kept for inspection
    chosen = report.chosen_artifact
    assert chosen.accepted is False and chosen.metric("probs").value > 0.01 and "probs: accuracy_drop" in chosen.reason
    assert _formats(report)["tflite_fp32"].accepted is True  # only what lost accuracy is rejected
    assert "REJECTED" in (out / "report.md").read_text()


# --- bad input: one line, non-zero, nothing in --out ----------------------------------------------------


def _assert_one_line_error(code: int, stderr: str, fragment: str) -> None:
    assert code == 2, stderr
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert lines[-1].startswith("tfsmith: error: ") and fragment in lines[-1], stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("kind", ["missing", "garbage", "truncated", "zip-without-config"])
def test_missing_or_corrupt_model(example: dict[str, Path], tmp_path: Path, tfsmith, kind: str) -> None:
    model = tmp_path / "model.keras"
    if kind == "garbage":
        model.write_bytes(b"this is not a model at all\n" * 10)
    elif kind == "truncated":
        model.write_bytes(example["model"].read_bytes()[:5000])
    elif kind == "zip-without-config":
        with zipfile.ZipFile(model, "w") as archive:
            archive.writestr("hello.txt", "hi")
    out = tmp_path / "out"
    code, _, stderr = tfsmith("optimize", model, "--data", example["data"], "--out", out)
    fragment = {"missing": "no such file", "garbage": "not a .keras zip", "truncated": "corrupt .keras",
                "zip-without-config": "not a Keras model"}[kind]
    _assert_one_line_error(code, stderr, fragment)
    _no_leftovers(out)


def _bad_data(example: dict[str, Path], path: Path, **changes: np.ndarray) -> Path:
    arrays = dict(np.load(example["data"]))
    arrays.update(changes)
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("flat_x", "x_val has shape (359, 64), input 'image' is (N, 8, 8, 1)"),
        ("string_x", "x_val has dtype <U1; input 'image' takes float32"),
        ("short_y", "y_val has 100 labels for 359 inputs"),
        ("empty_calib", "x_calib is empty"),
        ("no_val", "x_val is missing"),
    ],
)
def test_bad_data(example: dict[str, Path], tmp_path: Path, tfsmith, name: str, fragment: str) -> None:
    base = dict(np.load(example["data"]))
    n = len(base["x_val"])
    assert n == 359
    changes = {
        "flat_x": {"x_val": base["x_val"].reshape(n, 64)},
        "string_x": {"x_val": np.full((n, 8, 8, 1), "a")},
        "short_y": {"y_val": base["y_val"][:100]},
        "empty_calib": {"x_calib": np.zeros((0, 8, 8, 1), np.float32)},
        "no_val": {},
    }[name]
    data = _bad_data(example, tmp_path / "bad.npz", **changes)
    if name == "no_val":
        np.savez(data, **{k: v for k, v in base.items() if k != "x_val"})
    recipe = _write_recipe(tmp_path / "q.toml", '[quantization]\nmodes = ["int8"]\n')  # no training: fast
    out = tmp_path / "out"
    code, _, stderr = tfsmith("optimize", example["model"], "--data", data, "--recipe", recipe, "--out", out)
    _assert_one_line_error(code, stderr, fragment)
    _no_leftovers(out)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("too_many_classes", "expected class ids 0..9 or one-hot rows"),
        ("onehot_wrong_width", "got shape (359, 12)"),
    ],
)
def test_labels_that_fit_no_task_are_set_aside_with_a_note(example: dict[str, Path], tmp_path: Path, tfsmith,
                                                           name: str, fragment: str) -> None:
    """Labels are hints: a class id beyond the model's classes, or one-hot rows of the wrong width, are set aside
    and the output is judged by agreement with the original, as without labels."""
    base = dict(np.load(example["data"]))
    changes = {"too_many_classes": {"y_val": np.where(base["y_val"] == 9, 11, base["y_val"])},
               "onehot_wrong_width": {"y_val": np.eye(12)[base["y_val"]]}}[name]
    data = _bad_data(example, tmp_path / "odd.npz", **changes)
    recipe = _write_recipe(tmp_path / "q.toml", '[quantization]\nmodes = ["int8"]\n')
    code, stdout, stderr = tfsmith("optimize", example["model"], "--data", data, "--recipe", recipe, "--explain")
    assert code == 0, stderr
    note = next(line for line in stdout.splitlines() if line.startswith("note: labels of 'probs' set aside"))
    assert fragment in note and "judged by agreement with the original" in note


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[pruning]\nsparsity = 0.8\nfrequency = 100\n", "unknown key 'frequency'"),
        ("[pruning]\nsparsity = 1.2\n", "pruning.sparsity: 1.2 is outside"),
        ("[quantization]\nmodes = [\"int3\"]\n", "unknown mode 'int3'"),
    ],
)
def test_bad_recipe(example: dict[str, Path], tmp_path: Path, tfsmith, text: str, fragment: str) -> None:
    recipe = _write_recipe(tmp_path / "bad.toml", text)
    out = tmp_path / "out"
    code, _, stderr = tfsmith("optimize", example["model"], "--data", example["data"], "--recipe", recipe,
                              "--out", out)
    _assert_one_line_error(code, stderr, fragment)
    _no_leftovers(out)


def test_failed_run_leaves_an_earlier_output_untouched(example: dict[str, Path], tmp_path: Path, tfsmith) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text('{"earlier": true}')
    data = _bad_data(example, tmp_path / "bad.npz", x_calib=np.zeros((0, 8, 8, 1), np.float32))
    code, _, stderr = tfsmith("optimize", example["model"], "--data", data, "--recipe", "auto", "--out", out)
    _assert_one_line_error(code, stderr, "x_calib is empty")
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]
    assert json.loads((out / "report.json").read_text()) == {"earlier": True}


def test_foreign_non_empty_out_is_refused(example: dict[str, Path], tmp_path: Path, tfsmith) -> None:
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    code, _, stderr = tfsmith("optimize", example["model"], "--data", example["data"], "--out", out)
    _assert_one_line_error(code, stderr, "not empty")
    assert (out / "thesis.tex").read_text() == "precious" and len(list(out.iterdir())) == 1


def test_subclassed_model_refuses_pruning_and_keeps_post_training(example: dict[str, Path], tmp_path: Path,
                                                                 tfsmith) -> None:
    from builder.optimize import tfenv

    keras = tfenv.keras()

    class Net(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.flat = keras.layers.Flatten()
            self.dense = keras.layers.Dense(10, activation="softmax")

        def call(self, x):  # type: ignore[no-untyped-def]
            return self.dense(self.flat(x))

    net = Net()
    net(np.zeros((1, 8, 8, 1), np.float32))
    model_dir = tmp_path / "subclassed"
    net.save(str(model_dir), save_format="tf")
    recipe = _write_recipe(tmp_path / "r.toml", '[pruning]\nsparsity = 0.5\n[quantization]\nmodes = ["int8"]\n')
    out = tmp_path / "out"
    code, stdout, stderr = tfsmith("optimize", model_dir, "--data", example["data"], "--recipe", recipe,
                                   "--out", out, "--max-accuracy-drop", "0.5")
    assert code == 0, stderr
    report = _report(out)
    assert report.sparsity is None and report.recipe["pruning"] is None
    assert any("subclassed" in note and "Sequential/Functional" in note for note in report.notes)
    assert "subclassed" in stdout
    assert set(_formats(report)) == {"saved_model", "tflite_fp32", "tflite_int8", *IR_INT8}
    assert all(a.contract_kept for a in report.artifacts)


def test_data_from_a_python_function_returning_datasets(example: dict[str, Path], tmp_path: Path, tfsmith,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mydata.py").write_text(
        "import numpy as np, tensorflow as tf\n"
        f"PATH = {str(example['data'])!r}\n"
        "def load():\n"
        "    d = np.load(PATH)\n"
        "    return {'train': tf.data.Dataset.from_tensor_slices((d['x_train'], d['y_train'])).batch(32),\n"
        "            'val': tf.data.Dataset.from_tensor_slices((d['x_val'], d['y_val'])),\n"
        "            'calib': tf.data.Dataset.from_tensor_slices(d['x_calib'][:50]).batch(8)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    recipe = _write_recipe(tmp_path / "q.toml", '[quantization]\nmodes = ["int8"]\n')
    out = tmp_path / "out"
    code, _, stderr = tfsmith("optimize", example["model"], "--data", "mydata:load", "--recipe", recipe,
                              "--out", out, "--max-accuracy-drop", "0.05")
    assert code == 0, stderr
    report = _report(out)
    assert report.data.held_out_rows == 359  # unbatched val read row by row
    assert (report.data.source, report.data.train_rows, report.data.calibration_rows, report.data.calibration_from,
            report.data.labels) == ("mydata:load", 1238, 50, "x_calib", ("probs",))
    code, _, stderr = tfsmith("optimize", example["model"], "--data", "mydata:nothing", "--recipe", recipe,
                              "--out", tmp_path / "out2")
    _assert_one_line_error(code, stderr, "cannot import 'nothing' from 'mydata'")


def test_keras2_h5_model_is_prunable_format(example: dict[str, Path], tmp_path: Path, tfsmith) -> None:
    from builder.optimize import tfenv

    model = tfenv.keras().models.load_model(str(example["model"]))
    h5 = tmp_path / "digits.h5"
    model.save(str(h5))
    code, stdout, _ = tfsmith("optimize", h5, "--data", example["data"], "--explain")
    assert code == 0 and "pruning:" in stdout and "only Keras 2" not in stdout
    broken = tmp_path / "broken.h5"
    broken.write_bytes(h5.read_bytes()[:2048])
    code, _, stderr = tfsmith("optimize", broken, "--data", example["data"], "--out", tmp_path / "o")
    _assert_one_line_error(code, stderr, "corrupt HDF5")


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (["--target", "sapphirerapids"], ["chosen: model_int8.tflite", "avx512_vnni", "model_float16.tflite"]),
        (["--target", "x86-64-v3"], ["chosen: model_dynamic.tflite", "lacks int8 dot-product"]),
        (["--target", "x86-64-v3", "--cuda-cc", "8.0"], ["chosen: saved_model", "GPUs: 8.0", "serving_xla"]),
    ],
)
def test_explain_follows_the_named_target(example: dict[str, Path], tfsmith, target: list[str],
                                          expected: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code, stdout, stderr = tfsmith("optimize", example["model"], "--data", example["data"], "--explain", *target)
    assert code == 0, stderr
    for fragment in expected:
        assert fragment in stdout
    assert sum(line.startswith("why: ") for line in stdout.splitlines()) >= 6
    assert not list(tmp_path.glob("tfsmith-explain-*"))  # no note named a log: no folder left behind


def test_unknown_target_is_one_line(example: dict[str, Path], tmp_path: Path, tfsmith) -> None:
    out = tmp_path / "out"
    code, _, stderr = tfsmith("optimize", example["model"], "--data", example["data"], "--target", "pentium9",
                              "--out", out)
    _assert_one_line_error(code, stderr, "unknown target 'pentium9'")
    _no_leftovers(out)


def test_auto_with_held_out_rows_only_skips_what_needs_more_data_and_says_so(example: dict[str, Path],
                                                                            tmp_path: Path, tfsmith) -> None:
    """No training rows: int8 has nothing to calibrate on; pruning, with nothing to fine-tune on, is one-shot at
    the highest sparsity level the gate keeps (`prune_oneshot`)."""
    from builder.optimize.prune_oneshot import LEVELS

    base = dict(np.load(example["data"]))
    data = tmp_path / "val_only.npz"
    np.savez(data, x_val=base["x_val"])  # no labels, no training or calibration rows
    out = tmp_path / "out"
    code, stdout, stderr = tfsmith("optimize", example["model"], "--data", data, "--recipe", "auto", "--out", out)
    assert code == 0, stderr
    report = _report(out)
    assert "tflite_int8" not in _formats(report)
    assert any(n.startswith("int8 skipped") for n in report.notes)
    assert any(n.startswith("pruning: one-shot by magnitude") for n in report.notes)
    searched = next(n for n in report.notes if n.startswith("pruning one-shot: "))
    pruning = next(a for a in report.attempts if a.step == "pruning")
    if pruning.outcome == "done":  # the highest level that agreed, reached exactly
        assert report.sparsity["target"] in LEVELS and f"{report.sparsity['target']:.0%} agrees" in searched
        assert report.sparsity["achieved"] == pytest.approx(report.sparsity["target"], abs=0.01)
    else:
        assert report.sparsity is None and "changed the answers at every level tried" in pruning.line
    assert report.data.labels == () and report.chosen_artifact.metric("probs").metric == "disagreement"


def test_a_float_only_recipe_still_measures_runtimes_and_precisions(example: dict[str, Path], tmp_path: Path,
                                                                    tfsmith) -> None:
    recipe = _write_recipe(tmp_path / "float.toml", "[quantization]\nmodes = []\n")
    out = tmp_path / "out"
    code, stdout, stderr = tfsmith("optimize", example["model"], "--data", example["data"], "--recipe", recipe,
                                   "--out", out, "--latency-runs", "20")
    assert code == 0, stderr
    report = _report(out)
    assert set(_formats(report)) == {"saved_model", "tflite_fp32", *IR}  # the recipe narrows what is built...
    assert report.selection.measured and "among what recipe float builds" in report.selection.how  # ...not the choice
    candidates = report.selection.candidates
    runtimes = {c.runtime for c in candidates}
    assert {"litert", "tensorflow", "tensorflow-bf16"} <= runtimes
    if importlib.util.find_spec("openvino") is not None:
        assert {"openvino", "openvino-bf16"} <= runtimes
    assert all(c.precision for c in candidates) and not any(c.precision == "int8" for c in candidates)
    chosen = next(c for c in candidates if (c.artifact, c.runtime) == (report.chosen, report.chosen_runtime))
    assert not chosen.error and f"on {report.chosen_runtime} ({chosen.precision})" in stdout
    assert "| precision |" in (out / "report.md").read_text()
