"""tfsmith serve against its peers and against itself before the protocol work (a benchmark, not a test).

    python -m tests.benchmarks.serve_peers [--models DIR] [--rounds 3] [--requests 1500] [--out DIR]
        [--before-src DIR [--before-protocols]] [--mlserver-python PATH] [--judge]

With `--judge` (what `make bench` runs) it ends with one line per serving floor and exits 1 when one is
missed: MobileNetV2 REST JSON p50 at most 0.5x MLServer's JSON p50; digits REST req/s at 16 clients at least
2x MLServer's; digits REST server CPU per request at most 1.3x the bare Starlette endpoint's; MobileNetV2
REST JSON p50 (a 150,528-float body) at most 2x the same server's v2 binary p50.

The same .tflite in the same interpreter (LiteRT) behind every server, loopback load from `loadgen` (lean
keep-alive HTTP/1.1; gRPC from grpc.aio with pre-serialized requests), rounds interleaved so machine noise
spreads over all servers alike. Per server and model: single-client p50/p99, requests/s at 16 clients,
server CPU per request (its /proc CPU time over the 16-client run) and RSS after the run.

Servers:
  tfsmith REST       `python -m builder.server` (2 interpreters), TF Serving row JSON
  tfsmith gRPC       the same process, TF Serving Predict with tensor_content
  tfsmith v2 binary  the same process, Open Inference Protocol with the binary tensor data extension
  tfsmith v2 JSON    the same process, Open Inference Protocol JSON: MLServer's protocol, body for body
  tfsmith REST before  the server as it was before gRPC/v2/metrics (`--before-src`: a `git archive` of that
                     commit's builder/), for the REST overhead of the new protocols
  bare Starlette     a 20-line endpoint around the same interpreter: the floor for Python HTTP
  MLServer           only with `--mlserver-python` (a venv with mlserver + ai-edge-litert), its v2 JSON
Models (random weights, made once with TensorFlow in a subprocess): digits CNN (28x28x1) and MobileNetV2.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.benchmarks.loadgen import LoadResult, run_load

REPO = Path(__file__).resolve().parents[2]
MAKE_MODELS = r"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf, tf_keras as k
out = sys.argv[1]
k.utils.set_random_seed(0)
digits = k.Sequential([k.layers.Input((28, 28, 1), name="image"), k.layers.Conv2D(16, 3, activation="relu"),
    k.layers.MaxPooling2D(), k.layers.Conv2D(32, 3, activation="relu"), k.layers.MaxPooling2D(),
    k.layers.Flatten(), k.layers.Dense(10, activation="softmax", name="probs")])
mobilenet = k.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))
for name, model in (("digits", digits), ("mobilenet_v2", mobilenet)):
    with open(os.path.join(out, name + ".tflite"), "wb") as f:
        f.write(tf.lite.TFLiteConverter.from_keras_model(model).convert())
"""

BARE = r'''
import json, sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
interpreter = Interpreter(model_path=sys.argv[1], num_threads=1)
runner = interpreter.get_signature_runner()
name = list(runner.get_input_details())[0]
async def predict(request: Request) -> Response:
    x = np.asarray(json.loads(await request.body())["instances"], dtype=np.float32)
    out = next(iter(runner(**{name: x}).values()))
    return Response(json.dumps({"predictions": out.tolist()}), media_type="application/json")
app = Starlette(routes=[Route("/v1/models/m:predict", predict, methods=["POST"])])
if __name__ == "__main__":
    import uvicorn
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
'''

