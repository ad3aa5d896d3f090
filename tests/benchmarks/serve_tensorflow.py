"""The TensorFlow runtime's serving overhead, measured (a benchmark, never a timed test):

1. batch-1 p50 through the server over gRPC (`tensor_content`, TF Serving's own client) against calling the
   same signature in this process (`tf.saved_model.load` + its concrete function), same run, interleaved;
   goal: at most 1.15x;
2. the `serving_xla` signature (XLA-compiled) against `serving_default`, both through the server.

    python -m tests.benchmarks.serve_tensorflow [--models digits,mobilenet_v2] [--threads 1] [--calls 200]
        [--rounds 5] [--work DIR] [--json FILE]

Models: the digits CNN (`builder.optimize.example` trains it) and MobileNetV2 (tf_keras.applications,
weights=None), each saved with `serving_default` and `serving_xla` (the same call under jit_compile).
The server runs as its own process (`python -m builder.server DIR --runtime tensorflow`, as in an image)
with one worker and `--threads` intra-op threads; this process uses the same threads for the in-process
calls. Both share the machine's cores, so the figures hold for this machine and this run only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
GOAL = 1.15

MAKE = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf, tf_keras
from builder.optimize.example import train_example
out, which = sys.argv[1], sys.argv[2]
if which == "digits":
    model, _, _ = train_example(epochs=2)
    shape = (None, 8, 8, 1)
else:
    model = tf_keras.applications.MobileNetV2(weights=None)
    shape = (None, 224, 224, 3)
spec = tf.TensorSpec(shape, tf.float32, name="image")
plain = tf.function(lambda image: {"scores": model(image, training=False)}, input_signature=[spec])
xla = tf.function(lambda image: {"scores": model(image, training=False)}, input_signature=[spec], jit_compile=True)
module = tf.Module()
module.model = model
tf.saved_model.save(module, out, signatures={"serving_default": plain.get_concrete_function(),
                                             "serving_xla": xla.get_concrete_function()})
"""
SHAPES = {"digits": (1, 8, 8, 1), "mobilenet_v2": (1, 224, 224, 3)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_model(work: Path, which: str) -> Path:
    out = work / which
    if not (out / "saved_model.pb").is_file():
        subprocess.run([sys.executable, "-c", MAKE, str(out), which], check=True, cwd=REPO, timeout=1800,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    return out


class Server:
    """`python -m builder.server DIR --runtime tensorflow` on free ports, ready when /v2/health/ready says so."""

    def __init__(self, model: Path, threads: int) -> None:
        import httpx

        self.port, self.grpc_port = free_port(), free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "builder.server", str(model), "--runtime", "tensorflow", "--workers", "1",
             "--threads", str(threads), "--port", str(self.port), "--grpc-port", str(self.grpc_port),
             "--log-level", "warning"], cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"server for {model} exited with {self.process.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/v2/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"server for {model} not ready in 600 s")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def timed(call: Any, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def measure(which: str, model: Path, threads: int, calls: int, rounds: int) -> dict[str, Any]:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    loaded = tf.saved_model.load(str(model))
    x = np.random.default_rng(0).random(SHAPES[which], dtype=np.float32)
    server = Server(model, threads)
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
        requests = {}
        for signature in ("serving_default", "serving_xla"):
            request = predict_pb2.PredictRequest()
            request.model_spec.name = which
            request.model_spec.signature_name = signature
            request.inputs["image"].CopyFrom(tf.make_tensor_proto(x))
            requests[signature] = request

        def over_grpc(signature: str) -> Any:
            return lambda: tf.make_ndarray(stub.Predict(requests[signature], timeout=60).outputs["scores"])

        def in_process(signature: str) -> Any:
            function = loaded.signatures[signature]
            return lambda: function(image=x)["scores"].numpy()

        runners = {"in-process": in_process("serving_default"), "gRPC": over_grpc("serving_default"),
                   "in-process xla": in_process("serving_xla"), "gRPC xla": over_grpc("serving_xla")}
        want = runners["in-process"]()
        assert np.allclose(runners["gRPC"](), want, rtol=1e-5, atol=1e-6), "server and in-process disagree"
        for run in runners.values():  # warm-up (XLA compiles on its first call)
            timed(run, 20)
        samples: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(rounds * calls):  # one call of each in turn: load from elsewhere hits all of them alike
            for name, run in runners.items():
                samples[name] += timed(run, 1)
        function = loaded.signatures["serving_default"]
        try:
            positional = statistics.median(timed(lambda: function(x), calls))
        except TypeError as error:
            positional = None
            print(f"{which}: positional call refused ({str(error).splitlines()[0]})")
        keyword = statistics.median(timed(lambda: function(image=x), calls))
    finally:
        server.stop()
    p50 = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
    return {"model": which, "threads": threads, "calls": calls * rounds, "p50_us": p50,
            "ratio": p50["gRPC"] / p50["in-process"], "xla_vs_default": p50["gRPC xla"] / p50["gRPC"],
            "keyword_us": keyword * 1e6, "positional_us": None if positional is None else positional * 1e6}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | in-process p50 | gRPC p50 | ratio (goal <= 1.15) | gRPC serving_xla p50 | xla / default |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        p = r["p50_us"]
        lines.append(f"| {r['model']} | {p['in-process']:.0f} us | {p['gRPC']:.0f} us | {r['ratio']:.2f}x "
                     f"({'met' if r['ratio'] <= GOAL else 'missed'}) | {p['gRPC xla']:.0f} us | "
                     f"{r['xla_vs_default']:.2f}x |")
    for r in rows:
        if r["positional_us"] is not None:
            lines.append(f"{r['model']}: keyword call {r['keyword_us']:.0f} us, positional "
                         f"{r['positional_us']:.0f} us ({r['positional_us'] / r['keyword_us']:.1f}x)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits,mobilenet_v2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=200, help="calls per runner per round (calls alternate)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/tfsmith-bench-tensorflow"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)  # as the server sets them (1 worker)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for which in args.models.split(","):
        rows.append(measure(which, make_model(args.work, which), args.threads, args.calls, args.rounds))
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["ratio"] <= GOAL for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
