"""Ports nobody else can take, and `--processes N` as one server: a second `tfsmith serve` (or any process) on
a taken REST or gRPC port is refused in one line; with model processes only the front listens, every process
answers requests from a single connection, they drain on SIGTERM and stop with the front; one that dies is
replaced (only the requests it held fail), and a crash loop stops the server.

Real servers on loopback; which process answered is read from the server's own metrics
(`tfsmith_process_requests_total`) and who listens from the kernel's socket table, so the tests wait for
events, never for time."""

from __future__ import annotations

import http.client
import json
import re
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

from builder.model.backend import LiteRTBackend
from builder.wire import tfs_proto as pb
from builder.wire.tensors import fill_proto, to_array
from tests.e2e.test_serve import IN_FRONT, STOPPED, TFSMITH, Server, expected, free_port, inputs, models  # noqa: F401 - a fixture

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


def listeners(process: psutil.Process) -> set[int]:
    """The TCP ports `process` listens on."""
    try:
        return {c.laddr.port for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    except psutil.NoSuchProcess:
        return set()


def model_processes(server: Server) -> list[psutil.Process]:
    """The server's model processes (spawned by multiprocessing), oldest first."""
    children = psutil.Process(server.process.pid).children(recursive=True)
    return sorted((c for c in children if "spawn_main" in " ".join(command_line(c))), key=lambda c: c.pid)


def command_line(process: psutil.Process) -> list[str]:
    """Its command line; none once it has exited (a zombie until the front reads its status, or gone)."""
    try:
        return process.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return []


def answered_by_process(server: Server) -> dict[str, float]:
    """Requests each model process has answered, from the server's metrics."""
    text = http_get(server, "/monitoring/prometheus/metrics")[1].decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'tfsmith_process_requests_total\{process="(\d+)"\} (\S+)', text)}