MLSERVER_RUNTIME = r'''
import numpy as np
from ai_edge_litert.interpreter import Interpreter
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
class LiteRT(MLModel):
    async def load(self) -> bool:
        self._runner = Interpreter(model_path=self.settings.parameters.uri, num_threads=1).get_signature_runner()
        self._input = list(self._runner.get_input_details())[0]
        return True
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32)
        out = next(iter(self._runner(**{self._input: x}).values()))
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output("probs", out)])
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_models(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.tflite" for name in ("digits", "mobilenet_v2")}
    if not all(p.is_file() for p in paths.values()):
        subprocess.run([sys.executable, "-c", MAKE_MODELS, str(folder)], check=True, timeout=900)
    return paths


@dataclass
class Running:
    """A server process and how to reach it."""

    name: str
    process: subprocess.Popen[bytes]
    url: str
    grpc_port: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def cpu_seconds(self) -> float:
        import psutil

        proc = psutil.Process(self.process.pid)
        total = 0.0
        for p in [proc, *proc.children(recursive=True)]:
            times = p.cpu_times()
            total += times.user + times.system
        return total

    def rss_mb(self) -> float:
        import psutil

        proc = psutil.Process(self.process.pid)
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _wait(url: str, process: subprocess.Popen[bytes], path: str, timeout_s: float = 180) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + path, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url}{path} not ready in {timeout_s} s")


def start_tfsmith(model: Path, src: Path, grpc: bool, before: bool = False) -> Running:
    """`python -m builder.server` from `src` (this checkout, a snapshot of it, or the pre-protocol server)."""
    port, grpc_port = free_port(), free_port() if grpc else 0
    argv = [sys.executable, "-m", "builder.server", str(model), "--model-name", "m", "--port", str(port),
            "--workers", "2", "--log-level", "warning"] + ([] if before else ["--grpc-port", str(grpc_port)])
    process = subprocess.Popen(argv, cwd=src, env={**os.environ, "PYTHONPATH": str(src)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = Running("tfsmith", process, f"http://127.0.0.1:{port}", grpc_port)
    _wait(running.url, process, "/v1/models/m")
    return running


def start_bare(model: Path, workdir: Path) -> Running:
    script = workdir / "bare_starlette.py"
    script.write_text(BARE)
    port = free_port()
    process = subprocess.Popen([sys.executable, str(script), str(model), str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    running = Running("bare", process, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return running
        except OSError:
            time.sleep(0.3)
    raise RuntimeError("bare endpoint did not start")


def start_mlserver(model: Path, python: Path, workdir: Path) -> Running:
    folder = workdir / f"mlserver-{model.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "runtime.py").write_text(MLSERVER_RUNTIME)
    (folder / "model-settings.json").write_text(json.dumps(
        {"name": "m", "implementation": "runtime.LiteRT", "parameters": {"uri": str(model)}}))
    port = free_port()
    (folder / "settings.json").write_text(json.dumps({"http_port": port, "grpc_port": free_port(),
                                                      "metrics_port": free_port(), "parallel_workers": 0}))
    mlserver = python.parent / "mlserver"
    process = subprocess.Popen([str(mlserver), "start", str(folder)], cwd=folder, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    running = Running("mlserver", process, f"http://127.0.0.1:{port}")
    _wait(running.url, process, "/v2/models/m/ready")
    return running


# --- request bodies for each protocol -------------------------------------------------------------------

def rest_bodies(x: np.ndarray) -> list[bytes]:
    return [json.dumps({"instances": x[i:i + 1].tolist()}).encode() for i in range(len(x))]


def v2_json_bodies(x: np.ndarray, input_name: str = "image") -> list[bytes]:
    return [json.dumps({"inputs": [{"name": input_name, "shape": [1, *x.shape[1:]], "datatype": "FP32",
                                    "data": x[i:i + 1].ravel().tolist()}]}).encode() for i in range(len(x))]


def v2_binary(x: np.ndarray, input_name: str) -> tuple[list[bytes], list[dict[str, str]]]:
    bodies, headers = [], []
    for i in range(len(x)):
        row = np.ascontiguousarray(x[i:i + 1])
        head = json.dumps({"inputs": [{"name": input_name, "shape": list(row.shape), "datatype": "FP32",
                                       "parameters": {"binary_data_size": row.nbytes}}],
                           "parameters": {"binary_data_output": True}}).encode()
        bodies.append(head + row.tobytes())
        headers.append({"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"})
    return bodies, headers


def grpc_load(port: int, x: np.ndarray, input_name: str, total: int, concurrency: int) -> LoadResult:
    """Predict with tensor_content from `concurrency` grpc.aio tasks; requests serialized up front."""
    import grpc

    from builder.wire import tfs_proto as pb
    from builder.wire.tensors import fill_proto

    requests = []
    for i in range(len(x)):
        request = pb.PredictRequest()
        request.model_spec.name = "m"
        fill_proto(request.inputs[input_name], x[i:i + 1])
        requests.append(request.SerializeToString())

    async def run() -> LoadResult:
        latencies: list[float] = []
        failures: list[str] = []
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/Predict")

            async def client(count: int, offset: int) -> None:
                for n in range(count):
                    start = time.perf_counter()
                    try:
                        answer = await call(requests[(offset + n) % len(requests)], timeout=60)
                        latencies.append(time.perf_counter() - start)
                        if not answer:
                            failures.append("empty answer")
                    except grpc.RpcError as error:
                        failures.append(str(error))

            per, extra = divmod(total, concurrency)
            start = time.perf_counter()
            await asyncio.gather(*[client(per + (1 if i < extra else 0), i * 7) for i in range(concurrency)])
            seconds = time.perf_counter() - start
        return LoadResult(total, len(failures), 0, seconds, tuple(latencies), failures[0] if failures else "")

    return asyncio.run(run())


# --- measuring ------------------------------------------------------------------------------------------

@dataclass
class Row:
    server: str
    model: str
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    errors: int = 0

    def summary(self) -> dict[str, Any]:
        med = lambda v: round(statistics.median(v), 3) if v else None  # noqa: E731
        return {"server": self.server, "model": self.model, "p50_ms": med(self.p50_ms), "p99_ms": med(self.p99_ms),
                "rps": med(self.rps), "cpu_ms_per_request": med(self.cpu_ms), "rss_mb": med(self.rss_mb),
                "p50_ms_rounds": [round(v, 2) for v in self.p50_ms], "errors": self.errors, "rounds": len(self.rps)}


Load = Callable[[int, int], LoadResult]


def measure(row: Row, running: Running, load: Load, single: int, total: int) -> None:
    load(max(20, single // 10), 1)  # warm-up
    one = load(single, 1)
    cpu0 = running.cpu_seconds()
    many = load(total, 16)
    cpu = running.cpu_seconds() - cpu0
    row.p50_ms.append(one.p50_ms)
    row.p99_ms.append(one.p99_ms)
    row.rps.append(many.rps)
    row.cpu_ms.append(cpu / total * 1e3)
    row.rss_mb.append(running.rss_mb())
    row.errors += one.errors + many.errors + one.wrong + many.wrong
    if one.errors or many.errors:
        print(f"  {row.server} {row.model}: errors: {one.first_error or many.first_error}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serve_peers", description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("/tmp/tfsmith-bench-models"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/tfsmith-serve-peers"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1500, help="16-client requests per run (digits)")
    parser.add_argument("--before-src", type=Path, help="root of the pre-protocol server's source (builder/)")
    parser.add_argument("--before-protocols", action="store_true",
                        help="the --before-src server speaks gRPC and v2 too: measure all three of its protocols "
                        "(REST, gRPC, v2 binary) in the same interleaved rounds, not REST alone")
    parser.add_argument("--src", type=Path, default=REPO,
                        help="root of the server measured as tfsmith (default: this checkout; a `git archive` "
                        "snapshot keeps edits made during the run out of it)")
    parser.add_argument("--mlserver-python", type=Path, help="python of a venv with mlserver + ai-edge-litert")
    parser.add_argument("--only", choices=("digits", "mobilenet_v2"), help="one model only")
    parser.add_argument("--judge", action="store_true", help="judge the serving floors; exit 1 when one is missed")
    parser.add_argument("--rest-ab", action="store_true",
                        help="REST only: before (--before-src) vs now with gRPC on vs now with gRPC off")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    models = make_models(args.models)
    rows: dict[tuple[str, str], Row] = {}
    for model_name, model in models.items():
        if args.only and model_name != args.only:
            continue
        shape = (28, 28, 1) if model_name == "digits" else (224, 224, 3)
        x = np.random.default_rng(0).random((8, *shape), dtype=np.float32)
        scale = 1 if model_name == "digits" else 30  # MobileNetV2 JSON is ~1 MB a request
        total, single = max(64, args.requests // scale), max(32, 400 // scale)
        rest, v2json = rest_bodies(x), v2_json_bodies(x)
        named_v2json = functools.lru_cache(maxsize=2)(lambda name, x=x: v2_json_bodies(x, name))
        ok = lambda i, body: True  # noqa: E731 - correctness is the tests' job; a 200 is checked by loadgen
        for round_number in range(args.rounds):
            print(f"{model_name}: round {round_number + 1}/{args.rounds}", file=sys.stderr)
            plan: list[tuple[str, Callable[[], Running], list[tuple[str, Callable[[Running], Load]]]]] = [
                ("tfsmith", lambda: start_tfsmith(model, args.src, grpc=True), [
                    ("tfsmith REST", lambda r: lambda n, c: run_load(f"{r.url}/v1/models/m:predict", rest, ok, n, c)),
                    ("tfsmith gRPC tensor_content",
                     lambda r: lambda n, c: grpc_load(r.grpc_port, x, r.extra["input"], n, c)),
                    ("tfsmith v2 binary", lambda r: lambda n, c: _run_v2_binary(r, x, n, c)),
                    ("tfsmith v2 JSON", lambda r: lambda n, c: run_load(
                        f"{r.url}/v2/models/m/infer", named_v2json(r.extra["input"]), ok, n, c)),
                ]),
                ("bare", lambda: start_bare(model, args.out), [
                    ("bare Starlette", lambda r: lambda n, c: run_load(f"{r.url}/v1/models/m:predict", rest, ok, n, c)),
                ]),
            ]
            if args.rest_ab:
                rest_load: Callable[[Running], Load] = (
                    lambda r: lambda n, c: run_load(f"{r.url}/v1/models/m:predict", rest, ok, n, c))
                plan = [("tfsmith", lambda: start_tfsmith(model, args.src, grpc=True), [("tfsmith REST (gRPC on)", rest_load)]),
                        ("tfsmith", lambda: start_tfsmith(model, args.src, grpc=False), [("tfsmith REST (gRPC off)", rest_load)])]
            if args.before_src and args.before_protocols:
                plan.append(("tfsmith", lambda: start_tfsmith(model, args.before_src, grpc=True), [
                    ("tfsmith REST before", lambda r: lambda n, c: run_load(
                        f"{r.url}/v1/models/m:predict", rest, ok, n, c)),
                    ("tfsmith gRPC tensor_content before",
                     lambda r: lambda n, c: grpc_load(r.grpc_port, x, r.extra["input"], n, c)),
                    ("tfsmith v2 binary before", lambda r: lambda n, c: _run_v2_binary(r, x, n, c)),
                ]))
            elif args.before_src:
                plan.append(("before", lambda: start_tfsmith(model, args.before_src, grpc=False, before=True), [
                    ("tfsmith REST before", lambda r: lambda n, c: run_load(
                        f"{r.url}/v1/models/m:predict", rest, ok, n, c)),
                ]))
            if args.mlserver_python and not args.rest_ab:
                plan.append(("mlserver", lambda: start_mlserver(model, args.mlserver_python, args.out), [
                    ("MLServer v2 JSON", lambda r: lambda n, c: run_load(
                        f"{r.url}/v2/models/m/infer", v2json, ok, n, c)),
                ]))
            order = plan if round_number % 2 == 0 else list(reversed(plan))
            for _, start, loads in order:
                running = start()
                try:
                    running.extra["input"] = _input_name(running)
                    for label, make in loads:
                        row = rows.setdefault((label, model_name), Row(label, model_name))
                        measure(row, running, make(running), single, total)
                finally:
                    running.stop()
    summaries = [row.summary() for row in rows.values()]
    (args.out / "serve_peers.json").write_text(json.dumps(summaries, indent=2))
    table = render_table(summaries)
    (args.out / "serve_peers.md").write_text(table)
    print(table)
    chart(summaries, args.out / "serve_peers.png")
    if not args.judge:
        return 0
    verdicts = judge_floors(summaries)
    for goal, met, detail in verdicts:
        print(f"{'met' if met else 'MISSED' if met is False else 'not judged'}: {goal}: {detail}")
    return 1 if any(met is False for _, met, _ in verdicts) else 0


def judge_floors(summaries: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    """Pure: the serving floors on one run's summaries, as (goal, met or None when not measured, detail)."""
    rows = {(s["server"], s["model"]): s for s in summaries}

    def ratio(goal: str, server: str, peer: str, model: str, key: str, floor: float, at_most: bool
              ) -> tuple[str, bool | None, str]:
        mine, theirs = rows.get((server, model)), rows.get((peer, model))
        if not mine or not theirs or not mine[key] or not theirs[key]:
            return goal, None, f"{server} or {peer} not measured on {model}"
        value = mine[key] / theirs[key]
        return goal, value <= floor if at_most else value >= floor, \
            f"{mine[key]} vs {theirs[key]} ({key}): {value:.2f}x"

    return [
        ratio("MobileNetV2 REST JSON p50 <= 0.5x MLServer JSON", "tfsmith REST", "MLServer v2 JSON", "mobilenet_v2",
              "p50_ms", 0.5, True),
        ratio("digits REST req/s at 16 clients >= 2x MLServer", "tfsmith REST", "MLServer v2 JSON", "digits", "rps",
              2.0, False),
        ratio("digits REST CPU per request <= 1.3x bare Starlette", "tfsmith REST", "bare Starlette", "digits",
              "cpu_ms_per_request", 1.3, True),
        ratio("MobileNetV2 REST JSON p50 (150,528 floats) <= 2x v2 binary, same server", "tfsmith REST",
              "tfsmith v2 binary", "mobilenet_v2", "p50_ms", 2.0, True),
    ]


def _input_name(running: Running) -> str:
    import urllib.request

    if running.name != "tfsmith":
        return ""
    with urllib.request.urlopen(f"{running.url}/v1/models/m/metadata", timeout=10) as answer:
        meta = json.load(answer)
    return next(iter(meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]))


def _run_v2_binary(running: Running, x: np.ndarray, total: int, concurrency: int) -> LoadResult:
    if "v2_binary" not in running.extra:
        running.extra["v2_binary"] = v2_binary(x, running.extra["input"])
    bodies, headers = running.extra["v2_binary"]
    return run_load(f"{running.url}/v2/models/m/infer", bodies, lambda i, raw: len(raw) > 0, total, concurrency,
                    headers=headers, raw=True)


def render_table(summaries: list[dict[str, Any]]) -> str:
    """Medians over the rounds; each round's p50 beside them, since on a shared host they can differ widely."""
    lines = ["| model | server | p50 ms (1 client) | p50 each round | p99 ms | req/s (16 clients) | server CPU ms/req "
             "| RSS MB | errors |", "|---|---|---|---|---|---|---|---|---|"]
    for s in sorted(summaries, key=lambda s: (s["model"], -(s["rps"] or 0))):
        rounds = " / ".join(f"{v:.1f}" for v in s.get("p50_ms_rounds", []))
        lines.append(f"| {s['model']} | {s['server']} | {s['p50_ms']} | {rounds} | {s['p99_ms']} | {s['rps']:.0f} | "
                     f"{s['cpu_ms_per_request']} | {s['rss_mb']:.0f} | {s['errors']} |")
    return "\n".join(lines) + "\n"


def chart(summaries: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    models = sorted({s["model"] for s in summaries})
    figure, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for axis, model in zip(axes[0], models):
        rows = sorted((s for s in summaries if s["model"] == model), key=lambda s: -(s["rps"] or 0))
        axis.barh([s["server"] for s in rows], [s["rps"] for s in rows])
        axis.set_title(f"{model}: req/s at 16 clients (loopback)")
        axis.invert_yaxis()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
