"""Large JSON bodies read on two cores: the decoding helper process for real, alone and inside `tfsmith serve`.

The helper (`builder.server.decode_helper`) reads half of a tensor's text in a process of its own. Whatever it
does (reads, refuses, dies), a request's answer must be the one the body gets when read whole: the same
arrays, the same refusals, and no hang. Models are made once per module with TensorFlow in a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder.report import TensorSpec
from builder.server import decode_helper, tensor_json
from builder.model.backend import LiteRTBackend
from builder.server.protocol import PredictCall, RequestError, SignatureSpec, parse_json, parse_predict
from tests.e2e.test_serve import HTTP, TFSMITH, free_port

MAKE_MODELS = r"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf, tf_keras as k
out = sys.argv[1]
k.utils.set_random_seed(0)
image = k.Sequential([k.layers.Input((160, 160, 3), name="image"), k.layers.Conv2D(4, 3, strides=4, activation="relu"),
                      k.layers.GlobalAveragePooling2D(), k.layers.Dense(5, name="scores")])
tokens = k.Sequential([k.layers.Input((250000,), dtype="int32", name="ids"), k.layers.Embedding(1000, 4),
                       k.layers.GlobalAveragePooling1D(), k.layers.Dense(3, name="logits")])
for name, model in (("image", image), ("tokens", tokens)):
    with open(os.path.join(out, name + ".tflite"), "wb") as f:
        f.write(tf.lite.TFLiteConverter.from_keras_model(model).convert())
"""
IMAGE = SignatureSpec("serving_default", (TensorSpec("image", "float32", (None, 160, 160, 3)),),
                      (TensorSpec("scores", "float32", (None, 5)),))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("halves-models")
    subprocess.run([sys.executable, "-c", MAKE_MODELS, str(dest)], check=True, capture_output=True, timeout=300)
    return dest


@pytest.fixture
def helper() -> Iterator[decode_helper.DecodeHelper]:
    started = decode_helper.DecodeHelper()
    yield started
    started.close()


@pytest.fixture(scope="module")
def shared_helper() -> Iterator[decode_helper.DecodeHelper]:
    started = decode_helper.DecodeHelper()
    yield started
    started.close()


def general(body: bytes, signatures: dict[str, SignatureSpec]) -> PredictCall | str:
    try:
        return parse_predict(parse_json(body), signatures, 64)
    except RequestError as error:
        return f"error: {error}"


def image_body(batch: int, seed: int, **envelope: object) -> tuple[np.ndarray, bytes]:
    x = np.random.default_rng(seed).random((batch, 160, 160, 3), dtype=np.float32)
    return x, json.dumps({**envelope, "instances": x.tolist()}).encode()


def test_the_helper_reads_the_second_half_and_the_answer_is_the_whole_bodys(
        helper: decode_helper.DecodeHelper) -> None:
    signatures = {"serving_default": IMAGE}
    for batch, seed in ((1, 0), (3, 1), (1, 2)):
        x, body = image_body(batch, seed)
        call = tensor_json.parse_predict(body, signatures, 64, halves=helper)
        assert call is not None and call.batch == batch and not helper.broken
        np.testing.assert_array_equal(call.inputs["image"], x)
    tokens = {"serving_default": SignatureSpec("serving_default", (TensorSpec("ids", "int32", (None, 250000)),), ())}
    ids = np.random.default_rng(3).integers(0, 1000, (2, 250000))
    call = tensor_json.parse_predict(json.dumps({"inputs": ids.tolist()}).encode(), tokens, 64, halves=helper)
    assert call is not None and call.inputs["ids"].dtype == np.int32
    np.testing.assert_array_equal(call.inputs["ids"], ids)


class Counted:
    """The helper, counting the halves handed to it (so a test knows the body was read on two cores)."""

    def __init__(self, helper: decode_helper.DecodeHelper) -> None:
        self.helper, self.submitted = helper, 0

    def submit(self, text: bytes, floats: bool) -> bool:
        self.submitted += 1
        return self.helper.submit(text, floats)

    def collect(self) -> tuple[np.ndarray, bytes] | None:
        return self.helper.collect()


