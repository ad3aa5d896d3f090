"""One generated model through tfsmith as a user runs it: `tfsmith optimize` -> `tfsmith serve` (a real server
process) -> clients over REST (rows and columns), gRPC (tensorflow-serving-api's stubs) and the Open Inference
Protocol v2, each answer compared with the ORIGINAL model's (recorded by the builder from the saved file), and
the metadata compared with the original's contract: names, dtypes, shapes, every signature.

Shared by the e2e test (which asserts) and the sweep (which tabulates): `run_model` never raises for a tfsmith
failure; it returns an `Outcome` whose `failure` is one line (the class of the failure, the part a fix would
change) and whose `detail` keeps the rest. Every process is started with its own deadline; nothing here measures
time.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.modelgen.catalog import ModelSpec

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
PYTHON = REPO / ".venv" / "bin" / "python"
#: what optimize builds for the generator: the float .tflite and the SavedModel (correctness, not speed)
LIGHT_RECIPE = 'name = "light"\n[quantization]\nmodes = []\n[export]\nxla = false\n'
LATENCY_RUNS = "20"
BUILD_DEADLINE_S = 1800
OPTIMIZE_DEADLINE_S = 900
START_DEADLINE_S = 240
MODEL_NAME = "m"
#: the folder of `run_model`'s work where optimize writes
OPTIMIZED = "optimized"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}

#: contract dtype -> TensorFlow's DataType name and the v2 datatype (the protocols' own spellings, written here,
#: not taken from tfsmith, so a wrong mapping there shows up)
DT = {"float32": "DT_FLOAT", "float16": "DT_HALF", "float64": "DT_DOUBLE", "int32": "DT_INT32", "int64": "DT_INT64",
      "uint8": "DT_UINT8", "int8": "DT_INT8", "bool": "DT_BOOL", "string": "DT_STRING", "int16": "DT_INT16",
      "uint16": "DT_UINT16", "uint32": "DT_UINT32", "uint64": "DT_UINT64", "bfloat16": "DT_BFLOAT16",
      "complex64": "DT_COMPLEX64", "complex128": "DT_COMPLEX128"}
V2 = {"float32": "FP32", "float16": "FP16", "float64": "FP64", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
      "int8": "INT8", "bool": "BOOL", "string": "BYTES", "int16": "INT16", "uint16": "UINT16", "uint32": "UINT32",
      "uint64": "UINT64", "bfloat16": "BF16"}


@dataclass(frozen=True)
class Built:
    """A generated model on disk: its file, DATA, the original's contract and answers."""

    spec: ModelSpec
    model: Path
    data: Path
    contract: dict[str, Any]
    reference: Path
    labels: tuple[str, ...]
    build_error: str | None = None

    def answers(self) -> dict[str, dict[str, dict[str, np.ndarray]]]:
        """signature -> {"x": inputs, "y": the original's outputs} on the probe rows."""
        out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
        with np.load(self.reference) as ref:
            for key in ref.files:
                part, signature, name = key.split("/", 2)
                value = ref[key]
                if value.dtype.kind == "V" and value.dtype.itemsize == 2:  # numpy saves bfloat16 as 2-byte void
                    import ml_dtypes

                    value = value.view(ml_dtypes.bfloat16)
                out.setdefault(signature, {"x": {}, "y": {}})[part][name] = value
        return out


@dataclass
class Outcome:
    """What became of one model: `stage` reached (build, optimize, serve, metadata, answers, done), the one-line
    `failure` (None when it went through) and the text behind it."""

    spec: ModelSpec
    optimized: bool = False
    served: bool = False
    failure: str | None = None
    detail: str = ""
    repro: str = ""
    checks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None


# ------------------------------------------------------------------------------------------------ build


