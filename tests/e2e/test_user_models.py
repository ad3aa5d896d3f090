"""Models users bring that tfsmith was not written around, through `tfsmith optimize` and `tfsmith serve` as a
user runs them: a Keras 3 model whose dict outputs are named apart from their layers, a detector with
non-max suppression inside (its XLA signature cannot run), a `tf.Module` with three signatures, a classifier
returning class names (`StringLookup(invert=True)`), a `Lambda` holding a Python lambda (Keras's safe mode), an
STFT audio model sent a waveform shorter than one frame, and a token-id model sent an id beyond its vocabulary.

Every model is built here (Keras 3 and TensorFlow in a subprocess; nothing downloads), tiny and untrained: what
is checked is the contract (names, dtypes, signatures) and that every answer is the original model's, never
accuracy. optimize runs in this process (TensorFlow imported once) except where Keras's safe mode must stay on
for the rest of the session; the servers are real `tfsmith serve` processes asked over REST, the Open Inference
Protocol and gRPC, and a request the model cannot compute must be answered 400 (gRPC INVALID_ARGUMENT) with the
runtime's own words, not 500.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.inprocess import run_cli
from tests.conftest import SERVER_LOGS
from tests.e2e.test_serve import REPO, STOPPED, TFSMITH, free_port

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "ai_edge_litert", "grpc",
                                                     "tensorflow_serving")):
    pytest.skip("needs the optimize and serve extras and tensorflow-serving-api", allow_module_level=True)

HTTP = httpx.Client(timeout=60.0)
START_DEADLINE_S = 240
#: What optimize builds here: the float .tflite and the SavedModel (correctness, not speed, is checked).
LIGHT_RECIPE = 'name = "light"\n[quantization]\nmodes = []\n[export]\nxla = false\n'

DETECTOR_LAYERS = '''
import keras, tensorflow as tf


@keras.saving.register_keras_serializable(package="user_models")
class NMS(keras.layers.Layer):
    """One layer returning three answers by name."""

    def call(self, boxes, scores):
        found = tf.image.combined_non_max_suppression(boxes, scores, max_output_size_per_class=5, max_total_size=5,
                                                      clip_boxes=False)
        return {"boxes": found.nmsed_boxes, "scores": found.nmsed_scores, "classes": found.nmsed_classes}
'''

MAKE_MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out = sys.argv[1]
sys.path.insert(0, out)
import numpy as np, tensorflow as tf, keras
import detector_layers
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
features = lambda n: rng.random((n, 4), dtype=np.float32)

x = keras.Input((4,), name="features")
h = keras.layers.Dense(8, activation="relu", name="dense_1")(x)
keras.Model(x, {"logits": keras.layers.Dense(3, name="dense_3")(h),
                "score": keras.layers.Dense(1, name="dense_4")(h)}).save(f"{out}/heads.keras")
np.savez(f"{out}/heads.npz", **{"x_val/features": features(32)})

image = keras.Input((8, 8, 1), name="image")
flat = keras.layers.Flatten()(image)
boxes = keras.layers.Reshape((10, 1, 4))(keras.layers.Dense(40, activation="sigmoid")(flat))
scores = keras.layers.Reshape((10, 2))(keras.layers.Dense(20, activation="sigmoid")(flat))
keras.Model(image, detector_layers.NMS(name="nms")(boxes, scores)).save(f"{out}/detector.keras")
np.savez(f"{out}/detector.npz", **{"x_val": rng.random((16, 8, 8, 1), dtype=np.float32)})

class Retrieval(tf.Module):
    def __init__(self):
        self.w = tf.Variable(rng.random((4, 3), dtype=np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"probs": tf.nn.softmax(x @ self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def embed(self, x):
        return {"embedding": tf.math.l2_normalize(x @ self.w, axis=-1)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="a"),
                                  tf.TensorSpec([None, 4], tf.float32, name="b")])
    def score_pair(self, a, b):
        return {"similarity": tf.reduce_sum(tf.math.l2_normalize(a @ self.w, -1)
                                            * tf.math.l2_normalize(b @ self.w, -1), -1, keepdims=True)}

module = Retrieval()
tf.saved_model.save(module, f"{out}/retrieval", signatures={"serving_default": module.serve,
                                                            "embed": module.embed, "score_pair": module.score_pair})
np.savez(f"{out}/retrieval.npz", **{"x_val": features(32)})

x = keras.Input((4,), name="features")
probs = keras.layers.Dense(3, activation="softmax", name="probs")(keras.layers.Dense(8, activation="relu")(x))
label = keras.layers.StringLookup(vocabulary=["cat", "dog", "fish"], invert=True, num_oov_indices=0,
                                  name="label")(keras.ops.argmax(probs, axis=-1))
keras.Model(x, {"probs": probs, "label": label}).save(f"{out}/names.keras")
np.savez(f"{out}/names.npz", **{"x_val/features": features(32)})

x = keras.Input((4,), name="features")
keras.Model(x, keras.layers.Dense(2, name="out")(keras.layers.Lambda(lambda t: t * 2.0)(x))).save(f"{out}/lam.keras")
np.savez(f"{out}/lam.npz", **{"x_val": features(32)})

wave = keras.Input((None, 1), name="waveform")
spectrum = keras.layers.STFTSpectrogram(mode="log", frame_length=256, frame_step=128, fft_length=256)(wave)
keras.Model(wave, keras.layers.Dense(3, activation="softmax", name="probs")(
    keras.layers.GlobalAveragePooling1D()(spectrum))).save(f"{out}/stft.keras")
np.savez(f"{out}/stft.npz", **{"x_val": rng.standard_normal((16, 1024, 1)).astype(np.float32)})

tokens = keras.Input((6,), dtype="int32", name="tokens")
pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(20, 4)(tokens))
keras.Model(tokens, keras.layers.Dense(3, activation="softmax", name="probs")(pooled)).save(f"{out}/tokens.keras")
np.savez(f"{out}/tokens.npz", **{"x_val": rng.integers(0, 20, (32, 6)).astype(np.int32)})
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("user-models")
    (out / "detector_layers.py").write_text(DETECTOR_LAYERS)
    (out / "light.toml").write_text(LIGHT_RECIPE)
    made = subprocess.run([sys.executable, "-c", MAKE_MODELS, str(out)], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    return out


@pytest.fixture()
def optimize(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    """`tfsmith optimize MODEL --data MODEL.npz` in this process; returns (status, stdout, stderr, out folder)."""
    monkeypatch.chdir(models)  # --import finds the user's module in the current directory

    def run(name: str, *extra: str, recipe: str = "light.toml") -> tuple[int, str, str, Path]:
        model = models / name if (models / name).exists() else models / f"{name}.keras"
        out = tmp_path / f"{name}-optimized"
        code, stdout, stderr = run_cli(monkeypatch, capfd, "optimize", model, "--data", models / f"{name}.npz",
                                       "--recipe", recipe if recipe == "auto" else models / recipe, "--out", out,
                                       "--latency-runs", "20", *extra)
        assert "Traceback" not in stdout + stderr, (stdout + stderr)[-3000:]
        return code, stdout, stderr, out

    return run


class Server:
    """`tfsmith serve ARGS` on free loopback ports (REST and gRPC); its output kept for the log checks."""

    def __init__(self, *args: str) -> None:
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(os.environ.get(SERVER_LOGS, tempfile.gettempdir())) / f"tfsmith-user-models-{self.port}.log"
        self._out = self.log.open("w")
        self.process = subprocess.Popen([str(TFSMITH), "serve", *args, "--port", str(self.port), "--grpc-port",
                                         str(self.grpc_port)], stdout=self._out, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.output()[-3000:]}")
            try:
                if HTTP.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"server not ready in {START_DEADLINE_S} s: {self.output()[-3000:]}")

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text()

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
        finally:
            self._out.close()

    def predict(self, name: str, body: dict[str, Any]) -> httpx.Response:
        return HTTP.post(f"{self.url}/v1/models/{name}:predict", json=body)

    def infer_v2(self, name: str, inputs: list[dict[str, Any]]) -> httpx.Response:
        return HTTP.post(f"{self.url}/v2/models/{name}/infer", json={"inputs": inputs})

    def grpc_predict(self, name: str, signature: str = "", **inputs: np.ndarray) -> Any:
        import grpc
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        request = predict_pb2.PredictRequest()
        request.model_spec.name = name
        request.model_spec.signature_name = signature
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
            return prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)


def report(out: Path) -> Any:
    from builder.report import Report

    return Report.load(out)


def expected(out: Path) -> dict[str, np.ndarray]:
    with np.load(out / "samples.npz") as samples:
        return {k: samples[k] for k in samples.files}


# --- 1. outputs named by what the model returns ----------------------------------------------------------


def test_dict_outputs_keep_their_keys_not_their_layers_names(optimize) -> None:
    code, stdout, _, out = optimize("heads")
    assert code == 0, stdout[-2000:]
    found = report(out)
    assert set(found.contract.output_names) == {"logits", "score"}  # the layers are dense_3 and dense_4
    chosen = found.chosen_artifact
    assert {t.name for t in chosen.outputs} == {"logits", "score"} and chosen.accepted
    samples = expected(out)
    server = Server(str(out), "--runtime", "litert", "--model-name", "heads")
    try:
        answer = server.predict("heads", {"inputs": {"features": samples["x/features"][:4].tolist()}})
        assert answer.status_code == 200, answer.text
        outputs = answer.json()["outputs"]
        assert set(outputs) == {"logits", "score"}
        for name in ("logits", "score"):
            assert np.allclose(outputs[name], samples[f"expected/{name}"][:4], rtol=1e-4, atol=1e-5)
    finally:
        assert server.stop() in STOPPED


# --- 2. a candidate that cannot run: rejected with its reason, optimize goes on ---------------------------


def test_a_detectors_xla_signature_that_cannot_run_is_rejected_and_optimize_goes_on(optimize) -> None:
    code, stdout, stderr, out = optimize("detector", "--import", "detector_layers", recipe="auto")
    assert code == 0, (stdout + stderr)[-3000:]
    found = report(out)
    assert set(found.contract.output_names) == {"boxes", "scores", "classes"}  # all three from one layer, `nms`
    xla = next(c for c in found.selection.candidates if c.signature == "serving_xla")
    assert xla.p50_us is None and xla.error.startswith("cannot run here")
    assert "CombinedNonMaxSuppression" in xla.error and "\n" not in xla.error
    assert any(n.startswith("saved_model#serving_xla on tensorflow is not a candidate: cannot run here")
               for n in found.notes)
    assert "is not a candidate" in stdout  # the user sees it in the run's own output
    assert found.chosen == "saved_model" and found.gate.passed
    assert "serving_xla" not in found.chosen_artifact.extra["signatures"]  # not served: it cannot answer
    samples = expected(out)
    server = Server(str(out), "--model-name", "detector")
    try:
        answer = server.predict("detector", {"inputs": {"image": samples["x/image"][:2].tolist()}})
        assert answer.status_code == 200, answer.text
        for name in ("boxes", "scores", "classes"):
            assert np.allclose(answer.json()["outputs"][name], samples[f"expected/{name}"][:2], rtol=1e-5, atol=1e-6)
        metadata = HTTP.get(f"{server.url}/v1/models/detector/metadata").json()["metadata"]["signature_def"]
        assert set(metadata["signature_def"]) == {"serving_default"}
    finally:
        assert server.stop() in STOPPED


# --- 3. every signature served and judged ----------------------------------------------------------------


def test_every_signature_of_a_tf_module_is_kept_judged_and_served(optimize, models: Path) -> None:
    import tensorflow as tf

    code, stdout, _, out = optimize("retrieval")
    assert code == 0, stdout[-2000:]
    found = report(out)
    for artifact in found.artifacts:  # the .tflite files too: converted from every signature
        assert {"serving_default", "embed", "score_pair"} <= set(artifact.extra["signatures"]), artifact.path
        assert set(artifact.extra["other_signatures"]) == {"embed", "score_pair"}
    chosen = found.chosen_artifact
    assert chosen.accepted and all(v.startswith("passed") for v in chosen.extra["other_signatures"].values())
    assert any(n.startswith(f"served: {found.chosen} on {found.chosen_runtime} carries every signature")
               for n in found.notes)
    openvino = [c for c in found.selection.candidates if c.runtime.startswith("openvino")]
    assert all("has no signature 'serving_default'" in c.error for c in openvino)  # it reads one subgraph only
    if importlib.util.find_spec("openvino") is not None:  # one IR holds one function: none rather than one short
        assert not any(a.format.startswith("openvino_ir") for a in found.artifacts)
        assert any("OpenVINO's IR holds one function" in n and "would lose" in n and "embed" in n
                   and "score_pair" in n for n in found.notes), found.notes
    original = tf.saved_model.load(str(models / "retrieval"))
    x = np.random.default_rng(1).random((3, 4), dtype=np.float32)
    y = np.random.default_rng(2).random((3, 4), dtype=np.float32)
    server = Server(str(out), "--model-name", "retrieval")
    try:
        for signature, inputs in (("serving_default", {"x": x}), ("embed", {"x": x}), ("score_pair", {"a": x, "b": y})):
            want = {k: v.numpy() for k, v in original.signatures[signature](**inputs).items()}
            answer = server.predict("retrieval", {"signature_name": signature,
                                                  "inputs": {k: v.tolist() for k, v in inputs.items()}})
            assert answer.status_code == 200, (signature, answer.text)
            got = answer.json()["outputs"]
            got = got if isinstance(got, dict) else {next(iter(want)): got}
            for name, value in want.items():
                assert np.allclose(got[name], value, rtol=1e-4, atol=1e-5), (signature, name)
    finally:
        assert server.stop() in STOPPED


# --- 4. outputs of any dtype judged exactly --------------------------------------------------------------


def test_class_names_are_judged_exactly_and_served_as_strings(optimize) -> None:
    code, stdout, _, out = optimize("names")
    assert code == 0, stdout[-2000:]
    found = report(out)
    label = found.contract.output("label")
    assert label.dtype == "string" and label.task == "exact"  # Keras declares it int64; the model returns text
    metric = found.chosen_artifact.metric("label")
    assert metric.metric == "disagreement" and metric.value == 0.0 and metric.agreement == 1.0
    samples = expected(out)
    want = [v.decode() for v in samples["expected/label"][:4]]
    assert set(want) <= {"cat", "dog", "fish"}
    server = Server(str(out), "--model-name", "names")
    try:
        answer = server.predict("names", {"instances": [{"features": row} for row in samples["x/features"][:4].tolist()]})
        assert answer.status_code == 200, answer.text
        assert [row["label"] for row in answer.json()["predictions"]] == want
        reply = server.grpc_predict("names", features=samples["x/features"][:4])
        assert [v.decode() for v in reply.outputs["label"].string_val] == want
    finally:
        assert server.stop() in STOPPED


# --- 5. Keras's safe mode: one line saying how to proceed ------------------------------------------------


def test_a_lambda_model_is_refused_with_the_way_on_and_loads_when_trusted(models: Path, tmp_path: Path) -> None:
    # A subprocess: turning safe mode off must not leak into the rest of this session.
    args = [str(TFSMITH), "optimize", str(models / "lam.keras"), "--data", str(models / "lam.npz"), "--recipe",
            str(models / "light.toml"), "--latency-runs", "20"]
    refused = subprocess.run([*args, "--out", str(tmp_path / "refused")], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert len(lines) == 1 and "safe mode refuses it" in lines[0], refused.stderr[-2000:]
    assert "--import builder.optimize.unsafe_deserialization" in lines[0]
    assert not (tmp_path / "refused").exists()
    trusted = subprocess.run([*args, "--out", str(tmp_path / "trusted"), "--import",
                              "builder.optimize.unsafe_deserialization"], capture_output=True, text=True, timeout=600)
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    assert report(tmp_path / "trusted").contract.output_names == ("out",)


# --- 6. what the client sent and the model cannot compute: 400 -------------------------------------------


def _refused_everywhere(server: Server, name: str, input_name: str, bad: np.ndarray, datatype: str,
                        words: str) -> str:
    """The bad request over REST (rows and columns), the Open Inference Protocol and gRPC: 400 / INVALID_ARGUMENT
    with the runtime's words; returns the REST message."""
    import grpc

    rows = server.predict(name, {"instances": bad.tolist()})
    columns = server.predict(name, {"inputs": {input_name: bad.tolist()}})
    v2 = server.infer_v2(name, [{"name": input_name, "shape": list(bad.shape), "datatype": datatype,
                                 "data": bad.reshape(-1).tolist()}])
    for answer in (rows, columns, v2):
        assert answer.status_code == 400, answer.text
        assert words in answer.json()["error"] and "internal error" not in answer.json()["error"]
    with pytest.raises(grpc.RpcError) as failed:
        server.grpc_predict(name, **{input_name: bad})
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in failed.value.details()
    assert rows.json()["error"] == columns.json()["error"]  # the same failure says the same, every time
    return rows.json()["error"]


