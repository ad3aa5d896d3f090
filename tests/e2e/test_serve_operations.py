"""Operating `tfsmith serve`: SIGTERM drains without losing a request, TLS on REST and gRPC from PEM files,
JSON access logs, and `--help` grouping the options."""

from __future__ import annotations

import http.client
import itertools
import json
import shutil
import signal
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.e2e.test_serve import HTTP, IN_FRONT, LAYOUTS, STOPPED, TFSMITH, Server, inputs, models  # noqa: F401 - models is a fixture


def test_sigterm_drains_requests_in_flight_and_loses_none(models: Path) -> None:  # noqa: F811
    """Clients send until readiness turns 503 (what a load balancer watches). SIGTERM comes once every client
    has been answered and has its next request sent and waiting in a 300 ms batch; each of those must still
    be answered, and every request sent gets its 200. The test waits for these events, never for a time."""
    clients = 8
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--max-batch", "64",
                     "--batch-timeout-us", "300000", "--shutdown-delay-seconds", "1", "--drain-seconds", "10")
    body = json.dumps({"instances": inputs(1, seed=51).tolist()}).encode()
    stop_sending = threading.Event()
    lock = threading.Lock()
    in_flight: set[tuple[int, int]] = set()  # (client, request) sent and not yet answered
    results: dict[tuple[int, int], str] = {}

    def client(number: int) -> None:
        for request in itertools.count():
            if stop_sending.is_set():
                return
            key, result = (number, request), "not sent"
            connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=60)
            try:
                connection.request("POST", "/v1/models/digits:predict", body, {"content-type": "application/json"})
                with lock:
                    in_flight.add(key)
                answer = connection.getresponse()
                result = str(answer.status) if b"predictions" in answer.read() else f"bad {answer.status}"
            except OSError as error:
                result = f"lost: {type(error).__name__}: {error}"
            finally:
                with lock:
                    in_flight.discard(key)
                    results[key] = result
                connection.close()

    def watch_readiness() -> None:  # the load balancer
        while not stop_sending.is_set():
            try:
                if HTTP.get(f"{running.url}/v2/health/ready", timeout=10).status_code == 503:
                    stop_sending.set()
            except httpx.HTTPError:
                stop_sending.set()
            time.sleep(0.02)

    def all_waiting() -> set[tuple[int, int]]:
        """The requests in flight, once every client has had an answer and has its next request waiting."""
        with lock:
            answered = {number for number, _ in results}
            waiting = set(in_flight)
        return waiting if len(answered) == clients and len({n for n, _ in waiting}) == clients else set()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    threads.append(threading.Thread(target=watch_readiness))
    for thread in threads:
        thread.start()
    deadline, at_signal = time.monotonic() + 120, set()
    while not at_signal:
        with lock:
            failed = [r for r in results.values() if r != "200"]
        assert not failed, failed[:5]
        assert time.monotonic() < deadline, "the clients never had a request waiting at the same time"
        at_signal = all_waiting()
        time.sleep(0.005)
    running.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=60)
    code = running.process.wait(timeout=60)
    assert code in STOPPED
    assert not any(thread.is_alive() for thread in threads)
    assert all(r == "200" for r in results.values()), [r for r in results.values() if r != "200"][:5]
    assert {key: results.get(key) for key in at_signal} == {key: "200" for key in at_signal}
    assert len(at_signal) == clients  # one request of every client was waiting when the signal came


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls_on_rest_and_grpc(models: Path, certificate: tuple[Path, Path]) -> None:  # noqa: F811
    grpc = pytest.importorskip("grpc")
    from builder.wire import tfs_proto
    from builder.wire.tensors import fill_proto, to_array

    cert, key = certificate
    secure = httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), timeout=30)
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--tls-cert", str(cert),
                     "--tls-key", str(key), grpc=True, scheme="https", client=secure)
    try:
        x = inputs(2, seed=52)
        rest = secure.post(f"{running.url}/v1/models/digits:predict", json={"instances": x.tolist()})
        assert rest.status_code == 200
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served on the TLS port
            HTTP.get(f"http://127.0.0.1:{running.port}/v2/health/live", timeout=5)
        request = tfs_proto.PredictRequest()
        request.model_spec.name = "digits"
        fill_proto(request.inputs["pixels"], x)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{running.grpc_port}", credentials) as channel:
            predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                          request_serializer=tfs_proto.PredictRequest.SerializeToString,
                                          response_deserializer=tfs_proto.PredictResponse.FromString)
            answer = predict(request, timeout=10)
        assert np.allclose(to_array(answer.outputs["probs"], "probs"), rest.json()["predictions"], rtol=1e-6)
    finally:
        secure.close()  # an idle TLS keep-alive connection holds a graceful stop for asyncio's TLS shutdown timeout
        assert running.stop() in STOPPED


