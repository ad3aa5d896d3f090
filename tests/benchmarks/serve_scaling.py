"""Every core the server is given (a benchmark behind `make bench`, never a test).

    python -m tests.benchmarks.serve_scaling [--models DIR] [--seconds 5] [--rounds 3] [--out DIR] [--judge]
        [--protocols rest,v2,grpc] [--cores N] [--server-cpus K] [--load-processes P] [--auto-models LIST]
        [--skip alone,scaling,auto,costs,dispatch]

For the cores this process may use (N), MobileNetV2 fp32 on LiteRT, loopback load from this host:

1. the model alone: the same interpreter in N processes × 1 thread, no server (inferences/s);
2. per protocol (TF Serving REST JSON, Open Inference Protocol binary tensors, gRPC tensor_content) and per
   client pool (4 and 16 keep-alive connections opened together, as a proxy's pool is; gRPC: as many channels,
   each its own connection, plus one channel carrying 16 calls at once):
   - `serve --processes N --workers 1 --threads 1 --max-batch 1`: throughput, p50/p99, each model process's
     CPU seconds and requests (balance: max/min), the front's CPU;
   - N one-process servers on N ports with the pool's connections spread evenly over them (the balanced
     reference: what per-request dispatch must come within 0.9x of);
3. `serve` with every option auto against each configuration it could have chosen (in-process × N
   interpreters, N processes × 1 thread, N/2 processes × 2 threads...), v2 binary, 16 connections, for
   MobileNetV2 and for the digits CNN (a model faster than the server's own work per request);
4. the server's own CPU per request beyond the model's (one client; `process_cpu_seconds_total` minus
   `tfsmith_model_cpu_seconds_total` from the server's metrics): MobileNetV2's 600 KB binary tensor on v2 and
   gRPC, and the digits CNN's small request on REST, v2 and gRPC;
5. the server confined to one core (as a one-CPU container runs it; the load from the other cores), its one
   interpreter's calls taking turns on the event loop (`auto`), on a worker thread, or inline as they come:
   throughput, p50/p99, CPU beyond the model a request, and the slowest of the health probes sent every 50 ms
   meanwhile (MobileNetV2, v2 binary, 4 connections);
and the load generator's own CPU beside each run. With `--server-cpus K` the servers and the model alone run on
the first K of this process's CPUs and the load generator on the rest, so the load does not take the cores the
server was given (N is then K). On 8 CPUs or more that is the default, with K three quarters of them (one
Python load generator and the kernel's loopback work fit the rest); `--server-cpus 0` shares every CPU. The
throughput runs' load then comes from one process for each CPU left to it, at most 4 (`--load-processes P`):
one Python process drives about one core's worth of requests. Each comparison runs `--rounds` times, its sides
alternating, and reports the round with the median throughput, so a drift in the host's load falls on both
alike. Tables on the terminal and in serve_scaling.md, the numbers in serve_scaling.json (written after each
part, so a run cut short keeps what it measured), a plot in serve_scaling.png.

With `--judge` it ends with one line per floor and exits 1 when one is missed: with pools of 4 and 16
connections, per-process CPU within 1.25x (max/min) and throughput at least 0.9x N balanced one-process servers,
on REST, v2 binary and gRPC; per-request server CPU beyond the model at most 250 us for a 600 KB binary tensor
(v2, gRPC), 150 us for a small request on REST and v2 and 300 us on gRPC. On a host with at least 8 cores also:
binary-tensor throughput at least 0.8x the model alone, and auto within 10% of the best configuration (for
each model of the auto part).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from tests.benchmarks.loadgen import LoadResult, run_pool_for
from tests.benchmarks.serve_peers import free_port, make_models, rest_bodies, v2_binary

#: This checkout's root: where `python -m tests.benchmarks...` runs from.
ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ("rest", "v2", "grpc")
R = TypeVar("R", bound="Run | DispatchRun")
POOLS = (4, 16)


# --- servers ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where one share of a load goes: a server's REST and gRPC ports (picklable, for load processes)."""

    url: str
    grpc_port: int


