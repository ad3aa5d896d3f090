"""Many models, many versions, live: TF Serving's model config file (policies, labels), a base path of
integer version folders, and a new version published under load — no request fails, answers switch to the
new version, the old one is unloaded and its memory given back."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from builder.model.backend import LiteRTBackend
from tests.e2e.test_serve import HTTP, IN_FRONT, LAYOUTS, REPO, STOPPED, TFSMITH, Server

MAKE_VERSIONS = r"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf, tf_keras as k
out = sys.argv[1]
for version, width in ((1, 64), (2, 64), (3, 64), (4, 6000)):  # 4: ~27 MB of weights, to see memory come back
    k.utils.set_random_seed(version)
    model = k.Sequential([k.layers.Input((8, 8, 1), name="pixels"), k.layers.Flatten(),
                          k.layers.Dense(width, activation="relu"), k.layers.Dense(1100, activation="relu"),
                          k.layers.Dense(10, activation="softmax", name="probs")])
    with open(os.path.join(out, f"v{version}.tflite"), "wb") as f:
        f.write(tf.lite.TFLiteConverter.from_keras_model(model).convert())
"""


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("versions")
    subprocess.run([sys.executable, "-c", MAKE_VERSIONS, str(folder)], check=True, capture_output=True, timeout=300)
    return folder


def publish(versions: Path, base: Path, version: int, source: int | None = None) -> None:
    """Write `<base>/<version>/model.tflite` the way deployments do: staged, then renamed into place."""
    staging = base / f".staging-{version}"
    staging.mkdir(parents=True)
    shutil.copy(versions / f"v{source or version}.tflite", staging / "model.tflite")
    staging.rename(base / str(version))


def answer_of(x: np.ndarray, model: Path) -> np.ndarray:
    return LiteRTBackend(model).predict("serving_default", {"pixels": x})["probs"]


def rss_mb(server: Server) -> float:
    import psutil

    return psutil.Process(server.process.pid).memory_info().rss / 2**20


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "models" / "m"