def build_models(specs: list[ModelSpec], out: Path) -> dict[str, Built]:
    """Build every spec in one subprocess (TensorFlow, Keras 3 and tf_keras stay out of the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    specs_path = out / "specs.json"
    specs_path.write_text(json.dumps([s.as_dict() for s in specs]))
    made = subprocess.run([str(PYTHON), "-m", "tests.modelgen.build", str(out), str(specs_path)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=BUILD_DEADLINE_S)
    built: dict[str, Built] = {}
    for spec in specs:
        error_file = out / f"{spec.id}.build-error.txt"
        entry_file = out / f"{spec.id}.contract.json"
        if error_file.exists() or not entry_file.exists():
            error = error_file.read_text() if error_file.exists() else f"no output (builder: {made.stderr[-2000:]})"
            built[spec.id] = Built(spec, Path(), Path(), {}, Path(), (), build_error=error)
            continue
        entry = json.loads(entry_file.read_text())
        built[spec.id] = Built(spec, Path(entry["model"]), Path(entry["data"]), entry["contract"],
                               out / f"{spec.id}.reference.npz", tuple(entry["labels"]))
    return built


# ------------------------------------------------------------------------------------------------ optimize


def optimize_command(built: Built, out: Path, recipe: Path | str) -> list[str]:
    return [str(TFSMITH), "optimize", str(built.model), "--data", str(built.data), "--recipe", str(recipe),
            "--out", str(out), "--latency-runs", LATENCY_RUNS]


def one_line(text: str) -> str:
    """The failure's one line: tfsmith's own `tfsmith: error:` line, else the last line of a traceback, with
    the numbers that vary between runs (ports, temp paths, addresses) left as they are for the reader."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("tfsmith: error:"):
            return line
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^[A-Za-z_.]+(Error|Exception)\b", lines[i]):
            if lines[i].endswith(":"):  # TensorFlow's "Graph execution error:": the cause is a later line
                cause = next((c for c in lines[i + 1:] if not c.startswith(("Detected at node", "<stack", "[[", "File"))),
                             "")
                return f"{lines[i]} {cause}".strip()
            return lines[i]
    return lines[-1] if lines else "(no output)"


# ------------------------------------------------------------------------------------------------ serve


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`tfsmith serve OUT` on free loopback ports; its output kept in a log for the failure's detail."""

    def __init__(self, folder: Path) -> None:
        import httpx

        self.http = httpx.Client(timeout=60.0)
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder.parent / "serve.log"  # beside the optimized folder, so it goes when the trial's folder does
        self._out = self.log.open("w")
        self.process = subprocess.Popen([str(TFSMITH), "serve", str(folder), "--model-name", MODEL_NAME, "--port",
                                         str(self.port), "--grpc-port", str(self.grpc_port)], stdout=self._out,
                                        stderr=subprocess.STDOUT, cwd=REPO, env=ENV)
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited ({self.process.returncode}): {one_line(self.output())}")
            try:
                if self.http.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"server not ready in {START_DEADLINE_S} s: {one_line(self.output())}")

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        finally:
            self._out.close()
            self.http.close()


# ------------------------------------------------------------------------------------------------ wire forms


def to_json(values: np.ndarray) -> Any:
    """Values as a JSON client sends them: strings as text, or {"b64": ...} where they are not UTF-8."""
    if values.dtype.kind == "S":
        def one(v: bytes) -> Any:
            try:
                return v.decode("utf-8")
            except UnicodeDecodeError:
                return {"b64": base64.b64encode(v).decode()}
        return np.vectorize(one, otypes=[object])(values).tolist() if values.size else values.tolist()
    if values.dtype.kind == "c":  # JSON has no complex numbers: (real, imaginary) pairs, which a server refuses
        return np.stack([values.real, values.imag], axis=-1).tolist()
    return values.tolist()