@dataclass
class Server:
    """A `python -m builder.server` process and how to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    grpc_port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> Target:
        return Target(self.url, self.grpc_port)

    def model_processes(self) -> list[Any]:
        import psutil

        return [c for c in psutil.Process(self.process.pid).children(recursive=True)
                if "spawn_main" in " ".join(c.cmdline())]

    def cpu(self) -> tuple[float, list[float]]:
        """(the front's CPU seconds, each model process's), in process start order."""
        import psutil

        def seconds(process: Any) -> float:
            times = process.cpu_times()
            return times.user + times.system

        return seconds(psutil.Process(self.process.pid)), [seconds(p) for p in
                                                           sorted(self.model_processes(), key=lambda p: p.pid)]

    def metrics(self) -> dict[str, float]:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.url}/monitoring/prometheus/metrics", timeout=30) as answer:
            text = answer.read().decode()
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = sample.name + "".join(f"|{k}={v}" for k, v in sorted(sample.labels.items()))
                found[key] = found.get(key, 0.0) + sample.value
        return found

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


#: The tree whose server is measured (`--src`: a checkout of another version, for before/after tables).
SOURCE: list[Path | None] = [None]
#: The CPUs the servers and the model alone run on (`--server-cpus`; None: wherever this process may run).
SERVER_CPUS: list[set[int] | None] = [None]


def _confined(cpus: set[int] | None) -> Callable[[], None] | None:
    """A pre-exec hook that confines a child to `cpus` (None: no hook)."""
    return None if cpus is None else functools.partial(os.sched_setaffinity, 0, cpus)


def launch(argv_for: Callable[[int, int], list[str]], name: str, workdir: Path, ready: Callable[[Server], Any],
           timeout_s: float, cpus: set[int] | None = None) -> Server:
    """`python -m ...` (`argv_for(port, grpc_port)`, on two free ports) from the measured tree, its output in
    `workdir`, confined to `cpus` (default: the servers' CPUs); returned once `ready(server)` stops raising
    OSError. One that exits first, or is not ready in `timeout_s`, is an error naming the end of its log."""
    port, grpc_port = free_port(), free_port()
    log = workdir / f"{name}-{port}.log"
    source = SOURCE[0]
    env = {**os.environ, "PYTHONPATH": str(source)} if source else None
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", *argv_for(port, grpc_port)], stdout=out,
                                   stderr=subprocess.STDOUT, env=env, cwd=source or ROOT,
                                   preexec_fn=_confined(SERVER_CPUS[0] if cpus is None else cpus))
    server = Server(process, port, grpc_port, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            ready(server)
            return server
        except OSError:
            time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"{name} not ready in {timeout_s} s")


def _health_ready(server: Server) -> None:
    with urllib.request.urlopen(f"{server.url}/v2/health/ready", timeout=2):
        pass


def start_server(model: Path, args: Sequence[str], workdir: Path, timeout_s: float = 240,
                 cpus: set[int] | None = None) -> Server:
    """`serve` on free ports, ready; confined to `cpus` when given (what a container with that many CPUs gets)."""
    return launch(lambda port, grpc_port: ["builder.server", str(model), "--model-name", "m", "--port", str(port),
                                           "--grpc-port", str(grpc_port), "--log-level", "info", *args],
                  "server", workdir, _health_ready, timeout_s, cpus)


# --- load ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requests:
    """The request bodies of one protocol for the model's example rows."""

    protocol: str
    bodies: list[bytes]
    headers: list[dict[str, str]] | None = None


def requests_for(protocol: str, x: np.ndarray, input_name: str) -> Requests:
    if protocol == "rest":
        return Requests(protocol, rest_bodies(x))
    if protocol == "v2":
        bodies, headers = v2_binary(x, input_name)
        return Requests(protocol, bodies, headers)
    from builder.wire import tfs_proto as pb
    from builder.wire.tensors import fill_proto

    bodies = []
    for i in range(len(x)):
        request = pb.PredictRequest()
        request.model_spec.name = "m"
        fill_proto(request.inputs[input_name], x[i:i + 1])
        bodies.append(request.SerializeToString())
    return Requests(protocol, bodies)


def grpc_pool_for(port: int, bodies: Sequence[bytes], seconds: float, channels: int, streams: int = 1) -> LoadResult:
    """Predict calls for `seconds` over `channels` channels, each its own connection (a local subchannel pool:
    by default channels to one address share one), `streams` calls in flight on each."""
    import grpc

    from builder.wire import tfs_proto as pb

    async def run() -> LoadResult:
        latencies: list[float] = []
        failures: list[str] = []
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
        opened = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(channels)]
        for channel in opened:
            await channel.channel_ready()
        deadline = time.perf_counter() + seconds

        async def client(channel: Any, offset: int) -> None:
            call = channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/Predict")
            n = 0
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                try:
                    await call(bodies[(offset + n) % len(bodies)], timeout=60)
                    latencies.append(time.perf_counter() - began)
                except grpc.RpcError as error:
                    failures.append(str(error)[:200])
                n += 1

        began = time.perf_counter()
        await asyncio.gather(*(client(channel, i * streams + s) for i, channel in enumerate(opened)
                               for s in range(streams)))
        elapsed = time.perf_counter() - began
        for channel in opened:
            await channel.close()
        return LoadResult(len(latencies) + len(failures), len(failures), 0, elapsed, tuple(latencies),
                          failures[0] if failures else "")

    return asyncio.run(run())


def _load_to(target: Target, requests: Requests, seconds: float, connections: int, streams: int = 1) -> LoadResult:
    if requests.protocol == "grpc":
        return grpc_pool_for(target.grpc_port, requests.bodies, seconds, connections, streams)
    path = "/v1/models/m:predict" if requests.protocol == "rest" else "/v2/models/m/infer"
    return run_pool_for(target.url + path, requests.bodies, seconds, connections, requests.headers)


def load(server: Server, requests: Requests, seconds: float, connections: int, streams: int = 1) -> LoadResult:
    return _load_to(server.target, requests, seconds, connections, streams)