def wait_until(condition: Callable[[], bool], what: str, deadline_s: float = 180.0) -> None:
    """Poll `condition` until it holds; generous deadline, because shared CI machines are slow, not wrong."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"not seen in {deadline_s:.0f} s: {what}"
        time.sleep(0.05)


AFTER_EACH = 5  # answers every client must have from a version before the test moves on


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_new_version_under_load_switches_without_a_failed_request(versions: Path, base: Path, layout: str) -> None:
    """16 clients send without pause; once each has had answers from version 1, version 2 is published; every
    client then gets answers from version 2 and never again from version 1, and no request fails (with model
    processes: every process switches at once). The test counts answers (events), never what arrives within
    some time."""
    publish(versions, base, 1)
    x = np.random.default_rng(71).random((1, 8, 8, 1), dtype=np.float32)
    want = {1: answer_of(x, versions / "v1.tflite"), 2: answer_of(x, versions / "v2.tflite")}
    assert not np.allclose(want[1], want[2], atol=1e-4)
    running = Server(*LAYOUTS[layout], "--model-base-path", str(base), "--model-name", "m",
                     "--file-system-poll-wait-seconds", "0.2")
    body = json.dumps({"instances": x.tolist()}).encode()
    stop = threading.Event()
    seen: list[list[int | str]] = [[] for _ in range(16)]

    def client(log: list[int | str]) -> None:
        with httpx.Client(timeout=60) as session:
            while not stop.is_set():
                try:
                    answer = session.post(f"{running.url}/v1/models/m:predict", content=body,
                                          headers={"content-type": "application/json"})
                except httpx.HTTPError as error:
                    log.append(f"error: {error!r}")
                    continue
                if answer.status_code != 200:
                    log.append(f"HTTP {answer.status_code}: {answer.text[:200]}")
                    continue
                got = np.asarray(answer.json()["predictions"])
                log.append(next((v for v, w in want.items() if np.allclose(got, w, rtol=1e-5, atol=1e-6)),
                                "wrong answer"))

    def every_client_has(version: int) -> bool:
        problems = [r for log in seen for r in list(log) if not isinstance(r, int)]
        assert not problems, problems[:5]  # fail at the first failed request, not at the deadline
        return all(list(log).count(version) >= AFTER_EACH for log in seen)

    threads = [threading.Thread(target=client, args=(log,)) for log in seen]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: every_client_has(1), f"every client answered {AFTER_EACH} times by version 1")
        publish(versions, base, 2)
        wait_until(lambda: every_client_has(2), f"every client answered {AFTER_EACH} times by version 2")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    try:
        assert not any(thread.is_alive() for thread in threads)
        problems = [r for log in seen for r in log if not isinstance(r, int)]
        assert not problems, problems[:5]
        for log in seen:  # each client: once it saw version 2, never version 1 again
            assert log[-1] == 2 and 1 not in log[log.index(2):]
        assert HTTP.get(f"{running.url}/v1/models/m").json()["model_version_status"] == [
            {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]
        assert HTTP.get(f"{running.url}/v1/models/m/versions/1").status_code == 404
    finally:
        assert running.stop() in STOPPED


def test_memory_returns_to_one_models_worth(versions: Path, base: Path) -> None:
    publish(versions, base, 1, source=4)
    size_mb = (versions / "v4.tflite").stat().st_size / 2**20
    running = Server("--model-base-path", str(base), "--model-name", "m", "--file-system-poll-wait-seconds", "0.2",
                     "--processes", "1", "--workers", "2")  # one process: its two interpreters hold the weights
    try:
        x = np.random.default_rng(72).random((1, 8, 8, 1), dtype=np.float32).tolist()
        assert HTTP.post(f"{running.url}/v1/models/m:predict", json={"instances": x}).status_code == 200
        one = rss_mb(running)
        for version in (2, 3):
            publish(versions, base, version, source=4)
            wait_until(lambda: HTTP.get(f"{running.url}/v1/models/m").json()["model_version_status"][0]["version"]
                       == str(version), f"version {version} served")
            assert HTTP.post(f"{running.url}/v1/models/m:predict", json={"instances": x}).status_code == 200
        # Retired versions close once their last request is answered, off the request path: wait for the
        # memory to come back (a deadline, not a fixed pause). Two interpreters hold the weights (packed by
        # XNNPACK) plus the mapped file: keeping the retired versions would add about 3x the file per version;
        # what is left must stay under one file's worth.
        after: list[float] = []
        try:
            wait_until(lambda: after.append(rss_mb(running)) or after[-1] - one < size_mb,
                       f"memory back under one model file's worth ({size_mb:.0f} MB) above {one:.0f} MB", 60.0)
        finally:
            last = after[-1] if after else float("nan")
            print(f"\nRSS with one version {one:.0f} MB, after two reloads {last:.0f} MB (model file {size_mb:.0f} MB)")
    finally:
        assert running.stop() in STOPPED


CONFIG = """
model_config_list {
  config {
    name: "a"
    base_path: "%(a)s"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 1 versions: 2 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
  }
  config {
    name: "b"
    base_path: "%(b)s"
    model_version_policy { all {} }
  }
}
"""


def test_model_config_file_policies_and_labels(versions: Path, tmp_path: Path) -> None:
    for version in (1, 2, 3):
        publish(versions, tmp_path / "a", version)
    for version in (1, 2):
        publish(versions, tmp_path / "b", version)
    config = tmp_path / "models.config"
    config.write_text(CONFIG % {"a": tmp_path / "a", "b": tmp_path / "b"})
    running = Server(*IN_FRONT, "--model-config-file", str(config), grpc=True)
    try:
        status = HTTP.get(f"{running.url}/v1/models/a").json()["model_version_status"]
        assert [s["version"] for s in status] == ["1", "2"]  # specific: 3 is on disk but not served
        assert [s["version"] for s in HTTP.get(f"{running.url}/v1/models/b").json()["model_version_status"]] == [
            "1", "2"]
        assert HTTP.get(f"{running.url}/v1/models/a/labels/stable").json()["model_version_status"][0]["version"] == "1"
        x = np.random.default_rng(73).random((2, 8, 8, 1), dtype=np.float32)
        for label, version in (("stable", 1), ("canary", 2)):
            answer = HTTP.post(f"{running.url}/v1/models/a/labels/{label}:predict", json={"instances": x.tolist()})
            assert np.allclose(answer.json()["predictions"], answer_of(x, versions / f"v{version}.tflite"), rtol=1e-5,
                               atol=1e-6)
        latest = HTTP.post(f"{running.url}/v1/models/a:predict", json={"instances": x.tolist()}).json()
        assert np.allclose(latest["predictions"], answer_of(x, versions / "v2.tflite"), rtol=1e-5, atol=1e-6)
        missing = HTTP.get(f"{running.url}/v1/models/a/labels/nightly")
        assert missing.status_code == 404 and "label" in missing.json()["error"]
        assert HTTP.get(f"{running.url}/v1/models/a/versions/3").status_code == 404
        v2 = HTTP.get(f"{running.url}/v2/models/b").json()
        assert v2["versions"] == ["1", "2"]
        grpc = pytest.importorskip("grpc")
        from builder.wire import tfs_proto
        from builder.wire.tensors import fill_proto

        request = tfs_proto.PredictRequest()
        request.model_spec.name = "a"
        request.model_spec.version_label = "stable"
        fill_proto(request.inputs["pixels"], x)
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
            predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                          request_serializer=tfs_proto.PredictRequest.SerializeToString,
                                          response_deserializer=tfs_proto.PredictResponse.FromString)
            assert predict(request, timeout=10).model_spec.version.value == 1
    finally:
        assert running.stop() in STOPPED


@pytest.mark.parametrize(("text", "needle"), [
    ("model_config_list { config { name: 'a' base_pth: '/x' } }", "base_pth"),
    ("model_config_list { config { name: 'a' base_path: '/nonexistent' } }", "is not a folder"),
    ("model_config_list { }", "no models to serve"),
])
def test_bad_model_config_files_are_one_line_errors(tmp_path: Path, text: str, needle: str) -> None:
    config = tmp_path / "bad.config"
    config.write_text(text)
    done = subprocess.run([str(TFSMITH), "serve", "--model-config-file", str(config)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert len(errors) == 1 and needle in errors[0], done.stderr


def test_a_base_path_with_nothing_to_serve_is_refused_in_one_line_before_any_model_loads(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.xml").write_text("<net/>")  # a graph without its weights: no model
    done = subprocess.run([sys.executable, "-m", "builder.server", "--model-base-path", str(tmp_path / "m"),
                           "--model-name", "m", "--port", "0", "--grpc-port", "0"], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert errors == [f"tfsmith-serve: error: m: no version folder with a .tflite, an OpenVINO IR or a SavedModel "
                      f"under {tmp_path / 'm'}"], done.stderr
    assert "Traceback" not in done.stderr