def from_json(value: Any, like: np.ndarray) -> np.ndarray:
    """A JSON answer as an array of the original's dtype (strings as bytes) for the comparison."""
    if like.dtype.kind in "SO":
        def one(v: Any) -> bytes:
            return base64.b64decode(v["b64"]) if isinstance(v, dict) else str(v).encode("utf-8")
        flat = np.array(value, dtype=object)
        return np.vectorize(one, otypes=[object])(flat) if flat.size else flat
    return np.asarray(value)


def signature_def_from_rest(doc: dict[str, Any]) -> dict[str, Any]:
    """REST metadata's signature_def map as {signature: {"inputs": [...], "outputs": [...]}} in contract form."""
    sigs = doc["metadata"]["signature_def"]["signature_def"]
    out = {}
    for key, sig in sigs.items():
        out[key] = {part: sorted(({"name": name, "dtype": t.get("dtype"),
                                   "shape": [None if int(d["size"]) < 0 else int(d["size"])
                                             for d in t.get("tensor_shape", {}).get("dim", [])]}
                                  for name, t in sig.get(part, {}).items()), key=lambda s: s["name"])
                    for part in ("inputs", "outputs")}
    return out


def contract_as(contract: dict[str, Any], spelling: dict[str, str]) -> dict[str, Any]:
    """The original's contract with dtypes spelled as a protocol spells them."""
    return {key: {part: [{"name": s["name"], "dtype": spelling.get(s["dtype"], s["dtype"]), "shape": s["shape"]}
                         for s in sig[part]] for part in ("inputs", "outputs")} for key, sig in contract.items()}


def grpc_metadata(port: int) -> dict[str, Any]:
    import grpc
    from tensorflow_serving.apis import get_model_metadata_pb2, prediction_service_pb2_grpc

    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = MODEL_NAME
    request.metadata_field.append("signature_def")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).GetModelMetadata(request, timeout=60)
    sigs = get_model_metadata_pb2.SignatureDefMap()
    reply.metadata["signature_def"].Unpack(sigs)
    from tensorflow.core.framework import types_pb2

    out = {}
    for key, sig in sigs.signature_def.items():
        out[key] = {part: sorted(({"name": name, "dtype": types_pb2.DataType.Name(t.dtype),
                                   "shape": [None if d.size < 0 else int(d.size) for d in t.tensor_shape.dim]}
                                  for name, t in getattr(sig, part).items()), key=lambda s: s["name"])
                    for part in ("inputs", "outputs")}
    return out


def grpc_predict(port: int, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL_NAME
    request.model_spec.signature_name = signature
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)
    return {k: tf.make_ndarray(v) for k, v in reply.outputs.items()}


# ------------------------------------------------------------------------------------------------ comparing


def agree(got: np.ndarray, want: np.ndarray, task: str, gate: dict[str, float]) -> str | None:
    """None when `got` answers as the original within the gate of the output's task, else why not (one line).

    Non-float answers (strings, booleans, ids, a quantized file's integers) must be equal. Float answers are
    judged as tfsmith's gate judges an artifact (`builder.optimize.quality.output_metric`): top-1 agreement for
    classification, the 0.5 threshold for binary, the error relative to the original's spread for regression.
    """
    from builder.optimize.quality import output_metric
    from builder.report import OutputSpec

    want = np.asarray(want)
    got = np.asarray(got)
    if got.size != want.size:
        return f"shape {list(got.shape)}, the original's {list(want.shape)}"
    got = got.reshape(want.shape)
    if want.dtype.kind not in "fc":
        if want.dtype.kind == "S":
            same = [bytes(a) == bytes(b) for a, b in zip(got.reshape(-1).tolist(), want.reshape(-1).tolist())]
        else:
            same = list((got.astype(want.dtype) == want).reshape(-1))
        return None if all(same) else f"{sum(not s for s in same)} of {len(same)} values differ (exact)"
    if want.dtype.kind == "c":  # both parts: the error relative to the original's spread of either
        scale = max(float(np.std(np.concatenate([want.real.ravel(), want.imag.ravel()]))), 1e-12)
        error = float(np.sqrt(np.mean(np.abs(got.astype(np.complex128) - want) ** 2))) / scale
        return None if error <= gate["max_relative_error"] else f"relative_error {error:.4g} (complex)"
    got = got.astype(np.float64)
    if not np.all(np.isfinite(got)):
        return "non-finite values"
    spec = OutputSpec(name="_", dtype=str(want.dtype), shape=tuple([None, *want.shape[1:]]), task=task)
    metric = output_metric(spec, got, want.astype(np.float64), None,
                           max_accuracy_drop=gate["max_accuracy_drop"], max_relative_error=gate["max_relative_error"])
    return None if metric.passed else f"{metric.metric} {metric.value:.4g} > {metric.limit:.4g} ({task})"