def test_the_helper_reads_half_of_a_v2_data_list(helper: decode_helper.DecodeHelper) -> None:
    from builder.server.v2 import DATATYPES

    x = np.random.default_rng(4).random((2, 160, 160, 3), dtype=np.float32)
    ids = np.random.default_rng(5).integers(0, 1000, 250000)
    for data, datatype in ((x.ravel().tolist(), "FP32"), (ids.tolist(), "INT32")):
        body = json.dumps({"id": "r", "inputs": [{"name": "in", "shape": [len(data)], "datatype": datatype,
                                                  "data": data}], "outputs": [{"name": "out"}]}).encode()
        counted = Counted(helper)
        document = tensor_json.v2_document(body, DATATYPES, counted)  # type: ignore[arg-type]
        assert counted.submitted == 1 and not helper.broken
        whole = tensor_json.v2_document(body, DATATYPES)
        assert {k: v for k, v in document.items() if k != "inputs"} == {k: v for k, v in whole.items() if k != "inputs"}
        fast, one = document["inputs"][0].pop("data"), whole["inputs"][0].pop("data")
        assert document == whole and fast.dtype == one.dtype
        np.testing.assert_array_equal(fast, one)
        np.testing.assert_array_equal(fast, np.asarray(data, dtype=one.dtype))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), spot=st.floats(0.3, 0.8),
       damage=st.sampled_from([b"", b"]", b"[", b",", b" ", b"NaN", b"true", b'"1"', b"1e999", b"--1", b"0x1", b"],[",
                               b"{}"]))
def test_damage_near_the_cut_gets_the_general_answer(shared_helper: decode_helper.DecodeHelper, seed: int,
                                                     spot: float, damage: bytes) -> None:
    """Bodies broken where the tensor is cut are refused (or taken) exactly as when read whole, and a body the
    helper cannot read leaves it ready for the next."""
    signatures = {"serving_default": IMAGE}
    _, body = image_body(1, seed)
    at = body.index(b",", int(len(body) * spot))
    broken = body[:at] + damage + body[at + 1:]
    call = tensor_json.parse_predict(broken, signatures, 64, halves=shared_helper)
    assert not shared_helper.broken
    slow = general(broken, signatures)
    if call is None:
        return
    assert not isinstance(slow, str), f"taken by the halves, refused whole: {slow}"
    np.testing.assert_array_equal(call.inputs["image"], slow.inputs["image"])


