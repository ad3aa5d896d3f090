"""The serving floors, measured (a benchmark, never a timed test):

1. the server's added latency over a bare interpreter call at batch 1, p50, under 1 ms;
2. throughput under concurrency at least 3x the single-client rate, for the digits CNN.

    python -m tests.benchmarks.serve_floors MODEL.tflite|OPTIMIZE_OUT [--requests 2000] [--concurrency 16] [--json FILE]

Each server configuration runs as its own process (`python -m builder.server`, as in an image) on a free
loopback port; the load generator is the lean keep-alive client of `loadgen`, checking every answer.
Numbers depend on the machine and on what else runs on it; the table says which floor held.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from builder.model.artifact import resolve_artifact
from builder.model.backend import LiteRTBackend
from tests.benchmarks.loadgen import LoadResult, run_load
from builder.packaging.smoke import smoke_inputs

CONFIGS: dict[str, list[str]] = {
    "1 process, 2 interpreters": ["--workers", "2"],
    "1 process, batching 16": ["--workers", "2", "--max-batch", "16"],
    "2 processes": ["--workers", "1", "--processes", "2"],
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bare_p50_us(backend: LiteRTBackend, x: np.ndarray, runs: int = 2000) -> float:
    signature = next(iter(backend.signatures.values()))
    name = signature.inputs[0].name
    times = []
    for i in range(runs + 200):
        row = x[i % len(x)][np.newaxis]
        start = time.perf_counter()
        backend.predict(signature.name, {name: row})
        if i >= 200:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def measure(model: Path, args: Sequence[str], bodies: list[bytes], want: np.ndarray, requests: int,
            concurrency: int) -> tuple[LoadResult, LoadResult]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "builder.server", str(model), "--port", str(port), "--model-name", "m",
         "--log-level", "warning", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1/models/m:predict"
    def check(i: int, body: dict) -> bool:
        return bool(np.allclose(body["predictions"][0], want[i], rtol=1e-5, atol=1e-6))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"server {args} did not start") from None
                time.sleep(0.2)
        run_load(url, bodies, check, 300, concurrency)  # warm every process and interpreter
        single = run_load(url, bodies, check, requests, 1)
        many = run_load(url, bodies, check, requests, concurrency)
    finally:
        server.terminate()
        server.wait(timeout=20)
    return single, many


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.serve_floors", description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    artifact = resolve_artifact(args.model)
    backend = LiteRTBackend(artifact.model_path)
    signature = next(iter(backend.signatures.values()))
    x = next(iter(smoke_inputs(artifact, signature, count=64)[0].values()))  # a one-input model
    name, out = signature.inputs[0].name, signature.outputs[0].name
    want = np.concatenate([backend.predict(signature.name, {name: x[i : i + 1]})[out] for i in range(len(x))])
    bodies = [json.dumps({"instances": x[i : i + 1].tolist()}).encode() for i in range(len(x))]
    bare = bare_p50_us(backend, x)
    table = Table(title=f"serve floors: {artifact.model_path.name} (bare interpreter p50 {bare:.1f} us)")
    for column in ("server", "1 client p50", "overhead p50", "1 client req/s", f"{args.concurrency} clients req/s",
                   "p99 (many)", "scaling", "errors"):
        table.add_column(column, justify="right" if column != "server" else "left")
    results = {}
    for label, config in CONFIGS.items():
        with console.status(f"measuring {label} ..."):
            single, many = measure(artifact.model_path, config, bodies, want, args.requests, args.concurrency)
        overhead_ms = single.p50_ms - bare / 1000
        scaling = many.rps / single.rps
        results[label] = {"single_p50_ms": single.p50_ms, "overhead_ms": overhead_ms, "single_rps": single.rps,
                          "many_rps": many.rps, "many_p99_ms": many.p99_ms, "scaling": scaling,
                          "errors": single.errors + many.errors + single.wrong + many.wrong}
        table.add_row(label, f"{single.p50_ms:.3f} ms", f"{overhead_ms:.3f} ms", f"{single.rps:.0f}",
                      f"{many.rps:.0f}", f"{many.p99_ms:.2f} ms", f"{scaling:.2f}x", str(results[label]["errors"]))
    console.print(table)
    best_overhead = min(r["overhead_ms"] for r in results.values())
    best_scaling = max(r["scaling"] for r in results.values())
    console.print(f"floor 1 (overhead p50 < 1 ms): {'met' if best_overhead < 1 else 'NOT met'} ({best_overhead:.3f} ms)")
    console.print(f"floor 2 (concurrency >= 3x single client): {'met' if best_scaling >= 3 else 'NOT met'} "
                  f"({best_scaling:.2f}x; the load generator shares the machine's cores with the server)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"bare_p50_us": bare, "configs": results}, indent=1))
    return 0 if all(r["errors"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