def compare(what: str, got: dict[str, np.ndarray], want: dict[str, np.ndarray], tasks: dict[str, str],
            gate: dict[str, float]) -> list[str]:
    problems = []
    if set(got) != set(want):
        return [f"{what}: outputs {sorted(got)}, the original's {sorted(want)}"]
    for name, value in want.items():
        why = agree(got[name], value, tasks.get(name, "regression"), gate)
        if why:
            problems.append(f"{what}: {name}: {why}")
    return problems


def ask_everything(server: Server, built: Built, tasks: dict[str, str], gate: dict[str, float]) -> list[str]:
    """Every protocol, every signature, against the original; returns the problems (empty: all agree).

    A model with a fixed batch (a stateful RNN's 1) is asked a row per request; the answers are compared once all
    rows are in, so the gate judges them over the rows (one row has no spread to measure an error against)."""
    problems: list[str] = []
    answers = built.answers()
    for signature, pair in answers.items():
        x, want = pair["x"], pair["y"]
        n = len(next(iter(x.values())))
        step = built.spec.fixed_batch or n
        got: dict[str, list[dict[str, np.ndarray]]] = {}
        for start in range(0, n, step):
            part = {k: v[start:start + step] for k, v in x.items()}
            expect = {k: v[start:start + step] for k, v in want.items()}
            where = f"[{signature}] rows {start}..{start + len(next(iter(part.values()))) - 1}"
            for form, answer in ask_once(server, signature, part, expect, where).items():
                if isinstance(answer, str):
                    problems.append(answer)
                else:
                    got.setdefault(form, []).append(answer)
        for form, chunks in got.items():
            if len(chunks) * step < n:
                continue  # a chunk was refused: already reported
            joined = {k: np.concatenate([np.asarray(c[k]).reshape(-1, *want[k].shape[1:]) for c in chunks])
                      for k in chunks[0] if all(k in c for c in chunks)}
            problems += compare(f"{form} [{signature}]", joined, want, tasks, gate)
    return problems


def ask_once(server: Server, signature: str, part: dict[str, np.ndarray], expect: dict[str, np.ndarray],
             where: str) -> dict[str, dict[str, np.ndarray] | str]:
    """One request per protocol: form -> the answers by output name, or one line saying why there are none."""
    import httpx

    out: dict[str, dict[str, np.ndarray] | str] = {}
    rows = len(next(iter(part.values())))
    body_rows = {"signature_name": signature,
                 "instances": [{k: to_json(v[i]) for k, v in part.items()} for i in range(rows)]}
    body_cols = {"signature_name": signature, "inputs": {k: to_json(v) for k, v in part.items()}}
    for form, body in (("REST rows", body_rows), ("REST columns", body_cols)):
        try:
            reply = server.http.post(f"{server.url}/v1/models/{MODEL_NAME}:predict", json=body)
        except httpx.HTTPError as error:
            out[form] = f"{form} {where}: {type(error).__name__}: {error}"
            continue
        if reply.status_code != 200:
            out[form] = f"{form} {where}: HTTP {reply.status_code}: {reply.text[:300]}"
            continue
        doc = reply.json()
        if form == "REST rows":
            predictions = doc.get("predictions")
            if len(expect) == 1 and not (predictions and isinstance(predictions[0], dict)):
                out[form] = {next(iter(expect)): from_json(predictions, next(iter(expect.values())))}
            else:
                out[form] = {k: from_json([r[k] for r in predictions], v) for k, v in expect.items()
                             if predictions and k in predictions[0]}
        else:
            outputs = doc.get("outputs")
            out[form] = ({k: from_json(outputs[k], v) for k, v in expect.items() if k in outputs}
                         if isinstance(outputs, dict) else
                         {next(iter(expect)): from_json(outputs, next(iter(expect.values())))})
    try:
        out["gRPC"] = grpc_predict(server.grpc_port, signature, part)
    except Exception as error:  # a gRPC status is a finding, reported in one line
        details = getattr(error, "details", None)
        out["gRPC"] = f"gRPC {where}: {type(error).__name__}: {details() if callable(details) else error}"
    if signature == "serving_default":  # v2 serves the default signature
        out["v2"] = ask_v2(server, part, expect, where)
    return out