def test_a_helper_that_dies_leaves_every_body_to_one_core(helper: decode_helper.DecodeHelper,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    signatures = {"serving_default": IMAGE}
    x, body = image_body(1, 5)
    os.kill(helper._process.pid, signal.SIGKILL)
    helper._process.wait(timeout=10)
    call = tensor_json.parse_predict(body, signatures, 64, halves=helper)
    assert call is not None, "the body is read on one core"
    np.testing.assert_array_equal(call.inputs["image"], x)
    assert helper.broken and "read on one core from now on" in caplog.text
    assert not helper.submit(b"[1]", True)  # never handed a body again
    call = tensor_json.parse_predict(body, signatures, 64, halves=helper)
    assert call is not None and np.array_equal(call.inputs["image"], x)


def test_an_answer_out_of_step_stops_the_helper(helper: decode_helper.DecodeHelper,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """An answer to another request than the one waited for is never read as this body's numbers."""
    signatures = {"serving_default": IMAGE}
    x, body = image_body(1, 6)
    assert tensor_json.parse_predict(body, signatures, 64, halves=helper) is not None and not helper.broken
    # a request the server never waits for: its answer comes first, as an extra or stale answer would
    os.write(helper._requests, decode_helper.REQUEST.pack(99, helper._size, 0, 16, 16, decode_helper.FLOATS))
    call = tensor_json.parse_predict(body, signatures, 64, halves=helper)
    assert call is not None and np.array_equal(call.inputs["image"], x)
    assert helper.broken and "out of step" in caplog.text


def test_closing_ends_the_helper_process() -> None:
    started = decode_helper.DecodeHelper()
    process = started._process
    started.close()
    assert process.poll() is not None


def test_small_models_get_no_helper() -> None:
    small = SignatureSpec("serving_default", (TensorSpec("x", "float32", (None, 28, 28, 1)),), ())
    dynamic = SignatureSpec("serving_default", (TensorSpec("x", "float32", (None, None, 3)),), ())
    strings = SignatureSpec("serving_default", (TensorSpec("x", "object", (None, 100000)),), ())
    assert decode_helper.start_for([small, dynamic, strings]) is None


# --- inside `tfsmith serve` --------------------------------------------------------------------------------

class LoggedServer:
    """`tfsmith serve MODEL --log-level info` with its log in a file (the start-up decision is said there)."""

    def __init__(self, model: Path, log: Path) -> None:
        self.port, self.log = free_port(), log
        self.url = f"http://127.0.0.1:{self.port}"
        with log.open("w") as out:
            self.process = subprocess.Popen([str(TFSMITH), "serve", str(model), "--model-name", "m", "--port",
                                             str(self.port), "--grpc-port", "0", "--log-level", "info"],
                                            stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log.read_text()
            try:
                if HTTP.get(f"{self.url}/v2/health/ready", timeout=1).status_code == 200:
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.2)
        self.process.kill()
        raise AssertionError(f"server not ready in 120 s: {log.read_text()}")

    def helper_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return [int(pid) for pid in children
                if b"decode_helper" in Path(f"/proc/{pid}/cmdline").read_bytes()]

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=30)


def test_serve_reads_large_bodies_with_the_models_answers(models: Path, tmp_path: Path) -> None:
    local = LiteRTBackend(models / "image.tflite")
    server = LoggedServer(models / "image.tflite", tmp_path / "serve.log")
    try:
        said = server.log.read_text()
        two = "read on two cores (a helper process)" in said
        assert two or "read on one core" in said, said  # the start-up measurement's verdict is said
        helpers = server.helper_pids()
        assert len(helpers) == (1 if two else 0)
        assert HTTP.get(f"{server.url}/healthz").json()["json_cores"] == (2 if two else 1)
        for batch, seed, envelope, key in ((1, 10, {}, "instances"), (3, 11, {"signature_name": "serving_default"},
                                                                         "instances"), (2, 12, {}, "inputs")):
            x = np.random.default_rng(seed).random((batch, 160, 160, 3), dtype=np.float32)
            answer = HTTP.post(f"{server.url}/v1/models/m:predict", content=json.dumps({**envelope, key: x.tolist()}))
            assert answer.status_code == 200, answer.text
            got = np.asarray(answer.json()["predictions" if key == "instances" else "outputs"], dtype=np.float32)
            want = np.concatenate([local.predict("serving_default", {"image": x[i:i + 1]})["scores"]
                                   for i in range(batch)])
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        x = np.random.default_rng(15).random((2, 160, 160, 3), dtype=np.float32)
        v2_body = json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                                          "data": x.ravel().tolist()}]})
        answer = HTTP.post(f"{server.url}/v2/models/m/infer", content=v2_body)
        assert answer.status_code == 200, answer.text
        output = answer.json()["outputs"][0]
        want = np.concatenate([local.predict("serving_default", {"image": x[i:i + 1]})["scores"] for i in range(2)])
        np.testing.assert_allclose(np.asarray(output["data"], dtype=np.float32).reshape(output["shape"]), want,
                                   rtol=1e-5, atol=1e-6)
        at = v2_body.index(",", len(v2_body) * 6 // 10)
        nested = HTTP.post(f"{server.url}/v2/models/m/infer", content=v2_body[:at] + ", [0.5]" + v2_body[at:])
        assert nested.status_code == 400 and "error" in nested.json(), nested.text
        _, body = image_body(1, 13)
        at = body.index(b",", len(body) * 6 // 10)
        ragged = body[:at] + b"],[" + body[at + 1:]
        refused = HTTP.post(f"{server.url}/v1/models/m:predict", content=ragged)
        assert refused.status_code == 400
        assert refused.json()["error"] == general(ragged, {"serving_default": IMAGE}).removeprefix("error: ")
        if helpers:
            os.kill(helpers[0], signal.SIGKILL)
            x, body = image_body(1, 14)
            answer = HTTP.post(f"{server.url}/v1/models/m:predict", content=body)
            assert answer.status_code == 200, answer.text
            np.testing.assert_allclose(np.asarray(answer.json()["predictions"], dtype=np.float32),
                                       local.predict("serving_default", {"image": x})["scores"], rtol=1e-5, atol=1e-6)
            assert HTTP.get(f"{server.url}/healthz").json()["json_cores"] == 1
    finally:
        assert server.stop() in (0, -signal.SIGTERM)
    if helpers:
        assert "read on one core from now on" in server.log.read_text()
    for pid in helpers:
        assert not Path(f"/proc/{pid}").exists() or b"decode_helper" not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_a_served_helper_ends_with_its_server(models: Path, tmp_path: Path) -> None:
    server = LoggedServer(models / "tokens.tflite", tmp_path / "serve.log")
    helpers = server.helper_pids()
    ids = np.random.default_rng(1).integers(0, 1000, (1, 250000))
    answer = HTTP.post(f"{server.url}/v1/models/m:predict", content=json.dumps({"instances": ids.tolist()}))
    assert answer.status_code == 200, answer.text
    assert server.stop() in (0, -signal.SIGTERM)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in helpers)
