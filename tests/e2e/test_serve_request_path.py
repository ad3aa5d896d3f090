"""How many of the server's modules one request passes, and how often it enters each: counted in every process
of a real server (the front and each model process) by the profile hook `tests.benchmarks.request_path` uses
(a module is entered when a frame of another server module calls into it; calls from asyncio or grpcio, its
protocol callbacks and task steps, are callbacks, and a coroutine resumed after an await is a resume: neither
is an entry), for a v2 JSON infer, a TF Serving REST predict and a gRPC Predict, in both layouts.

The bounds are the request paths as they stand (docs/design/server.md gives them before and after), so a
change that adds a layer, a forwarding hop or a module to the path fails here and says which."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.benchmarks.profiled import hook_path
from tests.benchmarks.request_path import HOOK
from tests.e2e.test_serve import HTTP, LAYOUTS, STOPPED, Server, models  # noqa: F401 - models is a fixture

grpc = pytest.importorskip("grpc")

#: Requests counted of each kind (after as many unmeasured ones, so nothing is counted that runs once).
REQUESTS = 4
#: The most modules (builder.server.*, builder.wire.*) a request may pass, all its processes together.
MOST_MODULES = {
    "model-processes": {"v2": 10, "rest": 10, "grpc": 10},
    "in-front": {"v2": 8, "rest": 8, "grpc": 8},
}
#: The most times any module is entered by another a request (the router calls a protocol's handler, the data
#: plane its decoding; a protocol enters the data plane to read and to run the call, the call's rules to choose
#: the signature and make the call, the JSON module to read and to write).
MOST_ENTRIES = 2
#: Modules a request must not pass at all: the request and answer values are made without entering `messages`,
#: and the front hands a request to the balancer without the pool's own module (`model_processes`).
NEVER = {"builder.server.process.messages", "builder.server.front.model_processes"}


def _counted(out: Path, phase: str) -> dict[str, float]:
    """Entries per request into each module, every process of the server together."""
    entries: dict[str, float] = defaultdict(float)
    for dump in out.glob(f"{phase}-*.json"):
        for module, counts in json.loads(dump.read_text()).items():
            entries[module] += counts["entries"] / REQUESTS
    return dict(entries)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_request_passes_few_modules_and_enters_each_seldom(models: Path, layout: str, tmp_path: Path,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.wire import tfs_proto as pb
    from builder.wire.tensors import fill_proto

    out, phase = tmp_path / "out", tmp_path / "phase"
    out.mkdir()
    phase.write_text("off")
    monkeypatch.setenv("PYTHONPATH", hook_path(tmp_path, HOOK))
    monkeypatch.setenv("TFSMITH_TRACE_PHASE", str(phase))
    monkeypatch.setenv("TFSMITH_TRACE_OUT", str(out))
    running = Server(str(models / "image.tflite"), "--model-name", "digits", *LAYOUTS[layout], "--interpreters", "1",
                     "--threads", "1", "--max-batch", "1", grpc=True)
    try:
        row = np.random.default_rng(0).random((1, 8, 8, 1), dtype=np.float32)
        v2 = {"inputs": [{"name": "pixels", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": row.ravel().tolist()}]}
        message = pb.PredictRequest()
        message.model_spec.name = "digits"
        fill_proto(message.inputs["pixels"], row)
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
            predict = channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/Predict")
            sends = {
                "v2": lambda: HTTP.post(f"{running.url}/v2/models/digits/infer", json=v2).raise_for_status(),
                "rest": lambda: HTTP.post(f"{running.url}/v1/models/digits:predict",
                                          json={"instances": row.tolist()}).raise_for_status(),
                "grpc": lambda: predict(message.SerializeToString(), timeout=30),
            }
            for kind, send in sends.items():
                for _ in range(REQUESTS):
                    send()
                phase.write_text(kind)
                for _ in range(REQUESTS):
                    send()
                phase.write_text("off")
        HTTP.get(f"{running.url}/monitoring/prometheus/metrics")  # every process writes its last counts on a call
    finally:
        assert running.stop() in STOPPED
    for kind in sends:
        entries = _counted(out, kind)
        assert any(module.startswith("builder.server.protocols.") for module in entries), (kind, entries)
        assert len(entries) <= MOST_MODULES[layout][kind], (kind, sorted(entries))
        too_often = {module: count for module, count in entries.items() if count > MOST_ENTRIES}
        assert not too_often, (kind, too_often)
        assert not NEVER & set(entries), (kind, sorted(NEVER & set(entries)))