def test_an_id_beyond_the_vocabulary_is_the_clients_mistake_on_litert_and_tensorflow(optimize, tmp_path: Path) -> None:
    import shutil

    from builder.report import Report

    code, stdout, _, out = optimize("tokens")
    assert code == 0, stdout[-2000:]
    good = np.array([[1, 2, 3, 4, 5, 6]], dtype=np.int32)
    bad = np.array([[1, 2, 3, 4, 500, 6]], dtype=np.int32)
    # served from optimize's folder: refused before the model runs, with the range optimize measured on the
    # original (a Keras 3 Embedding of 20 rows takes -20..19), whatever the runtime
    ranged = "value 500 at [0, 4] is not in [-20, 20)"
    for served, runtime in ((out, "litert"), (out / "saved_model", "tensorflow")):
        server = Server(str(served), "--runtime", runtime, "--model-name", "tokens")
        try:
            message = _refused_everywhere(server, "tokens", "tokens", bad, "INT32", ranged)
            assert message.startswith("input 'tokens': ") and "the values the original model accepts" in message
            assert server.predict("tokens", {"instances": good.tolist()}).status_code == 200  # it still serves
        finally:
            assert server.stop() in STOPPED
    # the same files without optimize's report: each runtime's own refusal, in its own words
    bare = tmp_path / "bare"
    bare.mkdir()
    tflite = bare / Report.load(out).chosen
    shutil.copy(out / tflite.name, tflite)
    shutil.copytree(out / "saved_model", bare / "saved_model")
    server = Server(str(tflite), "--runtime", "litert", "--model-name", "tokens")
    try:
        message = _refused_everywhere(server, "tokens", "tokens", bad, "INT32", "gather index out of bounds")
        assert message.startswith("gather index out of bounds. Node number ") and message.count("gather") == 1
        assert message.endswith(" (GATHER) failed to invoke."), message  # LiteRT's two sentences, apart
        answer = server.predict("tokens", {"instances": good.tolist()})
        assert answer.status_code == 200  # it still serves
        assert "Traceback" not in server.output()
    finally:
        assert server.stop() in STOPPED
    _batch_mates_are_answered(tflite, good, bad, answer.json()["predictions"])
    server = Server(str(bare / "saved_model"), "--runtime", "tensorflow", "--model-name", "tokens")
    try:
        message = _refused_everywhere(server, "tokens", "tokens", bad, "INT32", "= 500 is not in [0, 20)")
        assert "Graph execution error" not in message and "[[" not in message
        assert server.predict("tokens", {"instances": good.tolist()}).status_code == 200
    finally:
        assert server.stop() in STOPPED