def _merged(results: Sequence[LoadResult]) -> LoadResult:
    latencies = tuple(v for r in results for v in r.latencies_s)
    return LoadResult(sum(r.requests for r in results), sum(r.errors for r in results), 0,
                      max(r.seconds for r in results), latencies, next((r.first_error for r in results if r.errors), ""))


#: Shares of a load: (target, connections, calls in flight on each).
Share = tuple[Target, int, int]


def _run_shares(shares: Sequence[Share], requests: Requests, seconds: float) -> LoadResult:
    """Every share at once in this process (threads: each share's load runs its own event loop)."""
    if len(shares) == 1:
        target, connections, streams = shares[0]
        return _load_to(target, requests, seconds, connections, streams)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(shares)) as pool:
        return _merged(list(pool.map(lambda share: _load_to(share[0], requests, seconds, share[1], share[2]),
                                     shares)))


def _load_process(shares: Sequence[Share], requests: Requests, seconds: float, ready: Any, go: Any,
                  out: Any) -> None:
    """One load process: says it is ready, waits for the word, runs its shares; sends (result, its CPU)."""
    ready.put(1)
    go.wait()
    cpu0 = own_cpu()
    result = _run_shares(shares, requests, seconds)
    out.put((result, own_cpu() - cpu0))


#: Load generator processes (`--load-processes`): 1 runs every load in this process.
LOAD_PROCESSES = [1]