def http_get(server: Server, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def wait_for(condition: Callable[[], object], what: str, deadline_s: float = DEADLINE_S) -> object:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not seen in {deadline_s:.0f} s: {what}")


def test_second_server_on_a_taken_grpc_port_is_refused_in_one_line(models: Path) -> None:  # noqa: F811
    first = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "first", grpc=True)
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
    first = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "first")
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
def two_processes(models: Path) -> Iterator[tuple[Server, list[psutil.Process]]]:  # noqa: F811
    """A `--processes 2` server with gRPC whose requests wait in a 2 s batch, so they are still in flight when a
    signal comes."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2", "--workers", "1",
                     "--threads", "1", "--max-batch", "64", "--batch-timeout-us", "2000000", "--drain-seconds", "30",
                     grpc=True)
    try:
        processes = wait_for(lambda: len(found := model_processes(running)) == 2 and found, "two model processes")
        yield running, processes  # type: ignore[misc]
    finally:
        if running.alive():
            running.stop()


def test_only_the_front_listens_and_one_connection_reaches_every_process(
        two_processes: tuple[Server, list[psutil.Process]], models: Path) -> None:  # noqa: F811
    running, processes = two_processes
    assert {running.port, running.grpc_port} <= listeners(psutil.Process(running.process.pid))
    assert all(not listeners(p) for p in processes)  # clients reach the front only
    rest = free_port()
    line = one_error_line(refused(models / "image.tflite", "--port", str(rest), "--grpc-port",
                                  str(running.grpc_port), own_port=rest))
    assert f"gRPC port {running.grpc_port}" in line  # nobody joins the front's gRPC port
    before = answered_by_process(running)
    x = inputs(1, seed=60)
    body = json.dumps({"instances": x.tolist()}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=60)  # ONE keep-alive connection
    try:
        for _ in range(4):
            connection.request("POST", "/v1/models/digits:predict", body, {"content-type": "application/json"})
            answer = connection.getresponse()
            assert answer.status == 200 and "predictions" in json.loads(answer.read())
    finally:
        connection.close()
    after = answered_by_process(running)
    served = {p: after[p] - before.get(p, 0.0) for p in after}
    assert set(served) == {"0", "1"} and all(n >= 1 for n in served.values()), served  # both processes answered
    with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}", options=FRESH) as channel:  # ONE channel
        call = _stub(channel, "Predict", pb.PredictRequest, pb.PredictResponse)
        calls = [call.future(predict_request("digits", x), timeout=60) for _ in range(4)]  # type: ignore[attr-defined]
        assert all(to_array(c.result().outputs["probs"], "probs").shape == (1, 10) for c in calls)
        many = inputs(96, seed=61)  # ~300 KB: read in place in the model process's shared memory
        got = to_array(call(predict_request("digits", many), timeout=60).outputs["probs"], "probs")  # type: ignore[operator]
        assert np.allclose(got, expected(LiteRTBackend(models / "image.tflite"), many), rtol=1e-5, atol=1e-6)
    final = answered_by_process(running)
    assert all(final[p] - after[p] >= 1 for p in final), (after, final)  # concurrent calls on one channel spread
    text = http_get(running, "/monitoring/prometheus/metrics")[1].decode()
    front = re.search(r"^tfsmith_front_cpu_seconds_total (\S+)$", text, re.MULTILINE)
    assert front is not None and float(front.group(1)) > 0, text[-2000:]  # the front's own share, for operators


def test_processes_drain_requests_in_flight_on_sigterm(two_processes: tuple[Server, list[psutil.Process]]) -> None:
    running, processes = two_processes
    x = inputs(1, seed=61)
    body = json.dumps({"instances": x.tolist()}).encode()
    rest = [http.client.HTTPConnection("127.0.0.1", running.port, timeout=60) for _ in range(4)]
    for connection in rest:
        connection.request("POST", "/v1/models/digits:predict", body, {"content-type": "application/json"})
    channels = [grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}", options=FRESH) for _ in range(2)]
    calls = [_stub(channel, "Predict", pb.PredictRequest, pb.PredictResponse).future(  # type: ignore[attr-defined]
        predict_request("digits", x), timeout=60) for channel in channels]

    def in_flight() -> float:
        text = http_get(running, "/monitoring/prometheus/metrics")[1].decode()
        found = re.search(r"^tfsmith_requests_in_flight (\S+)", text, re.M)
        return float(found.group(1)) if found else 0.0

    wait_for(lambda: in_flight() >= 6, "every request waiting in a model process's batch")
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
    wait_for(lambda: all(gone(p) for p in processes), "both model processes stopped")


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def readiness(server: Server) -> int | str:
    """The readiness status a fresh connection gets, or why there was none."""
    try:
        return http_get(server, "/v2/health/ready")[0]
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def test_processes_report_not_ready_through_the_shutdown_delay(models: Path) -> None:  # noqa: F811
    """After SIGTERM readiness answers 503 (whichever process answers it) and predicts are still answered while
    the delay runs (what a load balancer needs to take the server out of rotation first); a second signal
    stops it without the rest of the delay."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2",
                     "--shutdown-delay-seconds", "600", "--drain-seconds", "5", grpc=True)
    try:
        wait_for(lambda: len(model_processes(running)) == 2, "two model processes")
        assert {readiness(running) for _ in range(8)} == {200}
        running.process.send_signal(signal.SIGTERM)
        wait_for(lambda: all(readiness(running) == 503 for _ in range(8)), "every readiness request told 503")
        body = json.dumps({"instances": inputs(1, seed=62).tolist()}).encode()
        for _ in range(4):
            connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=60)
            connection.request("POST", "/v1/models/digits:predict", body, {"content-type": "application/json"})
            assert connection.getresponse().status == 200
            connection.close()
        running.process.send_signal(signal.SIGTERM)  # a second signal: stop now, without the rest of the delay
        assert running.process.wait(timeout=120) in STOPPED
    finally:
        if running.alive():
            running.stop()


def test_model_processes_stop_when_the_front_is_killed(models: Path) -> None:  # noqa: F811
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2", grpc=True)
    processes = wait_for(lambda: len(found := model_processes(running)) == 2 and found, "two model processes")
    running.process.kill()
    running.process.wait(timeout=60)
    wait_for(lambda: all(gone(p) for p in processes), "both model processes stopped", deadline_s=120)