def _batch_mates_are_answered(model: Path, good: np.ndarray, bad: np.ndarray, alone: list[Any]) -> None:
    """With dynamic batching, the bad request and three good ones sent together share one interpreter call
    (a batch of 4 examples leaves once all have come, however slow the machine: the deadline is a minute); the
    model refuses it, and only the bad request gets the 400."""
    from concurrent.futures import ThreadPoolExecutor

    server = Server(str(model), "--runtime", "litert", "--model-name", "tokens", "--processes", "1", "--workers", "1",
                    "--max-batch", "4", "--batch-timeout-us", "60000000")
    try:
        others = [good, good[:, ::-1].copy(), np.full_like(good, 7)]
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda rows: server.predict("tokens", {"instances": rows.tolist()}),
                                    [bad, *others]))
        assert answers[0].status_code == 400 and "gather index out of bounds" in answers[0].json()["error"]
        assert [a.status_code for a in answers[1:]] == [200, 200, 200], [a.text for a in answers[1:]]
        np.testing.assert_allclose(answers[1].json()["predictions"], alone, rtol=1e-6)
        assert answers[2].json()["predictions"] != answers[3].json()["predictions"]  # each its own answer
        metrics = HTTP.get(f"{server.url}/monitoring/prometheus/metrics").text
        singles = float(re.search(r'^tfsmith_batch_size_bucket\{le="1\.0"\} (\S+)$', metrics, re.M).group(1))
        calls = float(re.search(r"^tfsmith_batch_size_count (\S+)$", metrics, re.M).group(1))
        assert calls > singles, metrics  # they did share a batch
    finally:
        assert server.stop() in STOPPED