def test_tls_needs_both_files(models: Path, certificate: tuple[Path, Path]) -> None:  # noqa: F811
    done = subprocess.run([str(TFSMITH), "serve", str(models / "image.tflite"), "--tls-cert", str(certificate[0])],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")] == [
        "tfsmith: error: --tls-cert and --tls-key go together"]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_json_access_log(models: Path, layout: str) -> None:  # noqa: F811
    """One line per request in either layout (the front writes them, wherever the models run)."""
    running = Server(*LAYOUTS[layout], str(models / "image.tflite"), "--model-name", "digits", "--access-log", "json")
    HTTP.post(f"{running.url}/v1/models/digits:predict", json={"instances": inputs(1).tolist()})
    HTTP.get(f"{running.url}/v1/models/nope")
    assert running.stop() in STOPPED
    output = running.process.stdout.read() if running.process.stdout else ""
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    predict = [r for r in records if r["path"] == "/v1/models/digits:predict"]
    assert len(predict) == 1 and predict[0]["status"] == 200 and predict[0]["method"] == "POST", records
    assert predict[0]["duration_ms"] >= 0 and predict[0]["remote"].startswith("127.0.0.1:")
    assert [r["status"] for r in records if r["path"] == "/v1/models/nope"] == [404]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_fronts_refusals_are_answered_counted_and_logged(models: Path, layout: str) -> None:  # noqa: F811
    """What the front refuses itself (a body over the limit as sent or as decoded, a gRPC message over it) never
    reaches a model, and is still counted in the metrics and written in the access log, with its one outcome."""
    import gzip

    grpc = pytest.importorskip("grpc")
    running = Server(*LAYOUTS[layout], str(models / "image.tflite"), "--model-name", "digits", "--access-log", "json",
                     "--max-body-bytes", "65536", grpc=True)
    try:
        url = f"{running.url}/v1/models/digits:predict"
        big = HTTP.post(url, content=b" " * 70_000, headers={"content-type": "application/json"})
        assert big.status_code == 413 and "exceeds the limit of 65536 bytes" in big.json()["error"]
        bomb = HTTP.post(url, content=gzip.compress(b" " * 1_000_000),
                         headers={"content-type": "application/json", "content-encoding": "gzip"})
        assert bomb.status_code == 413 and "decoded request body" in bomb.json()["error"]
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
            predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
            with pytest.raises(grpc.RpcError) as refused:
                predict(b"\0" * 70_000, timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "request message of 70000 bytes exceeds the limit of 65536 bytes" in refused.value.details()
        metrics = HTTP.get(f"{running.url}/monitoring/prometheus/metrics").text
        counted = [line for line in metrics.splitlines()
                   if line.startswith(':tensorflow:serving:request_count{model_name="",status="RESOURCE_EXHAUSTED"}')]
        assert [float(line.split()[-1]) for line in counted] == [3.0], metrics
    finally:
        assert running.stop() in STOPPED
    output = running.process.stdout.read() if running.process.stdout else ""
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    said = sorted((r["protocol"], r["status"], r["outcome"]) for r in records if r.get("reason"))
    assert said == [("grpc", 8, "RESOURCE_EXHAUSTED"), ("http", 413, "RESOURCE_EXHAUSTED"),
                    ("http", 413, "RESOURCE_EXHAUSTED")], records


def test_serve_help_groups_the_options() -> None:
    done = subprocess.run([str(TFSMITH), "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    text = done.stdout
    for group, flags in {"network:": ["--grpc-port", "--max-body-bytes"],
                         "operations:": ["--access-log", "--drain-seconds", "--shutdown-delay-seconds"],
                         "security:": ["--tls-cert", "--tls-key"]}.items():
        section = text[text.index(group):]
        for flag in flags:
            assert flag in section.split("\n\n")[0], (group, flag)
