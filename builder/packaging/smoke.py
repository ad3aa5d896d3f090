"""Prove a serving image answers correctly before anyone deploys it.

Start the container with its port published on 127.0.0.1 only, wait until it answers (or the container
dies or its log shows a crash: then its last log lines are the error, at once), send the requests a client of the ORIGINAL model sends (its held-out rows,
its input names and dtypes) in both TF Serving forms (row and columnar), check every answer against the local
interpreter on the same artifact and against the original model's own answers with each output's metric,
and stop the container. Any failure fails the smoke test.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.engine.base import Engine
from builder.errors import TfsmithError
from builder.packaging.plan import GRPC_PORT, ServePlan
from builder.model import registry
from builder.model.artifact import Artifact, Samples, load_samples
from builder.packaging.protocol_checks import ProtocolCheckError, check_grpc, check_v2
from builder.server.options import DEFAULT_MAX_BODY_BYTES
from builder.say import Say



class SmokeFailed(TfsmithError):
    """The image did not start, did not answer, or answered differently from the local interpreter."""


@dataclass(frozen=True)
class Fidelity:
    """How close one output of the served model is to the ORIGINAL model's answer on the same rows."""

    output: str
    metric: str  # "top-1 agreement" | "exact agreement" | "relative error"
    value: float
    passed: bool

    def text(self) -> str:
        shown = f"{self.value:.1%}" if self.metric == "relative error" else f"{self.value:.3f}"
        return f"{self.output} {self.metric} {shown}"


@dataclass(frozen=True)
class SmokeResult:
    requests: int
    examples: int
    max_abs_diff: float
    fidelity: tuple[Fidelity, ...]  # per output, against the original model (empty without samples)
    startup_s: float
    #: approximate runtimes (bf16 compute): the agreement of its answers with the same file computed exactly
    #: here (top-1 for class scores), else None
    local_agreement: float | None = None
    note: str = ""  # a caveat the numbers need (e.g. a constant reference makes agreement meaningless)
    protocols: tuple[str, ...] = ("REST row", "REST columnar")
    reference: str = "the local interpreter"  # what the answers were compared with, run here

    def line(self) -> str:
        if self.local_agreement is None:
            match = f"every answer matches {self.reference}"
        else:
            match = (f"its answers (computed at a lower precision) agree with {self.reference} at f32 on "
                     f"{self.local_agreement:.1%} of rows")
        text = (
            f"smoke: {self.requests} requests ({', '.join(self.protocols)}), {self.examples} examples, {match} "
            f"(max |diff| {self.max_abs_diff:.3g}); ready in {self.startup_s:.1f} s"
        )
        if self.fidelity:
            text += "; against the original model: " + ", ".join(f.text() for f in self.fidelity)
        return text + (f" ({self.note})" if self.note else "")


def smoke_inputs(artifact: Artifact, signature: Any, count: int = 16) -> tuple[dict[str, np.ndarray], Samples | None]:
    """What a client of the original model sends (its held-out rows, in its own dtypes, every input), and the
    samples they came from (with the original model's answers). Without samples (a bare .tflite),
    deterministic generated inputs stand in and there is nothing to judge fidelity against."""
    from builder.model.inputs import sample_inputs

    if artifact.samples_path is not None:
        samples = load_samples(artifact.samples_path).head(count)
        missing = [spec.name for spec in signature.inputs if spec.name not in samples.inputs]
        if missing:
            raise SmokeFailed(f"{artifact.samples_path}: no samples for input(s) {', '.join(missing)} of the served "
                              f"signature (it takes {', '.join(s.name for s in signature.inputs)})")
        return {spec.name: as_dtype(samples.inputs[spec.name], spec.dtype) for spec in signature.inputs}, samples
    text = [spec for spec in signature.inputs if is_text(spec.dtype)]
    generated = sample_inputs(dataclasses.replace(signature, inputs=tuple(s for s in signature.inputs
                                                                          if s not in text)), batch=count, seed=7)
    for spec in text:  # no samples to take text from: distinct made-up strings, one per example (and element)
        shape = [count if i == 0 and d in (-1, None) else max(d or 1, 1) for i, d in enumerate(spec.shape)]
        words = [f"tfsmith smoke text {i} ünïcode" for i in range(int(np.prod(shape)))]
        generated[spec.name] = as_bytes(np.array(words, dtype=object).reshape(shape))
    return {spec.name: generated[spec.name] for spec in signature.inputs}, None


