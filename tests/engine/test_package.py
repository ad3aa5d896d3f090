"""`tfsmith package` on the real engine: a litert serving image built from the local base image, smoke-tested
by the command itself, then run with a published port on 127.0.0.1, queried over HTTP and stopped; a
TF Serving-layout image built on a local stand-in base, its /models tree, batching file and warmup records
checked inside the container."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from builder.engine.docker import DockerEngine
from builder.model.artifact import load_samples
from builder.model.backend import LiteRTBackend
from builder.packaging.plan import PackageOptions
from builder.packaging.smoke import _http, wait_healthy
from builder.packaging.workflow import package_model
from tests.e2e.test_serve import make_models
from tests.report_fixture import write_report

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
LITERT_TAG = "tfsmith-test-serve/digits:litert"
TFSERVING_TAG = "tfsmith-test-serve/digits:tfserving"


@pytest.fixture(scope="session")
def engine(docker_engine: None) -> Iterator[DockerEngine]:
    engine = DockerEngine()
    yield engine
    for tag in (LITERT_TAG, TFSERVING_TAG):
        engine.remove_image(tag)


@pytest.fixture(scope="session")
def artifact_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An optimize-style --out folder: chosen .tflite, SavedModel, samples.npz and report.json."""
    models = make_models(tmp_path_factory.mktemp("package-models"))
    out = tmp_path_factory.mktemp("digits")
    shutil.copy2(models / "image.tflite", out / "model_fp32.tflite")
    shutil.copy2(models / "samples.npz", out / "samples.npz")
    shutil.copytree(models / "saved_model", out / "saved_model")
    write_report(out, chosen="model_fp32.tflite", artifacts=[("model_fp32.tflite", "tflite_fp32")])
    return out


