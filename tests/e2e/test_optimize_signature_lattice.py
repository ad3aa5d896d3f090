"""`tfsmith optimize` on signatures beyond float32 rows, as a user runs it: a float64 regression network, a
`tf.Module` with a scalar `temperature` beside the batch, a masked text model whose all-padding row the
original answers NaN, a conditional generator whose `UpSampling2D` the converter loses static dimensions of,
and a Keras 3 subclassed model saved as `.keras` (its module passed with --import).
Each goes through, its own SavedModel at least accepted; DATA that does not fit is one line."""

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

RECIPE = 'name = "lattice"\n[export]\nopenvino = false\nxla = false\n[quantization]\nmodes = []\n'

SUBCLASSED_MODULE = r'''
import keras


@keras.saving.register_keras_serializable(package="lattice")
class LatticeSubclassed(keras.Model):
    def __init__(self, units=8, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(units, activation="relu")
        self.head = keras.layers.Dense(3, activation="softmax")

    def call(self, x):
        return self.head(self.hidden(x))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package="lattice")
class LatticeKeyed(keras.Model):
    """Called with a dict of inputs, answering a dict."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.age = keras.layers.Dense(4)
        self.head = keras.layers.Dense(2)

    def call(self, inputs):
        return {"score": self.head(keras.ops.concatenate([self.age(inputs["age"]), inputs["bmi"]], axis=-1))}
'''

MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out = sys.argv[1]
sys.path.insert(0, out)
import numpy as np, keras, tensorflow as tf
rng = np.random.default_rng(0)
keras.utils.set_random_seed(0)


class Tempered(tf.Module):
    def __init__(self):
        self.w = tf.Variable(rng.normal(size=(10, 3)).astype("float32"))

    @tf.function(input_signature=[tf.TensorSpec([None, 10], tf.float32), tf.TensorSpec([], tf.float32)])
    def serve(self, features, temperature):
        return {"probs": tf.nn.softmax(tf.matmul(features, self.w) / temperature)}

module = Tempered()
tf.saved_model.save(module, f"{out}/tempered", signatures={"serving_default": module.serve})
features = rng.normal(size=(24, 10)).astype("float32")
np.savez(f"{out}/tempered.npz", **{"x_val/features": features, "x_val/temperature": np.array(2.0, "float32")})
np.savez(f"{out}/tempered_rows.npz", **{"x_val/features": features, "x_val/temperature": np.repeat([0.5, 2.0], 12)})
np.savez(f"{out}/tempered_bad.npz", **{"x_val/features": features, "x_val/temperature": np.ones((24, 2))})
np.save(f"{out}/tempered_expected.npy", module.serve(features, tf.constant(2.0))["probs"].numpy())

ids = keras.Input((12,), dtype="int32", name="ids")
pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(30, 8, mask_zero=True)(ids))
keras.Model(ids, keras.layers.Dense(3, activation="softmax", name="prob")(pooled)).save(f"{out}/masked.keras")
tokens = rng.integers(1, 30, (24, 12)).astype("int32")
tokens[:, 8:] = 0  # zero-padded, never all padding
np.savez(f"{out}/masked.npz", x_val=tokens)

latent, label = keras.Input((8,), name="latent"), keras.Input((1,), dtype="int32", name="class_id")
h = keras.layers.Multiply()([latent, keras.layers.Flatten()(keras.layers.Embedding(3, 8)(label))])
h = keras.layers.UpSampling2D()(keras.layers.Reshape((4, 4, 16))(keras.layers.Dense(4 * 4 * 16)(h)))
keras.Model([latent, label], keras.layers.Conv2D(1, 3, padding="same", activation="tanh", name="image")(h)
            ).save(f"{out}/generator.keras")
np.savez(f"{out}/generator.npz", **{"x_val/latent": rng.normal(size=(16, 8)).astype("float32"),
                                    "x_val/class_id": rng.integers(0, 3, (16, 1)).astype("int32")})

from lattice_subclassed import LatticeKeyed, LatticeSubclassed
keyed = LatticeKeyed()
people = {"age": rng.random((24, 3)).astype("float32"), "bmi": rng.random((24, 1)).astype("float32")}
keyed({k: v[:1] for k, v in people.items()})
keyed.save(f"{out}/keyed.keras")
np.savez(f"{out}/keyed.npz", **{f"x_val/{k}": v for k, v in people.items()})
model = LatticeSubclassed()
x = rng.random((24, 6)).astype("float32")
model(x[:1])
model.save(f"{out}/subclassed.keras")
np.savez(f"{out}/subclassed.npz", x_val=x)
np.save(f"{out}/subclassed_expected.npy", np.asarray(model(x)))

keras.config.set_floatx("float64")  # a scientist's regression network (last: the settings outlive it)
keras.config.set_dtype_policy("float64")
state = keras.Input((4,), name="state", dtype="float64")
keras.Model(state, keras.layers.Dense(1, name="value")(keras.layers.Dense(8, activation="tanh")(state))
            ).save(f"{out}/regression64.keras")
