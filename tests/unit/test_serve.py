"""Pure logic of the serve room: TF Serving request parsing and answers, batching decisions, warmup records,
plans and rendered Dockerfiles. No server, no engine."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.errors import InputError
from builder.packaging import warmup
from builder.server.artifacts import Artifact, model_name_for, resolve_artifact
from builder.server.batching import BatchingConfig, batch_key, merge_inputs, run_inline, split_outputs, take_count
from builder.packaging.plan import PackageOptions, _docker_quote, plan_package, render_dockerfile
from builder.server.protocol import (
    PredictCall,
    RequestError,
    SignatureSpec,
    TensorSpec,
    format_outputs,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
    parse_version,
)
from builder.packaging.tfserving import BatchingParameters, build_options, server_flags, warmup_records

IMAGE = SignatureSpec(
    "serving_default",
    inputs=(TensorSpec("x", "float32", (-1, 2, 2)),),
    outputs=(TensorSpec("probs", "float32", (-1, 3)),),
)
TWO = SignatureSpec(
    "pair",
    inputs=(TensorSpec("a", "float32", (-1, 2)), TensorSpec("b", "int8", (-1, 1))),
    outputs=(TensorSpec("sum", "float32", (-1, 1)), TensorSpec("idx", "int32", (-1,))),
)
SIGS = {IMAGE.name: IMAGE, TWO.name: TWO}


def status_of(body: object, signatures: dict[str, SignatureSpec] = SIGS) -> int:
    with pytest.raises(RequestError) as caught:
        parse_predict(body, signatures)
    return caught.value.status


# --- protocol -------------------------------------------------------------------------------------------


def test_row_format_single_input_stacks_instances_in_order() -> None:
    call = parse_predict({"instances": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]}, SIGS)
    assert call.signature == "serving_default" and call.row_format and call.batch == 2
    assert call.inputs["x"].dtype == np.float32
    assert call.inputs["x"].tolist() == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]


def test_row_format_named_instances_for_several_inputs() -> None:
    body = {"signature_name": "pair", "instances": [{"a": [1.5, 2], "b": [3]}, {"a": [0, 0], "b": [-4]}]}
    call = parse_predict(body, SIGS)
    assert call.inputs["a"].shape == (2, 2) and call.inputs["b"].dtype == np.int8
    assert call.inputs["b"].ravel().tolist() == [3, -4]


def test_columnar_format_plain_and_named() -> None:
    plain = parse_predict({"inputs": [[[0, 1], [2, 3]]]}, SIGS)
    assert not plain.row_format and plain.inputs["x"].shape == (1, 2, 2)
    named = parse_predict({"signature_name": "pair", "inputs": {"a": [[1, 2]] * 3, "b": [[1]] * 3}}, SIGS)
    assert named.batch == 3


@pytest.mark.parametrize(
    "body",
    [
        [],  # not an object
        {"instances": [], "signature_name": ""},  # empty
        {"instances": [[[1, 2], [3, 4]]], "inputs": [[[1, 2], [3, 4]]]},  # both forms
        {},  # neither
        {"instances": [[1, 2, 3, 4]]},  # wrong rank
        {"instances": [[[1, 2, 3], [3, 4, 5]]]},  # wrong fixed dimension
        {"instances": [[[1, 2], [3]]]},  # ragged
        {"instances": [[[1e300, 2], [3, 4]]]},  # beyond float32
        {"instances": [[["a", "b"], ["c", "d"]]]},  # strings for float
        {"instances": [[[True, False], [True, True]]]},  # booleans for float
        {"instances": [[[{"b64": "AAAA"}, 1], [1, 1]]]},  # binary for a float input
        {"instances": [[[1, 2], [3, 4]]], "extra": 1},  # unknown field
        {"signature_name": "nope", "instances": [[[1, 2], [3, 4]]]},  # unknown signature
        {"signature_name": 7, "instances": [[[1, 2], [3, 4]]]},
        {"signature_name": "pair", "instances": [[1, 2]]},  # several inputs need named rows
        {"signature_name": "pair", "instances": [{"a": [1, 2]}]},  # missing input
        {"signature_name": "pair", "instances": [{"a": [1, 2], "b": [1], "c": 1}]},  # unknown input
        {"signature_name": "pair", "instances": [{"a": [1, 2], "b": [0.5]}]},  # fraction for int8
        {"signature_name": "pair", "instances": [{"a": [1, 2], "b": [300]}]},  # out of int8 range
        {"signature_name": "pair", "inputs": {"a": [[1, 2], [3, 4]], "b": [[1]]}},  # batch sizes differ
        {"signature_name": "pair", "inputs": [[1, 2]]},  # several inputs need an object
        {"inputs": [[[1, 2], [3, 4]]], "signature_name": None, "x": 1},
        {"inputs": []},  # empty batch
        {"instances": [[[1, 2], [3, 4]], {"x": [[1, 2], [3, 4]]}]},  # mixed rows
    ],
)
def test_bad_requests_are_400(body: object) -> None:
    assert status_of(body) == 400


def test_malformed_json_and_versions() -> None:
    for raw in (b"{bad", b"\xff\xfe", b"[" * 100000):
        with pytest.raises(RequestError) as caught:
            parse_json(raw)
        assert caught.value.status == 400
    assert parse_version("3") == 3
    with pytest.raises(RequestError) as caught:
        parse_version("latest")
    assert caught.value.status == 404


def test_default_signature_needs_a_name_when_ambiguous() -> None:
    sigs = {"a": IMAGE, "b": TWO}
    assert status_of({"instances": [[[1, 2], [3, 4]]]}, sigs) == 400


@given(st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=20))
@settings(max_examples=300, deadline=None)
def test_any_json_is_accepted_or_refused_with_400(body: object) -> None:
    """Whatever a client sends, parsing either yields valid arrays or a 400: never another exception."""
    for wrapped in (body, {"instances": body}, {"inputs": body}, {"signature_name": "pair", "inputs": body}):
        try:
            call = parse_predict(wrapped, SIGS)
        except RequestError as error:
            assert error.status == 400
        else:
            spec = SIGS[call.signature]
            for tensor in spec.inputs:
                assert call.inputs[tensor.name].dtype == np.dtype(tensor.dtype)
                assert call.inputs[tensor.name].shape[1:] == tuple(tensor.shape[1:])


def test_answers_follow_tf_serving_shapes() -> None:
    single = {"probs": np.array([[0.1, 0.2, 0.7], [1, 0, 0]], dtype=np.float32)}
    assert format_outputs(single, IMAGE, row_format=True)["predictions"][1] == [1.0, 0.0, 0.0]
    assert np.allclose(format_outputs(single, IMAGE, row_format=False)["outputs"], single["probs"])
    double = {"sum": np.array([[1.0], [2.0]], dtype=np.float32), "idx": np.array([4, 5], dtype=np.int32)}
    assert format_outputs(double, TWO, row_format=True)["predictions"] == [{"sum": [1.0], "idx": 4}, {"sum": [2.0], "idx": 5}]
    assert format_outputs(double, TWO, row_format=False)["outputs"] == {"sum": [[1.0], [2.0]], "idx": [4, 5]}


def test_status_and_metadata_documents() -> None:
    assert model_status([1])["model_version_status"][0] == {
        "version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    meta = model_metadata("digits", 1, SIGS)
    sig = meta["metadata"]["signature_def"]["signature_def"]["pair"]
    assert meta["model_spec"] == {"name": "digits", "signature_name": "", "version": "1"}
    assert sig["inputs"]["b"]["dtype"] == "DT_INT8"
    assert [d["size"] for d in sig["inputs"]["a"]["tensor_shape"]["dim"]] == ["-1", "2"]
    assert sig["method_name"] == "tensorflow/serving/predict"


# --- batching -------------------------------------------------------------------------------------------


def _call(n: int, width: int = 2, signature: str = "pair") -> PredictCall:
    return PredictCall(signature, {"a": np.full((n, width), n, dtype=np.float32)}, True, n)


def test_take_count_fills_up_to_the_max_but_always_takes_one() -> None:
    assert take_count([1, 1, 1, 1], 3) == 3
    assert take_count([2, 2, 2], 5) == 2
    assert take_count([10, 1], 4) == 1  # an oversized request goes alone
    assert take_count([1], 64) == 1


def test_merge_and_split_round_trip() -> None:
    calls = [_call(1), _call(3), _call(2)]
    merged = merge_inputs(calls)
    assert merged["a"].shape == (6, 2)
    parts = split_outputs({"y": merged["a"] * 2}, [c.batch for c in calls])
    assert [p["y"].shape[0] for p in parts] == [1, 3, 2]
    assert all(np.all(p["y"] == 2 * c.batch) for p, c in zip(parts, calls))


def test_batch_keys_separate_shapes_and_signatures() -> None:
    assert batch_key(_call(1)) == batch_key(_call(5))
    assert batch_key(_call(1, width=3)) != batch_key(_call(1))
    assert batch_key(_call(1, signature="other")) != batch_key(_call(1))


def test_batching_config_and_inline_decision() -> None:
    assert not BatchingConfig().enabled and BatchingConfig(8, 500).enabled
    with pytest.raises(ValueError):
        BatchingConfig(0)
    assert run_inline(10.0, BatchingConfig())
    assert not run_inline(10.0, BatchingConfig(8))
    assert not run_inline(5000.0, BatchingConfig())


# --- warmup records -------------------------------------------------------------------------------------


def test_crc32c_known_value_and_masking() -> None:
    assert warmup.crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert warmup.masked_crc32c(b"") == 0xA282EAD8


def test_warmup_records_round_trip() -> None:
    x = np.arange(2 * 4, dtype=np.float32).reshape(2, 2, 2)
    blob = warmup.write_warmup(warmup_records("digits", {"input_1": x, "ids": np.array([[7], [9]], np.int64)}, version=3))
    parsed = warmup.read_warmup(blob)
    assert len(parsed) == 2
    assert parsed[1].model_name == "digits" and parsed[1].version == 3 and parsed[1].signature_name == "serving_default"
    tensor = parsed[1].inputs["input_1"]
    assert tensor.dtype == 1 and tensor.shape == (1, 2, 2)
    assert np.frombuffer(tensor.content, dtype="<f4").tolist() == [4, 5, 6, 7]
    ids = parsed[1].inputs["ids"]
    assert ids.dtype == 9 and ids.shape == (1, 1) and np.frombuffer(ids.content, dtype="<i8").tolist() == [9]


def test_warmup_reader_detects_corruption() -> None:
    blob = bytearray(warmup.write_warmup(warmup_records("m", {"x": np.zeros((1, 2), np.float32)}, 1)))
    blob[-6] ^= 0xFF
    with pytest.raises(ValueError, match="CRC"):
        warmup.read_warmup(bytes(blob))
    with pytest.raises(ValueError, match="truncated"):
        warmup.read_warmup(bytes(blob[:-3]))
    assert struct.unpack("<Q", bytes(blob[:8]))[0] == len(blob) - 16


def test_tfserving_files() -> None:
    text = BatchingParameters(16, 500, 2, 10).text()
    assert "max_batch_size { value: 16 }" in text and "batch_timeout_micros { value: 500 }" in text
    assert build_options(("-march=haswell", "-mtune=haswell")) == "--config=release --copt=-march=haswell --copt=-mtune=haswell"
    assert "--prefer_tflite_model=true" in server_flags(saved_model=False)
    assert "--prefer_tflite_model=true" not in server_flags(saved_model=True)


# --- artifacts, plans, Dockerfiles ----------------------------------------------------------------------


class _Target:
    name = "x86-64-v3"
    arch = "x86_64"
    features = frozenset({"avx2", "fma", "avx"})
    copts = ("-march=haswell",)


def _artifact(tmp_path: Path, report: dict | None = None) -> Artifact:
    model = tmp_path / "model_int8.tflite"
    model.write_bytes(b"TFL3-not-a-real-model")
    return Artifact(model, "digits", report)


def test_plan_labels_and_command(tmp_path: Path) -> None:
    report = {"artifacts": [{"path": "model_int8.tflite", "kind": "tflite_int8", "size_bytes": 21, "accuracy": 0.96,
                             "latency_us": {"p50": 28.0}}]}
    plan = plan_package(_artifact(tmp_path, report), PackageOptions(workers=3), target=_Target(),
                        requirements=("numpy==2",))
    import hashlib

    assert plan.labels["io.tfsmith.model.sha256"] == hashlib.sha256(b"TFL3-not-a-real-model").hexdigest()
    assert plan.labels["io.tfsmith.report.summary"] == "model_int8.tflite tflite_int8 21 B acc 0.9600 p50 28us"
    assert plan.target_features == ("avx", "avx2", "fma")
    assert plan.tag.startswith("tfsmith/serve-digits:litert-")
    assert plan.command[:1] == ["/models/digits/1/model.tflite"] and "--workers" in plan.command
    with pytest.raises(InputError):
        plan_package(_artifact(tmp_path), PackageOptions(runtime="torchserve"))


def test_rendered_litert_dockerfile(tmp_path: Path) -> None:
    plan = plan_package(_artifact(tmp_path), PackageOptions(), target=_Target(), requirements=("numpy==2", "fastapi==1"))
    text = render_dockerfile(plan)
    assert text.startswith("# Rendered") and "FROM tfsmith/python:bookworm\n" in text
    assert "USER 10001:10001" in text and "HEALTHCHECK" in text and "/healthz" in text
    assert '"numpy==2" \\\n       "fastapi==1" \\\n    && ' in text
    assert "TFSMITH_IMAGE_FEATURES=avx,avx2,fma" in text
    assert 'ENTRYPOINT ["/opt/venv/bin/python", "/opt/tfsmith/guard.py", "--"' in text
    cmd = json.loads(text.split("\nCMD ", 1)[1].splitlines()[0])
    assert cmd == plan.command
    assert "--pull" not in text and "# syntax" not in text


def test_docker_quote_escapes() -> None:
    assert _docker_quote('a "b" $HOME \\ x\ny') == '"a \\"b\\" \\$HOME \\\\ x y"'


def test_resolve_artifact(tmp_path: Path) -> None:
    out = tmp_path / "digits-out"
    out.mkdir()
    (out / "model_fp32.tflite").write_bytes(b"a")
    (out / "model_int8.tflite").write_bytes(b"b")
    with pytest.raises(InputError, match="cannot tell"):
        resolve_artifact(out)
    (out / "report.json").write_text(json.dumps({"chosen": "model_int8.tflite", "samples": "samples.npz"}))
    np.savez(out / "samples.npz", x=np.zeros((2, 1)))
    art = resolve_artifact(out)
    assert art.model_path.name == "model_int8.tflite" and art.name == "digits-out"
    assert art.samples_path == out / "samples.npz"
    with pytest.raises(InputError):
        resolve_artifact(tmp_path / "missing.tflite")
    with pytest.raises(InputError):
        resolve_artifact(out / "report.json")
    with pytest.raises(InputError):
        resolve_artifact(out / "model_int8.tflite", name="bad/name")
    assert model_name_for(Path("/x/My Model!.tflite")) == "My-Model"


def test_server_config_travels_to_worker_processes_intact(tmp_path: Path) -> None:
    from builder.server.app import ServerConfig, config_from_json, config_to_json

    config = ServerConfig(model_path=tmp_path / "m.tflite", model_name="digits", version=3, runtime="openvino",
                          runtime_reason="auto: faster", workers=4, threads=2, batching=BatchingConfig(16, 250),
                          max_body_bytes=4096, dispatch="threads")
    assert config_from_json(config_to_json(config)) == config


# --- the package workflow on the fake engine ------------------------------------------------------------

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "serve" / "tiny_conv.tflite"


def test_tfserving_package_refuses_before_building(tmp_path: Path) -> None:
    from builder.engine.base import Image
    from builder.engine.fake import FakeEngine
    from builder.packaging.workflow import package_model

    engine = FakeEngine()
    options = PackageOptions(runtime="tfserving", base_image="stand-in:1", tag="t:1")
    with pytest.raises(InputError, match="not on this engine"):
        package_model(TINY, options, smoke=False, engine=engine, say=lambda _: None)
    engine.images["sha256:base"] = Image("sha256:base", ("stand-in:1",))
    engine.run_results["stand-in:1"] = (1, "")  # `command -v tensorflow_model_server` fails: no server inside
    with pytest.raises(InputError, match="no tensorflow_model_server"):
        package_model(TINY, options, smoke=True, engine=engine, say=lambda _: None)
    assert engine.builds == []


def test_tfserving_package_builds_the_layout_context(tmp_path: Path) -> None:
    from builder.engine.base import Image
    from builder.engine.fake import FakeEngine
    from builder.packaging.workflow import package_model

    engine = FakeEngine(images={"sha256:base": Image("sha256:base", ("stand-in:1",))})
    options = PackageOptions(runtime="tfserving", base_image="stand-in:1", tag="t:1", max_batch=4)
    plan, image = package_model(TINY, options, model_name="tiny", smoke=False, keep_context=tmp_path / "ctx",
                                engine=engine, say=lambda _: None)
    assert [b.tags for b in engine.builds] == [("t:1",)] and "t:1" in image.tags
    ctx = tmp_path / "ctx"
    assert (ctx / "models" / "tiny" / "1" / "model.tflite").read_bytes() == TINY.read_bytes()
    records = warmup.read_warmup((ctx / "models" / "tiny" / "1" / "assets.extra" / "tf_serving_warmup_requests").read_bytes())
    assert len(records) == 10 and set(records[0].inputs) == {"input_1"}
    assert records[0].inputs["input_1"].shape == (1, 8, 8, 1)
    assert "max_batch_size { value: 4 }" in (ctx / "models" / "batching_parameters.txt").read_text()
    dockerfile = (ctx / "Dockerfile").read_text()
    assert "FROM stand-in:1" in dockerfile and "--prefer_tflite_model=true" in dockerfile
    assert plan.labels["io.tfsmith.runtime"] == "tfserving"


def test_litert_backend_reads_the_recorded_model() -> None:
    from builder.server.backends import LiteRTBackend, sample_inputs

    backend = LiteRTBackend(TINY)
    sig = backend.signatures["serving_default"]
    assert sig.inputs[0] == TensorSpec("input_1", "float32", (-1, 8, 8, 1))
    out = backend.predict("serving_default", sample_inputs(sig, batch=3))
    assert out["dense"].shape == (3, 10) and np.allclose(out["dense"].sum(axis=1), 1.0, atol=1e-5)


def test_resolve_artifact_takes_the_fastest_accepted_tflite_when_a_saved_model_was_chosen(tmp_path: Path) -> None:
    """optimize picks the SavedModel for GPU targets; a LiteRT server needs a .tflite from the same run."""
    out = tmp_path / "gpu-out"
    out.mkdir()
    for name in ("model_fp32.tflite", "model_float16.tflite", "model_int8.tflite"):
        (out / name).write_bytes(b"x")
    artifacts = [
        {"path": "saved_model", "kind": "saved_model", "accepted": True, "latency_us": {"p50": 500.0}},
        {"path": "model_fp32.tflite", "accepted": True, "latency_us": {"p50": 40.0}},
        {"path": "model_float16.tflite", "accepted": True, "latency_us": {"p50": 30.0}},
        {"path": "model_int8.tflite", "accepted": False, "latency_us": {"p50": 10.0}},
    ]
    (out / "report.json").write_text(json.dumps({"chosen": "saved_model", "artifacts": artifacts}))
    assert resolve_artifact(out).model_path.name == "model_float16.tflite"
    (out / "report.json").write_text(json.dumps({"chosen": "saved_model", "artifacts": artifacts[:1]}))
    with pytest.raises(InputError, match="--runtime tfserving"):
        resolve_artifact(out)


def test_server_code_copied_into_images_has_every_tfsmith_module_it_imports(tmp_path: Path) -> None:
    """Images get a subset of tfsmith; every module-level `builder.*` import of that code must be in it.

    (Imports inside functions are host-side paths — packaging, `--runtime auto` — that images never run.)
    """
    import ast

    from builder.packaging.plan import copy_server_code

    copy_server_code(tmp_path)
    copied = {
        ".".join(path.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__")
        for path in tmp_path.rglob("*.py")
    }
    missing = set()
    for path in (tmp_path / "builder").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("builder"):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.startswith("builder")]
            else:
                continue
            missing.update(name for name in names if name not in copied)
    assert "builder.server.app" in copied and not missing