def ask_v2(server: Server, part: dict[str, np.ndarray], expect: dict[str, np.ndarray],
           where: str) -> dict[str, np.ndarray] | str:
    inputs = []
    for name, value in part.items():
        dtype = "string" if value.dtype.kind == "S" else str(value.dtype)
        data = (np.char.decode(value, "utf-8").reshape(-1).tolist() if dtype == "string"
                else value.reshape(-1).tolist())
        inputs.append({"name": name, "shape": list(value.shape), "datatype": V2[dtype], "data": data})
    reply = server.http.post(f"{server.url}/v2/models/{MODEL_NAME}/infer", json={"inputs": inputs})
    if reply.status_code != 200:
        return f"v2 {where}: HTTP {reply.status_code}: {reply.text[:300]}"
    return {out["name"]: from_json(out["data"], expect[out["name"]]).reshape(out["shape"])
            for out in reply.json().get("outputs", []) if out["name"] in expect}


def metadata_problems(server: Server, built: Built) -> list[str]:
    """The served metadata over REST, gRPC and v2 against the original's contract (every signature)."""
    problems = []
    want_dt = contract_as(built.contract, DT)
    rest = signature_def_from_rest(server.http.get(f"{server.url}/v1/models/{MODEL_NAME}/metadata").json())
    for source, served in (("REST metadata", rest), ("gRPC metadata", grpc_metadata(server.grpc_port))):
        for key, sig in want_dt.items():
            if key not in served:
                problems.append(f"{source}: no signature {key!r} (served: {sorted(served)})")
            elif served[key] != sig:
                problems.append(f"{source} [{key}]: {json.dumps(served[key])} != the original's {json.dumps(sig)}")
    v2 = server.http.get(f"{server.url}/v2/models/{MODEL_NAME}").json()
    want = contract_as(built.contract, {**V2, "complex64": "COMPLEX64", "complex128": "COMPLEX128"})["serving_default"]
    for part in ("inputs", "outputs"):
        got = sorted(({"name": t["name"], "dtype": t["datatype"], "shape": [None if d < 0 else d for d in t["shape"]]}
                      for t in v2.get(part, [])), key=lambda s: s["name"])
        if got != want[part]:
            problems.append(f"v2 metadata {part}: {json.dumps(got)} != the original's {json.dumps(want[part])}")
    return problems


# ------------------------------------------------------------------------------------------------ one model


def repro_command(built: Built, out: Path, recipe: Path | str) -> str:
    spec = built.spec
    return (f"python -m tests.benchmarks.model_sweep --seed {spec.seed} --start {spec.index} --count 1 --details "
            f"--keep /tmp/modelgen-{spec.id}   (optimize alone: " + " ".join(optimize_command(built, out, recipe)) + ")")