def is_text(dtype: Any) -> bool:
    """Whether a tensor holds strings (TensorFlow's DT_STRING: bytes in numpy, or text from JSON)."""
    if isinstance(dtype, str) and dtype in ("string", "bytes", "str", "object"):
        return True
    try:
        return np.dtype(dtype).kind in "OSU"
    except TypeError:
        return False


def as_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` in a signature's dtype; strings become an object array of bytes (what TensorFlow answers)."""
    if is_text(dtype) or is_text(array.dtype):
        return as_bytes(array)
    return array.astype(dtype)


def as_bytes(array: np.ndarray) -> np.ndarray:
    """Strings of any numpy spelling (`S`, `U`, object of str/bytes) as an object array of bytes."""
    flat = [v.encode() if isinstance(v, str) else bytes(v) for v in np.asarray(array, dtype=object).reshape(-1)]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(np.shape(array))


def json_value(array: np.ndarray) -> Any:
    """A tensor as TF Serving's JSON carries it: numbers as numbers, UTF-8 strings as strings, other bytes
    as `{"b64": ...}`."""
    array = np.asarray(array, dtype=object) if isinstance(array, (bytes, str)) else np.asarray(array)
    if not is_text(array.dtype):
        return array.tolist()

    def one(value: Any) -> Any:
        data = value.encode() if isinstance(value, str) else bytes(value)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(data).decode("ascii")}

    return np.vectorize(one, otypes=[object])(np.asarray(array, dtype=object)).tolist() if array.size else []


def from_json(value: Any) -> np.ndarray:
    """An answer from TF Serving's JSON back to numpy (`{"b64": ...}` strings as bytes)."""
    def decode(item: Any) -> Any:
        if isinstance(item, dict) and set(item) == {"b64"}:
            return base64.b64decode(item["b64"])
        if isinstance(item, list):
            return [decode(v) for v in item]
        return item.encode() if isinstance(item, str) else item

    decoded = decode(value)
    array = np.asarray(decoded, dtype=object)
    if array.size and any(isinstance(v, (bytes, bytearray)) for v in array.reshape(-1)):
        return array
    return np.asarray(decoded)


#: The server's default body limit (images run with it): the columnar request, which carries every example
#: at once, must stay under it.
SERVER_MAX_BODY_BYTES = DEFAULT_MAX_BODY_BYTES


def fit_body(inputs: dict[str, np.ndarray], limit: int = SERVER_MAX_BODY_BYTES) -> int:
    """How many examples fit one columnar JSON request under `limit` (224x224x3 images take ~3 MB of JSON
    each), at least one."""
    per_example = sum(len(json.dumps(json_value(v[:1]))) for v in inputs.values()) + 2
    rows = min(len(v) for v in inputs.values())
    return max(1, min(rows, int(0.8 * limit) // per_example))


def _http(url: str, body: bytes | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")
    except urllib.error.URLError as error:  # refused, reset, broken pipe: the server's problem, said in one line
        raise SmokeFailed(f"{url}: no answer ({error.reason})") from None


#: Where a serving image says it is ready: 200 once the model is loaded and warmed (Open Inference Protocol).
READY_PATH = "/v2/health/ready"


#: What a crashed process leaves in a container's log: QEMU on an emulated fault, the guard naming the signal
#: its command died of, the kernel's words through a shell, Python's own fatal error.
CRASH_MARKS = ("uncaught target signal", "died of signal", "Segmentation fault", "Illegal instruction",
               "Fatal Python error")


def stopped_or_crashed(running: Any, lines: int = 3) -> str | None:
    """None while the container may still come up; else why it will not, with its last log lines: it exited,
    or its log shows a crash and its healthcheck no longer says "starting" (a crashed process that did not
    exit would otherwise be waited on until the deadline, minutes under emulation)."""
    dead = running.exited(lines)
    if dead is not None:
        return dead
    tail = [line for line in running.logs(tail=max(lines * 4, 20)).strip().splitlines() if line.strip()]
    if any(mark in line for line in tail for mark in CRASH_MARKS) and running.health() not in ("starting", "healthy"):
        return f"crashed while starting ({running.health()}): {' | '.join(tail[-lines:])}"
    return None


def wait_healthy(
    base_url: str, alive: Callable[[], str | None], timeout_s: float = 90.0, path: str = READY_PATH
) -> float:
    """Seconds until `path` answers 200; SmokeFailed when the container exits or time runs out."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout_s:
        dead = alive()
        if dead is not None:
            verb = "crashed" if dead.startswith("crashed") else "exited"
            raise SmokeFailed(f"the container {verb} before answering: {dead.removeprefix('crashed ')}")
        try:
            status, _ = _http(f"{base_url}{path}", timeout=2.0)
            if status == 200:
                return time.monotonic() - start
            last = f"HTTP {status}"
        except (OSError, ValueError, SmokeFailed) as error:  # not up yet
            last = str(error)
        time.sleep(0.25)
    raise SmokeFailed(f"no healthy answer from {base_url}{path} within {timeout_s:.0f} s (last: {last})")


def compare(got: np.ndarray, want: np.ndarray, dtype: str, output: str = "") -> float:
    """Largest difference; SmokeFailed beyond float rounding (float), or for any difference at all in an
    answer that is not a float (integer ids, booleans, strings: the same file must give the same answer)."""
    where = f"output {output!r}: " if output else ""
    if got.shape != want.shape:
        raise SmokeFailed(f"{where}answer has shape {list(got.shape)}, the local interpreter's {list(want.shape)}")
    if is_text(dtype) or is_text(want.dtype):
        same = bool(np.all(as_bytes(got) == as_bytes(want)))
        if not same:
            raise SmokeFailed(f"{where}string answers differ from the local runtime's")
        return 0.0
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    kind = np.dtype(dtype).kind
    ok = bool(np.array_equal(got, want)) if kind in "iub" else bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))
    if not ok:
        raise SmokeFailed(f"{where}answers differ from the local interpreter's (max |diff| {diff:.3g})")
    return diff


#: Runtimes whose answers approximate the served float file's (bf16 compute): judged by agreement, not bit for
#: bit.
APPROXIMATE_RUNTIMES = registry.APPROXIMATE
#: Smallest top-1 agreement with a reference (the fp32 interpreter, or the original model) a served
#: classification output must reach on the smoke rows.
MIN_AGREEMENT = 0.9
#: Largest relative error (L2 of the difference over L2 of the reference) a served regression output may have
#: against the original model on the smoke rows.
MAX_RELATIVE_ERROR = 0.1


def _is_scores(array: np.ndarray) -> bool:
    """One row of several class scores per example (what top-1 agreement is meaningful for)."""
    return array.ndim == 2 and array.shape[1] > 1 and np.dtype(array.dtype).kind == "f"


def fidelity(output: str, got: np.ndarray, original: np.ndarray) -> Fidelity:
    """The output's metric against the original model: top-1 agreement for class scores, exact agreement for
    integer answers, relative error otherwise (regression, embeddings)."""
    if got.shape != original.shape:
        raise SmokeFailed(f"output {output!r}: answer has shape {list(got.shape)}, the original model's "
                          f"{list(original.shape)}: the served signature changed")
    if is_text(original.dtype) or is_text(got.dtype):
        got, original = as_bytes(got), as_bytes(original)
        value = float(np.mean(np.all((got == original).reshape(len(got), -1), axis=1))) if len(got) else 1.0
        return Fidelity(output, "exact agreement", value, value >= MIN_AGREEMENT)
    if _is_scores(original):
        value = float(np.mean(np.argmax(got, axis=1) == np.argmax(original, axis=1)))
        return Fidelity(output, "top-1 agreement", value, value >= MIN_AGREEMENT)
    if np.dtype(original.dtype).kind in "iub":
        value = float(np.mean(np.all((got == original).reshape(len(got), -1), axis=1))) if len(got) else 1.0
        return Fidelity(output, "exact agreement", value, value >= MIN_AGREEMENT)
    reference = float(np.linalg.norm(original.astype(np.float64)))
    error = float(np.linalg.norm(got.astype(np.float64) - original.astype(np.float64)))
    value = error / reference if reference > 0 else error
    return Fidelity(output, "relative error", value, value <= MAX_RELATIVE_ERROR)


def compare_approximate(got: np.ndarray, want: np.ndarray, output: str = "") -> tuple[float, float]:
    """(max |diff|, top-1 agreement) of answers computed at a lower precision (bf16) vs the same file computed
    exactly here; SmokeFailed below the floor.

    Bit-for-bit equality cannot hold at another precision, so the honest check is the output's metric: the same
    class for class scores, a small relative error otherwise.
    """
    judged = fidelity(output or "output", got, want)  # refuses a changed shape first
    numeric = not (is_text(got.dtype) or is_text(want.dtype))  # strings are judged by agreement alone
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size and numeric else 0.0
    if not judged.passed:
        raise SmokeFailed(f"answers of {judged.output!r} vs the same file at f32 here: {judged.text()} "
                          f"(max |diff| {diff:.3g})")
    return diff, judged.value if judged.metric != "relative error" else 1.0


def _rows_request(inputs: dict[str, np.ndarray], i: int, named: bool) -> bytes:
    """Row form with one instance, as most clients send: a plain value for one-input models, an object by
    input name otherwise."""
    if named:
        return json.dumps({"instances": [{k: json_value(v[i]) for k, v in inputs.items()}]}).encode()
    (value,) = inputs.values()
    return json.dumps({"instances": [json_value(value[i])]}).encode()


def _row_answer(body: Any, names: list[str]) -> dict[str, np.ndarray]:
    predictions = body["predictions"]
    if len(names) == 1:
        return {names[0]: from_json(predictions)}
    return {name: from_json([row[name] for row in predictions]) for name in names}


def _columnar_answer(body: Any, names: list[str]) -> dict[str, np.ndarray]:
    outputs = body["outputs"]
    if isinstance(outputs, dict):
        return {name: from_json(outputs[name]) for name in names}
    return {names[0]: from_json(outputs)}


def reference_backend(artifact: Artifact, runtime: str) -> Any:
    """What the served answers are checked against, run here on the same artifact: TensorFlow for what runs on
    TensorFlow (a SavedModel, a Select-TF-ops .tflite), OpenVINO at f32 for its IR (the IR needs OpenVINO; its
    int8 computes as the file says), else the LiteRT interpreter on the .tflite. bf16 runtimes are checked
    against f32."""
    from builder.model.backend import LiteRTBackend
    from builder.model.create import create_backend

    if registry.on_tensorflow(runtime) or artifact.model_path.is_dir():
        return create_backend(registry.TENSORFLOW_DEFAULT, artifact.model_path, 1)
    if artifact.ir:
        return create_backend(registry.IR_DEFAULT, artifact.model_path, 1)
    return LiteRTBackend(artifact.model_path)


def served_signature(backend: Any, name: str | None) -> Any:
    """The signature requests without `signature_name` get: the one named, else serving_default, else the first."""
    signatures = backend.signatures
    if name and name in signatures:
        return signatures[name]
    return signatures.get("serving_default") or next(iter(signatures.values()))


def check_server(base_url: str, artifact: Artifact, model_name: str, version: int, count: int = 16,
                 grpc_address: tuple[str, int] | None = None, runtime: str = "litert",
                 signature_name: str | None = None) -> SmokeResult:
    """Query a running server as a client of the original model would, and judge every answer twice.

    Requests carry the original model's held-out rows in its own input dtypes (float pixels, int token ids,
    strings, several named inputs), in TF Serving's row form (one instance a request) and columnar form, then
    once over TF Serving's gRPC API (`tensor_content`, when `grpc_address` is given) and the Open Inference
    Protocol (`/v2/models/<m>/infer`, binary tensors). Each answer must match the same artifact run here
    (`reference_backend`: within float rounding; bf16 runtimes by the output's metric), and each
    output is judged against the ORIGINAL model's answers with its metric: top-1 agreement for class scores,
    exact agreement for integers and strings, relative error for regression.
    """
    status, health = _http(f"{base_url}/healthz")
    approximate = status == 200 and health.get("runtime") in APPROXIMATE_RUNTIMES
    local = reference_backend(artifact, runtime)
    signature = served_signature(local, signature_name)
    inputs, samples = smoke_inputs(artifact, signature, count)
    keep = fit_body(inputs)
    inputs = {k: v[:keep] for k, v in inputs.items()}
    rows = min(len(v) for v in inputs.values())
    names = [spec.name for spec in signature.outputs]
    dtypes = {spec.name: spec.dtype for spec in signature.outputs}
    per_row = [local.predict(signature.name, {k: v[i : i + 1] for k, v in inputs.items()}) for i in range(rows)]
    want = {name: np.concatenate([p[name] for p in per_row]) for name in names}
    worst, agreements = 0.0, []

    def check(got: dict[str, np.ndarray]) -> None:
        nonlocal worst
        for name in names:
            answer = as_dtype(np.asarray(got[name]), dtypes[name])
            if approximate:
                diff, agree = compare_approximate(answer, want[name], name)
                agreements.append(agree)
            else:
                diff = compare(answer, want[name], dtypes[name], name)
            worst = max(worst, diff)

    status, body = _http(f"{base_url}/v1/models/{model_name}")
    if status != 200 or body.get("model_version_status", [{}])[0].get("state") != "AVAILABLE":
        raise SmokeFailed(f"model status answered HTTP {status}: {body}")
    requests, answers = 1, []
    named = len(inputs) > 1
    for i in range(rows):
        status, body = _http(f"{base_url}/v1/models/{model_name}/versions/{version}:predict",
                             _rows_request(inputs, i, named))
        requests += 1
        if status != 200:
            raise SmokeFailed(f"predict answered HTTP {status}: {body}")
        answers.append(_row_answer(body, names))
    row_answers = {name: np.concatenate([a[name] for a in answers]) for name in names}
    check(row_answers)
    payload = json.dumps({"signature_name": signature.name,
                          "inputs": {k: json_value(v) for k, v in inputs.items()}})
    status, body = _http(f"{base_url}/v1/models/{model_name}:predict", payload.encode())  # columnar, every row
    requests += 1
    if status != 200:
        raise SmokeFailed(f"columnar predict answered HTTP {status}: {body}")
    check(_columnar_answer(body, names))
    protocols = ["REST row", "REST columnar"]
    try:
        if grpc_address is not None:
            check(check_grpc(*grpc_address, model_name, version, inputs))
            requests += 1
            protocols.append("gRPC")
        check(check_v2(base_url, model_name, inputs))
        requests += 1
        protocols.append("v2")
    except ProtocolCheckError as error:
        raise SmokeFailed(str(error)) from None
    judged: list[Fidelity] = []
    if samples is not None:
        for name in names:
            if name in samples.expected:
                judged.append(fidelity(name, as_dtype(row_answers[name], dtypes[name]),
                                       samples.expected[name][:rows]))
    failed = [f for f in judged if not f.passed]
    if failed:
        raise SmokeFailed("the served answers drifted from the original model's: "
                          + ", ".join(f.text() for f in failed))
    note = ""
    constant = [n for n in names if want[n].size and np.dtype(want[n].dtype).kind in "fiu"  # np.ptp refuses bools
                and float(np.max(np.ptp(want[n].reshape(rows, -1), axis=0))) == 0.0]
    if constant:
        note = (f"the reference answers of {', '.join(constant)} are the same for every row (random weights?): "
                "agreement says little about quality there")
    reference = ("the same model on TensorFlow here" if registry.on_tensorflow(runtime) or artifact.model_path.is_dir()
                 else "the same IR on OpenVINO here" if artifact.ir else "the local interpreter")
    return SmokeResult(requests, rows, worst, tuple(judged), 0.0, min(agreements) if agreements else None, note,
                       tuple(protocols), reference)


def native_platform() -> str:
    """This machine's platform in the words images use (`linux/amd64`, `linux/arm64`)."""
    import platform

    return "linux/arm64" if platform.machine() in ("aarch64", "arm64") else "linux/amd64"


def smoke_test(engine: Engine, plan: ServePlan, artifact: Artifact, say: Say) -> SmokeResult:
    """Run the image, wait for health, compare answers, stop it; SmokeFailed on any problem."""
    emulated = plan.platform != native_platform()
    say(f"smoke: starting {plan.tag}" + (f" ({plan.platform} under emulation: slower)" if emulated else ""))
    from builder.packaging.plan import smoke_gpus

    gpus = smoke_gpus(engine, plan)  # a CUDA image runs with the GPUs where the engine can pass them in
    if gpus.line:
        say(gpus.line)
    with engine.start(plan.tag, ports=(plan.port, GRPC_PORT), platform=plan.platform, gpus=gpus.passed,
                      env=gpus.env) as running:
        url = running.url(plan.port)
        startup = wait_healthy(url, lambda: stopped_or_crashed(running), timeout_s=900.0 if emulated else
                               180.0 if plan.kind == "tensorflow" else 90.0)
        say(f"smoke: ready on {url} after {startup:.1f} s")
        result = check_server(url, artifact, plan.model_name, plan.version,
                              grpc_address=(running.host, running.host_port(GRPC_PORT)), runtime=plan.runtime,
                              signature_name=plan.signature)
        code = running.stop(timeout=60.0 if emulated else 10.0)
    if code not in (0, 143):
        if not emulated:
            raise SmokeFailed(f"the server did not stop cleanly (exit {code})")
        # Under QEMU user-mode emulation the server's threads may not wind down before the deadline; every answer
        # was already checked, so say so instead of failing an image that native hardware runs differently.
        result = dataclasses.replace(result, note="; ".join(filter(None, (
            result.note, f"under emulation it did not exit within 60 s of SIGTERM (exit {code})"))))
    return dataclasses.replace(result, startup_s=startup)
