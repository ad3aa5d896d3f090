"""`tfsmith serve` on the TensorFlow runtime, as a user runs it: real SavedModels built here (a GRU over
variable-length sequences, a `TextVectorization` string classifier, a `tf.Module` whose only signature is
`predict`, with int64, bool, float16 and string tensors), served on loopback and asked over REST (rows and
columns), gRPC (TF Serving's own `tensorflow-serving-api` client) and the Open Inference Protocol
(tritonclient). Every answer is compared with the same signature called in this process: the same graph on
the same TensorFlow, so floats must agree to float32 rounding (rtol 1e-5, atol 1e-6) and everything else
exactly."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import SERVER_LOGS
from tests.e2e.test_serve import REPO, STOPPED, TFSMITH, free_port

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
grpc = pytest.importorskip("grpc")
pytest.importorskip("tensorflow_serving.apis.predict_pb2", reason="tensorflow-serving-api not installed")
from tensorflow_serving.apis import (  # noqa: E402
    get_model_metadata_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
)

HTTP = httpx.Client(timeout=60.0)
RTOL, ATOL = 1e-5, 1e-6
#: Starting a TensorFlow server imports TensorFlow and loads the model: seconds when idle, much longer on a
#: machine shared with other builds, so the wait is generous (it ends as soon as the server is ready).
START_DEADLINE_S = 240

MAKE_MODELS = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf, keras
out = sys.argv[1]
keras.utils.set_random_seed(0)
seq = keras.Input(shape=(None, 8), name="seq")
gru = keras.Model(seq, keras.layers.Dense(3, name="scores")(keras.layers.GRU(16)(seq)))
gru.export(os.path.join(out, "gru"))
vectorize = keras.layers.TextVectorization(max_tokens=50, output_sequence_length=6)
vectorize.adapt(tf.constant(["good movie", "bad movie", "great plot and acting", "terrible plot", "fine"]))
text = keras.Input(shape=(), dtype="string", name="text")
hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 4)(vectorize(text)))
classifier = keras.Model(text, keras.layers.Dense(2, activation="softmax", name="probs")(hidden))
classifier.export(os.path.join(out, "text"))
class Mixed(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="ids"),
                                  tf.TensorSpec([None, 2], tf.bool, name="mask"),
                                  tf.TensorSpec([None, 2], tf.float16, name="h")])
    def predict(self, ids, mask, h):
        return {"total": tf.cast(ids, tf.float32) * 2.0 + tf.reduce_sum(tf.cast(mask, tf.float32), 1),
                "half": h * tf.constant(2.0, tf.float16), "big": ids * 3, "any": tf.reduce_any(mask, 1),
                "label": tf.strings.join(["id-", tf.strings.as_string(ids)]),
                "raw_bytes": tf.strings.join(["x", tf.strings.as_string(ids)]),
                "blob": tf.strings.join([tf.constant(b"\xff"), tf.strings.as_string(ids)])}
mixed = Mixed()
tf.saved_model.save(mixed, os.path.join(out, "mixed"), signatures={"predict": mixed.predict})
class Tempered(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.reshape(tf.range(9, dtype=tf.float64) / 10.0, (3, 3)))
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float64, name="features"),
                                  tf.TensorSpec([], tf.float64, name="temperature")])
    def serve(self, features, temperature):
        return {"probs": tf.nn.softmax(tf.matmul(features, self.w) / temperature)}
tempered = Tempered()
tf.saved_model.save(tempered, os.path.join(out, "tempered"), signatures={"serving_default": tempered.serve})
converter = tf.lite.TFLiteConverter.from_saved_model(os.path.join(out, "gru"))
converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
converter._experimental_lower_tensor_list_ops = False
with open(os.path.join(out, "gru_select.tflite"), "wb") as f:
    f.write(converter.convert())
plain = keras.Sequential([keras.Input((4,), name="v"), keras.layers.Dense(2, name="out")])
with open(os.path.join(out, "plain.tflite"), "wb") as f:
    f.write(tf.lite.TFLiteConverter.from_keras_model(plain).convert())
"""


