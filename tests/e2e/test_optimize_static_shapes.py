"""Two models whose saved graph or whose answers leave a gap, optimized end to end:

- a Keras 3 conditional GAN generator (Embedding of a class id times a latent, Dense, Reshape, UpSampling2D +
  Conv2D twice): its saved graph lost height, width and channels (`tensor<?x?x16x32xf32>`), so the TFLite
  converter has no builtin Conv2D for it; converted again from the signature traced with the contract's static
  shapes, it gets .tflite files that keep the signature (dynamic batch), judged by the gate, with a note;
- a `tf.Module` that divides by the L2 norm of its input (NaN for an all-zero row) and one that checks its
  numbers (it fails there): the all-zero row the gate adds is set aside with a note, and the original's own
  SavedModel is accepted.

Models are built in a subprocess (Keras 3 and tf.Module); optimize runs in this process.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.e2e.inprocess import run_cli

pytestmark = [pytest.mark.tf, pytest.mark.slow]
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "ai_edge_litert")):
    pytest.skip("needs the optimize extra", allow_module_level=True)

RECIPE = 'name = "static-shapes"\n[quantization]\nmodes = {modes}\n[export]\nopenvino = false\nxla = false\n'

MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf, keras
from keras import layers
out = sys.argv[1]
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)

cid = keras.Input((1,), dtype="int32", name="class_id")
z = keras.Input((16,), name="latent")
h = layers.Multiply()([layers.Flatten()(layers.Embedding(3, 16)(cid)), z])
h = layers.Reshape((4, 4, 32))(layers.Dense(4 * 4 * 32, activation="relu")(h))
h = layers.Conv2D(16, 3, padding="same", activation="relu")(layers.UpSampling2D()(h))
image = layers.Conv2D(1, 3, padding="same", activation="tanh", name="image")(layers.UpSampling2D()(h))
keras.Model([cid, z], image).save(f"{out}/gan.keras")
ids, latent = rng.integers(0, 3, (64, 1)).astype("int32"), rng.normal(size=(64, 16)).astype("float32")
np.savez(f"{out}/gan.npz", **{"x_val/class_id": ids[:32], "x_val/latent": latent[:32],
                              "x_calib/class_id": ids[32:], "x_calib/latent": latent[32:]})

class Direction(tf.Module):
    def __init__(self, checked):
        self.w = tf.Variable(rng.normal(size=(8, 3)).astype("float32"))
        self.checked = checked

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def __call__(self, x):
        unit = x / tf.norm(x, axis=1, keepdims=True)  # 0 / 0 for an all-zero row
        if self.checked:
            unit = tf.debugging.check_numerics(unit, "direction of a zero vector")
        return {"score": tf.matmul(unit, self.w)}

for name, checked in (("nan_at_zero", False), ("fails_at_zero", True)):
    m = Direction(checked)
    tf.saved_model.save(m, f"{out}/{name}", signatures={"serving_default": m.__call__})
x = (rng.normal(size=(64, 8)) + 0.1).astype("float32")
np.savez(f"{out}/direction.npz", x_val=x[:32], x_calib=x[32:])
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("static_shapes")
    done = subprocess.run([sys.executable, "-c", MODELS, str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture()
def optimize(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    def run(model: str, data: str, modes: str) -> tuple[Path, dict[str, Any]]:
        recipe = tmp_path / f"{Path(model).stem}.toml"
        recipe.write_text(RECIPE.format(modes=modes))
        out = tmp_path / Path(model).stem
        code, _, stderr = run_cli(monkeypatch, capfd, "optimize", models / model, "--data", models / data,
                                  "--recipe", recipe, "--latency-runs", 10, "--out", out)
        assert code == 0, f"optimize {model} exited {code}: {stderr[-3000:]}"
        return out, json.loads((out / "report.json").read_text())

    return run


def artifact(report: dict[str, Any], path: str) -> dict[str, Any]:
    return next(a for a in report["artifacts"] if a["path"] == path)


def test_a_generator_whose_graph_lost_its_shapes_gets_tflite_files_from_the_static_trace(
        optimize, models: Path) -> None:
    out, report = optimize("gan.keras", "gan.npz", '["dynamic"]')
    for path in ("model_fp32.tflite", "model_dynamic.tflite"):
        found = artifact(report, path)
        assert found["accepted"], found["reason"]
        assert found["metrics"][0]["metric"] == "relative_error"
    assert any(n.startswith("dynamic: converted from the model traced with its signature's static shapes")
               and "tf.Conv2D" in n for n in report["notes"]), report["notes"]
    assert not any(n.startswith("no plain .tflite") for n in report["notes"])

    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(out / "model_fp32.tflite")).get_signature_runner("serving_default")
    inputs = runner.get_input_details()
    assert {k: v["shape_signature"].tolist() for k, v in inputs.items()} == {"class_id": [-1, 1], "latent": [-1, 16]}
    assert runner.get_output_details()["image"]["shape_signature"].tolist() == [-1, 16, 16, 1]
    with np.load(models / "gan.npz") as data:
        rows = {"class_id": data["x_val/class_id"][:5], "latent": data["x_val/latent"][:5]}
    import keras

    expected = keras.saving.load_model(models / "gan.keras").predict(
        {"class_id": rows["class_id"], "latent": rows["latent"]}, verbose=0)
    got = runner(**rows)["image"]  # a batch of 5 on a file traced with the batch left open
    assert got.shape == (5, 16, 16, 1)
    np.testing.assert_allclose(got, expected, atol=1e-5)

    # the same from a conversion in a process of its own: everything it needs comes by value (int8 calibrated)
    from builder.optimize import isolated, quantize

    int8 = out / "isolated_int8.tflite"
    notes = isolated.call(quantize.convert_to_file, out / "saved_model", "int8", int8, rows, "serving_default",
                          limit=None)
    assert any(n.startswith("int8: converted from the model traced with its signature's static shapes")
               for n in notes), notes
    runner = Interpreter(model_path=str(int8)).get_signature_runner("serving_default")
    assert runner(**rows)["image"].shape == (5, 16, 16, 1)


@pytest.mark.parametrize("model", ["nan_at_zero", "fails_at_zero"])
def test_the_gates_zero_row_is_set_aside_where_the_original_has_no_answer(optimize, model: str) -> None:
    _, report = optimize(model, "direction.npz", "[]")
    original = artifact(report, "saved_model")
    assert original["accepted"], original["reason"]
    assert artifact(report, "model_fp32.tflite")["accepted"]
    assert any(n.startswith("the gate's own row after the held-out ones (an all-zero input) set aside: the original "
                            "itself fails or answers NaN there") for n in report["notes"]), report["notes"]