np.savez(f"{out}/regression64.npz", x_val=rng.normal(size=(24, 4)))
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lattice")
    (out / "lattice_subclassed.py").write_text(SUBCLASSED_MODULE)
    done = subprocess.run([sys.executable, "-c", MODELS, str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture()
def optimize(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)

    def run(model: str, data: str, *extra: object) -> tuple[int, Path, str]:
        out = tmp_path / f"{Path(model).stem}-{Path(data).stem}"
        monkeypatch.chdir(models)  # --import finds the user's module in the current directory
        code, _, stderr = run_cli(monkeypatch, capfd, "optimize", models / model, "--data", models / data,
                                  "--recipe", recipe, "--latency-runs", 10, "--out", out, *extra)
        return code, out, stderr

    return run


def report_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text())


def accepted(report: dict[str, Any]) -> dict[str, bool]:
    return {a["path"]: a["accepted"] for a in report["artifacts"]}


def test_a_float64_regression_network_is_optimized_with_its_contract_in_float64(optimize) -> None:
    code, out, stderr = optimize("regression64.keras", "regression64.npz")
    assert code == 0, stderr[-3000:]
    report = report_of(out)
    contract = report["model"]["contract"]
    assert contract["inputs"][0]["dtype"] == "float64" and contract["outputs"][0]["dtype"] == "float64"
    assert accepted(report)["saved_model"]


def test_a_scalar_beside_the_batch_is_read_as_declared_and_every_file_judged(optimize, models: Path) -> None:
    code, out, stderr = optimize("tempered", "tempered.npz")
    assert code == 0, stderr[-3000:]
    report = report_of(out)
    inputs = {t["name"]: t["shape"] for t in report["model"]["contract"]["inputs"]}
    assert inputs == {"features": [None, 10], "temperature": []}
    verdicts = accepted(report)
    assert verdicts["saved_model"] and verdicts["model_fp32.tflite"], report["artifacts"]


def test_a_scalar_given_per_row_is_called_once_per_value(optimize) -> None:
    code, out, stderr = optimize("tempered", "tempered_rows.npz")
    assert code == 0, stderr[-3000:]
    assert accepted(report_of(out))["model_fp32.tflite"]


def test_data_whose_scalar_has_another_shape_is_one_line(optimize) -> None:
    code, out, stderr = optimize("tempered", "tempered_bad.npz")
    assert code == 2, stderr[-3000:]
    assert "Traceback" not in stderr
    assert "x_val/temperature has shape (24, 2), input 'temperature' takes no batch" in stderr
    assert not out.exists()


def test_a_masked_text_model_is_not_refused_for_the_all_padding_row_the_gate_adds(optimize) -> None:
    code, out, stderr = optimize("masked.keras", "masked.npz")
    assert code == 0, stderr[-3000:]
    report = report_of(out)
    saved = next(a for a in report["artifacts"] if a["path"] == "saved_model")
    assert saved["accepted"]
    # the all-padding row the gate adds is where the original itself answers NaN: set aside, and said so
    assert any(n.startswith("the gate's own row after the held-out ones (an all-zero input) set aside")
               for n in report["notes"]) or \
        any("set aside" in m["why"] for a in report["artifacts"] for m in a["metrics"]), report["notes"]


def test_a_keras3_subclassed_model_saved_as_keras_goes_through_with_its_module(optimize, models: Path) -> None:
    code, out, stderr = optimize("subclassed.keras", "subclassed.npz", "--import", "lattice_subclassed")
    assert code == 0, stderr[-3000:]
    report = report_of(out)
    contract = report["model"]["contract"]
    assert [t["name"] for t in contract["inputs"]] == ["args_0"]  # what Keras's own model.export serves
    assert [t["shape"] for t in contract["outputs"]] == [[None, 3]]
    assert accepted(report)["saved_model"] and accepted(report)["model_fp32.tflite"]


def test_a_tflite_declares_the_dimensions_its_conversion_lost_as_the_original_does(optimize, models: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    code, out, stderr = optimize("generator.keras", "generator.npz")
    assert code == 0, stderr[-3000:]
    verdicts = accepted(report_of(out))
    assert verdicts.get("model_fp32.tflite"), [a["reason"] for a in report_of(out)["artifacts"]]
    runner = Interpreter(str(out / "model_fp32.tflite")).get_signature_runner()
    assert list(runner.get_output_details()["image"]["shape_signature"]) == [-1, 8, 8, 1]
    rng = np.random.default_rng(3)
    answers = runner(latent=rng.normal(size=(5, 8)).astype("float32"), class_id=np.zeros((5, 1), "int32"))
    assert answers["image"].shape == (5, 8, 8, 1)


def test_a_keras3_subclassed_model_called_with_a_dict_is_served_by_its_keys(optimize) -> None:
    code, out, stderr = optimize("keyed.keras", "keyed.npz", "--import", "lattice_subclassed")
    assert code == 0, stderr[-3000:]
    contract = report_of(out)["model"]["contract"]
    assert sorted(t["name"] for t in contract["inputs"]) == ["age", "bmi"]
    assert [t["name"] for t in contract["outputs"]] == ["score"]
    assert accepted(report_of(out))["model_fp32.tflite"]