@pytest.fixture(scope="session")
def tf_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gru/, text/, mixed/ (SavedModels), gru_select.tflite (Select TF ops) and plain.tflite."""
    out = tmp_path_factory.mktemp("tf-models")
    subprocess.run([sys.executable, "-c", MAKE_MODELS, str(out)], check=True, capture_output=True, timeout=600)
    return out


class TFServer:
    """`tfsmith serve MODEL ...` on free loopback ports (REST and gRPC), output kept for the log assertions."""

    def __init__(self, *args: str) -> None:
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(os.environ.get(SERVER_LOGS, tempfile.gettempdir())) / f"tfsmith-serve-test-{self.port}.log"
        self._out = self.log.open("w")
        self.process = subprocess.Popen(
            [str(TFSMITH), "serve", *args, "--port", str(self.port), "--grpc-port", str(self.grpc_port),
             "--log-level", "info"], stdout=self._out, stderr=subprocess.STDOUT, text=True)
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


def _serve(*args: str) -> Iterator[TFServer]:
    server = TFServer(*args)
    yield server
    assert server.stop() in STOPPED


@pytest.fixture(scope="module")
def gru_server(tf_models: Path) -> Iterator[TFServer]:
    yield from _serve(str(tf_models / "gru"), "--runtime", "auto", "--workers", "2")


@pytest.fixture(scope="module")
def text_server(tf_models: Path) -> Iterator[TFServer]:
    yield from _serve(str(tf_models / "text"), "--model-name", "reviews", "--max-batch", "8")


@pytest.fixture(scope="module")
def mixed_server(tf_models: Path) -> Iterator[TFServer]:
    yield from _serve(str(tf_models / "mixed"))


@pytest.fixture(scope="module")
def tempered_server(tf_models: Path) -> Iterator[TFServer]:
    yield from _serve(str(tf_models / "tempered"))


@pytest.fixture(scope="module")
def loaded(tf_models: Path) -> dict[str, Any]:
    """The same SavedModels, loaded in this process: what every answer is compared with."""
    return {name: tf.saved_model.load(str(tf_models / name)) for name in ("gru", "text", "mixed", "tempered")}


def local(model: Any, signature: str, **inputs: Any) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in model.signatures[signature](**inputs).items()}


def predict(server: TFServer, name: str, body: dict[str, Any]) -> httpx.Response:
    return HTTP.post(f"{server.url}/v1/models/{name}:predict", json=body)


def stub(server: TFServer) -> Any:
    return prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))


def grpc_request(name: str, signature: str = "", **inputs: np.ndarray) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


# --- GRU over variable-length sequences --------------------------------------------------------------------


def test_gru_variable_lengths_over_rest_rows_and_columns(gru_server: TFServer, loaded: dict[str, Any]) -> None:
    rng = np.random.default_rng(1)
    for steps in (5, 11):  # two lengths, one server: the time dimension is dynamic
        x = rng.random((3, steps, 8), dtype=np.float32)
        want = local(loaded["gru"], "serving_default", seq=x)["output_0"]
        rows = predict(gru_server, "gru", {"instances": x.tolist()})
        assert rows.status_code == 200, rows.text
        assert np.allclose(rows.json()["predictions"], want, rtol=RTOL, atol=ATOL)
        columns = predict(gru_server, "gru", {"signature_name": "serve", "inputs": {"seq": x.tolist()}})
        assert columns.status_code == 200, columns.text
        assert np.allclose(columns.json()["outputs"], want, rtol=RTOL, atol=ATOL)


def test_gru_health_metadata_and_the_device_line(gru_server: TFServer) -> None:
    health = HTTP.get(f"{gru_server.url}/healthz").json()
    assert health["runtime"] == "tensorflow" and "SavedModel runs only on TensorFlow" in health["runtime_reason"]
    meta = HTTP.get(f"{gru_server.url}/v1/models/gru/metadata").json()["metadata"]["signature_def"]["signature_def"]
    assert set(meta) == {"serve", "serving_default"}
    dims = [d["size"] for d in meta["serving_default"]["inputs"]["seq"]["tensor_shape"]["dim"]]
    assert dims == ["-1", "-1", "8"]
    device_lines = [line for line in gru_server.output().splitlines() if "TensorFlow 2." in line and "thread" in line]
    assert len(device_lines) == 1 and ("runs on the CPU" in device_lines[0] or " GPU" in device_lines[0]), device_lines


def test_gru_over_grpc_with_tensor_content(gru_server: TFServer, loaded: dict[str, Any]) -> None:
    x = np.random.default_rng(2).random((2, 7, 8), dtype=np.float32)
    request = grpc_request("gru", "serving_default", seq=x)
    assert request.inputs["seq"].tensor_content
    answer = stub(gru_server).Predict(request, timeout=60)
    got = tf.make_ndarray(answer.outputs["output_0"])
    assert np.allclose(got, local(loaded["gru"], "serving_default", seq=x)["output_0"], rtol=RTOL, atol=ATOL)
    with pytest.raises(grpc.RpcError) as refused:
        stub(gru_server).Predict(grpc_request("gru", "nope", seq=x), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "serve, serving_default" in refused.value.details()


def test_gru_over_v2_binary(gru_server: TFServer, loaded: dict[str, Any]) -> None:
    client_http = pytest.importorskip("tritonclient.http")
    x = np.random.default_rng(3).random((1, 9, 8), dtype=np.float32)
    client = client_http.InferenceServerClient(f"127.0.0.1:{gru_server.port}")
    tensor = client_http.InferInput("seq", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    result = client.infer("gru", [tensor], outputs=[client_http.InferRequestedOutput("output_0", binary_data=True)])
    got = result.as_numpy("output_0")
    assert np.allclose(got, local(loaded["gru"], "serving_default", seq=x)["output_0"], rtol=RTOL, atol=ATOL)


def test_unknown_signature_is_a_400_naming_the_ones_that_exist(gru_server: TFServer) -> None:
    answer = predict(gru_server, "gru", {"signature_name": "serving_xla", "instances": [[[0.0] * 8]]})
    assert answer.status_code == 400 and "serve, serving_default" in answer.json()["error"]


# --- strings: a TextVectorization classifier ---------------------------------------------------------------


def test_text_rows_columns_and_b64_over_rest(text_server: TFServer, loaded: dict[str, Any]) -> None:
    sentences = ["good movie", "terrible plot", "fine acting, unknown words", ""]
    want = local(loaded["text"], "serving_default", text=tf.constant(sentences))["output_0"]
    rows = predict(text_server, "reviews", {"instances": sentences})
    assert rows.status_code == 200, rows.text
    assert np.allclose(rows.json()["predictions"], want, rtol=RTOL, atol=ATOL)
    columns = predict(text_server, "reviews", {"inputs": {"text": sentences}})
    assert np.allclose(columns.json()["outputs"], want, rtol=RTOL, atol=ATOL)
    binary = [{"b64": base64.b64encode(s.encode()).decode()} for s in sentences]
    b64 = predict(text_server, "reviews", {"instances": binary})
    assert b64.status_code == 200, b64.text
    assert np.allclose(b64.json()["predictions"], want, rtol=RTOL, atol=ATOL)
    for bad, needle in [({"instances": [1.5]}, "expected strings"), ({"instances": [{"b64": "%%"}]}, "Base64")]:
        refused = predict(text_server, "reviews", bad)
        assert refused.status_code == 400 and needle in refused.json()["error"], refused.text


def test_text_metadata_says_dt_string_and_the_self_test_was_skipped(text_server: TFServer) -> None:
    meta = HTTP.get(f"{text_server.url}/v1/models/reviews/metadata").json()["metadata"]["signature_def"]
    assert meta["signature_def"]["serving_default"]["inputs"]["text"]["dtype"] == "DT_STRING"
    assert "self-test skipped" in text_server.output()  # no samples: no invented text
    assert HTTP.get(f"{text_server.url}/healthz").json()["model_p50_us"] is None


def test_text_over_grpc_string_val(text_server: TFServer, loaded: dict[str, Any]) -> None:
    sentences = np.array([b"great plot and acting", b"bad movie"], dtype=object)
    request = grpc_request("reviews", text=sentences)
    assert list(request.inputs["text"].string_val) == list(sentences)
    answer = stub(text_server).Predict(request, timeout=60)
    want = local(loaded["text"], "serving_default", text=tf.constant(sentences))["output_0"]
    assert np.allclose(tf.make_ndarray(answer.outputs["output_0"]), want, rtol=RTOL, atol=ATOL)
    metadata = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata.model_spec.name = "reviews"
    metadata.metadata_field.append("signature_def")
    assert stub(text_server).GetModelMetadata(metadata, timeout=60).metadata["signature_def"].value


@pytest.mark.parametrize("binary", [True, False])
def test_text_over_v2_bytes(text_server: TFServer, loaded: dict[str, Any], binary: bool) -> None:
    client_http = pytest.importorskip("tritonclient.http")
    sentences = np.array([b"good movie", b"terrible plot", b"fine"], dtype=object)
    client = client_http.InferenceServerClient(f"127.0.0.1:{text_server.port}")
    tensor = client_http.InferInput("text", [3], "BYTES")
    tensor.set_data_from_numpy(sentences, binary_data=binary)
    result = client.infer("reviews", [tensor])
    want = local(loaded["text"], "serving_default", text=tf.constant(sentences))["output_0"]
    assert np.allclose(result.as_numpy("output_0"), want, rtol=RTOL, atol=ATOL)


# --- a tf.Module whose only signature is `predict`: int64, bool, float16, strings --------------------------


def _mixed_inputs() -> dict[str, np.ndarray]:
    return {"ids": np.array([3, 2**40, -7], dtype=np.int64), "mask": np.array([[True, False], [False, False],
                                                                                 [True, True]]),
            "h": np.array([[0.5, -1.25], [65000.0 / 2, 3.0], [0.0, 1e-3]], dtype=np.float16)}


def _check_mixed(got: dict[str, Any], want: dict[str, np.ndarray]) -> None:
    assert got["total"].dtype == np.float32 and np.allclose(got["total"], want["total"], rtol=RTOL, atol=ATOL)
    for name in ("half", "big", "any"):
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name]), name
    for name in ("label", "raw_bytes", "blob"):
        assert list(got[name]) == list(want[name]), name


def test_mixed_dtypes_over_rest_with_its_only_signature(mixed_server: TFServer, loaded: dict[str, Any]) -> None:
    x = _mixed_inputs()
    want = local(loaded["mixed"], "predict", **x)
    body = {"inputs": {"ids": x["ids"].tolist(), "mask": x["mask"].tolist(), "h": x["h"].tolist()}}
    answer = predict(mixed_server, "mixed", body)  # no signature_name: the model's only one
    assert answer.status_code == 200, answer.text
    out = answer.json()["outputs"]
    got = {"total": np.array(out["total"], np.float32), "half": np.array(out["half"], np.float16),
           "big": np.array(out["big"], np.int64), "any": np.array(out["any"]),
           "label": [s.encode() for s in out["label"]],
           "raw_bytes": [base64.b64decode(v["b64"]) for v in out["raw_bytes"]],  # `_bytes`: always b64
           "blob": [base64.b64decode(v["b64"]) for v in out["blob"]]}  # not UTF-8: b64
    assert all(isinstance(v, str) for v in out["label"]) and out["big"][1] == 3 * 2**40
    _check_mixed(got, want)
    rows = predict(mixed_server, "mixed", {"signature_name": "predict", "instances": [
        {"ids": int(i), "mask": m.tolist(), "h": h.tolist()} for i, m, h in zip(x["ids"], x["mask"], x["h"])]})
    assert rows.status_code == 200, rows.text
    assert [r["big"] for r in rows.json()["predictions"]] == want["big"].tolist()
    refused = predict(mixed_server, "mixed", {"inputs": {**body["inputs"], "mask": [[1, 0], [0, 0], [1, 1]]}})
    assert refused.status_code == 400 and "booleans" in refused.json()["error"]
    refused = predict(mixed_server, "mixed", {"inputs": {**body["inputs"], "ids": [1, True, 2]}})
    assert refused.status_code == 400 and "booleans" in refused.json()["error"]


def test_mixed_dtypes_over_grpc(mixed_server: TFServer, loaded: dict[str, Any]) -> None:
    x = _mixed_inputs()
    answer = stub(mixed_server).Predict(grpc_request("mixed", "predict", **x), timeout=60)
    got = {name: tf.make_ndarray(tensor) for name, tensor in answer.outputs.items()}
    _check_mixed(got, local(loaded["mixed"], "predict", **x))
    assert answer.outputs["label"].dtype == tf.string.as_datatype_enum


def test_mixed_dtypes_over_v2_json(mixed_server: TFServer, loaded: dict[str, Any]) -> None:
    client_http = pytest.importorskip("tritonclient.http")
    x = _mixed_inputs()
    client = client_http.InferenceServerClient(f"127.0.0.1:{mixed_server.port}")
    tensors = []
    for name, datatype in (("ids", "INT64"), ("mask", "BOOL"), ("h", "FP16")):
        tensor = client_http.InferInput(name, list(x[name].shape), datatype)
        tensor.set_data_from_numpy(x[name], binary_data=name == "h")  # FP16 only travels in binary
        tensors.append(tensor)
    wanted = [client_http.InferRequestedOutput(n, binary_data=True)
              for n in ("total", "half", "big", "any", "label", "raw_bytes", "blob")]
    result = client.infer("mixed", tensors, outputs=wanted)
    got = {name: result.as_numpy(name) for name in ("total", "half", "big", "any", "label", "raw_bytes", "blob")}
    _check_mixed(got, local(loaded["mixed"], "predict", **x))


# --- float64 and a scalar input beside a batched one ---------------------------------------------------------


def test_a_float64_signature_with_a_scalar_input_is_served_on_every_protocol_rows_refused(
        tempered_server: TFServer, loaded: dict[str, Any]) -> None:
    features = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0], [0.25, -1.0, 2.0]])
    want = local(loaded["tempered"], "serving_default", features=tf.constant(features),
                 temperature=tf.constant(0.5, tf.float64))["probs"]
    columns = predict(tempered_server, "tempered", {"inputs": {"features": features.tolist(), "temperature": 0.5}})
    assert columns.status_code == 200, columns.text
    np.testing.assert_allclose(np.array(columns.json()["outputs"]), want, rtol=RTOL, atol=ATOL)
    rows = predict(tempered_server, "tempered", {"instances": [{"features": [1.0, 2.0, 3.0], "temperature": 0.5}]})
    assert rows.status_code == 400 and "temperature" in rows.json()["error"] and "'inputs'" in rows.json()["error"]
    answer = stub(tempered_server).Predict(grpc_request("tempered", features=features, temperature=np.float64(0.5)),
                                           timeout=60)
    assert answer.outputs["probs"].dtype == tf.float64.as_datatype_enum
    np.testing.assert_allclose(tf.make_ndarray(answer.outputs["probs"]), want, rtol=RTOL, atol=ATOL)
    v2 = HTTP.post(f"{tempered_server.url}/v2/models/tempered/infer", json={"inputs": [
        {"name": "features", "shape": [3, 3], "datatype": "FP64", "data": features.ravel().tolist()},
        {"name": "temperature", "shape": [], "datatype": "FP64", "data": [0.5]}]})
    assert v2.status_code == 200, v2.text
    output = v2.json()["outputs"][0]
    assert output["datatype"] == "FP64" and output["shape"] == [3, 3]
    np.testing.assert_allclose(np.array(output["data"]).reshape(3, 3), want, rtol=RTOL, atol=ATOL)


# --- start-up refusals: one line, non-zero, no traceback ---------------------------------------------------


def _refusal(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "builder.server", *args, "--port", "0", "--grpc-port", "0"],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})})
    errors = [line for line in done.stderr.splitlines() if line.startswith("tfsmith-serve: error:")]
    assert done.returncode != 0 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def test_unknown_signature_name_option_is_refused_naming_the_signatures(tf_models: Path) -> None:
    done = _refusal(str(tf_models / "mixed"), "--signature-name", "serving_default")
    assert "has no such signature; it has: predict" in done.stderr


def test_require_gpu_without_one_refuses_to_start(tf_models: Path) -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU: the refusal cannot happen here")
    done = _refusal(str(tf_models / "gru"), env={"TFSMITH_IMAGE_REQUIRE_GPU": "1"})
    assert "TFSMITH_IMAGE_REQUIRE_GPU=1 but TensorFlow" in done.stderr and "sees no GPU" in done.stderr


def test_saved_model_on_litert_is_refused(tf_models: Path) -> None:
    done = _refusal(str(tf_models / "gru"), "--runtime", "litert")
    assert "a SavedModel runs only on TensorFlow; use --runtime tensorflow" in done.stderr


def test_select_ops_tflite_on_litert_keeps_litert_words_and_says_what_to_use(tf_models: Path) -> None:
    done = _refusal(str(tf_models / "gru_select.tflite"), "--runtime", "litert")
    line = done.stderr.strip().splitlines()[-1]
    assert "LiteRT cannot run this model: Select TensorFlow op(s)" in line and line.endswith("use --runtime tensorflow")


def _has_flex_delegate(select_ops_model: Path) -> bool:
    """Whether this TensorFlow's interpreter runs Select TF ops (builds that link the Flex delegate do)."""
    try:
        with warnings.catch_warnings():  # tf.lite.Interpreter says LiteRT replaces it; asked here on purpose
            warnings.simplefilter("ignore")
            tf.lite.Interpreter(model_path=str(select_ops_model)).allocate_tensors()
    except RuntimeError:
        return False
    return True