def test_a_waveform_shorter_than_one_frame_is_the_clients_mistake(optimize) -> None:
    code, stdout, _, out = optimize("stft")
    assert code == 0, stdout[-2000:]
    samples = expected(out)
    short = np.zeros((1, 100, 1), dtype=np.float32)
    server = Server(str(out / "saved_model"), "--runtime", "tensorflow", "--model-name", "stft")
    try:
        message = _refused_everywhere(server, "stft", "waveform", short, "FP32", "Input to reshape is a tensor with 100")
        assert message.endswith(".") and "\n" not in message and "Detected at node" not in message
        answer = server.predict("stft", {"inputs": {"waveform": samples["x/waveform"][:1].tolist()}})
        assert answer.status_code == 200, answer.text
        assert np.allclose(answer.json()["outputs"], samples["expected/probs"][:1], rtol=1e-4, atol=1e-5)
        assert "Traceback" not in server.output()
    finally:
        assert server.stop() in STOPPED
    server = Server(str(out), "--runtime", "litert", "--model-name", "stft")  # the .tflite, allocated per length
    try:
        _refused_everywhere(server, "stft", "waveform", short, "FP32", "failed to prepare")
        for length in (1024, 512, 1024):  # lengths it can take still answer, before and after a refusal
            waveform = samples["x/waveform"][:1, :length]
            answer = server.predict("stft", {"inputs": {"waveform": waveform.tolist()}})
            assert answer.status_code == 200, answer.text
        assert np.allclose(answer.json()["outputs"], samples["expected/probs"][:1], rtol=1e-4, atol=1e-5)
        assert "Traceback" not in server.output()
    finally:
        assert server.stop() in STOPPED