def _split(count: int, parts: int) -> list[int]:
    """`count` in `parts` as even as whole numbers go, the larger first."""
    return [count // parts + (1 if i < count % parts else 0) for i in range(parts)]


def buckets_for(shares: Sequence[Share], processes: int) -> list[list[Share]]:
    """The shares dealt to at most `processes` load processes (pure): with fewer shares than processes, a
    pool's connections are split between them (one channel's calls stay together, on one connection)."""
    if processes > 1 and len(shares) < processes:
        parts = processes // len(shares)
        shares = [(target, part, streams) for target, connections, streams in shares
                  for part in (_split(connections, parts) if streams == 1 else [connections])]
        shares = [share for share in shares if share[1]]
    processes = max(1, min(processes, len(shares)))
    return [list(shares[i::processes]) for i in range(processes)]


def spread(shares: Sequence[Share], requests: Requests, seconds: float) -> tuple[LoadResult, float]:
    """The shares loaded at once over `LOAD_PROCESSES` processes, and the load generator's CPU seconds. One
    Python process drives about one core's worth of requests, which on many cores is less than the server
    answers (12 one-process servers took 2.8 s of its CPU in a 3 s gRPC load)."""
    buckets = buckets_for(shares, LOAD_PROCESSES[0])
    if len(buckets) == 1:
        cpu0 = own_cpu()
        result = _run_shares(buckets[0], requests, seconds)
        return result, own_cpu() - cpu0
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Queue(), context.Event(), context.Queue()
    workers = [context.Process(target=_load_process, args=(bucket, requests, seconds, ready, go, out), daemon=True)
               for bucket in buckets]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=120)
    go.set()
    answers = [out.get(timeout=seconds + 180) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    return _merged([result for result, _ in answers]), sum(cpu for _, cpu in answers)


def even_shares(servers: Sequence[Server], connections: int) -> list[Share]:
    """The pool's connections spread evenly over one-process servers."""
    return [(s.target, n, 1) for s, n in zip(servers, _split(connections, len(servers))) if n]


def interleaved(runs: Sequence[Callable[[], R]], rounds: int) -> list[R]:
    """Each run `rounds` times, the runs alternating (the order reversed every other round, so a drift in the
    host's load falls on all alike); for each, the round with the median throughput."""
    done: list[list[Run]] = [[] for _ in runs]
    for round_number in range(rounds):
        order = list(range(len(runs))) if round_number % 2 == 0 else list(reversed(range(len(runs))))
        for index in order:
            done[index].append(runs[index]())
    return [sorted(found, key=lambda r: r.rps)[len(found) // 2] for found in done]


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


# --- the model alone -------------------------------------------------------------------------------------

ALONE = textwrap.dedent("""
    import sys, time, numpy as np
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path=sys.argv[1], num_threads=1); it.allocate_tensors()
    index = it.get_input_details()[0]["index"]
    x = np.load(sys.argv[2])
    for i in range(5):
        it.set_tensor(index, x[i % len(x)][None]); it.invoke()
    sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
    deadline, n = time.perf_counter() + float(sys.argv[3]), 0
    while time.perf_counter() < deadline:
        it.set_tensor(index, x[n % len(x)][None]); it.invoke(); n += 1
    print(n)
""")


def model_alone(model: Path, x: np.ndarray, processes: int, seconds: float, workdir: Path) -> float:
    """Inferences/s of the same interpreter in `processes` processes × 1 thread, started together."""
    rows = workdir / "rows.npy"
    np.save(rows, x)
    procs = [subprocess.Popen([sys.executable, "-c", ALONE, str(model), str(rows), str(seconds)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              preexec_fn=_confined(SERVER_CPUS[0]))
             for _ in range(processes)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    counts = [int(proc.communicate(timeout=seconds + 120)[0].split()[-1]) for proc in procs]
    return sum(counts) / seconds


# --- measuring -------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One load against one server layout."""

    layout: str
    protocol: str
    connections: int
    streams: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    loadgen_cpu_s: float
    front_cpu_s: float | None = None
    process_cpu_s: list[float] = field(default_factory=list)
    process_requests: list[float] = field(default_factory=list)

    @property
    def cpu_balance(self) -> float | None:
        """max/min of the model processes' CPU seconds (infinite when one did nothing; None for one process)."""
        cpu = list(self.process_cpu_s)
        if len(cpu) < 2 or max(cpu) <= 0:
            return None
        return max(cpu) / min(cpu) if min(cpu) > 0 else float("inf")

    def summary(self) -> dict[str, Any]:
        return {**asdict(self), "cpu_balance": self.cpu_balance}


def measured_run(server: Server, requests: Requests, seconds: float, connections: int, layout: str,
                 streams: int = 1) -> Run:
    shares: list[Share] = [(server.target, connections, streams)]
    spread(shares, requests, min(2.0, seconds / 3))  # warm every process's path
    front0, procs0 = server.cpu()
    metrics0 = server.metrics()
    result, loadgen = spread(shares, requests, seconds)
    front1, procs1 = server.cpu()
    metrics1 = server.metrics()
    answered = [metrics1.get(f"tfsmith_process_requests_total|process={i}", 0.0)
                - metrics0.get(f"tfsmith_process_requests_total|process={i}", 0.0) for i in range(len(procs1))]
    return Run(layout, requests.protocol, connections, streams, result.rps, result.p50_ms, result.p99_ms,
               result.errors, loadgen, front1 - front0, [b - a for a, b in zip(procs0, procs1)], answered)


def balanced_run(servers: Sequence[Server], requests: Requests, seconds: float, connections: int) -> Run:
    shares = even_shares(servers, connections)
    spread(shares, requests, min(2.0, seconds / 3))
    before = [s.cpu()[0] for s in servers]
    result, loadgen = spread(shares, requests, seconds)
    after = [s.cpu()[0] for s in servers]
    return Run(f"{len(servers)} one-process servers", requests.protocol, connections, 1, result.rps, result.p50_ms,
               result.p99_ms, result.errors, loadgen, None, [b - a for a, b in zip(before, after)])


def cpu_between(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    """(the server's CPU seconds, its model calls') between two readings of its metrics."""
    cpu = sum(b.get(k, 0.0) - a.get(k, 0.0) for k in b if k.startswith("process_cpu_seconds_total"))
    model = sum(b.get(k, 0.0) - a.get(k, 0.0) for k in b if k.startswith("tfsmith_model_cpu_seconds_total"))
    return cpu, model


def cost_per_request(server: Server, requests: Requests, count_s: float, connections: int = 1) -> dict[str, float]:
    """The server's CPU per request, the model's, what is beyond it, and (with model processes) the front's own
    share of it (microseconds): from one client by default, or from `connections` at once (a busy server,
    whose cores never sit idle between requests)."""
    load(server, requests, 1.0, connections)
    a = server.metrics()
    front0, processes = server.cpu()
    result = load(server, requests, count_s, connections)
    front1, _ = server.cpu()
    b = server.metrics()
    cpu, model = cpu_between(a, b)
    n = max(1, result.requests)
    return {"requests": n, "p50_ms": result.p50_ms, "server_us": cpu / n * 1e6, "model_us": model / n * 1e6,
            "beyond_us": (cpu - model) / n * 1e6, "front_us": (front1 - front0) / n * 1e6 if processes else None,
            "errors": result.errors}


#: Roughly the size of each model's answer (bytes), for the front alone's fixed answers.
ANSWER_BYTES = {"mobilenet_v2": 4 * 1000 + 200, "digits": 4 * 10 + 200}
#: Connections of the busy cost measurement: enough that a request is always waiting.
BUSY_CONNECTIONS = 4


def front_alone_cost(requests: Requests, gap_s: float, answer_bytes: int, count_s: float, workdir: Path) -> float:
    """The front with no model behind it (`front_alone`), one client: its CPU per request (microseconds) when
    every answer is a fixed `answer_bytes` after `gap_s` of idle waiting."""
    import socket

    def listening(server: Server) -> None:
        for port in (server.grpc_port, server.port):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()

    server = launch(lambda port, grpc_port: ["tests.benchmarks.front_alone", str(port), str(grpc_port), repr(gap_s),
                                             str(answer_bytes)], "front-alone", workdir, listening, 60)
    try:
        load(server, requests, 1.0, 1)
        before = server.cpu()[0]
        result = load(server, requests, count_s, 1)
        if result.errors:  # a failed request costs less than an answered one: such a floor would be too low
            raise RuntimeError(f"the front alone failed {result.errors} of {result.requests} requests: "
                               f"{result.first_error}")
        return (server.cpu()[0] - before) / max(1, result.requests) * 1e6
    finally:
        server.stop()


@dataclass
class DispatchRun:
    """One load on a server confined to one core, with a health probe every 50 ms beside it."""

    label: str
    rps: float
    p50_ms: float
    p99_ms: float
    beyond_us: float
    slowest_probe_ms: float
    errors: int


def dispatch_run(server: Server, requests: Requests, seconds: float, connections: int, label: str) -> DispatchRun:
    """What the load costs the server beyond the model, and how long a probe waited meanwhile."""
    import threading

    load(server, requests, min(2.0, seconds / 3), connections)
    probes: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            with urllib.request.urlopen(f"{server.url}/v2/health/ready", timeout=60) as answer:
                answer.read()
            probes.append(time.perf_counter() - began)
            stop.wait(0.05)

    prober = threading.Thread(target=probe)
    a = server.metrics()
    prober.start()
    try:
        result = load(server, requests, seconds, connections)
    finally:
        stop.set()
        prober.join()
    b = server.metrics()
    cpu, model = cpu_between(a, b)
    n = max(1, result.requests)
    return DispatchRun(label, result.rps, result.p50_ms, result.p99_ms, (cpu - model) / n * 1e6,
                       max(probes, default=0.0) * 1e3, result.errors)


def input_name(server: Server) -> str:
    with urllib.request.urlopen(f"{server.url}/v1/models/m/metadata", timeout=30) as answer:
        meta = json.load(answer)
    return next(iter(meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]))


def serving_line(server: Server) -> str:
    """Where the server said its models are and how their calls run."""
    for line in server.log.read_text().splitlines():
        if " models " in line and "serving " in line:
            return line.rsplit(" models ", 1)[1].strip()
    return "?"


def configuration(server: Server) -> str:
    """The configuration line the server printed at start."""
    for line in server.log.read_text().splitlines():
        if "configuration:" in line:
            return line.split("configuration:", 1)[1].strip()
    return "?"


def auto_alternatives(cores: int) -> list[tuple[str, list[str]]]:
    """The configurations `--processes auto` chooses among on `cores` cores."""
    options = [("in-process", ["--processes", "1", "--workers", str(cores), "--threads", "1", "--max-batch", "1"])]
    threads = 1
    while threads <= cores:
        processes = cores // threads
        if processes >= 2:
            label = f"{processes} processes × {threads} thread{'s' if threads > 1 else ''}"
            fixed = ["--processes", str(processes), "--workers", "1", "--threads", str(threads), "--max-batch", "1"]
            options.append((label, fixed))
            options.append((f"{label}, pinned", [*fixed, "--pin-cores", "on"]))  # auto leaves it off: measured
        threads *= 2
    # fewer single-thread processes than cores: what a model faster than the front's hand-over needs
    for processes in sorted({cores // 2, cores // 3, cores // 4} - {0, 1}, reverse=True):
        options.append((f"{processes} processes × 1 thread",
                        ["--processes", str(processes), "--workers", "1", "--threads", "1", "--max-batch", "1"]))
    return options


def main(argv: Sequence[str] | None = None) -> int:
    from builder.measure.cores import read_cores

    parser = argparse.ArgumentParser(prog="serve_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("/tmp/tfsmith-bench-models"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/tfsmith-serve-scaling"))
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each measured load")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each comparison, interleaved (median)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--cores", type=int, default=None, help="N (default: the cores this process may use)")
    parser.add_argument("--server-cpus", type=int, default=None, metavar="K",
                        help="run the servers on the first K of this process's CPUs, the load generator on the rest "
                             "(default: 3/4 of them on 8 or more, else 0: all shared)")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: alone,scaling,auto,costs,dispatch")
    parser.add_argument("--src", type=Path, help="root of another checkout whose server to measure (before/after)")
    parser.add_argument("--load-processes", type=int, default=None, metavar="P",
                        help="load generator processes for the throughput runs (default: with --server-cpus, one "
                             "for each CPU left to the load, at most 4; else 1)")
    parser.add_argument("--auto-models", default="mobilenet_v2,digits",
                        help="the models of the auto part (comma list of mobilenet_v2, digits)")
    parser.add_argument("--judge", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    SOURCE[0] = args.src
    usable = sorted(os.sched_getaffinity(0))
    if args.server_cpus is None:
        args.server_cpus = len(usable) * 3 // 4 if len(usable) >= 8 else 0
    if args.server_cpus:
        if not 1 <= args.server_cpus < len(usable):
            parser.error(f"--server-cpus must leave the load generator a CPU: 1 to {len(usable) - 1} here")
        SERVER_CPUS[0] = set(usable[:args.server_cpus])
        os.sched_setaffinity(0, set(usable[args.server_cpus:]))
    cores = args.cores or (args.server_cpus if args.server_cpus else read_cores().count)
    if args.load_processes is None:
        args.load_processes = min(4, len(usable) - args.server_cpus) if args.server_cpus else 1
    if args.load_processes < 1:
        parser.error("--load-processes must be at least 1")
    LOAD_PROCESSES[0] = args.load_processes
    models = make_models(args.models)
    model = models["mobilenet_v2"]
    x = np.random.default_rng(0).random((8, 224, 224, 3), dtype=np.float32)
    protocols = [p for p in args.protocols.split(",") if p]
    results: dict[str, Any] = {"cores": cores, "host": _host(), "runs": [], "auto": [], "costs": {},
                               "front_alone": {}, "dispatch": [],
                               "server_cpus": sorted(SERVER_CPUS[0]) if SERVER_CPUS[0] else None,
                               "load_processes": LOAD_PROCESSES[0]}

    def save() -> None:
        (args.out / "serve_scaling.json").write_text(json.dumps(results, indent=2))
        (args.out / "serve_scaling.md").write_text(render(results))
    fixed = ["--workers", "1", "--threads", "1", "--max-batch", "1"]

    if "alone" not in skip:
        results["model_alone_per_s"] = model_alone(model, x, cores, args.seconds, args.out)
        print(f"model alone, {cores} processes × 1 thread: {results['model_alone_per_s']:.0f} inferences/s",
              file=sys.stderr)
        save()
    if "scaling" not in skip:
        served = start_server(model, ["--processes", str(cores), *fixed], args.out)
        singles = [start_server(model, ["--processes", "1", *fixed], args.out) for _ in range(cores)]
        try:
            name = input_name(served)
            for protocol in protocols:
                requests = requests_for(protocol, x, name)
                for pool in POOLS:
                    pair = (functools.partial(measured_run, served, requests, args.seconds, pool,
                                              f"--processes {cores}"),
                            functools.partial(balanced_run, singles, requests, args.seconds, pool))
                    for run in interleaved(pair, args.rounds):
                        results["runs"].append(run.summary())
                        _say(run)
                    save()
                if protocol == "grpc":
                    (run,) = interleaved((functools.partial(measured_run, served, requests, args.seconds, 1,
                                                            f"--processes {cores}", streams=16),), args.rounds)
                    results["runs"].append(run.summary())
                    _say(run)
        finally:
            for server in (served, *singles):
                server.stop()
    if "auto" not in skip:
        small = np.random.default_rng(0).random((8, 28, 28, 1), dtype=np.float32)
        for model_name, rows in (("mobilenet_v2", x), ("digits", small)):
            if model_name not in args.auto_models.split(","):
                continue
            choices = [("auto", []), *auto_alternatives(cores)]
            servers = [start_server(models[model_name], options, args.out) for _, options in choices]
            try:
                requests = requests_for("v2", rows, input_name(servers[0]))
                runs = interleaved([functools.partial(measured_run, server, requests, args.seconds, 16, label)
                                    for (label, _), server in zip(choices, servers)], args.rounds)
                for (label, _), server, run in zip(choices, servers, runs):
                    answered = max(1.0, run.rps * args.seconds)
                    entry = {"model": model_name, "label": label, "configuration": configuration(server),
                             "rps": run.rps, "p50_ms": run.p50_ms, "p99_ms": run.p99_ms, "errors": run.errors,
                             "front_us": None if not run.process_cpu_s else (run.front_cpu_s or 0.0) / answered * 1e6,
                             "process_us": [c / n * 1e6 for c, n in zip(run.process_cpu_s, run.process_requests) if n]}
                    results["auto"].append(entry)
                    print(f"{model_name} {label}: {entry['configuration']}: {run.rps:.0f} req/s", file=sys.stderr)
                save()
            finally:
                for server in servers:
                    server.stop()
    if "costs" not in skip:
        small = np.random.default_rng(0).random((8, 28, 28, 1), dtype=np.float32)
        for model_name, rows, protocol_set in (("mobilenet_v2", x, ("v2", "grpc")),
                                               ("digits", small, ("rest", "v2", "grpc"))):
            for layout, options in (("in-process", ["--processes", "1", *fixed]),
                                    (f"{cores} processes", ["--processes", str(cores), *fixed])):
                server = start_server(models[model_name], options, args.out)
                try:
                    name = input_name(server)
                    for protocol in protocol_set:
                        requests = requests_for(protocol, rows, name)
                        cost = cost_per_request(server, requests, args.seconds)
                        cost["busy"] = cost_per_request(server, requests, args.seconds, BUSY_CONNECTIONS)
                        results["costs"][f"{model_name} {protocol} {layout}"] = cost
                        print(f"cost {model_name} {protocol} {layout}: {cost}", file=sys.stderr)
                        save()
                        if layout == "in-process":
                            gap_s = cost["model_us"] / 1e6
                            results["front_alone"][f"{model_name} {protocol}"] = {
                                "gap_us": cost["model_us"],
                                **{key: front_alone_cost(requests, gap, ANSWER_BYTES[model_name], args.seconds,
                                                         args.out)
                                   for key, gap in (("at_once_us", 0.0), ("after_gap_us", gap_s))}}
                            print(f"front alone, {model_name} {protocol}: "
                                  f"{results['front_alone'][f'{model_name} {protocol}']}", file=sys.stderr)
                            save()
                finally:
                    server.stop()
    if "dispatch" not in skip and len(usable) >= 2:
        # the server on one core, as a one-CPU container runs it; the load generator on the others
        one = {usable[0]}
        options = [("auto", []), ("--dispatch threads", ["--dispatch", "threads"]),
                   ("--dispatch inline", ["--dispatch", "inline"])]
        servers = [start_server(model, ["--processes", "1", "--workers", "1", *extra], args.out, cpus=one)
                   for _, extra in options]
        load_cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, load_cpus - one)
        try:
            requests = requests_for("v2", x, input_name(servers[0]))
            runs = interleaved([functools.partial(dispatch_run, server, requests, args.seconds, 4, label)
                                for (label, _), server in zip(options, servers)], args.rounds)
            for run, server in zip(runs, servers):
                results["dispatch"].append({**asdict(run), "serving": serving_line(server)})
                print(f"one core, {run.label}: {run.rps:.0f} req/s, {run.beyond_us:.0f} us beyond the model, "
                      f"slowest probe {run.slowest_probe_ms:.0f} ms", file=sys.stderr)
        finally:
            os.sched_setaffinity(0, load_cpus)
            for server in servers:
                server.stop()
    save()
    table = render(results)
    print(table)
    plot(results, args.out / "serve_scaling.png")
    if not args.judge:
        return 0
    verdicts = judge(results)
    for goal, met, detail in verdicts:
        print(f"{'met' if met else 'MISSED' if met is False else 'not judged'}: {goal}: {detail}")
    return 1 if any(met is False for _, met, _ in verdicts) else 0


def _host() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _say(run: Run) -> None:
    balance = f", CPU balance {run.cpu_balance:.2f}x" if run.cpu_balance else ""
    print(f"{run.layout} {run.protocol} {run.connections}×{run.streams}: {run.rps:.0f} req/s, p50 {run.p50_ms:.1f} ms"
          f"{balance}, errors {run.errors}", file=sys.stderr)


#: The server's own CPU a request may cost beyond the model, one client (microseconds).
COST_GOALS_US = {"mobilenet_v2 v2": 250, "mobilenet_v2 grpc": 250, "digits rest": 150, "digits v2": 150,
                 "digits grpc": 300}


def _cost_detail(cost: dict[str, Any], floor: dict[str, float] | None) -> str:
    """What a request cost beyond the model, busy too, beside what the front alone costs for the same request."""
    detail = f"{cost['beyond_us']:.0f} us (server {cost['server_us']:.0f}, model {cost['model_us']:.0f})"
    if cost.get("busy"):
        detail += f"; busy {cost['busy']['beyond_us']:.0f} us"
    if floor:
        detail += (f"; the front alone, a fixed answer: {floor['at_once_us']:.0f} us at once, "
                   f"{floor['after_gap_us']:.0f} us after {floor['gap_us']:.0f} us idle")
    return detail


def judge(results: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """Pure: the floors on one run's results, as (goal, met or None when not measured, detail)."""
    verdicts: list[tuple[str, bool | None, str]] = []
    runs = results.get("runs", [])
    cores = results.get("cores", 0)
    for protocol in PROTOCOLS:
        for pool in POOLS:
            served = next((r for r in runs if r["protocol"] == protocol and r["connections"] == pool
                           and r["streams"] == 1 and r["layout"].startswith("--processes")), None)
            balanced = next((r for r in runs if r["protocol"] == protocol and r["connections"] == pool
                             and "one-process" in r["layout"]), None)
            goal = f"{protocol}, pool of {pool}"
            if served is None or balanced is None:
                verdicts.append((goal, None, "not measured"))
                continue
            balance = served["cpu_balance"]
            verdicts.append((f"{goal}: per-process CPU within 1.25x", None if balance is None else balance <= 1.25,
                             f"max/min {balance:.2f}x" if balance else "one process"))
            ratio = served["rps"] / balanced["rps"] if balanced["rps"] else 0.0
            verdicts.append((f"{goal}: throughput >= 0.9x {cores} balanced one-process servers", ratio >= 0.9,
                             f"{served['rps']:.0f} vs {balanced['rps']:.0f} req/s: {ratio:.2f}x"))
    costs = results.get("costs", {})
    for key, limit in COST_GOALS_US.items():
        floor = results.get("front_alone", {}).get(key)
        for layout, cost in ((k[len(key) + 1:], v) for k, v in costs.items() if k.startswith(key + " ")):
            verdicts.append((f"{key} server CPU beyond the model, {layout} <= {limit} us",
                             cost["beyond_us"] <= limit, _cost_detail(cost, floor)))
    alone = results.get("model_alone_per_s")
    if cores >= 8 and alone:
        for protocol in ("v2", "grpc"):
            best = max((r["rps"] for r in runs if r["protocol"] == protocol and r["layout"].startswith("--processes")),
                       default=0.0)
            verdicts.append((f"{protocol} throughput >= 0.8x the model alone on {cores} cores", best >= 0.8 * alone,
                             f"{best:.0f} vs {alone:.0f}/s: {best / alone:.2f}x"))
        for model in ("mobilenet_v2", "digits"):
            entries = [a for a in results.get("auto", []) if a.get("model", "mobilenet_v2") == model]
            auto = next((a for a in entries if a["label"] == "auto"), None)
            others = [a["rps"] for a in entries if a["label"] != "auto"]
            if auto and others:
                verdicts.append((f"{model}: --processes auto within 10% of the best configuration",
                                 auto["rps"] >= 0.9 * max(others), f"{auto['rps']:.0f} vs best {max(others):.0f} req/s"))
    return verdicts


def render(results: dict[str, Any]) -> str:
    lines = [f"# Serving on {results['cores']} cores ({results['host']})", ""]
    if results.get("server_cpus"):
        lines += [f"The servers and the model alone ran on CPUs {_spans(results['server_cpus'])}, the load generator "
                  f"on the others ({results.get('load_processes', 1)} process(es)).", ""]
    if results.get("model_alone_per_s"):
        lines.append(f"The model alone, {results['cores']} processes × 1 thread: "
                     f"{results['model_alone_per_s']:.0f} inferences/s.\n")
    lines += ["| layout | protocol | connections × calls | req/s | p50 ms | p99 ms | CPU s per model process | "
              "requests per process | balance | front CPU s | load generator CPU s | errors |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results.get("runs", []):
        cpu = " / ".join(f"{c:.1f}" for c in r["process_cpu_s"])
        answered = " / ".join(f"{n:.0f}" for n in r["process_requests"]) or "—"
        balance = f"{r['cpu_balance']:.2f}x" if r["cpu_balance"] else "—"
        front = f"{r['front_cpu_s']:.1f}" if r["front_cpu_s"] is not None else "—"
        lines.append(f"| {r['layout']} | {r['protocol']} | {r['connections']} × {r['streams']} | {r['rps']:.0f} | "
                     f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {cpu} | {answered} | {balance} | {front} | "
                     f"{r['loadgen_cpu_s']:.1f} | {r['errors']} |")
    if results.get("auto"):
        lines += ["", "| model | configuration | chosen as | req/s (v2 binary, 16 connections) | p50 ms | p99 ms | "
                  "front CPU us a request | model process CPU us a request |", "|---|---|---|---|---|---|---|---|"]
        for a in results["auto"]:
            front = "—" if a.get("front_us") is None else f"{a['front_us']:.0f}"
            each = a.get("process_us") or []
            per_process = "—" if not each else f"{min(each):.0f}–{max(each):.0f}" if len(each) > 1 else f"{each[0]:.0f}"
            lines.append(f"| {a.get('model', 'mobilenet_v2')} | {a['label']} | {a['configuration']} | {a['rps']:.0f} | "
                         f"{a['p50_ms']:.1f} | {a['p99_ms']:.1f} | {front} | {per_process} |")
    if results.get("costs"):
        lines += ["", f"| request (one client) | server CPU us | model us | beyond the model us | of it, the front's | "
                  f"p50 ms | beyond the model, busy ({BUSY_CONNECTIONS} connections) us |", "|---|---|---|---|---|---|---|"]
        for key, c in results["costs"].items():
            front = "—" if c.get("front_us") is None else f"{c['front_us']:.0f}"
            busy = f"{c['busy']['beyond_us']:.0f}" if c.get("busy") else "—"
            lines.append(f"| {key} | {c['server_us']:.0f} | {c['model_us']:.0f} | {c['beyond_us']:.0f} | {front} | "
                         f"{c['p50_ms']:.2f} | {busy} |")
    if results.get("front_alone"):
        lines += ["", "| the front alone, a fixed answer (one client) | CPU us a request, answered at once | "
                  "after an idle wait as long as the model's call | that wait us |", "|---|---|---|---|"]
        for key, f in results["front_alone"].items():
            lines.append(f"| {key} | {f['at_once_us']:.0f} | {f['after_gap_us']:.0f} | {f['gap_us']:.0f} |")
    if results.get("dispatch"):
        lines += ["", "| one core, MobileNetV2 v2 binary, 4 connections | calls run | req/s | p50 ms | p99 ms | "
                  "beyond the model us | slowest probe ms |", "|---|---|---|---|---|---|---|"]
        for d in results["dispatch"]:
            lines.append(f"| {d['label']} | {d['serving']} | {d['rps']:.0f} | {d['p50_ms']:.1f} | {d['p99_ms']:.1f} | "
                         f"{d['beyond_us']:.0f} | {d['slowest_probe_ms']:.0f} |")
    return "\n".join(lines) + "\n"


def _spans(cpus: Sequence[int]) -> str:
    """CPU numbers as ranges: 0-11,14."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def plot(results: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    runs = results.get("runs", [])
    if not runs:
        return
    labels = [f"{r['protocol']} {r['connections']}×{r['streams']}\n{r['layout'].replace('--processes', 'processes')}"
              for r in runs]
    figure, axis = plt.subplots(figsize=(max(8, len(runs) * 0.8), 4.5))
    axis.bar(range(len(runs)), [r["rps"] for r in runs],
             color=["tab:blue" if r["layout"].startswith("--") else "tab:gray" for r in runs])
    if results.get("model_alone_per_s"):
        axis.axhline(results["model_alone_per_s"], color="tab:red", linestyle="--", label="the model alone")
        axis.legend()
    axis.set_xticks(range(len(runs)), labels, rotation=60, ha="right", fontsize=7)
    axis.set_ylabel("requests/s")
    axis.set_title(f"MobileNetV2 on {results['cores']} cores: per-request dispatch (blue) vs balanced servers (gray)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