@pytest.fixture(scope="session")
def litert_image(engine: DockerEngine, base_image: str, artifact_dir: Path) -> str:
    """Built and smoke-tested by the CLI exactly as a user runs it."""
    done = subprocess.run(
        [str(TFSMITH), "package", str(artifact_dir), "--kind", "litert", "--base-image", base_image,
         "--tag", LITERT_TAG, "--model-name", "digits", "--smoke"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "every answer matches the local interpreter" in done.stdout and "probs top-1 agreement" in done.stdout
    assert "gRPC, v2)" in done.stdout
    return LITERT_TAG


def test_litert_image_labels_user_and_healthcheck(engine: DockerEngine, litert_image: str, artifact_dir: Path) -> None:
    image = engine.inspect(litert_image)
    digest = hashlib.sha256((artifact_dir / "model_fp32.tflite").read_bytes()).hexdigest()
    assert image.labels["io.tfsmith.model.sha256"] == digest
    assert image.labels["io.tfsmith.report.summary"].startswith("model_fp32.tflite tflite_fp32")
    assert image.labels["io.tfsmith.runtime.reason"].startswith("chosen by tfsmith optimize")
    assert image.labels["io.tfsmith.runtime"] == "litert"
    config = image.config
    assert config.user == "10001:10001"
    assert "/v2/health/ready" in " ".join(config.healthcheck) and config.exposed_ports == (8500, 8501)


def test_litert_image_serves_on_loopback_and_stops_cleanly(
    engine: DockerEngine, litert_image: str, artifact_dir: Path
) -> None:
    local = LiteRTBackend(artifact_dir / "model_fp32.tflite")
    x = load_samples(artifact_dir / "samples.npz").inputs["pixels"][:6]
    want = local.predict("serving_default", {"pixels": x})["probs"]
    with engine.start(litert_image, ports=(8501,)) as running:
        url = running.url(8501)
        wait_healthy(url, running.exited)
        status, body = _http(f"{url}/v1/models/digits")
        assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
        status, body = _http(f"{url}/v1/models/digits:predict", json.dumps({"instances": x.tolist()}).encode())
        assert status == 200 and np.allclose(body["predictions"], want, rtol=1e-5, atol=1e-6)
        status, body = _http(f"{url}/v1/models/digits:predict", b"{oops")
        assert status == 400 and "malformed JSON" in body["error"]
        code, output = running.exec(config_healthcheck(engine, litert_image))
        assert code == 0, output
        code, output = running.exec(["id", "-u"])
        assert output.strip() == "10001"
        exit_code = running.stop()
    assert exit_code in (0, 143)  # SIGTERM handled: graceful shutdown


def config_healthcheck(engine: DockerEngine, tag: str) -> list[str]:
    test = engine.inspect(tag).config.healthcheck
    assert test[0] == "CMD"
    return list(test[1:])


def test_guard_refuses_a_cpu_without_the_target_features(engine: DockerEngine, litert_image: str) -> None:
    code, output = engine.run(litert_image, env={"TFSMITH_IMAGE_TARGET": "imaginary", "TFSMITH_IMAGE_FEATURES": "avx2,nosuchfeature"},
                              timeout=60)
    assert code == 3
    assert "nosuchfeature" in output and "Traceback" not in output


def test_tfserving_layout_image(engine: DockerEngine, base_image: str, artifact_dir: Path, tmp_path: Path) -> None:
    plan, image = package_model(
        artifact_dir,
        PackageOptions(kind="tfserving", base_image=base_image, tag=TFSERVING_TAG, max_batch=8,
                       batch_timeout_us=2000),
        model_name="digits", smoke=False, keep_context=tmp_path / "context", say=print, engine=engine,
    )
    assert image is not None and plan.base_image == base_image
    script = (
        "import json, os, sys; sys.path.insert(0, '/opt/tfsmith'); import warmup\n"
        "tree = sorted(os.path.relpath(os.path.join(d, f), '/models') for d, _, fs in os.walk('/models') for f in fs)\n"
        "records = warmup.read_warmup(open('/models/digits/1/assets.extra/tf_serving_warmup_requests', 'rb').read())\n"
        "print(json.dumps({'tree': tree, 'env': [os.environ.get('MODEL_NAME'), os.environ.get('MODEL_BASE_PATH')],"
        " 'batching': open('/models/batching_parameters.txt').read(),"
        " 'warmup': [[r.model_name, r.signature_name, r.version, {k: [t.dtype, list(t.shape)] for k, t in r.inputs.items()}]"
        " for r in records]}))\n"
    )
    code, output = engine.run(TFSERVING_TAG, ["-c", script], entrypoint=["python3"], timeout=60)
    assert code == 0, output
    found = json.loads(output.strip().splitlines()[-1])
    assert "digits/1/saved_model.pb" in found["tree"]
    assert any(path.startswith("digits/1/variables/") for path in found["tree"])
    assert found["env"] == ["digits", "/models"]
    assert "max_batch_size { value: 8 }" in found["batching"]
    assert "batch_timeout_micros { value: 2000 }" in found["batching"]
    assert len(found["warmup"]) == 10
    assert found["warmup"][0] == ["digits", "serving_default", 1, {"pixels": [1, [1, 8, 8, 1]]}]
    cmd = engine.inspect(TFSERVING_TAG).config.cmd
    assert "--batching_parameters_file=/models/batching_parameters.txt" in cmd
    assert "--prefer_tflite_model=true" not in cmd  # a SavedModel is there
    build = (tmp_path / "context" / "tfsmith" / "tfserving-build" / "Dockerfile").read_text()
    assert 'TF_SERVING_BUILD_OPTIONS="--config=release' in build
    assert "tensorflow_serving/model_servers:tensorflow_model_server" in build


def test_warmup_file_is_read_by_tensorflow_itself(engine: DockerEngine, base_image: str, artifact_dir: Path,
                                                  tmp_path: Path) -> None:
    """TensorFlow's own TFRecord reader (CRC-checked) and TensorProto parser accept what we wrote."""
    pytest.importorskip("tensorflow")
    from builder.packaging.tfserving import render_tfserving_context, batching_for
    from builder.model.artifact import resolve_artifact
    from builder.packaging.plan import BaseImage, plan_package

    artifact = resolve_artifact(artifact_dir, "digits")
    plan = plan_package(artifact, PackageOptions(kind="tfserving", base_image=base_image), kind="tfserving",
                        base=BaseImage(base_image), runtime="tfserving")
    context = render_tfserving_context(plan, artifact, tmp_path / "ctx", batching_for(PackageOptions()))
    warm = context / "models" / "digits" / "1" / "assets.extra" / "tf_serving_warmup_requests"
    check = (
        "import os, sys, numpy as np; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
        "import tensorflow as tf\nfrom tensorflow.core.framework import tensor_pb2\n"
        "from builder.packaging.warmup import decode_message, decode_prediction_log\n"
        "records = list(tf.data.TFRecordDataset(sys.argv[1]).as_numpy_iterator())\n"
        "x = np.load(sys.argv[2])['x/pixels'][:len(records)]\n"
        "for i, rec in enumerate(records):\n"
        "    log = decode_message(rec); req = decode_message(decode_message(log[6][0])[1][0])\n"
        "    entry = decode_message(req[2][0]); tensor = tensor_pb2.TensorProto.FromString(entry[2][0])\n"
        "    assert np.array_equal(tf.make_ndarray(tensor), x[i:i+1]), i\n"
        "print('ok', len(records))\n"
    )
    done = subprocess.run([sys.executable, "-c", check, str(warm), str(artifact_dir / "samples.npz")],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok 10")


def test_the_real_clients_users_have_get_correct_answers_from_the_image(
    engine: DockerEngine, litert_image: str, artifact_dir: Path
) -> None:
    """TF Serving's own gRPC stubs (tensorflow-serving-api) and Triton's v2 client, against the packaged image."""
    tf = pytest.importorskip("tensorflow")
    grpc = pytest.importorskip("grpc")
    httpclient = pytest.importorskip("tritonclient.http")
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    x = load_samples(artifact_dir / "samples.npz").inputs["pixels"][:4]
    want = LiteRTBackend(artifact_dir / "model_fp32.tflite").predict("serving_default", {"pixels": x})["probs"]
    with engine.start(litert_image, ports=(8501, 8500)) as running:
        wait_healthy(running.url(8501), running.exited)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "digits"
        request.inputs["pixels"].CopyFrom(tf.make_tensor_proto(x))
        with grpc.insecure_channel(f"127.0.0.1:{running.host_port(8500)}") as channel:
            answer = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
        assert np.allclose(tf.make_ndarray(answer.outputs["probs"]), want, rtol=1e-5, atol=1e-6)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{running.host_port(8501)}")
        tensor = httpclient.InferInput("pixels", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        result = client.infer("digits", [tensor])
        assert np.allclose(result.as_numpy("probs"), want, rtol=1e-5, atol=1e-6)
        assert running.stop() in (0, 143)
