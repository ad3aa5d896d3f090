"""Fine-tuning with the labels DATA has: a two-output model whose training rows have labels for one output only
(or labels for the other that fit no task) is pruned with fine-tuning, the labelled output on its labels and the
other on the original model's own answers on the training rows, with a note saying so; pruning is no longer
refused or skipped for the want of one output's labels.

The model is built here, tiny (a small two-head MLP on synthetic rows, in tf_keras and in Keras 3), in subprocesses; optimize runs
in this process.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.inprocess import run_cli

pytestmark = [pytest.mark.tf]
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "tf_keras", "tensorflow_model_optimization")):
    pytest.skip("needs the optimize extra", allow_module_level=True)

#: Pruning only: no quantization, OpenVINO or XLA, so the run is the pruning and the gate.
RECIPE = ('name = "distil"\n[pruning]\nsparsity = 0.3\nepochs = 5\n[quantization]\nmodes = []\n'
          "[export]\nopenvino = false\nxla = false\n")

TWO_HEADS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out, flavour = sys.argv[1], sys.argv[2]
if flavour == "tf_keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tf_keras as keras
else:
    import keras
import numpy as np
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(500, 8)).astype("float32")
w = rng.normal(size=(8, 3)).astype("float32")
kind = np.argmax(x @ w, axis=1).astype("int64")
level = np.stack([x[:, 0] + 0.5 * x[:, 1], np.tanh(x[:, 2])], axis=1).astype("float32")
i = keras.Input((8,), name="features")
h = keras.layers.Dense(64, activation="relu")(i)
model = keras.Model(i, [keras.layers.Dense(3, activation="softmax", name="kind")(h),
                        keras.layers.Dense(2, name="level")(h)])
model.compile(keras.optimizers.Adam(0.01), ["sparse_categorical_crossentropy", "mse"])
model.fit(x[:400], [kind[:400], level[:400]], epochs=20, batch_size=32, verbose=0)
model.save(f"{out}/two_heads.h5" if flavour == "tf_keras" else f"{out}/two_heads.keras")
train, val = slice(0, 400), slice(400, 500)
# labels for `kind` only: `level` has none to fine-tune on
np.savez(f"{out}/kind_only.npz", **{"x_train/features": x[train], "y_train/kind": kind[train],
                                    "x_val/features": x[val], "y_val/kind": kind[val]})
# labels for `level` that fit no task (5 columns for a 2-column output): set aside
np.savez(f"{out}/level_unfit.npz", **{"x_train/features": x[train], "y_train/kind": kind[train],
                                      "y_train/level": rng.normal(size=(400, 5)).astype("float32"),
                                      "x_val/features": x[val], "y_val/kind": kind[val]})
'''

#: The same two-head model in tf_keras (pruned by tfmot) and in Keras 3 (pruned by tfsmith's own masks).
MODELS = {"tf_keras": "two_heads.h5", "keras3": "two_heads.keras"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("distil")
    for flavour in MODELS:
        done = subprocess.run([sys.executable, "-c", TWO_HEADS, str(out), flavour], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture()
def optimize(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    recipe = tmp_path / "distil.toml"
    recipe.write_text(RECIPE)

    def run(model: str, data: str, *extra: object) -> tuple[int, str, Path]:
        # a gate wider than the default: what is judged here is that the pruned model is made and judged, and a
        # 64-unit layer loses more to pruning than a user's model does (relative error 0.08 at 30% here)
        out = tmp_path / f"{Path(model).suffix[1:]}-{Path(data).stem}"
        code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", models / model, "--data",
                                       models / data, "--recipe", recipe, "--latency-runs", 10, "--out", out,
                                       "--max-accuracy-drop", 0.05, "--max-relative-error", 0.25, *extra)
        assert code == 0, f"optimize exited {code}: {stderr[-3000:]}"
        return code, stdout, out

    return run


def report_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text())


@pytest.mark.parametrize("flavour", list(MODELS))
def test_an_output_without_training_labels_is_fine_tuned_to_the_originals_answers(optimize, flavour: str) -> None:
    _, explained, _ = optimize(MODELS[flavour], "kind_only.npz", "--explain")
    note = "output 'level' has no training labels: fine-tuned to the original's own answers on the 400 training rows"
    assert f"note: pruning: {note}" in explained
    assert "pruning (skipped" not in explained

    _, stdout, out = optimize(MODELS[flavour], "kind_only.npz")
    report = report_of(out)
    assert f"note: pruning: {note}" in stdout and f"pruning: {note}" in report["notes"]
    assert not any("skipped" in line and "pruning" in line for line in report["notes"])
    # pruned, fine-tuned and kept by the gate against the original: the report gives the sparsity reached
    assert report["sparsity"] is not None and report["sparsity"]["achieved"] >= 0.29
    pruning = [a for a in report["attempts"] if a["step"] == "pruning"]
    assert pruning and pruning[-1]["outcome"] == "done", pruning
    assert report["data"]["train_rows"] == 400 and report["data"]["labels"] == ["kind"]


def test_an_output_whose_training_labels_are_set_aside_is_distilled_not_skipped(optimize) -> None:
    _, _, out = optimize(MODELS["tf_keras"], "level_unfit.npz")
    report = report_of(out)
    assert any(line.startswith("labels of 'level' set aside: y_train/level has shape (400, 5)")
               for line in report["notes"]), report["notes"]
    assert ("pruning: output 'level' has its training labels set aside: fine-tuned to the original's own answers "
            "on the 400 training rows") in report["notes"]
    assert not any("fine-tuning needs a label" in line for line in report["notes"])
    assert report["sparsity"] is not None and report["sparsity"]["achieved"] >= 0.29


def test_quantization_aware_training_fits_the_unlabelled_output_to_the_originals_answers(
        optimize, tmp_path: Path) -> None:
    recipe = tmp_path / "distil.toml"  # the fixture's recipe file, now QAT without pruning
    recipe.write_text('name = "distil"\n[quantization]\nmodes = []\nqat = true\nqat_epochs = 1\n'
                      "[export]\nopenvino = false\nxla = false\n")
    _, _, out = optimize(MODELS["tf_keras"], "kind_only.npz")
    report = report_of(out)
    assert ("QAT: output 'level' has no training labels: fine-tuned to the original's own answers on the 400 "
            "training rows") in report["notes"]
    qat = [a for a in report["attempts"] if a["step"] == "quantization-aware training"]
    assert qat and qat[-1]["outcome"] == "done", qat
    assert any(a["path"] == "model_qat_int8.tflite" for a in report["artifacts"])
