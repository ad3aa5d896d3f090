"""Ports nobody else can take: a second `tfsmith serve` (or any process) on a taken REST or gRPC port is
refused in one line, while `--processes N` workers share both ports, each answering, and drain on SIGTERM.

Real servers on loopback; which worker answered a connection is read from the kernel's socket table (the
worker process owning the server side of our connection), so the tests wait for events, never for time."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import numpy as np
import psutil
import pytest

from builder.server import tfs_proto as pb
from builder.server.tensors import fill_proto, to_array
from tests.e2e.test_serve import STOPPED, TFSMITH, Server, free_port, inputs, models  # noqa: F401 - a fixture

grpc = pytest.importorskip("grpc")
FRESH = [("grpc.use_local_subchannel_pool", 1)]  # a new channel opens its own connection, as a new client would
DEADLINE_S = 120.0


def refused(model: Path, *args: str, own_port: int | None = None) -> str:
    """Run a second server that must refuse to start; its whole output. When `own_port` is its free REST port,
    fails as soon as that answers (the server started) rather than at the deadline."""
    process = subprocess.Popen([str(TFSMITH), "serve", str(model), "--log-level", "warning", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def exited_or_serving() -> bool:
            if process.poll() is not None or own_port is None:
                return process.poll() is not None
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", own_port)) == 0

        wait_for(exited_or_serving, "the second server exiting")
        assert process.poll() not in (None, 0), "the second server started"
        return process.stdout.read() if process.stdout else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def one_error_line(output: str) -> str:
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("tfsmith: error:")]
    assert len(errors) == 1, output
    return errors[0]


def _stub(channel: object, method: str, request: type, response: type) -> Callable[..., object]:
    return channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/{method}",  # type: ignore[attr-defined]
                               request_serializer=request.SerializeToString, response_deserializer=response.FromString)


def metadata_request(name: str) -> object:
    request = pb.GetModelMetadataRequest()
    request.model_spec.name = name
    request.metadata_field.append("signature_def")
    return request


def predict_request(name: str, x: np.ndarray) -> object:
    request = pb.PredictRequest()
    request.model_spec.name = name
    fill_proto(request.inputs["pixels"], x, True)
    return request


def answered_model(port: int, name: str) -> str:
    """The model name in a GetModelMetadata answer on a fresh channel (a different server: a different name)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=FRESH) as channel:
        call = _stub(channel, "GetModelMetadata", pb.GetModelMetadataRequest, pb.GetModelMetadataResponse)
        return call(metadata_request(name), timeout=30).model_spec.name  # type: ignore[attr-defined]


def own_local_ports(server_port: int) -> set[int]:
    """Local ports of this test process's established connections to `server_port`."""
    return {c.laddr.port for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == server_port and c.status == psutil.CONN_ESTABLISHED}


def owner(workers: list[psutil.Process], server_port: int, client_port: int) -> int | None:
    """The worker process holding the server side of our connection (from `client_port`), once accepted."""
    for worker in workers:
        for c in worker.net_connections("tcp"):
            if c.laddr.port == server_port and c.raddr and c.raddr.port == client_port:
                return worker.pid
    return None


def wait_for(condition: Callable[[], object], what: str, deadline_s: float = DEADLINE_S) -> object:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not seen in {deadline_s:.0f} s: {what}")