class SteadyLoad:
    """`clients` threads, each posting predicts on its own keep-alive connection until stopped; every answer's
    status (and the body of each that is not 200) kept."""

    def __init__(self, server: Server, clients: int) -> None:
        self.body = json.dumps({"instances": inputs(1, seed=63).tolist()}).encode()
        self.server = server
        self.statuses: list[int] = []
        self.refusals: list[tuple[int, bytes]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _client(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        try:
            while not self.stopping.is_set():
                connection.request("POST", "/v1/models/digits:predict", self.body,
                                   {"content-type": "application/json"})
                answer = connection.getresponse()
                payload = answer.read()
                self.statuses.append(answer.status)
                if answer.status != 200:
                    self.refusals.append((answer.status, payload))
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=120)
            assert not thread.is_alive(), "a client still waiting for an answer"


def metric(server: Server, name: str) -> float:
    text = http_get(server, "/monitoring/prometheus/metrics")[1].decode()
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else -1.0


def test_a_model_process_killed_under_load_costs_only_the_requests_it_held(models: Path) -> None:  # noqa: F811
    """SIGKILL (as the OOM killer sends it) on one of two model processes while four clients keep sending: it is
    replaced with the same model, at most the requests it held (its window: 2 here) fail with 503 and a one-line
    reason, every other request is answered, and the server stays ready throughout."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2", "--workers", "1",
                     "--threads", "1", "--max-batch", "1", grpc=True)
    load = None
    try:
        processes = wait_for(lambda: len(found := model_processes(running)) == 2 and found, "two model processes")
        load = SteadyLoad(running, clients=4)
        wait_for(lambda: len(load.statuses) >= 50, "the load under way")
        processes[0].kill()
        wait_for(lambda: metric(running, "tfsmith_model_process_restarts_total") == 1, "the replacement serving")
        assert readiness(running) == 200
        replaced = {p.pid for p in model_processes(running)}
        assert processes[0].pid not in replaced and processes[1].pid in replaced and len(replaced) == 2
        answered = answered_by_process(running)
        wait_for(lambda: answered_by_process(running)["0"] >= answered["0"] + 20, "the replacement answering")
        load.stop()
        failed = len(load.refusals)
        print(f"SIGKILL under load: {failed} of {len(load.statuses)} requests failed")
        assert failed <= 2, load.refusals
        for status, payload in load.refusals:
            assert status == 503 and json.loads(payload)["error"].startswith("the model process answering"), payload
        assert metric(running, "tfsmith_model_processes_live") == 2
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}", options=FRESH) as channel:
            call = _stub(channel, "Predict", pb.PredictRequest, pb.PredictResponse)
            got = call(predict_request("digits", inputs(1, seed=64)), timeout=60)  # type: ignore[operator]
            assert to_array(got.outputs["probs"], "probs").shape == (1, 10)
        assert running.alive()
    finally:
        if load is not None:
            load.stop()
        assert running.stop() in STOPPED


def test_model_processes_dying_in_a_crash_loop_stop_the_server(models: Path) -> None:  # noqa: F811
    """Three deaths within a minute: the server exits 1 and says why, and its other processes stop with it."""
    running = Server(str(models / "image.tflite"), "--model-name", "digits", "--processes", "2")
    first = wait_for(lambda: len(found := model_processes(running)) == 2 and found, "two model processes")
    for process in first:
        process.kill()
    started = {p.pid for p in first}
    newer = wait_for(lambda: [p for p in model_processes(running) if p.pid not in started], "a replacement")
    newer[0].kill()  # the third death, loading or serving
    assert running.process.wait(timeout=120) == 1
    output = running.process.stdout.read() if running.process.stdout else ""
    assert "Traceback" not in output, output
    assert re.search(r"model process \d \(pid \d+\) was killed by SIGKILL unasked: 3 model processes died within "
                     r"60 s, a crash loop; stopping the server", output), output
    wait_for(lambda: all(gone(p) for p in [*first, *newer]), "the other model processes stopped")


def test_model_processes_refusing_a_model_say_so_in_one_line(tmp_path: Path, models: Path) -> None:  # noqa: F811
    broken = tmp_path / "broken.tflite"
    broken.write_bytes((models / "image.tflite").read_bytes()[:1000])
    port = free_port()
    line = one_error_line(refused(broken, "--port", str(port), "--grpc-port", str(free_port()), "--processes", "2",
                                  own_port=port))
    assert f"{broken}: not a loadable .tflite model" in line, line
