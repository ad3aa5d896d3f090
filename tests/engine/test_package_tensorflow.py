"""The `tensorflow` image kind on the real engine: SavedModels LiteRT cannot serve, packaged FROM the TensorFlow
image `tfsmith build` made for the target, proven with real clients against the same model run here.

Models no LiteRT image can take: a Keras 3 GRU over variable-length sequences (`(None, 8)`), and a `tf.Module`
whose only signature is `predict`, taking strings and int64 and answering strings, int32 and int64.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from builder.engine.docker import DockerEngine
from tests.tf_image import TARGET, TFSMITH, ensure_tf_image, packaging_from_tf_image

pytestmark = [pytest.mark.engine, pytest.mark.tf, pytest.mark.slow]

GRU_TAG = "tfsmith-test-serve/gru:tensorflow"
TEXT_TAG = "tfsmith-test-serve/text:tensorflow"
MAKE_MODELS = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf, keras
out = sys.argv[1]
keras.utils.set_random_seed(3)
sequences = keras.Input(shape=(None, 8), name="seq")
hidden = keras.layers.GRU(16)(sequences)
model = keras.Model(sequences, keras.layers.Dense(3, activation="softmax", name="probs")(hidden))
model.export(f"{out}/gru/saved_model")

class Text(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                  tf.TensorSpec([None], tf.int64, name="ids")])
    def predict(self, text, ids):
        return {"length": tf.strings.length(text, unit="UTF8_CHAR"), "upper": tf.strings.upper(text),
                "twice": ids * 2}

module = Text()
tf.saved_model.save(module, f"{out}/text/saved_model", signatures={"predict": module.predict})
"""
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "COLUMNS": "200"}


@pytest.fixture(scope="module")
def engine(docker_engine: None) -> Iterator[DockerEngine]:
    engine = DockerEngine()
    yield engine
    for tag in (GRU_TAG, TEXT_TAG):
        engine.remove_image(tag)