def listening_workers(server: Server) -> list[psutil.Process]:
    """The worker processes of `server` listening on both its REST and its gRPC port."""
    found = []
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            ports = {c.laddr.port for c in child.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            continue
        if {server.port, server.grpc_port} <= ports:
            found.append(child)
    return found


def test_second_server_on_a_taken_grpc_port_is_refused_in_one_line(models: Path) -> None:  # noqa: F811
    first = Server(str(models / "image.tflite"), "--model-name", "first", grpc=True)
    try:
        port = free_port()
        output = refused(models / "image.tflite", "--model-name", "second", "--port", str(port),
                         "--grpc-port", str(first.grpc_port), own_port=port)
        line = one_error_line(output)
        assert f"gRPC port {first.grpc_port} on 127.0.0.1 is taken by another process" in line, line
        assert "--grpc-port" in line
        # every fresh channel still reaches the first server's model, none a second server's
        assert {answered_model(first.grpc_port, "first") for _ in range(12)} == {"first"}
    finally:
        assert first.stop() in STOPPED


def test_second_server_on_a_taken_rest_port_is_refused_in_one_line(models: Path) -> None:  # noqa: F811
    first = Server(str(models / "image.tflite"), "--model-name", "first")
    try:
        output = refused(models / "image.tflite", "--model-name", "second", "--port", str(first.port),
                         "--grpc-port", str(free_port()))
        line = one_error_line(output)
        assert f"REST port {first.port} on 127.0.0.1 is taken by another process" in line, line
        assert first.alive()
    finally:
        assert first.stop() in STOPPED


def test_a_foreign_grpc_server_sharing_its_port_keeps_it(models: Path) -> None:  # noqa: F811
    """gRPC servers set SO_REUSEPORT by default: ours must refuse to join one, not split its calls."""
    foreign = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = foreign.add_insecure_port("127.0.0.1:0")
    foreign.start()
    try:
        rest = free_port()
        line = one_error_line(refused(models / "image.tflite", "--port", str(rest), "--grpc-port", str(port),
                                      own_port=rest))
        assert f"gRPC port {port} on 127.0.0.1 is taken by another process" in line, line
    finally:
        foreign.stop(None)


@pytest.fixture
def two_workers(models: Path) -> Iterator[tuple[Server, list[psutil.Process]]]:  # noqa: F811
    """A `--processes 2` server with gRPC whose two workers both listen on both ports; requests wait in a
    2 s batch so they are still in flight when a signal comes."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2",
                     "--max-batch", "64", "--batch-timeout-us", "2000000", "--drain-seconds", "30", grpc=True)
    try:
        workers = wait_for(lambda: (found := listening_workers(running)) and len(found) == 2 and found,
                           "two workers listening on the REST and gRPC ports")
        yield running, workers  # type: ignore[misc]
    finally:
        if running.alive():
            running.stop()


def test_processes_share_both_ports_and_each_worker_answers(two_workers: tuple[Server, list[psutil.Process]],
                                                            models: Path) -> None:  # noqa: F811
    running, workers = two_workers
    rest = free_port()
    line = one_error_line(refused(models / "image.tflite", "--port", str(rest), "--grpc-port",
                                  str(running.grpc_port), own_port=rest))
    assert f"gRPC port {running.grpc_port}" in line  # a later server cannot join our workers

    def grpc_answerer() -> int | None:
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}", options=FRESH) as channel:
            call = _stub(channel, "GetModelMetadata", pb.GetModelMetadataRequest, pb.GetModelMetadataResponse)
            answer = call(metadata_request("digits"), timeout=30)
            assert answer.model_spec.name == "digits"  # type: ignore[attr-defined]
            (client_port,) = own_local_ports(running.grpc_port)
            return owner(workers, running.grpc_port, client_port)

    def rest_answerer() -> int | None:
        connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=30)
        try:
            connection.request("GET", "/v1/models/digits")
            answer = connection.getresponse()
            assert answer.status == 200 and b"AVAILABLE" in answer.read()
            return owner(workers, running.port, connection.sock.getsockname()[1])
        finally:
            connection.close()

    pids = {w.pid for w in workers}
    for protocol, answerer in (("gRPC", grpc_answerer), ("REST", rest_answerer)):
        seen: set[int | None] = set()
        wait_for(lambda: seen.add(answerer()) or pids <= seen, f"both workers answering fresh {protocol} clients")
        assert seen <= pids  # every connection was answered by one of our workers


def test_processes_drain_requests_in_flight_on_sigterm(two_workers: tuple[Server, list[psutil.Process]]) -> None:
    running, workers = two_workers
    x = inputs(1, seed=61)
    body = json.dumps({"instances": x.tolist()}).encode()
    rest = [http.client.HTTPConnection("127.0.0.1", running.port, timeout=60) for _ in range(4)]
    for connection in rest:
        connection.request("POST", "/v1/models/digits:predict", body, {"content-type": "application/json"})
    channels = [grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}", options=FRESH) for _ in range(2)]
    calls = [_stub(channel, "Predict", pb.PredictRequest, pb.PredictResponse).future(  # type: ignore[attr-defined]
        predict_request("digits", x), timeout=60) for channel in channels]
    client_ports = [c.sock.getsockname()[1] for c in rest]
    wait_for(lambda: all(owner(workers, running.port, p) for p in client_ports)
             and len(own_local_ports(running.grpc_port)) == len(channels)
             and all(owner(workers, running.grpc_port, p) for p in own_local_ports(running.grpc_port)),
             "every request accepted by a worker")
    running.process.send_signal(signal.SIGTERM)
    answers = []
    for connection in rest:
        answer = connection.getresponse()
        answers.append((answer.status, json.loads(answer.read())))
        connection.close()
    assert all(status == 200 and "predictions" in payload for status, payload in answers), answers
    for call in calls:
        got = to_array(call.result().outputs["probs"], "probs")  # type: ignore[attr-defined]
        assert got.shape == (1, 10)
    for channel in channels:
        channel.close()
    assert running.process.wait(timeout=120) in STOPPED
    assert all(gone(worker) for worker in workers)


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def readiness(server: Server) -> int | str:
    """The readiness status a fresh connection gets (whichever worker accepts it), or why there was none."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("GET", "/v2/health/ready")
        answer = connection.getresponse()
        answer.read()
        return answer.status
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    finally:
        connection.close()


def test_processes_report_not_ready_through_the_shutdown_delay(models: Path) -> None:  # noqa: F811
    """After SIGTERM every worker answers 503 on readiness and still answers predicts while the delay runs
    (what a load balancer needs to take it out of rotation first), as one process does."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2",
                     "--shutdown-delay-seconds", "600", "--drain-seconds", "5", grpc=True)
    try:
        workers = wait_for(lambda: (found := listening_workers(running)) and len(found) == 2 and found,
                           "two workers listening")
        assert {readiness(running) for _ in range(8)} == {200}
        running.process.send_signal(signal.SIGTERM)
        wait_for(lambda: all(readiness(running) == 503 for _ in range(8)), "every fresh connection told 503")
        assert len(listening_workers(running)) == 2  # both still there, both not ready
        body = json.dumps({"instances": inputs(1, seed=62).tolist()}).encode()
        for _ in range(4):
            connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=60)
            connection.request("POST", "/v1/models/digits:predict", body, {"content-type": "application/json"})
            assert connection.getresponse().status == 200
            connection.close()
        for worker in workers:  # a second signal: stop now, without the rest of the delay
            worker.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=120) in STOPPED
    finally:
        if running.alive():
            running.stop()


def test_workers_stop_when_their_supervisor_is_killed(models: Path) -> None:  # noqa: F811
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2", grpc=True)
    workers = wait_for(lambda: (found := listening_workers(running)) and len(found) == 2 and found,
                       "two workers listening")
    running.process.kill()
    running.process.wait(timeout=60)
    wait_for(lambda: all(gone(worker) for worker in workers), "both workers stopped", deadline_s=120)


def test_workers_refusing_a_model_say_so_in_one_line(tmp_path: Path, models: Path) -> None:  # noqa: F811
    broken = tmp_path / "broken.tflite"
    broken.write_bytes((models / "image.tflite").read_bytes()[:1000])
    port = free_port()
    line = one_error_line(refused(broken, "--port", str(port), "--grpc-port", str(free_port()), "--processes", "2",
                                  own_port=port))
    assert f"{broken}: not a loadable .tflite model" in line, line
