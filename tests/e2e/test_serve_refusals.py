"""The original's refusals kept: a conditional generator's `class_id` into a 3-row `Embedding` (Keras 3, beside a
float latent) through `tfsmith optimize` -> `tfsmith serve`. What the original refuses on TensorFlow (an id past
the table) is refused by the served .tflite on LiteRT and by the OpenVINO IR (which on its own answers a row the
model does not have) with TF Serving's status on REST rows and columns, gRPC and v2; ids the original accepts,
Keras 3's wrapped negative ones included, get the original's answers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_serve import HTTP, MODEL_PROCESSES, STOPPED, TFSMITH, Server

MAKE_GENERATOR = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras
out = sys.argv[1]
keras.utils.set_random_seed(0)
class_id = keras.Input((1,), dtype="int32", name="class_id")
z = keras.Input((4,), name="z")
embedded = keras.layers.Flatten()(keras.layers.Embedding(3, 4)(class_id))
image = keras.layers.Dense(6, activation="tanh", name="image")(keras.layers.Concatenate()([embedded, z]))
model = keras.Model([class_id, z], image)
model.save(os.path.join(out, "generator.keras"))
rng = np.random.default_rng(0)
np.savez(os.path.join(out, "data.npz"), **{"x_val/class_id": rng.integers(0, 3, (32, 1)).astype(np.int32),
                                          "x_val/z": rng.random((32, 4), dtype=np.float32)})
ids = np.array([[0], [1], [2], [-1], [-3]], dtype=np.int32)
np.savez(os.path.join(out, "asked.npz"), class_id=ids, z=np.full((5, 4), 0.5, np.float32),
         image=model.predict([ids, np.full((5, 4), 0.5, np.float32)], verbose=0))
"""

RECIPE = 'choose = "tflite_fp32"\n[quantization]\nmodes = []\n[export]\ntflite_fp32 = true\nopenvino = true\n'
#: Ids the original refuses: past the table, and below the -3 that Keras 3 counts from its end.
REFUSED = (7, 3, -4, 2**31 - 1)


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("refusals")
    subprocess.run([sys.executable, "-c", MAKE_GENERATOR, str(work)], check=True, capture_output=True, timeout=300)
    (work / "recipe.toml").write_text(RECIPE)
    done = subprocess.run([str(TFSMITH), "optimize", str(work / "generator.keras"), "--data", str(work / "data.npz"),
                           "--recipe", str(work / "recipe.toml"), "--out", str(work / "out"), "--latency-runs", "20"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work


@pytest.fixture(scope="module")
def asked(optimized: Path) -> dict[str, np.ndarray]:
    with np.load(optimized / "asked.npz") as data:
        return {k: data[k] for k in data.files}


def test_optimize_measures_the_range_the_original_accepts(optimized: Path) -> None:
    report = json.loads((optimized / "out" / "report.json").read_text())
    assert report["chosen"] == "model_fp32.tflite"
    assert report["model"]["contract"]["input_ranges"] == [{"name": "class_id", "low": -3, "high": 3}]
    assert any("'class_id' in [-3, 3) (measured)" in note for note in report["notes"])


@pytest.fixture(scope="module", params=["litert", "openvino"])
def server(optimized: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    """The chosen .tflite on LiteRT (in model processes, behind the front), and the IR on OpenVINO."""
    out = optimized / "out"
    model = [str(out)] if request.param == "litert" else [str(out / "openvino_fp32.xml"), "--runtime", "openvino"]
    running = Server(*model, "--model-name", "gan", *MODEL_PROCESSES, grpc=True)
    yield running
    assert running.stop() in STOPPED


def _refusal(answer: object, value: int) -> None:
    assert answer.status_code == 400, answer.text  # type: ignore[attr-defined]
    said = answer.json()["error"]  # type: ignore[attr-defined]
    assert said.startswith(f"input 'class_id': value {value} at [") and "is not in [-3, 3)" in said, said


def test_rest_and_v2_answer_accepted_ids_as_the_original_and_refuse_the_others(server: Server,
                                                                             asked: dict[str, np.ndarray]) -> None:
    url = f"{server.url}/v1/models/gan:predict"
    rows = [{"class_id": c.tolist(), "z": z.tolist()} for c, z in zip(asked["class_id"], asked["z"])]
    answer = HTTP.post(url, json={"instances": rows})
    assert answer.status_code == 200, answer.text
    assert np.allclose(answer.json()["predictions"], asked["image"], atol=1e-5)  # -1 and -3: rows 2 and 0
    for value in REFUSED:
        _refusal(HTTP.post(url, json={"instances": [{**rows[0], "class_id": [value]}]}), value)
        columns = {"class_id": [[1], [value]], "z": [[0.5] * 4] * 2}
        _refusal(HTTP.post(url, json={"inputs": columns}), value)
        v2 = {"inputs": [{"name": "class_id", "datatype": "INT32", "shape": [1, 1], "data": [value]},
                         {"name": "z", "datatype": "FP32", "shape": [1, 4], "data": [0.5] * 4}]}
        _refusal(HTTP.post(f"{server.url}/v2/models/gan/infer", json=v2), value)
    assert server.alive()
    from tests.e2e.test_serve_metrics import scrape

    counts = scrape(server)[":tensorflow:serving:request_count"]  # counted as every refusal is
    assert counts[(("model_name", "gan"), ("status", "INVALID_ARGUMENT"))] == 3 * len(REFUSED)


def test_grpc_refuses_with_invalid_argument(server: Server, asked: dict[str, np.ndarray]) -> None:
    grpc = pytest.importorskip("grpc")
    from builder.wire import tfs_proto
    from builder.wire.tensors import fill_proto, to_array

    def request(ids: np.ndarray) -> object:
        made = tfs_proto.PredictRequest()
        made.model_spec.name = "gan"
        fill_proto(made.inputs["class_id"], ids.astype(np.int32))
        fill_proto(made.inputs["z"], np.full((len(ids), 4), 0.5, np.float32))
        return made

    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                      request_serializer=tfs_proto.PredictRequest.SerializeToString,
                                      response_deserializer=tfs_proto.PredictResponse.FromString)
        answer = predict(request(asked["class_id"]), timeout=10)
        assert np.allclose(to_array(answer.outputs["image"], "image"), asked["image"], atol=1e-5)
        for value in (7, -4):
            with pytest.raises(grpc.RpcError) as refused:
                predict(request(np.array([[0], [value]])), timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"value {value} at [1, 0] is not in [-3, 3)" in refused.value.details()
