"""Signatures in the dtypes TF Serving's TensorProto carries beyond the common ones, as a user runs them: through
`tfsmith optimize` and then `tfsmith serve` (a real server process), asked over every protocol.

- a spectrum model (`tf.signal.rfft` in a `tf.Module`): float32 frames in, a complex64 `spectrum` and a float32
  `power` out. gRPC carries complex values and answers as the original; TF Serving's JSON has no complex numbers
  and v2 no complex datatype, so REST (rows and columns) and v2 refuse it 400 with the reason, in one line;
- a bfloat16 model (bfloat16 `x` in, bfloat16 `y` and a float32 `total` out), DATA as numpy saves a bfloat16
  array: served on every protocol (REST and v2 as numbers, v2's BF16; gRPC's DT_BFLOAT16).
"""

from __future__ import annotations

import importlib.util
import subprocess

import numpy as np
import pytest

from tests.modelgen.runner import ENV, LIGHT_RECIPE, MODEL_NAME, PYTHON, REPO, TFSMITH, Server, grpc_predict

pytestmark = [pytest.mark.tf, pytest.mark.slow]
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "ai_edge_litert", "grpc", "ml_dtypes")):
    pytest.skip("needs the optimize and serve extras", allow_module_level=True)

MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out = sys.argv[1]
import ml_dtypes, numpy as np, tensorflow as tf
rng = np.random.default_rng(0)


class Spectrum(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="frames")])
    def serve(self, frames):
        spectrum = tf.signal.rfft(frames)
        return {"spectrum": spectrum, "power": tf.reduce_sum(tf.abs(spectrum) ** 2, axis=1, keepdims=True)}


class Half(tf.Module):
    def __init__(self):
        self.w = tf.Variable(rng.normal(size=(4, 3)).astype("float32"))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.bfloat16, name="x")])
    def serve(self, x):
        y = tf.matmul(x, tf.cast(self.w, tf.bfloat16))
        return {"y": y, "total": tf.reduce_sum(tf.cast(y, tf.float32), axis=1)}


for name, module, x in (("spectrum", Spectrum(), rng.normal(size=(32, 64)).astype("float32")),
                        ("half", Half(), rng.normal(size=(32, 4)).astype(ml_dtypes.bfloat16))):
    tf.saved_model.save(module, f"{out}/{name}", signatures={"serving_default": module.serve})
    np.savez(f"{out}/{name}.npz", x_val=x[:24])  # a bfloat16 array as numpy saves one (2-byte void)
    probe = x[24:]
    np.save(f"{out}/{name}-probe.npy", probe.astype(np.float32))
    for key, value in module.serve(tf.constant(probe)).items():
        value = value.numpy()
        np.save(f"{out}/{name}-{key}.npy", value.astype(np.float32) if value.dtype == ml_dtypes.bfloat16 else value)
'''


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("dtypes")
    made = subprocess.run([str(PYTHON), "-c", MODELS, str(folder)], capture_output=True, text=True, env=ENV,
                          timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    (folder / "light.toml").write_text(LIGHT_RECIPE)
    return folder


def served(work, name: str) -> Server:
    out = work / f"{name}-out"
    done = subprocess.run([str(TFSMITH), "optimize", str(work / name), "--data", str(work / f"{name}.npz"),
                           "--recipe", str(work / "light.toml"), "--out", str(out), "--latency-runs", "10"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:] + done.stdout[-2000:]
    return Server(out)


def test_complex_answers_go_over_grpc_and_rest_and_v2_refuse_them_with_the_reason(work) -> None:
    server = served(work, "spectrum")
    try:
        probe = np.load(work / "spectrum-probe.npy")
        got = grpc_predict(server.grpc_port, "serving_default", {"frames": probe})
        assert got["spectrum"].dtype == np.complex64
        want = np.load(work / "spectrum-spectrum.npy")
        assert np.max(np.abs(got["spectrum"] - want)) <= 1e-4 * np.max(np.abs(want))
        np.testing.assert_allclose(got["power"], np.load(work / "spectrum-power.npy"), rtol=1e-4)
        doc = server.http.get(f"{server.url}/v1/models/{MODEL_NAME}/metadata").json()
        outputs = doc["metadata"]["signature_def"]["signature_def"]["serving_default"]["outputs"]
        assert outputs["spectrum"]["dtype"] == "DT_COMPLEX64"
        for body in ({"inputs": {"frames": probe.tolist()}}, {"instances": [{"frames": r.tolist()} for r in probe]}):
            reply = server.http.post(f"{server.url}/v1/models/{MODEL_NAME}:predict", json=body)
            assert reply.status_code == 400, reply.text[:300]
            assert reply.json()["error"] == ("output 'spectrum' is complex64: TF Serving's JSON (REST) carries no "
                                             "complex values; ask over gRPC")
        inputs = [{"name": "frames", "shape": list(probe.shape), "datatype": "FP32", "data": probe.ravel().tolist()}]
        reply = server.http.post(f"{server.url}/v2/models/{MODEL_NAME}/infer", json={"inputs": inputs})
        assert reply.status_code == 400 and "v2 has no complex datatype" in reply.json()["error"], reply.text[:300]
    finally:
        server.stop()


def test_bfloat16_is_served_on_every_protocol(work) -> None:
    import ml_dtypes

    server = served(work, "half")
    try:
        probe = np.load(work / "half-probe.npy")  # bfloat16 values, held as float32
        want_y, want_total = np.load(work / "half-y.npy"), np.load(work / "half-total.npy")
        got = grpc_predict(server.grpc_port, "serving_default", {"x": probe.astype(ml_dtypes.bfloat16)})
        assert got["y"].dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(got["y"].astype(np.float32), want_y, rtol=2e-2, atol=1e-2)  # bfloat16's 8 bits
        np.testing.assert_allclose(got["total"], want_total, rtol=2e-2, atol=1e-2)
        reply = server.http.post(f"{server.url}/v1/models/{MODEL_NAME}:predict", json={"inputs": {"x": probe.tolist()}})
        assert reply.status_code == 200, reply.text[:300]
        np.testing.assert_allclose(np.asarray(reply.json()["outputs"]["y"], np.float32), want_y, rtol=2e-2, atol=1e-2)
        rows = server.http.post(f"{server.url}/v1/models/{MODEL_NAME}:predict",
                                json={"instances": [{"x": r.tolist()} for r in probe]})
        assert rows.status_code == 200, rows.text[:300]
        np.testing.assert_allclose([r["total"] for r in rows.json()["predictions"]], want_total, rtol=2e-2, atol=1e-2)
        inputs = [{"name": "x", "shape": list(probe.shape), "datatype": "BF16", "data": probe.ravel().tolist()}]
        reply = server.http.post(f"{server.url}/v2/models/{MODEL_NAME}/infer", json={"inputs": inputs})
        assert reply.status_code == 200, reply.text[:300]
        y = next(o for o in reply.json()["outputs"] if o["name"] == "y")
        assert y["datatype"] == "BF16"
        np.testing.assert_allclose(np.asarray(y["data"], np.float32).reshape(y["shape"]), want_y, rtol=2e-2, atol=1e-2)
        v2 = server.http.get(f"{server.url}/v2/models/{MODEL_NAME}").json()
        assert {"name": "x", "datatype": "BF16", "shape": [-1, 4]} in v2["inputs"]
    finally:
        server.stop()
