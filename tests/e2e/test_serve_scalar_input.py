"""A signature with a scalar beside the batch, as a user runs it: a `tf.Module` SavedModel taking `features`
[-1, 10] float32 and `temperature` [] float32 (softmax(logits / temperature)), DATA with a 0-d temperature,
through `tfsmith optimize` and then `tfsmith serve` (a real server process), asked over REST (columns), gRPC
and v2 with the temperature as a scalar and answered as the original answers. REST's row format cannot carry a
scalar beside rows (every instance is one row): TF Serving answers such a request 400, and so does tfsmith."""

from __future__ import annotations

import importlib.util
import subprocess

import numpy as np
import pytest

from tests.modelgen.runner import ENV, LIGHT_RECIPE, MODEL_NAME, PYTHON, REPO, TFSMITH, Server, grpc_predict

pytestmark = [pytest.mark.tf, pytest.mark.slow]
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "ai_edge_litert", "grpc")):
    pytest.skip("needs the optimize and serve extras", allow_module_level=True)

MODEL = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out = sys.argv[1]
import numpy as np, tensorflow as tf
rng = np.random.default_rng(0)


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
probe = rng.normal(size=(5, 10)).astype("float32")
np.save(f"{out}/probe.npy", probe)
for t in (0.5, 3.0):
    np.save(f"{out}/expected-{t}.npy", module.serve(probe, tf.constant(t))["probs"].numpy())
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("scalar")
    made = subprocess.run([str(PYTHON), "-c", MODEL, str(work)], capture_output=True, text=True, env=ENV, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    (work / "light.toml").write_text(LIGHT_RECIPE)
    done = subprocess.run([str(TFSMITH), "optimize", str(work / "tempered"), "--data", str(work / "tempered.npz"),
                           "--recipe", str(work / "light.toml"), "--out", str(work / "out"), "--latency-runs", "10"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:] + done.stdout[-2000:]
    server = Server(work / "out")
    try:
        yield server, work
    finally:
        server.stop()


@pytest.mark.parametrize("temperature", [0.5, 3.0])
def test_rest_columns_carry_the_scalar_as_declared(served, temperature: float) -> None:
    server, work = served
    probe = np.load(work / "probe.npy")
    body = {"inputs": {"features": probe.tolist(), "temperature": temperature}}
    reply = server.http.post(f"{server.url}/v1/models/{MODEL_NAME}:predict", json=body)
    assert reply.status_code == 200, reply.text[:500]
    got = np.asarray(reply.json()["outputs"], dtype=np.float32)
    np.testing.assert_allclose(got, np.load(work / f"expected-{temperature}.npy"), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.5, 3.0])
def test_grpc_carries_the_scalar_as_declared(served, temperature: float) -> None:
    server, work = served
    probe = np.load(work / "probe.npy")
    got = grpc_predict(server.grpc_port, "serving_default",
                       {"features": probe, "temperature": np.array(temperature, np.float32)})
    np.testing.assert_allclose(got["probs"], np.load(work / f"expected-{temperature}.npy"), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.5, 3.0])
def test_v2_carries_the_scalar_as_declared(served, temperature: float) -> None:
    server, work = served
    probe = np.load(work / "probe.npy")
    inputs = [{"name": "features", "shape": list(probe.shape), "datatype": "FP32", "data": probe.reshape(-1).tolist()},
              {"name": "temperature", "shape": [], "datatype": "FP32", "data": [temperature]}]
    reply = server.http.post(f"{server.url}/v2/models/{MODEL_NAME}/infer", json={"inputs": inputs})
    assert reply.status_code == 200, reply.text[:500]
    (probs,) = reply.json()["outputs"]
    assert probs["name"] == "probs" and probs["shape"] == [5, 3]
    got = np.asarray(probs["data"], dtype=np.float32).reshape(5, 3)
    np.testing.assert_allclose(got, np.load(work / f"expected-{temperature}.npy"), rtol=1e-4, atol=1e-5)


def test_the_metadata_declares_the_scalar(served) -> None:
    server, _ = served
    doc = server.http.get(f"{server.url}/v1/models/{MODEL_NAME}/metadata").json()
    inputs = doc["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    assert inputs["temperature"]["dtype"] == "DT_FLOAT"
    assert inputs["temperature"]["tensor_shape"].get("dim", []) == []
    v2 = server.http.get(f"{server.url}/v2/models/{MODEL_NAME}").json()
    assert {"name": "temperature", "datatype": "FP32", "shape": []} in v2["inputs"]


def test_rows_cannot_carry_a_scalar_beside_them_and_are_refused_400(served) -> None:
    server, work = served
    probe = np.load(work / "probe.npy")
    body = {"instances": [{"features": row.tolist(), "temperature": 0.5} for row in probe]}
    reply = server.http.post(f"{server.url}/v1/models/{MODEL_NAME}:predict", json=body)
    assert reply.status_code == 400, reply.text[:500]
    error = reply.json()["error"]
    assert "\n" not in error and "temperature" in error, error