def test_select_ops_tflite_on_tensorflow(tf_models: Path, loaded: dict[str, Any]) -> None:
    """Served and compared where the TensorFlow build has the Flex delegate; refused in one line (the
    interpreter's own words and what to serve instead) where it has not, as the stock wheel."""
    if not _has_flex_delegate(tf_models / "gru_select.tflite"):
        done = _refusal(str(tf_models / "gru_select.tflite"), "--runtime", "tensorflow")
        assert "needs Select TF ops, and this TensorFlow" in done.stderr and "Select TensorFlow op(s)" in done.stderr
        assert "serve the SavedModel it was converted from with --runtime tensorflow" in done.stderr
        return
    server = TFServer(str(tf_models / "gru_select.tflite"), "--runtime", "tensorflow")
    try:
        x = np.random.default_rng(4).random((1, 6, 8), dtype=np.float32)
        answer = predict(server, "gru_select", {"instances": x.tolist()})
        want = local(loaded["gru"], "serving_default", seq=x)["output_0"]
        assert np.allclose(answer.json()["predictions"], want, rtol=1e-4, atol=1e-5)  # converted graph
    finally:
        assert server.stop() in STOPPED


def test_plain_tflite_on_tensorflow_interpreter(tf_models: Path) -> None:
    """The .tflite path of the TensorFlow runtime, in process: same interface and answers as LiteRT."""
    from builder.model.backend import LiteRTBackend
    from builder.model.tensorflow import TFLiteOnTensorFlowBackend

    on_tf = TFLiteOnTensorFlowBackend(tf_models / "plain.tflite")
    on_litert = LiteRTBackend(tf_models / "plain.tflite")
    assert on_tf.runtime == "tensorflow" and on_tf.signatures == on_litert.signatures
    signature = on_tf.signatures["serving_default"]
    x = {signature.inputs[0].name: np.random.default_rng(5).random((3, 4), dtype=np.float32)}
    output = signature.outputs[0].name
    assert np.allclose(on_tf.predict("serving_default", x)[output], on_litert.predict("serving_default", x)[output],
                       rtol=RTOL, atol=ATOL)


