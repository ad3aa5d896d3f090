"""Every zoo model (tests/zoo.py) through optimize -> serve -> package with its contract intact.

What a client of the ORIGINAL model sends (its input names and dtypes: float pixels, int token ids, several
named inputs; TF Serving's row and columnar forms, named and unnamed) must still work against what
`tfsmith optimize --recipe auto` chose, and every answer must stay within its output's metric of the
original model's own answer. Twice: as chosen by measurement on this host, and as chosen by rule for an
int8 target (`--target sapphirerapids`: full int8 on VNNI/AMX), where int8 internals must stay invisible to a
float client. The host's choice is then packaged into a serving image and smoke-tested.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from builder.engine.base import Engine
from builder.packaging.smoke import fidelity
from builder.report import Report
from builder.server.protocols.tfs_rest import TF_DTYPES
from tests import zoo, zoo_runs
from tests.e2e.test_serve import STOPPED, TFSMITH, Server

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ROWS = 12
TARGETS = ("host", "sapphirerapids")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="session")
def zoo_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zoo.ZooModel]:
    return {name: zoo_runs.model(name, tmp_path_factory) for name in zoo.ALL_NAMES}


@pytest.fixture(scope="session")
def optimized(zoo_models: dict[str, zoo.ZooModel], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """`tfsmith optimize --recipe auto` per (model, target), run once per test run and shared (tests/zoo_runs:
    test_optimize_zoo checks the same runs' reports)."""

    def run(name: str, target: str) -> Path:
        done = zoo_runs.auto(name, target, tmp_path_factory)
        assert done.code == 0, (name, target, done.stdout[-2000:], done.stderr[-2000:])
        assert "Traceback" not in done.stderr
        return done.out

    yield run


def _original(model: zoo.ZooModel) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    x = {name: values[:ROWS] for name, values in zoo.load_data(model)["x_val"].items()}
    return x, zoo.predict(model, x)


def _judge(model: zoo.ZooModel, got: dict[str, np.ndarray], want: dict[str, np.ndarray], how: str) -> list[str]:
    lines = []
    for name, (dtype, _, _) in model.outputs.items():
        answer = np.asarray(got[name]).astype(dtype)
        judged = fidelity(name, answer, np.asarray(want[name]).astype(dtype))
        assert judged.passed, (model.name, how, judged.text())
        lines.append(judged.text())
    return lines


def _row_requests(x: dict[str, np.ndarray], named: bool) -> list[dict]:
    rows = len(next(iter(x.values())))
    if named:
        return [{"instances": [{k: v[i].tolist() for k, v in x.items()}]} for i in range(rows)]
    (values,) = x.values()
    return [{"instances": [values[i].tolist()]} for i in range(rows)]


def _row_answers(bodies: list[dict], outputs: list[str]) -> dict[str, np.ndarray]:
    if len(outputs) == 1:
        return {outputs[0]: np.concatenate([np.asarray(b["predictions"]) for b in bodies])}
    return {name: np.asarray([p[name] for b in bodies for p in b["predictions"]]) for name in outputs}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", zoo.NAMES)
def test_a_client_of_the_original_model_is_served_unchanged(
    name: str, target: str, zoo_models: dict[str, zoo.ZooModel], optimized: dict
) -> None:
    model = zoo_models[name]
    out = optimized(name, target)
    report = Report.load(out)
    assert report.gate.passed, report.gate
    x, want = _original(model)
    client = httpx.Client(timeout=30)
    running = Server(str(out), "--model-name", "m", client=client)
    try:
        meta = client.get(f"{running.url}/v1/models/m/metadata").json()
        signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert {k: v["dtype"] for k, v in signature["inputs"].items()} == {
            k: TF_DTYPES[d][0] for k, (d, _) in model.inputs.items()}, "input names or dtypes changed"
        assert {k: v["dtype"] for k, v in signature["outputs"].items()} == {
            k: TF_DTYPES[d][0] for k, (d, _, _) in model.outputs.items()}, "output names or dtypes changed"
        outputs = list(model.outputs)
        forms = [True] if len(x) > 1 else [False, True]  # one-input models: plain rows and named objects
        for named in forms:
            bodies = []
            for request in _row_requests(x, named):
                answer = client.post(f"{running.url}/v1/models/m:predict", json=request)
                assert answer.status_code == 200, answer.text
                bodies.append(answer.json())
            judged = _judge(model, _row_answers(bodies, outputs), want, f"row form, named={named}")
        columnar = [{"inputs": {k: v.tolist() for k, v in x.items()}}]
        if len(x) == 1:
            columnar.append({"inputs": next(iter(x.values())).tolist()})
        for request in columnar:
            answer = client.post(f"{running.url}/v1/models/m:predict", json=request)
            assert answer.status_code == 200, answer.text
            got = answer.json()["outputs"]
            got = got if isinstance(got, dict) else {outputs[0]: got}
            _judge(model, got, want, "columnar form")
    finally:
        assert running.stop() in STOPPED
    print(f"\nzoo | {name} | {target} | {report.chosen} | {report.chosen_runtime} | "
          f"{'; '.join(judged)} | drop-in (names, dtypes, row+columnar)")


@pytest.fixture(scope="session")
def engine_and_base() -> tuple[Engine, str]:
    """The engine, the slim base LiteRT images start from and the TensorFlow image for x86-64-v3 (made from the
    stock wheel, as `make build` does here) that `tensorflow` images start from."""
    from builder.engine.docker import DockerEngine
    from builder.engine.local import DEFAULT_BASE_IMAGE, ensure_base_image, ensure_engine
    from tests.locks import one_at_a_time
    from tests.tf_image import ensure_tf_image

    with one_at_a_time("docker-engine"):
        ensure_engine(say=print)
    with one_at_a_time("base-image"):
        base = ensure_base_image(DEFAULT_BASE_IMAGE, say=print)
    ensure_tf_image(base)
    return DockerEngine(), base


def _tf_dtype(dtype: str) -> str:
    """TensorFlow's name of a contract dtype (`float32` -> DT_FLOAT, `string` -> DT_STRING)."""
    return "DT_STRING" if dtype == "string" else TF_DTYPES[dtype][0]


def _strings_as_json(values: np.ndarray) -> object:
    from builder.packaging.smoke import json_value

    return json_value(values)


@pytest.mark.parametrize("name", zoo.TF_NAMES)
def test_what_only_tensorflow_runs_is_served_to_a_client_of_the_original_unchanged(
    name: str, zoo_models: dict[str, zoo.ZooModel], optimized: dict
) -> None:
    """A GRU over variable-length sequences and a TextVectorization string model (no plain .tflite: served on
    TensorFlow, or on OpenVINO's IR where its converter took the model and it measured faster), a custom layer loaded with --import and a predict-only module (whatever optimize measured
    fastest): REST rows and columns in the original dtypes (strings as JSON strings) and TF Serving's own gRPC
    client get the original model's answers."""
    grpc = pytest.importorskip("grpc")
    tf = pytest.importorskip("tensorflow")
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    model = zoo_models[name]
    out = optimized(name, "host")
    report = Report.load(out)
    assert report.gate.passed, report.gate
    if name in ("gru_sequence", "text_classifier"):  # no plain .tflite: TensorFlow, or OpenVINO's IR where it took it
        assert (report.chosen, report.chosen_runtime) == ("saved_model", "tensorflow") or (
            report.chosen.endswith(".xml") and report.chosen_runtime.startswith("openvino"))
    x, want = _original(model)
    outputs = list(model.outputs)
    client = httpx.Client(timeout=60)
    running = Server(str(out), "--model-name", "m", grpc=True, client=client)
    try:
        meta = client.get(f"{running.url}/v1/models/m/metadata").json()
        signature = meta["metadata"]["signature_def"]["signature_def"][model.signature]
        assert {k: v["dtype"] for k, v in signature["inputs"].items()} == {
            k: _tf_dtype(d) for k, (d, _) in model.inputs.items()}, "input names or dtypes changed"
        rows = len(next(iter(x.values())))
        bodies = []
        for i in range(rows):
            request = {"signature_name": model.signature,
                       "instances": [{k: _strings_as_json(v[i]) for k, v in x.items()}]}
            answer = client.post(f"{running.url}/v1/models/m:predict", json=request)
            assert answer.status_code == 200, answer.text
            bodies.append(answer.json())
        judged = _judge(model, _row_answers(bodies, outputs), want, "row form")
        columnar = {"signature_name": model.signature, "inputs": {k: _strings_as_json(v) for k, v in x.items()}}
        answer = client.post(f"{running.url}/v1/models/m:predict", json=columnar)
        assert answer.status_code == 200, answer.text
        got = answer.json()["outputs"]
        _judge(model, got if isinstance(got, dict) else {outputs[0]: got}, want, "columnar form")
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "m"
            request.model_spec.signature_name = model.signature
            for k, v in x.items():
                request.inputs[k].CopyFrom(tf.make_tensor_proto(v.astype(object) if v.dtype.kind in "SU" else v))
            reply = stub.Predict(request, timeout=60)
        _judge(model, {k: tf.make_ndarray(reply.outputs[k]) for k in outputs}, want, "gRPC (tensorflow-serving-api)")
    finally:
        assert running.stop() in STOPPED
    print(f"\nzoo | {name} | host | {report.chosen} ({report.chosen_signature}) | {report.chosen_runtime} | "
          f"{'; '.join(judged)} | drop-in (names, dtypes, row+columnar, gRPC client)")


@pytest.mark.engine
@pytest.mark.parametrize("name", zoo.ALL_NAMES)
def test_the_chosen_artifact_packages_and_passes_its_smoke_test(
    name: str, optimized: dict, engine_and_base: tuple[Engine, str]
) -> None:
    """As `make build` step 4 runs it: the kind follows the chosen artifact (a LiteRT image for a .tflite, an
    OpenVINO image for OpenVINO's IR, FROM the target's TensorFlow image for what runs on TensorFlow), and the
    runtime is what optimize measured."""
    from tests.tf_image import TARGET, packaging_from_tf_image

    engine, _ = engine_and_base
    out = optimized(name, "host")
    tag = f"tfsmith-test-zoo/{name.replace('_', '-')}:smoke"
    with packaging_from_tf_image(TARGET):
        done = subprocess.run(
            [str(TFSMITH), "package", str(out), "--target", TARGET, "--tag", tag, "--model-name", "m", "--smoke"],
            capture_output=True, text=True, timeout=900, env=ENV,
        )
    try:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "against the original model:" in done.stdout, done.stdout
        report = Report.load(out)
        kind = ("tensorflow" if report.chosen_runtime.startswith("tensorflow") else
                "openvino" if report.chosen.endswith(".xml") else "litert")
        assert f"image kind: {kind}" in done.stdout and f"runtime: {report.chosen_runtime}" in done.stdout
    finally:
        engine.remove_image(tag)
    print(f"\nzoo package | {name} | {kind} image | "
          + next(line for line in done.stdout.splitlines() if line.startswith("smoke:")))

