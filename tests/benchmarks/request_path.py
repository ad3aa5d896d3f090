"""Which of the server's modules one request passes, and how it comes into each (a measurement, not a test).

    python -m tests.benchmarks.request_path [--model FILE] [--src DIR] [--model-processes 2] [--requests 10]

Starts `python -m builder.server` (from this checkout, or `--src DIR`: another checkout, for before/after) with
a profile hook in every process of it (the front and each model process: a `sitecustomize` on PYTHONPATH) and
sends, one at a time over one keep-alive connection (as `requests.Session`, tritonclient and gRPC channels do),
a v2 JSON infer, a TF Serving REST predict and a gRPC Predict of the digits CNN. For each it prints, per
request, the server modules (`builder.server.*`, `builder.wire.*`) it passed, every process together, and how
it came into each: an *entry* is a call from a frame of another server module into this one (one layer calling
another); a *callback* is a call from outside the server's code (asyncio's protocol callbacks and task steps,
grpcio's threads); a coroutine resumed after an await is a *resume*, neither. Counting runs only between two
marks written to a file the hook reads, so each path is counted over its own requests alone.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from tests.benchmarks.profiled import hook_path, report, work_folder

ROOT = Path(__file__).resolve().parents[2]

#: The profile hook every process of the measured server imports at start (as `sitecustomize`).
HOOK = r'''
import dis, json, os, sys, threading
_PHASE_FILE = os.environ.get("TFSMITH_TRACE_PHASE")
if _PHASE_FILE:
    _OUT = os.environ["TFSMITH_TRACE_OUT"]
    _state = {"phase": "", "counts": {}}
    _first = {}

    def _first_resume(code):
        offset = _first.get(code)
        if offset is None:
            offset = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
            _first[code] = offset
        return offset

    def _dump():
        phase, counts = _state["phase"], _state["counts"]
        if phase and counts:
            with open(os.path.join(_OUT, f"{phase}-{os.getpid()}.json"), "w") as out:
                json.dump(counts, out)

    def _profile(frame, event, arg):
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("builder.server") or name.startswith("builder.wire")):
            return
        try:
            with open(_PHASE_FILE) as marks:
                phase = marks.read().strip()
        except OSError:
            phase = ""
        if phase != _state["phase"]:
            _dump()
            _state["phase"], _state["counts"] = phase, {}
        if not phase or phase == "off":
            return
        back = frame.f_back
        caller = back.f_globals.get("__name__", "") if back is not None else ""
        if caller == name:
            return
        if frame.f_lasti > _first_resume(frame.f_code):
            kind = "resumes"
        elif caller.startswith("builder.server") or caller.startswith("builder.wire"):
            kind = "entries"
        else:
            kind = "callbacks"
        entry = _state["counts"].setdefault(name, {"entries": 0, "callbacks": 0, "resumes": 0})
        entry[kind] += 1

    sys.setprofile(_profile)
    threading.setprofile(_profile)
'''


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(p) for p in text)
    return found


class _KeepAlive:
    """One HTTP/1.1 connection kept open for every request, as clients that send many do."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post(self, path: str, body: bytes) -> bytes:
        self.connection.request("POST", path, body, {"Content-Type": "application/json"})
        answer = self.connection.getresponse()
        data = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{path}: {answer.status} {data[:200]!r}")
        return data


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return answer.read()


def measure(model: Path, src: Path | None, model_processes: int, requests: int) -> dict[str, Any]:
    """Entries, callbacks and resumes per request into each module, by request kind (see the module)."""
    with work_folder("tfsmith-request-path-") as work:
        return _measure(work, model, src, model_processes, requests)