# --- the OpenAPI contract holds for strings and mixed dtypes -----------------------------------------------


#: JSON Schema cannot say that several inputs' arrays share one length, so for a model with several inputs
#: a columnar body whose inputs differ in batch size is schema-valid and still refused (400, as it must be:
#: the signature needs one batch); its TF Serving predict routes are fuzzed on the one-input models.
EXCLUDED = {"text_server": [], "mixed_server": ["--exclude-path-regex", ":predict$"]}


@pytest.mark.parametrize("which", ["text_server", "mixed_server"])
def test_schemathesis_finds_nothing(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The document describes string (and b64), int64, bool and float16 inputs exactly: a schema-driven
    fuzzer with every check on finds no answer it does not describe."""
    import shutil

    from tests.e2e.test_serve_contract import CONFIG

    binary = shutil.which("schemathesis", path=str(REPO / ".venv" / "bin")) or shutil.which("schemathesis")
    if binary is None:
        pytest.skip("schemathesis (dev extra) not installed")
    server: TFServer = request.getfixturevalue(which)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    done = subprocess.run([binary, "--config-file", str(config), "run", f"{server.url}/openapi.json", "--checks", "all",
                           "--max-examples", "10", "--generation-deterministic", "--request-timeout", "30",
                           *EXCLUDED[which]],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    summary = [line for line in done.stdout.splitlines() if "generated" in line]
    assert done.returncode == 0, done.stdout[-6000:]
    assert summary and "passed" in summary[-1] and "fail" not in summary[-1], summary
    assert server.process.poll() is None


def test_tf_serving_base_path_layout_of_saved_models(tf_models: Path, loaded: dict[str, Any], tmp_path: Path) -> None:
    """`--model-base-path` over `<base>/<version>/saved_model.pb` (TF Serving's own layout) serves the newest
    version on TensorFlow without being told the runtime."""
    import shutil

    base = tmp_path / "gru"
    shutil.copytree(tf_models / "gru", base / "7")
    server = TFServer("--model-base-path", str(base))
    try:
        assert HTTP.get(f"{server.url}/healthz").json()["runtime"] == "tensorflow"
        x = np.random.default_rng(6).random((2, 4, 8), dtype=np.float32)
        answer = HTTP.post(f"{server.url}/v1/models/gru/versions/7:predict", json={"instances": x.tolist()})
        assert answer.status_code == 200, answer.text
        want = local(loaded["gru"], "serving_default", seq=x)["output_0"]
        assert np.allclose(answer.json()["predictions"], want, rtol=RTOL, atol=ATOL)
    finally:
        assert server.stop() in STOPPED
