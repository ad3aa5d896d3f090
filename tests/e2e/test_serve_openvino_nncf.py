"""`tfsmith serve --runtime openvino-nncf` as a user runs it: OpenVINO reads the fp32 .tflite of an
optimize-like folder, NNCF quantizes it at start from the folder's samples, and the TF Serving API answers
with the same names as LiteRT; its int8 answers pick the same classes as the fp32 model. The model is a tiny
CNN trained for a few seconds on sklearn's 8x8 digits (random weights would make int8 agreement meaningless).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder.report import Report
from builder.model.artifact import load_samples, resolve_artifact
from tests.report_fixture import write_report
from builder.model.backend import LiteRTBackend
from builder.model.create import model_for_runtime
from builder.packaging.smoke import MIN_AGREEMENT as MIN_APPROXIMATE_AGREEMENT, check_server
from tests.e2e.test_serve import HTTP, STOPPED, TFSMITH, Server

pytestmark = pytest.mark.tf

MAKE_FOLDER = r"""
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf, tf_keras as k
from sklearn.datasets import load_digits
out = sys.argv[1]
k.utils.set_random_seed(0)
digits = load_digits()
x = (digits.images / 16.0).astype(np.float32)[..., None]
y = digits.target
model = k.Sequential([k.layers.Input((8, 8, 1), name="pixels"), k.layers.Conv2D(8, 3, activation="relu"),
                      k.layers.Flatten(), k.layers.Dense(10, activation="softmax", name="probs")])
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x[:1400], y[:1400], epochs=4, batch_size=32, verbose=0)
def convert(int8):
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([x[i : i + 1]] for i in range(64))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return converter.convert()
for name, int8 in (("model_fp32.tflite", False), ("model_int8.tflite", True)):
    with open(os.path.join(out, name), "wb") as f:
        f.write(convert(int8))
held = x[1400:1464]
np.savez(os.path.join(out, "samples.npz"), **{"x/pixels": held, "y/probs": y[1400:1464],
         "expected/probs": model.predict(held, verbose=0)})
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An optimize --out-like folder: chosen int8 model, its fp32 sibling, report.json, samples.npz."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    out = tmp_path_factory.mktemp("nncf-opt")
    subprocess.run([sys.executable, "-c", MAKE_FOLDER, str(out)], check=True, capture_output=True, timeout=300)
    write_report(out, chosen="model_int8.tflite", source="digits_tiny.keras",
                 artifacts=[("model_int8.tflite", "tflite_int8"), ("model_fp32.tflite", "tflite_fp32")])
    return out


def test_nncf_server_answers_like_the_fp32_model(folder: Path) -> None:
    running = Server(str(folder), "--runtime", "openvino-nncf", "--workers", "2")
    try:
        health = HTTP.get(f"{running.url}/healthz").json()
        assert health["runtime"] == "openvino-nncf" and health["model"] == "digits_tiny"
        meta = HTTP.get(f"{running.url}/v1/models/digits_tiny/metadata").json()
        signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert {spec["dtype"] for spec in signature["inputs"].values()} == {"DT_FLOAT"}  # the fp32 model's inputs

        samples = load_samples(folder / "samples.npz")
        x, y, float_model = samples.inputs["pixels"], samples.labels["probs"], samples.expected["probs"]
        fp32 = LiteRTBackend(folder / "model_fp32.tflite")
        want = fp32.predict("serving_default", {"pixels": x})["probs"]
        got = np.asarray(HTTP.post(f"{running.url}/v1/models/digits_tiny:predict",
                                   json={"instances": x.tolist()}).json()["predictions"], dtype=np.float32)
        assert got.shape == want.shape == (64, 10)
        agreement = float(np.mean(got.argmax(1) == want.argmax(1)))
        print(f"\nopenvino-nncf vs fp32 LiteRT: argmax agreement {agreement:.3f}, max |diff| "
              f"{np.abs(got - want).max():.3g}; accuracy int8 {np.mean(got.argmax(1) == y):.3f} "
              f"fp32 {np.mean(want.argmax(1) == y):.3f}")
        assert agreement >= MIN_APPROXIMATE_AGREEMENT
        assert np.mean(got.argmax(1) == float_model.argmax(1)) >= MIN_APPROXIMATE_AGREEMENT
        assert not np.allclose(got, want, rtol=1e-5, atol=1e-6)  # really int8: the answers are not fp32's

        # the packaging smoke check, against this server: it must judge by agreement, and pass
        artifact = resolve_artifact(folder)
        artifact = dataclasses.replace(artifact, model_path=model_for_runtime("openvino-nncf", artifact.model_path))
        result = check_server(running.url, artifact, "digits_tiny", 1)
        assert result.local_agreement is not None and result.local_agreement >= MIN_APPROXIMATE_AGREEMENT
        assert "int8 (NNCF) answers agree with the local fp32 interpreter" in result.line()
    finally:
        assert running.stop() in STOPPED


def test_nncf_without_samples_is_refused_in_one_line(folder: Path, tmp_path: Path) -> None:
    bare = tmp_path / "no-samples"
    shutil.copytree(folder, bare)
    (bare / "samples.npz").unlink()
    assert Report.load(bare).samples == "samples.npz"
    done = subprocess.run([str(TFSMITH), "serve", str(bare), "--runtime", "openvino-nncf"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert len(errors) == 1 and "openvino-nncf needs calibration samples" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