@pytest.fixture(scope="module")
def tf_image(engine: DockerEngine, base_image: str) -> str:
    return ensure_tf_image(base_image)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tf-kind-models")
    done = subprocess.run([sys.executable, "-c", MAKE_MODELS, str(out)], capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def package(model: Path, tag: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`tfsmith package` as a user runs it: no --kind and no --base-image, only the target."""
    with packaging_from_tf_image(TARGET):
        return subprocess.run([str(TFSMITH), "package", str(model), "--target", TARGET, "--tag", tag, *extra],
                              capture_output=True, text=True, timeout=900, env=ENV)


@pytest.fixture(scope="module")
def gru_image(engine: DockerEngine, tf_image: str, models: Path) -> str:
    done = package(models / "gru" / "saved_model", GRU_TAG, "--model-name", "gru")
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "image kind: tensorflow" in done.stdout and f"base image: {tf_image}" in done.stdout
    assert "every answer matches the same model on TensorFlow here" in done.stdout
    assert "gRPC, v2)" in done.stdout
    return GRU_TAG


@pytest.fixture(scope="module")
def text_image(engine: DockerEngine, tf_image: str, models: Path) -> str:
    done = package(models / "text" / "saved_model", TEXT_TAG, "--model-name", "text", "--signature", "predict")
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "every answer matches the same model on TensorFlow here" in done.stdout
    return TEXT_TAG


def test_the_image_is_built_from_the_targets_tensorflow_image_and_keeps_its_guard(
        engine: DockerEngine, gru_image: str, tf_image: str) -> None:
    image = engine.inspect(gru_image)
    assert image.labels["io.tfsmith.kind"] == "serve-tensorflow"
    assert image.labels["io.tfsmith.runtime"] == "tensorflow"
    assert image.labels["org.opencontainers.image.base.name"] == tf_image
    assert "prebuilt wheel" in image.labels["io.tfsmith.base.reason"]  # honest: not compiled here
    assert image.config.entrypoint[:2] == ("/usr/local/bin/tfsmith-guard", "--")
    assert image.config.user == "10001:10001" and 8500 in image.config.exposed_ports
    code, output = engine.run(gru_image, env={"TFSMITH_IMAGE_TARGET": "imaginary",
                                               "TFSMITH_IMAGE_FEATURES": "avx2,nosuchfeature"}, timeout=120)
    assert code == 3 and "nosuchfeature" in output and "Traceback" not in output


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - loopback only
        return json.loads(answer.read())


def test_variable_length_sequences_get_the_models_own_answers(engine: DockerEngine, gru_image: str,
                                                               models: Path) -> None:
    import tensorflow as tf

    local = tf.saved_model.load(str(models / "gru" / "saved_model")).signatures["serving_default"]
    rng = np.random.default_rng(5)
    with engine.start(gru_image, ports=(8501,)) as running:
        from builder.packaging.smoke import wait_healthy

        wait_healthy(running.url(8501), running.exited, timeout_s=240)
        for steps in (5, 11, 1):
            batch = rng.random((2, steps, 8), dtype=np.float32)
            served = _post(f"{running.url(8501)}/v1/models/gru:predict", {"instances": batch.tolist()})
            (want,) = (value.numpy() for value in local(seq=tf.constant(batch)).values())
            assert np.allclose(np.asarray(served["predictions"]), want, atol=1e-5), steps


def test_string_models_answer_rest_with_b64_and_the_real_grpc_client(engine: DockerEngine, text_image: str) -> None:
    grpc = pytest.importorskip("grpc")
    tf = pytest.importorskip("tensorflow")
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from builder.packaging.smoke import wait_healthy

    with engine.start(text_image, ports=(8501, 8500)) as running:
        wait_healthy(running.url(8501), running.exited, timeout_s=240)
        body = {"signature_name": "predict",
                "inputs": {"text": ["grüße", {"b64": base64.b64encode("añb".encode()).decode()}], "ids": [3, 40]}}
        answer = _post(f"{running.url(8501)}/v1/models/text:predict", body)["outputs"]
        assert answer["upper"] == ["GRüßE", "AñB"] and answer["length"] == [5, 3] and answer["twice"] == [6, 80]
        with grpc.insecure_channel(f"{running.host}:{running.host_port(8500)}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "text"
            request.model_spec.signature_name = "predict"
            request.inputs["text"].CopyFrom(tf.make_tensor_proto(np.array([b"abc", "Zoë".encode()], dtype=object)))
            request.inputs["ids"].CopyFrom(tf.make_tensor_proto(np.array([1, 2], dtype=np.int64)))
            reply = stub.Predict(request, timeout=60)
        assert [v.decode() for v in tf.make_ndarray(reply.outputs["upper"]).tolist()] == ["ABC", "ZOë"]
        assert tf.make_ndarray(reply.outputs["twice"]).tolist() == [2, 4]


def test_a_gpu_required_where_tensorflow_sees_none_is_refused_in_one_line(engine: DockerEngine, gru_image: str) -> None:
    with engine.start(gru_image, env={"TFSMITH_IMAGE_REQUIRE_GPU": "1"}) as running:
        code = running.wait(240)
        output = running.logs()
    assert code != 0 and "GPU" in output and "Traceback" not in output


def _a_target_without_a_tensorflow_image() -> str:
    """A named x86 target that neither this host's own build (`make build` makes the host target's image) nor
    the suite made a TensorFlow image for: derived from this host's detection and the engine's images, never
    assumed (an Ice Lake host builds `icelake`, a Sapphire Rapids one `sapphirerapids`)."""
    from builder.targets import resolve_target

    taken = {resolve_target("host").name, resolve_target(TARGET).name}
    for name in ("cascadelake", "icelake", "haswell", "zen3", "skylake_avx512", "broadwell"):
        labelled = subprocess.run(["docker", "images", "-q", "--filter", f"label=io.tfsmith.target={name}"],
                                  capture_output=True, text=True, timeout=60, check=False).stdout.strip()
        if name not in taken and not labelled:
            return name
    pytest.skip(f"every candidate target has a TensorFlow image on this engine (host target: {sorted(taken)})")


def test_without_the_targets_tensorflow_image_package_says_how_to_make_it(models: Path) -> None:
    target = _a_target_without_a_tensorflow_image()
    done = subprocess.run([str(TFSMITH), "package", str(models / "gru" / "saved_model"), "--target", target],
                          capture_output=True, text=True, timeout=300, env=ENV)
    errors = [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert f"no TensorFlow image for {target}-cpu" in errors[0] and f"tfsmith build --target {target}" in errors[0]
