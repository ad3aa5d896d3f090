"""Models a new user brought at first contact, each once stopped by one step that could not take it, now served
with every optimization that works and a note for each that does not:

- a quantization-aware-trained CNN (tfmot's `quantize_model` on tf_keras) as `.h5`, `.keras` and SavedModel:
  loads without a module of the user's own, is not pruned again, and its int8 file keeps the input range it
  learned;
- a Keras 3 wide-and-deep model on a dict of inputs of mixed dtypes (a string through StringLookup, an int64
  through IntegerLookup, Normalization, CategoryEncoding): exported and called by key;
- a small U-Net (a softmax per pixel) with per-pixel class ids or one-hot labels: classification per pixel;
- the user's own full-integer `.tflite` (uint8 in, uint8 scores out) with class-id labels: scores, measured as
  it is;
- a mixed_float16 CNN: `.tflite` candidates through its float32 twin;
- a recipe that asks for pruning the model cannot take (95% of a tiny model's weights): pruning drops out with
  a note, and the original's weights are served.

Every model is built here, tiny (synthetic data or scikit-learn's bundled digits and iris), in subprocesses
(tf_keras with tfmot, and Keras 3, apart); optimize runs in this process.
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
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "tf_keras", "keras", "tensorflow_model_optimization",
                                                     "ai_edge_litert")):
    pytest.skip("needs the optimize extra", allow_module_level=True)

#: Only what each test looks at is built: no OpenVINO, no XLA, short timing; no quantization unless asked for.
QUICK = "[export]\nopenvino = false\nxla = false\n"
FLOAT_ONLY = "[quantization]\nmodes = []\n"

KERAS2_MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"; os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras
import tensorflow_model_optimization as tfmot
from sklearn.datasets import load_digits, load_iris
out = sys.argv[1]
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
d = load_digits(); x = (d.images / 16.0).astype("float32")[..., None]; y = d.target.astype("int64")
xt, yt, xv, yv = x[:600], y[:600], x[1200:1300], y[1200:1300]
np.savez(f"{out}/digits.npz", x_train=xt, y_train=yt, x_val=xv, y_val=yv, x_calib=xt[:64])

def cnn():
    i = keras.Input((8, 8, 1), name="image")
    h = keras.layers.Flatten()(keras.layers.Conv2D(8, 3, activation="relu", padding="same")(i))
    return keras.Model(i, keras.layers.Dense(10, activation="softmax", name="probs")(h))

qat = tfmot.quantization.keras.quantize_model(cnn())
qat.compile("adam", "sparse_categorical_crossentropy"); qat.fit(xt, yt, epochs=1, verbose=0)
qat.save(f"{out}/qat_saved_model"); qat.save(f"{out}/qat.keras"); qat.save(f"{out}/qat.h5")

keras.mixed_precision.set_global_policy("mixed_float16")
i = keras.Input((8, 8, 1), name="image")
h = keras.layers.Dense(10)(keras.layers.Flatten()(keras.layers.Conv2D(8, 3, activation="relu", padding="same")(i)))
mixed = keras.Model(i, keras.layers.Activation("softmax", dtype="float32", name="probs")(h))
mixed.compile("adam", "sparse_categorical_crossentropy"); mixed.fit(xt, yt, epochs=1, verbose=0)
mixed.save(f"{out}/mixed.keras")
keras.mixed_precision.set_global_policy("float32")

i = keras.Input((6, 4), name="seq")
h = keras.layers.GlobalAveragePooling1D()(keras.layers.GroupNormalization(2)(keras.layers.Dense(4)(i)))
grouped = keras.Model(i, keras.layers.Dense(3, activation="softmax", name="p")(h))
grouped.compile("adam", "sparse_categorical_crossentropy")
xs = rng.normal(size=(200, 6, 4)).astype("float32"); ys = (xs[:, :, 0].mean(axis=1) > 0).astype("int64")
grouped.fit(xs, ys, epochs=1, verbose=0); grouped.save(f"{out}/grouped.keras")
np.savez(f"{out}/grouped.npz", x_train=xs[:150], y_train=ys[:150], x_val=xs[150:], y_val=ys[150:])

i = keras.Input((16, 16, 3), name="image")
c1 = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(i)
c2 = keras.layers.UpSampling2D()(keras.layers.Conv2D(8, 3, padding="same", activation="relu")(keras.layers.MaxPool2D()(c1)))
unet = keras.Model(i, keras.layers.Conv2D(4, 1, activation="softmax", name="mask")(keras.layers.Concatenate()([c2, c1])))
unet.compile("adam", "sparse_categorical_crossentropy")
xs = rng.random((96, 16, 16, 3), dtype=np.float32); ys = (xs[..., 0] * 4).astype("int64").clip(0, 3)
unet.fit(xs[:64], ys[:64], epochs=1, verbose=0); unet.save(f"{out}/unet.keras")
np.savez(f"{out}/unet_ids.npz", x_val=xs[64:], y_val=ys[64:])
np.savez(f"{out}/unet_onehot.npz", x_val=xs[64:], y_val=np.eye(4)[ys[64:]])

ir = load_iris(); xi = ir.data.astype("float32"); yi = ir.target.astype("int64")
i = keras.Input((4,), name="features")
t = keras.Model(i, keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(16, activation="relu")(i)))
t.compile(keras.optimizers.Adam(0.02), "sparse_categorical_crossentropy"); t.fit(xi, yi, epochs=40, verbose=0)
conv = tf.lite.TFLiteConverter.from_keras_model(t)
conv.optimizations = [tf.lite.Optimize.DEFAULT]
conv.representative_dataset = lambda: ([xi[k:k + 1]] for k in range(150))
conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
conv.inference_input_type = tf.uint8; conv.inference_output_type = tf.uint8
open(f"{out}/iris_uint8.tflite", "wb").write(conv.convert())
from ai_edge_litert.interpreter import Interpreter
scale, zero = Interpreter(f"{out}/iris_uint8.tflite").get_input_details()[0]["quantization"]
xq = np.clip(np.round(xi / scale + zero), 0, 255).astype("uint8")
order = rng.permutation(150)
np.savez(f"{out}/iris_uint8.npz", x_val=xq[order[:64]], y_val=yi[order[:64]])
'''

KERAS3_MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras, tensorflow as tf
out = sys.argv[1]
keras.utils.set_random_seed(0)
rng = np.random.default_rng(1); n = 300
cities = ["paris", "rome", "oslo", "lima"]
city = rng.choice(cities, n); user = rng.integers(0, 50, n).astype("int64"); age = rng.normal(40, 10, n).astype("float32")
clicked = ((age > 40) ^ (city == "rome")).astype("float32")
c = keras.Input((1,), dtype="string", name="city"); u = keras.Input((1,), dtype="int64", name="user")
a = keras.Input((1,), dtype="float32", name="age")
looked = keras.layers.Flatten()(keras.layers.StringLookup(vocabulary=cities, output_mode="one_hot")(c))
users = keras.layers.CategoryEncoding(num_tokens=52, output_mode="one_hot")(keras.layers.IntegerLookup(vocabulary=list(range(50)))(u))
wide = keras.layers.Concatenate()([looked, users, keras.layers.Normalization(mean=40.0, variance=100.0)(a)])
deep = keras.layers.Dense(8, activation="relu")(wide)
click = keras.layers.Dense(1, activation="sigmoid", name="click")(keras.layers.Concatenate()([deep, wide]))
model = keras.Model({"user": u, "age": a, "city": c}, click)  # keyed in another order than model.inputs lists them
model.compile("adam", "binary_crossentropy")
x = {"city": tf.constant(city[:, None]), "user": user[:, None], "age": age[:, None]}
model.fit(tf.data.Dataset.from_tensor_slices((x, clicked)).batch(32), epochs=1, verbose=0)
model.save(f"{out}/wide_deep.keras")
val = slice(200, 300)
np.savez(f"{out}/wide_deep.npz", **{"x_val/city": np.char.encode(city[val][:, None].astype(str), "utf-8"),
                                    "x_val/user": user[val][:, None], "x_val/age": age[val][:, None],
                                    "y_val/click": clicked[val][:, None]})
np.save(f"{out}/wide_deep_expected.npy", np.asarray(model({k: tf.constant(v[val]) for k, v in x.items()})))

keras.mixed_precision.set_global_policy("mixed_float16")  # a model that answers float16: no float32 last layer
yh = rng.integers(0, 4, 600).astype("int64"); xh = 0.2 * rng.random((600, 8, 8, 1), dtype=np.float32)
for k in range(4):  # the class is the bright quadrant: answers the model is sure of
    xh[yh == k, 4 * (k // 2):4 * (k // 2) + 4, 4 * (k % 2):4 * (k % 2) + 4] += 1.0
i = keras.Input((8, 8, 1), name="image")
h = keras.layers.Dense(32, activation="relu")(keras.layers.Flatten()(i))
half = keras.Model(i, keras.layers.Dense(4, activation="softmax", name="probs")(h))
half.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy"); half.fit(xh[:400], yh[:400], epochs=10, verbose=0)
half.save(f"{out}/half.keras")
keras.mixed_precision.set_global_policy("float32")
np.savez(f"{out}/half.npz", x_train=xh[:400], y_train=yh[:400], x_val=xh[400:], y_val=yh[400:])
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("first_contact")
    for script in (KERAS2_MODELS, KERAS3_MODELS):
        done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture()
def optimize(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    def run(model: str, data: str, recipe: str = FLOAT_ONLY, tasks: str = "") -> tuple[Path, dict[str, Any], str]:
        recipe_path = tmp_path / f"{Path(model).stem}.toml"
        recipe_path.write_text(f'name = "first-contact"\n{recipe}\n{QUICK}\n{tasks}')
        out = tmp_path / f"{Path(model).stem}-{Path(data).stem}"
        code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", models / model, "--data", models / data,
                                       "--recipe", recipe_path, "--latency-runs", 10, "--out", out)
        assert code == 0, f"optimize {model} exited {code}: {stderr[-3000:]}"
        return out, json.loads((out / "report.json").read_text()), stdout

    return run


def artifact(report: dict[str, Any], path: str) -> dict[str, Any]:
    return next(a for a in report["artifacts"] if a["path"] == path)


PRUNE_AND_INT8 = "[pruning]\nsparsity = 0.5\nepochs = 1\n[quantization]\nmodes = [\"int8\"]\n"


def test_a_quantization_aware_model_loads_is_not_pruned_again_and_keeps_its_ranges(optimize) -> None:
    out, report, _ = optimize("qat.h5", "digits.npz", PRUNE_AND_INT8)
    assert any("quantization-aware-trained" in n and "pruning and QAT skipped" in n for n in report["notes"])
    assert report["sparsity"] is None
    int8 = artifact(report, "model_int8.tflite")
    assert int8["accepted"], int8["reason"]
    from ai_edge_litert.interpreter import Interpreter

    # the learned input range is [0, 1] (digits scaled by 1/16): the int8 file's first quantized tensor keeps it
    interpreter = Interpreter(str(out / "model_int8.tflite"))
    first = next(d for d in interpreter.get_tensor_details() if "quantize_layer" in d["name"])
    scale, zero = first["quantization"]
    assert (-128 - zero) * scale == pytest.approx(0.0, abs=1e-6)
    assert (127 - zero) * scale == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("saved", ["qat.keras", "qat_saved_model"])
def test_a_quantization_aware_model_loads_from_every_format(models: Path, tmp_path: Path, saved: str,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "prune.toml"
    recipe.write_text(f'name = "first-contact"\n{PRUNE_AND_INT8}{QUICK}')
    code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", models / saved, "--data", models / "digits.npz",
                                   "--recipe", recipe, "--explain")
    assert code == 0, stderr[-3000:]
    assert "pruning and QAT skipped: the model is a quantization-aware-trained model" in stdout


def test_a_keras3_model_on_a_dict_of_inputs_is_exported_and_called_by_key(optimize, models: Path) -> None:
    out, report, _ = optimize("wide_deep.keras", "wide_deep.npz")
    inputs = {t["name"]: t["dtype"] for t in report["model"]["contract"]["inputs"]}
    assert inputs == {"city": "string", "user": "int64", "age": "float32"}
    assert artifact(report, "saved_model")["accepted"]
    import tensorflow as tf

    data = np.load(models / "wide_deep.npz")
    serve = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    answers = serve(city=tf.constant(data["x_val/city"]), user=tf.constant(data["x_val/user"]),
                    age=tf.constant(data["x_val/age"]))["click"].numpy()
    np.testing.assert_allclose(answers, np.load(models / "wide_deep_expected.npy"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("labels", ["unet_ids.npz", "unet_onehot.npz"])
def test_a_softmax_per_pixel_is_judged_per_pixel_against_per_pixel_labels(optimize, labels: str) -> None:
    _, report, _ = optimize("unet.keras", labels)
    (mask,) = report["model"]["contract"]["outputs"]
    assert mask["task"] == "classification" and "256 positions" in mask["task_why"]
    metric = artifact(report, "model_fp32.tflite")["metrics"][0]
    assert metric["metric"] == "accuracy_drop" and metric["passed"] and metric["accuracy"] is not None
    assert not any("set aside" in n for n in report["notes"])


def test_the_users_own_full_integer_tflite_is_scores_and_measured_as_it_is(optimize) -> None:
    _, report, _ = optimize("iris_uint8.tflite", "iris_uint8.npz")
    (scores,) = report["model"]["contract"]["outputs"]
    assert scores["dtype"] == "uint8" and scores["task"] == "classification" and "uint8 scores" in scores["task_why"]
    assert [a["path"] for a in report["artifacts"]] == ["model.tflite"]  # not quantized twice
    metric = report["artifacts"][0]["metrics"][0]
    assert metric["metric"] == "accuracy_drop" and metric["passed"] and metric["original_accuracy"] > 0.5


def test_labels_that_fit_no_task_are_set_aside_and_the_output_judged_by_agreement(optimize) -> None:
    _, report, _ = optimize("unet.keras", "unet_ids.npz", tasks='[tasks]\nmask = "regression"\n')
    assert any(n.startswith("labels of 'mask' set aside") for n in report["notes"])
    assert artifact(report, "saved_model")["metrics"][0]["metric"] == "relative_error"
    assert report["data"]["labels"] == []


def test_a_mixed_precision_model_gets_tflite_candidates(optimize) -> None:
    _, report, _ = optimize("mixed.keras", "digits.npz", "[quantization]\nmodes = [\"int8\"]\n")
    assert any(n.startswith("mixed precision (mixed_float16)") for n in report["notes"])
    assert artifact(report, "model_fp32.tflite")["accepted"], artifact(report, "model_fp32.tflite")["reason"]
    assert artifact(report, "model_int8.tflite")["metrics"]  # made and judged (the gate may keep it or not)


def test_a_mixed_precision_model_answering_float16_is_pruned_and_converted_answering_float16(optimize) -> None:
    # pruning fine-tunes its float32 twin and the conversions start from it: the served files answer float16
    # as the original does (they answered float32 and were all refused for it; a pruned one left no file at all)
    out, report, _ = optimize("half.keras", "half.npz", "[pruning]\nsparsity = 0.3\nepochs = 2\n"
                                                        "[quantization]\nmodes = [\"dynamic\"]\n")
    assert [(o["name"], o["dtype"]) for o in report["model"]["contract"]["outputs"]] == [("probs", "float16")]
    assert report["sparsity"] is not None, report["notes"]  # kept: the served SavedModel is the pruned export
    for path in ("saved_model", "model_fp32.tflite", "model_dynamic.tflite"):
        assert artifact(report, path)["accepted"], artifact(report, path)["reason"]
    from ai_edge_litert.interpreter import Interpreter

    assert Interpreter(str(out / "model_fp32.tflite")).get_output_details()[0]["dtype"] == np.float16


def test_a_pruned_export_that_answers_otherwise_drops_pruning_and_the_model_is_served(
        optimize, monkeypatch: pytest.MonkeyPatch) -> None:
    # every file is made from the pruned SavedModel: were it to answer another dtype than the original (its
    # float32 twin's, without the cast back), no file would pass; pruning drops out instead, with the difference
    from builder.optimize import model_io

    monkeypatch.setattr(model_io, "_as_declared", lambda tensor, dtype, tf: tensor)
    _, report, stdout = optimize("half.keras", "half.npz", "[pruning]\nsparsity = 0.3\nepochs = 2\n"
                                                           "[quantization]\nmodes = []\n")
    note = next(n for n in report["notes"] if n.startswith("pruning dropped"))
    assert note.startswith("pruning dropped: the pruned model's SavedModel signature differs from the original's: "
                           "probs float16[?,4], probs float32[?,4]"), note
    assert report["sparsity"] is None and artifact(report, "saved_model")["accepted"]
    assert f"note: {note}" in stdout


def test_pruning_the_model_cannot_take_drops_out_whatever_the_recipe(optimize) -> None:
    # 95% of a tiny model's weights: tfmot stops short of the target on its small tensors (and what it reaches
    # changes the answers); either way pruning drops out with its reason and the original's weights are served
    _, report, _ = optimize("grouped.keras", "grouped.npz", "[pruning]\nsparsity = 0.95\nepochs = 1\n"
                                                           "[quantization]\nmodes = []\n")
    note = next(n for n in report["notes"] if n.startswith("pruning"))
    assert note.startswith("pruning dropped: ") and len(note) > len("pruning dropped: ") + 20
    assert report["sparsity"] is None
    assert artifact(report, "saved_model")["accepted"] and report["gate"]["passed"]
