"""The example digits CNN as a Keras 3 user has it (trained with Keras 3, saved as .keras) through
`tfsmith optimize` with pruning to 80%: the pruned model passes the default gate against the original (DATA has
held-out labels, so the gate is the accuracy drop, top-1 agreement beside it: the same gate every file made
from it gets), and the pruned float .tflite's gzip size is at most a third of the unpruned float .tflite's, as
the report gives both (and so is its size: the pruned zeros are stored sparse); the report says what pruning
bought (sparsity, sizes, speed per runtime, sparse kernels per runtime).

The pruned model changes a few of the 360 gate rows' answers (three to five, measured over fine-tuning seeds:
rows where the original's top two scores are 0.02-0.28 apart), while its accuracy on the held-out labels stays
the original's or rises; the line that keeps it gives both."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "ai_edge_litert", "sklearn")):
    pytest.skip("needs the optimize extra (tensorflow, keras, ai-edge-litert, scikit-learn)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
RECIPE = """name = "pruned-80"
[pruning]
sparsity = 0.8
epochs = 4
[quantization]
modes = []
[export]
xla = false
openvino = false
"""

#: Keras 3's twin of `builder.optimize.example.build_cnn`, trained and saved in a process of its own (Keras 3 and
#: tf_keras stay out of the test's process)
TRAIN = """
import sys
import numpy as np
from builder.optimize import tfenv
from builder.optimize.example import digits_arrays
tfenv.tensorflow()
import keras
keras.utils.set_random_seed(0)
arrays = digits_arrays(seed=0)
inputs = keras.Input(shape=(8, 8, 1), name="image")
h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
h = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(h)
h = keras.layers.MaxPooling2D()(h)
h = keras.layers.Flatten()(h)
h = keras.layers.Dense(128, activation="relu")(h)
outputs = keras.layers.Dense(10, activation="softmax", name="probs")(h)
model = keras.Model(inputs, outputs, name="digits_cnn")
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(arrays["x_train"], arrays["y_train"], epochs=15, batch_size=32, verbose=0)
model.save(sys.argv[1] + "/digits_cnn.keras")
np.savez_compressed(sys.argv[1] + "/digits.npz", **arrays)
"""


def test_a_keras3_digits_cnn_pruned_to_80_percent_passes_the_gate_at_a_third_of_the_float_gzip(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", TRAIN, str(tmp_path)], check=True, env=env, cwd=REPO, timeout=900)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    out = tmp_path / "optimized"
    done = subprocess.run([str(REPO / ".venv" / "bin" / "tfsmith"), "optimize", str(tmp_path / "digits_cnn.keras"),
                           "--data", str(tmp_path / "digits.npz"), "--recipe", str(recipe), "--out", str(out),
                           "--latency-runs", "20"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    sparsity = report["sparsity"]
    assert sparsity is not None, report["notes"]
    pruning = next(a for a in report["attempts"] if a["step"] == "pruning")
    assert pruning["outcome"] == "done" and "accuracy" in pruning["line"] and "agreement" in pruning["line"], pruning
    assert sparsity["achieved"] >= 0.79
    pruned = next(a for a in report["artifacts"] if a["format"] == "tflite_fp32")
    assert pruned["accepted"], pruned  # judged by the gate against the original
    unpruned = sparsity["unpruned_fp32"]
    print(f"pruned float .tflite {pruned['size_bytes']} B (gzip {pruned['gzip_bytes']}), unpruned "
          f"{unpruned['size_bytes']} B (gzip {unpruned['gzip_bytes']}), sparsity {sparsity['achieved']:.3f}")
    assert sparsity["stored_sparse"] == "model_fp32.tflite"  # the zeros stored sparse: the file itself shrinks
    assert pruned["size_bytes"] * 3 <= unpruned["size_bytes"]
    assert pruned["gzip_bytes"] * 3 <= unpruned["gzip_bytes"]
    assert set(sparsity["sparse_kernels"]) >= {"litert"}
    markdown = (out / "report.md").read_text()
    assert "## What pruning bought" in markdown
    assert "- float .tflite:" in markdown and "unpruned" in markdown
    assert "sparse kernels, litert: not used: model_fp32.tflite stores the pruned weights sparse" in markdown
    assert "pruned (zeros stored sparse), against" in markdown
    assert "model_fp32.tflite (pruned):" in markdown and " us" in markdown
    assert "pruning bought: float .tflite:" in done.stdout  # said at the end of optimize's output too
