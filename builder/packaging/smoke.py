"""Prove a serving image answers correctly before anyone deploys it.

Start the container with its port published on 127.0.0.1 only, wait until /healthz answers (or the
container dies: then its log is the error), send real predict requests built from the report's held-out
samples in both TF Serving forms (row and columnar), compare every answer with the local interpreter's on
the same inputs, and stop the container. Any difference fails the smoke test.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import TfsmithError
from builder.server.artifacts import Artifact

Say = Callable[[str], None]


class SmokeFailed(TfsmithError):
    """The image did not start, did not answer, or answered differently from the local interpreter."""


@dataclass(frozen=True)
class SmokeResult:
    requests: int
    examples: int
    max_abs_diff: float
    agreement: float | None  # argmax agreement with the samples' `expected` (the float model), when known
    startup_s: float
    #: int8-at-load runtimes (openvino-nncf): argmax agreement with the local fp32 interpreter, else None
    local_agreement: float | None = None
    note: str = ""  # a caveat the numbers need (e.g. a constant reference makes agreement meaningless)

    def line(self) -> str:
        if self.local_agreement is None:
            match = "all answers match the local interpreter"
        else:
            match = (f"int8 (NNCF) answers agree with the local fp32 interpreter on {self.local_agreement:.1%} of "
                     f"argmaxes")
        text = (
            f"smoke: {self.requests} requests, {self.examples} examples, {match} "
            f"(max |diff| {self.max_abs_diff:.3g}); ready in {self.startup_s:.1f} s"
        )
        if self.agreement is not None:
            text += f"; argmax agreement with the float model {self.agreement:.3f}"
        return text + (f" ({self.note})" if self.note else "")


def smoke_inputs(artifact: Artifact, signature: Any, count: int = 16) -> tuple[np.ndarray, np.ndarray | None]:
    """Held-out inputs for the model's first input (quantized for int8 models) and the float model's outputs.

    Without samples (a bare .tflite), deterministic generated inputs stand in.
    """
    from builder.server.backends import sample_inputs

    spec = signature.inputs[0]
    expected = None
    if artifact.samples_path is not None:
        with np.load(artifact.samples_path) as data:
            x = np.asarray(data["x"][:count])
            if "expected" in data.files:
                expected = np.asarray(data["expected"][:count])
        x = quantize_for(artifact.model_path, spec, x)
    else:
        x = sample_inputs(signature, batch=count, seed=7)[spec.name]
    return x, expected


def quantize_for(model_path: Path, spec: Any, x: np.ndarray) -> np.ndarray:
    """Float samples in the model's input dtype: int8/uint8 inputs use the tensor's (scale, zero point)."""
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "f":
        return x.astype(dtype)
    from ai_edge_litert.interpreter import Interpreter

    detail = Interpreter(model_path=str(model_path)).get_input_details()[0]
    scale, zero_point = detail["quantization"]
    if not scale:
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale + zero_point), info.min, info.max).astype(dtype)


#: The server's default body limit (app.DEFAULT_MAX_BODY_BYTES; images run with it): the columnar request,
#: which carries every example at once, must stay under it.
SERVER_MAX_BODY_BYTES = 16 * 1024 * 1024


def fit_body(x: np.ndarray, expected: np.ndarray | None, limit: int = SERVER_MAX_BODY_BYTES
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """As many examples as fit one columnar JSON request under `limit` (big inputs, e.g. 224x224x3 images,
    take ~3 MB of JSON each), at least one."""
    per_example = len(json.dumps(x[:1].tolist())) + 2
    keep = max(1, min(len(x), int(0.8 * limit) // per_example))
    return x[:keep], None if expected is None else expected[:keep]


def _http(url: str, body: bytes | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")
    except urllib.error.URLError as error:  # refused, reset, broken pipe: the server's problem, said in one line
        raise SmokeFailed(f"{url}: no answer ({error.reason})") from None


def wait_healthy(
    base_url: str, alive: Callable[[], str | None], timeout_s: float = 90.0, path: str = "/healthz"
) -> float:
    """Seconds until `path` answers 200; SmokeFailed when the container exits or time runs out."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout_s:
        dead = alive()
        if dead is not None:
            raise SmokeFailed(f"the container exited before answering: {dead}")
        try:
            status, _ = _http(f"{base_url}{path}", timeout=2.0)
            if status == 200:
                return time.monotonic() - start
            last = f"HTTP {status}"
        except (OSError, ValueError, SmokeFailed) as error:  # not up yet
            last = str(error)
        time.sleep(0.25)
    raise SmokeFailed(f"no healthy answer from {base_url}{path} within {timeout_s:.0f} s (last: {last})")