def recipe_for(work: Path, recipe: str) -> Path | str:
    """`--recipe` for optimize: "auto" as it is, else the recipe text written into `work`."""
    if recipe == "auto":
        return recipe
    path = work / "recipe.toml"
    path.write_text(recipe)
    return path


def run_model(built: Built, work: Path, recipe_text: str = LIGHT_RECIPE, serve: bool = True) -> Outcome:
    """optimize -> serve -> every client; the outcome, never an exception for what tfsmith does. `recipe_text`:
    a recipe's TOML, or "auto"; `serve=False` stops after optimize (its report is in `work`/optimized)."""
    from builder.report import Report

    outcome = Outcome(built.spec)
    work.mkdir(parents=True, exist_ok=True)
    recipe = recipe_for(work, recipe_text)
    out = work / OPTIMIZED
    outcome.repro = repro_command(built, out, recipe)
    if built.build_error:
        outcome.failure = "build: " + one_line(built.build_error)
        outcome.detail = built.build_error
        return outcome
    done = subprocess.run(optimize_command(built, out, recipe), cwd=work, env=ENV, capture_output=True, text=True,
                          timeout=OPTIMIZE_DEADLINE_S)
    if done.returncode != 0 or "Traceback" in done.stdout + done.stderr:
        outcome.failure = f"optimize exit {done.returncode}: {one_line(done.stderr + chr(10) + done.stdout)}"
        outcome.detail = (done.stdout + done.stderr)[-6000:]
        return outcome
    outcome.optimized = True
    if not serve:
        return outcome
    report = Report.load(out)
    tasks = {o.name: o.task for o in report.contract.outputs}
    gate = {"max_accuracy_drop": report.gate.max_accuracy_drop, "max_relative_error": report.gate.max_relative_error}
    try:
        server = Server(out)
    except RuntimeError as error:
        outcome.failure = f"serve: {error}"
        return outcome
    try:
        problems = metadata_problems(server, built)
        outcome.checks.append("metadata")
        problems += ask_everything(server, built, tasks, gate)
        outcome.checks.append("answers")
        if problems:
            outcome.failure = "served: " + problems[0]
            outcome.detail = "\n".join(problems) + f"\nchosen: {report.chosen} on {report.chosen_runtime}\n" + \
                server.output()[-3000:]
        else:
            outcome.served = True
    except Exception as error:  # a client that cannot even ask is a finding too, kept to one line
        outcome.failure = f"served: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        outcome.detail = server.output()[-3000:]
    finally:
        server.stop()
    return outcome


# ------------------------------------------------------------------------------------------------ lattice cells