def _measure(work: Path, model: Path, src: Path | None, model_processes: int, requests: int) -> dict[str, Any]:
    import grpc

    from builder.wire import tfs_proto as pb
    from builder.wire.tensors import fill_proto
    from tests.benchmarks.serve_peers import free_port

    (work / "out").mkdir()
    phase = work / "phase"
    phase.write_text("off")
    port, grpc_port = free_port(), free_port()
    source = src or ROOT
    env = {**os.environ, "PYTHONPATH": hook_path(work, HOOK, source), "TFSMITH_TRACE_PHASE": str(phase),
           "TFSMITH_TRACE_OUT": str(work / "out")}
    log = (work / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "builder.server", str(model), "--model-name", "m", "--port", str(port),
         "--grpc-port", str(grpc_port), "--model-processes", str(model_processes), "--interpreters", "1",
         "--threads", "1", "--max-batch", "1"], env=env, cwd=source, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                _get(f"{url}/v2/health/ready")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((work / "server.log").read_text()[-2000:]) from None
                time.sleep(0.3)
        meta = json.loads(_get(f"{url}/v1/models/m/metadata"))
        name = next(iter(meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]))
        row = np.random.default_rng(0).random((1, 28, 28, 1), dtype=np.float32)
        rest = json.dumps({"instances": row.tolist()}).encode()
        v2 = json.dumps({"inputs": [{"name": name, "shape": [1, 28, 28, 1], "datatype": "FP32",
                                     "data": row.ravel().tolist()}]}).encode()
        message = pb.PredictRequest()
        message.model_spec.name = "m"
        fill_proto(message.inputs[name], row)
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        predict = channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/Predict")
        client = _KeepAlive(port)
        sends = {"v2 infer (JSON)": lambda: client.post("/v2/models/m/infer", v2),
                 "TF Serving REST predict": lambda: client.post("/v1/models/m:predict", rest),
                 "gRPC Predict": lambda: predict(message.SerializeToString(), timeout=60)}
        for index, (label, send) in enumerate(sends.items()):
            for _ in range(20):
                send()
            phase.write_text(f"p{index}")
            for _ in range(requests):
                send()
            phase.write_text("off")
        # every process dumps the last phase at its next call: the metrics scrape reaches each of them
        _get(f"{url}/monitoring/prometheus/metrics")
        time.sleep(0.5)
        channel.close()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    result: dict[str, Any] = {}
    for index, label in enumerate(sends):
        modules: dict[str, dict[str, float]] = {}
        for dump in (work / "out").glob(f"p{index}-*.json"):
            for module, counts in json.loads(dump.read_text()).items():
                entry = modules.setdefault(module, {"entries": 0.0, "callbacks": 0.0, "resumes": 0.0})
                for key in entry:
                    entry[key] += counts.get(key, 0) / requests
        result[label] = dict(sorted(modules.items(), key=lambda item: (-item[1]["entries"], item[0])))
    return result


def render(result: dict[str, Any]) -> str:
    lines = []
    for label, modules in result.items():
        entries = sum(m["entries"] for m in modules.values())
        callbacks = sum(m.get("callbacks", 0.0) for m in modules.values())
        most = max(modules.items(), key=lambda item: item[1]["entries"], default=("-", {"entries": 0}))
        lines.append(f"{label}: {len(modules)} modules, {entries:.1f} entries and {callbacks:.1f} callbacks a request "
                     f"(most entered: {most[0]} {most[1]['entries']:.1f})")
        for module, counts in modules.items():
            lines.append(f"    {module:45s} {counts['entries']:5.1f} entries  {counts.get('callbacks', 0.0):5.1f} "
                         f"callbacks  {counts['resumes']:5.1f} resumes")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="request_path", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("/tmp/tfsmith-bench-models/digits.tflite"))
    parser.add_argument("--src", type=Path, help="root of another checkout whose server to measure")
    parser.add_argument("--model-processes", type=int, default=2)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the counts here")
    args = parser.parse_args(argv)
    result = measure(args.model, args.src, args.model_processes, args.requests)
    return report(render(result), result, args.json)


if __name__ == "__main__":
    sys.exit(main())