def compare(got: np.ndarray, want: np.ndarray, dtype: str) -> float:
    """Largest difference; SmokeFailed beyond float rounding (float) or one quantization step (integer)."""
    if got.shape != want.shape:
        raise SmokeFailed(f"answer has shape {list(got.shape)}, the local interpreter's {list(want.shape)}")
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    kind = np.dtype(dtype).kind
    ok = diff <= 1 if kind in "iu" else bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))
    if not ok:
        raise SmokeFailed(f"answers differ from the local interpreter's (max |diff| {diff:.3g})")
    return diff


#: Runtimes whose answers are int8 approximations of the served fp32 .tflite (quantized at server start).
APPROXIMATE_RUNTIMES = ("openvino-nncf",)
#: Smallest argmax agreement with the fp32 interpreter an int8-at-load server must reach on the samples.
MIN_APPROXIMATE_AGREEMENT = 0.9


def compare_approximate(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(max |diff|, argmax agreement) of int8 answers vs the fp32 interpreter's; SmokeFailed below the floor.

    Bit-for-bit equality cannot hold for a model quantized at load, so the honest check is that it picks the
    same class; outputs that are not (batch, classes) must stay within 10% of the reference's range instead.
    """
    if got.shape != want.shape:
        raise SmokeFailed(f"answer has shape {list(got.shape)}, the local interpreter's {list(want.shape)}")
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    if got.ndim == 2 and got.shape[1] > 1:
        agreement = float(np.mean(np.argmax(got, axis=1) == np.argmax(want, axis=1)))
        if agreement < MIN_APPROXIMATE_AGREEMENT:
            raise SmokeFailed(f"int8 answers agree with the fp32 interpreter on only {agreement:.1%} of argmaxes "
                              f"(< {MIN_APPROXIMATE_AGREEMENT:.0%}; max |diff| {diff:.3g})")
        return diff, agreement
    span = float(np.ptp(want)) if want.size else 0.0
    if diff > 0.1 * max(span, 1e-6):
        raise SmokeFailed(f"int8 answers differ from the fp32 interpreter's by {diff:.3g} (> 10% of its range)")
    return diff, 1.0


def check_server(base_url: str, artifact: Artifact, model_name: str, version: int, count: int = 16) -> SmokeResult:
    """Query a running server with held-out samples and compare with the local LiteRT interpreter.

    The server says its runtime in /healthz; an int8-at-load runtime is compared by argmax agreement with
    the fp32 model it quantized (`artifact.model_path`), every other one within float rounding.
    """
    from builder.server.backends import LiteRTBackend

    status, health = _http(f"{base_url}/healthz")
    approximate = status == 200 and health.get("runtime") in APPROXIMATE_RUNTIMES
    local = LiteRTBackend(artifact.model_path)
    signature = next(iter(local.signatures.values()))
    x, expected = smoke_inputs(artifact, signature, count)
    x, expected = fit_body(x, expected)
    name = signature.inputs[0].name
    out_spec = signature.outputs[0]
    want = np.concatenate([local.predict(signature.name, {name: x[i : i + 1]})[out_spec.name] for i in range(len(x))])
    requests, worst, agreements = 0, 0.0, []

    def check(got: np.ndarray) -> float:
        if not approximate:
            return compare(got, want, out_spec.dtype)
        diff, agree = compare_approximate(got, want)
        agreements.append(agree)
        return diff

    status, body = _http(f"{base_url}/v1/models/{model_name}")
    if status != 200 or body.get("model_version_status", [{}])[0].get("state") != "AVAILABLE":
        raise SmokeFailed(f"model status answered HTTP {status}: {body}")
    rows = []
    for i in range(len(x)):  # row form, one example per request, as most clients send
        payload = json.dumps({"instances": x[i : i + 1].tolist()}).encode()
        status, body = _http(f"{base_url}/v1/models/{model_name}/versions/{version}:predict", payload)
        requests += 1
        if status != 200:
            raise SmokeFailed(f"predict answered HTTP {status}: {body}")
        rows.append(np.asarray(body["predictions"], dtype=out_spec.dtype))
    worst = max(worst, check(np.concatenate(rows)))
    payload = json.dumps({"signature_name": signature.name, "inputs": {name: x.tolist()}}).encode()
    status, body = _http(f"{base_url}/v1/models/{model_name}:predict", payload)  # columnar, the whole batch
    requests += 1
    if status != 200:
        raise SmokeFailed(f"columnar predict answered HTTP {status}: {body}")
    columnar = body["outputs"][out_spec.name] if isinstance(body["outputs"], dict) else body["outputs"]
    worst = max(worst, check(np.asarray(columnar, dtype=out_spec.dtype)))
    agreement = None
    if expected is not None and expected.ndim == 2 and want.ndim == 2 and expected.shape == want.shape:
        agreement = float(np.mean(np.argmax(expected, axis=1) == np.argmax(want, axis=1)))
    note = ""
    if approximate and want.size and float(np.max(np.ptp(want.reshape(len(want), -1), axis=1))) == 0.0:
        note = "the fp32 reference answers are constant (random weights?): agreement says nothing about quality"
    return SmokeResult(requests, len(x), worst, agreement, 0.0, min(agreements) if agreements else None, note)


class RunningContainer:
    """A detached container with one port published on 127.0.0.1; stopped and removed on exit."""

    def __init__(self, client: Any, image: str, port: int, name: str | None = None) -> None:
        self._client = client
        self.container = client.containers.run(
            image, detach=True, ports={f"{port}/tcp": ("127.0.0.1", None)}, name=name, init=False
        )
        self.container.reload()
        bindings = self.container.attrs["NetworkSettings"]["Ports"].get(f"{port}/tcp") or []
        if not bindings:
            self.stop()
            raise SmokeFailed(f"container {self.container.short_id} published no port for {port}")
        self.host_port = int(bindings[0]["HostPort"])
        self.url = f"http://127.0.0.1:{self.host_port}"

    def exited(self) -> str | None:
        self.container.reload()
        if self.container.status in ("exited", "dead"):
            logs = self.container.logs().decode(errors="replace").strip().splitlines()
            return f"exit {self.container.attrs['State'].get('ExitCode')}: {' | '.join(logs[-3:])}"
        return None

    def health(self) -> str:
        self.container.reload()
        return str((self.container.attrs["State"].get("Health") or {}).get("Status", "none"))

    def stop(self, timeout: int = 10) -> int:
        """SIGTERM, wait, remove; returns the exit code (0 when the server shut down cleanly)."""
        try:
            self.container.stop(timeout=timeout)
            self.container.reload()
            return int(self.container.attrs["State"].get("ExitCode", -1))
        finally:
            self.container.remove(force=True)

    def __enter__(self) -> RunningContainer:
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001, S110 - already gone
            pass


def smoke_test(client: Any, image: str, artifact: Artifact, model_name: str, version: int, port: int,
               say: Say) -> SmokeResult:
    """Run the image, wait for health, compare answers, stop it; SmokeFailed on any problem."""
    say(f"smoke: starting {image}")
    with RunningContainer(client, image, port) as running:
        startup = wait_healthy(running.url, running.exited)
        say(f"smoke: healthy on {running.url} after {startup:.1f} s")
        result = check_server(running.url, artifact, model_name, version)
        code = running.stop()
    if code not in (0, 143):
        raise SmokeFailed(f"the server did not stop cleanly (exit {code})")
    return dataclasses.replace(result, startup_s=startup)