def build_cells(specs: list[Any], out: Path) -> dict[str, Built]:
    """Build every cell model (`tests.modelgen.cells`) in one subprocess; the same files as `build_models`."""
    out.mkdir(parents=True, exist_ok=True)
    specs_path = out / "cells.json"
    specs_path.write_text(json.dumps([s.as_dict() for s in specs]))
    made = subprocess.run([str(PYTHON), "-m", "tests.modelgen.cells", str(out), str(specs_path)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=BUILD_DEADLINE_S)
    built: dict[str, Built] = {}
    for spec in specs:
        error_file, entry_file = out / f"{spec.id}.build-error.txt", out / f"{spec.id}.contract.json"
        if error_file.exists() or not entry_file.exists():
            error = error_file.read_text() if error_file.exists() else f"no output (builder: {made.stderr[-2000:]})"
            built[spec.id] = Built(spec, Path(), Path(), {}, Path(), (), build_error=error)
            continue
        entry = json.loads(entry_file.read_text())
        built[spec.id] = Built(spec, Path(entry["model"]), Path(entry["data"]), entry["contract"],
                               out / f"{spec.id}.reference.npz", ())
    return built


@dataclass(frozen=True)
class Reply:
    """One protocol's reply: the answers by output name, or the refusal's status and its message."""

    answers: dict[str, np.ndarray] | None
    status: str = ""
    message: str = ""


def ask_protocol(server: Server, protocol: str, x: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> Reply:
    """`x` (each input as declared: `x` with its batch, a scalar as a 0-d array) as a client of `protocol` sends it."""
    import httpx

    from tests.modelgen.lattice import GRPC, REST_COLUMNS, REST_ROWS, V2 as V2_PROTOCOL

    if protocol in (REST_ROWS, REST_COLUMNS):
        if protocol == REST_ROWS:  # every instance one row of every input: a scalar repeated in each
            rows = len(x["x"]) if np.ndim(x["x"]) else 1
            body: dict[str, Any] = {"instances": [{k: to_json(v[i] if np.ndim(v) and k == "x" else v)
                                                   for k, v in x.items()} for i in range(rows)]}
        else:
            body = {"inputs": {k: to_json(v) for k, v in x.items()}}
        try:
            reply = server.http.post(f"{server.url}/v1/models/{MODEL_NAME}:predict", json=body)
        except httpx.HTTPError as error:
            return Reply(None, type(error).__name__, str(error))
        if reply.status_code != 200:
            return Reply(None, f"HTTP {reply.status_code}", str(reply.json().get("error", reply.text))
                         if reply.headers.get("content-type", "").startswith("application/json") else reply.text)
        doc = reply.json()
        if protocol == REST_ROWS:
            rows_out = doc["predictions"]
            return Reply({k: from_json([r[k] for r in rows_out], v) for k, v in want.items()})
        return Reply({k: from_json(doc["outputs"][k], v) for k, v in want.items() if k in doc["outputs"]})
    if protocol == GRPC:
        try:
            return Reply(grpc_predict(server.grpc_port, "serving_default", x))
        except Exception as error:
            code, details = getattr(error, "code", None), getattr(error, "details", None)
            return Reply(None, code().name if callable(code) else type(error).__name__,
                         details() if callable(details) else str(error))
    assert protocol == V2_PROTOCOL, protocol
    inputs = []
    for name, value in x.items():
        dtype = "string" if value.dtype.kind == "S" else str(value.dtype)
        data = np.char.decode(value, "utf-8").reshape(-1).tolist() if dtype == "string" else to_json(value.reshape(-1))
        inputs.append({"name": name, "shape": list(value.shape), "datatype": V2.get(dtype, dtype.upper()),
                       "data": data})
    reply = server.http.post(f"{server.url}/v2/models/{MODEL_NAME}/infer", json={"inputs": inputs})
    if reply.status_code != 200:
        return Reply(None, f"HTTP {reply.status_code}", str(reply.json().get("error", reply.text)))
    return Reply({out["name"]: from_json(out["data"], want[out["name"]]).reshape(out["shape"])
                  for out in reply.json().get("outputs", []) if out["name"] in want})


def cell_agree(got: np.ndarray, want: np.ndarray, gate: dict[str, float]) -> str | None:
    """`agree` for a cell's answer: a lone float (a signature of scalars) within the gate's relative error of the
    original's; anything else as `agree` judges it."""
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype.kind in "fc" and want.size == 1 and got.size == 1:
        g, w = got.reshape(-1)[0].item(), want.reshape(-1)[0].item()  # a float, or a complex number
        close = np.isfinite(g) and abs(g - w) <= gate["max_relative_error"] * max(abs(w), 1e-6)
        return None if close else f"{g!r}, the original's {w!r}"
    return agree(got, want, "regression", gate)


def run_cell(built: Built, work: Path) -> Outcome:
    """A lattice cell through optimize -> serve -> every protocol; each protocol's reply held to the cell's
    verdict (`tests.modelgen.lattice.verdict`): the original's answers, or the refusal's status and reason.
    `Outcome.checks` lists what was checked: `optimize refused`, `metadata`, and one entry per protocol."""
    from builder.report import Report
    from tests.modelgen.lattice import PROTOCOLS, REASON_ROWS, REASON_ROWS_OUT, REASON_V2, verdict

    outcome = Outcome(built.spec)
    cell = built.spec.the_cell
    work.mkdir(parents=True, exist_ok=True)
    recipe = work / "light.toml"
    recipe.write_text(LIGHT_RECIPE)
    out = work / "optimized"
    outcome.repro = f"pytest tests/e2e/test_model_generator_lattice.py -k '{built.spec.id}'"
    if built.build_error:
        outcome.failure = "build: " + one_line(built.build_error)
        outcome.detail = built.build_error
        return outcome
    done = subprocess.run(optimize_command(built, out, recipe), cwd=work, env=ENV, capture_output=True, text=True,
                          timeout=OPTIMIZE_DEADLINE_S)
    text = done.stdout + done.stderr
    first = verdict(cell, PROTOCOLS[0])
    if first.stage == "optimize":
        errors = [line for line in text.splitlines() if line.startswith("tfsmith: error:")]
        if done.returncode != 2 or "Traceback" in text or len(errors) != 1 or cell.dtype not in errors[0] \
                or out.exists():
            outcome.failure = (f"optimize of a {cell.dtype} signature: expected one line refusing the dtype (exit 2, "
                               f"nothing written), got exit {done.returncode}: {one_line(text)}")
            outcome.detail = text[-6000:]
        else:
            outcome.checks.append("optimize refused")
        return outcome
    if done.returncode != 0 or "Traceback" in text:
        outcome.failure = f"optimize exit {done.returncode}: {one_line(done.stderr + chr(10) + done.stdout)}"
        outcome.detail = text[-6000:]
        return outcome
    outcome.optimized = True
    report = Report.load(out)
    gate = {"max_accuracy_drop": report.gate.max_accuracy_drop, "max_relative_error": report.gate.max_relative_error}
    try:
        server = Server(out)
    except RuntimeError as error:
        outcome.failure = f"serve: {error}"
        return outcome
    problems: list[str] = []
    words = {REASON_ROWS: "scalar", REASON_V2: "complex", REASON_ROWS_OUT: "total"}  # what the refusal must name
    try:
        problems += metadata_problems(server, built)
        outcome.checks.append("metadata")
        pair = built.answers()["serving_default"]
        for protocol in PROTOCOLS:
            expected = verdict(cell, protocol)
            reply = ask_protocol(server, protocol, pair["x"], pair["y"])
            if expected.served:
                if reply.answers is None:
                    problems.append(f"{protocol}: {reply.status}: {reply.message.splitlines()[0] if reply.message else ''}")
                    continue
                if set(reply.answers) != set(pair["y"]):
                    problems.append(f"{protocol}: outputs {sorted(reply.answers)}, the original's {sorted(pair['y'])}")
                    continue
                problems += [f"{protocol}: {name}: {why}" for name, value in pair["y"].items()
                             if (why := cell_agree(reply.answers[name], value, gate))]
            elif reply.answers is not None:
                problems.append(f"{protocol}: answered where TF Serving refuses ({expected.reason})")
            elif reply.status != expected.status or "\n" in reply.message or \
                    words.get(expected.reason, "") not in reply.message:
                problems.append(f"{protocol}: refused {reply.status} ({reply.message[:200]!r}), expected "
                                f"{expected.status}: {expected.reason}")
            outcome.checks.append(protocol)
        if problems:
            outcome.failure = "served: " + problems[0]
            outcome.detail = "\n".join(problems) + f"\nchosen: {report.chosen} on {report.chosen_runtime}\n" + \
                server.output()[-3000:]
        else:
            outcome.served = True
    except Exception as error:  # a client that cannot even ask is a finding too, kept to one line
        outcome.failure = f"served: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        outcome.detail = server.output()[-3000:]
    finally:
        server.stop()
    return outcome
