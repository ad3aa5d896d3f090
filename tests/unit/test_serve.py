"""Pure logic of the serve room: TF Serving request parsing and answers, batching decisions, warmup records,
plans and rendered Dockerfiles. No server, no engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.server.core.runner import (BatchingConfig, batch_key, dispatch_mode, merge_inputs, run_inline, split_outputs,
                                     take_count)
from builder.server.protocols.tfs_rest import (
    SignatureSpec,
    TensorSpec,
    format_outputs,
    model_metadata,
    model_status,
    parse_json,
    parse_predict,
)
from builder.server.core.call import Call, RequestError, parse_version

IMAGE = SignatureSpec(
    "serving_default",
    inputs=(TensorSpec("x", "float32", (None, 2, 2)),),
    outputs=(TensorSpec("probs", "float32", (None, 3)),),
)
TWO = SignatureSpec(
    "pair",
    inputs=(TensorSpec("a", "float32", (None, 2)), TensorSpec("b", "int8", (None, 1))),
    outputs=(TensorSpec("sum", "float32", (None, 1)), TensorSpec("idx", "int32", (None,))),
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
    # an output without a batch (a scalar beside the rows) cannot be written as rows: 400, as TF Serving says it;
    # the column format carries it
    scalar = {"sum": np.array([[1.0], [2.0]], dtype=np.float32), "idx": np.array(7, dtype=np.int32)}
    with pytest.raises(RequestError, match="Tensor name: idx has no shape information") as refused:
        format_outputs(scalar, TWO, row_format=True)
    assert refused.value.status == 400
    assert format_outputs(scalar, TWO, row_format=False)["outputs"]["idx"] == 7
    uneven = {"sum": np.array([[1.0], [2.0]], dtype=np.float32), "idx": np.array([4, 5, 6], dtype=np.int32)}
    with pytest.raises(RequestError, match="batch sizes differ"):
        format_outputs(uneven, TWO, row_format=True)


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


def _call(n: int, width: int = 2, signature: str = "pair") -> Call:
    return Call(signature, {"a": np.full((n, width), n, dtype=np.float32)}, n)


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


def test_auto_dispatch_takes_turns_on_the_loop_only_for_one_interpreter_on_one_core() -> None:
    assert dispatch_mode(10.0, BatchingConfig(), 2, 2) == "inline"  # faster than a hop to a thread
    assert dispatch_mode(7000.0, BatchingConfig(), 1, 1) == "turns"
    assert dispatch_mode(7000.0, BatchingConfig(), 1, 2) == "threads"  # the loop reads on while the model runs
    assert dispatch_mode(7000.0, BatchingConfig(), 2, 1) == "threads"  # two interpreters run at once on threads
    assert dispatch_mode(7000.0, BatchingConfig(8), 1, 1) == "threads"  # a batch fills while one runs
    assert dispatch_mode(200_000.0, BatchingConfig(), 1, 1) == "threads"  # a probe would wait 0.2 s behind it
    assert dispatch_mode(None, BatchingConfig(), 1, 1) == "threads"  # not timed: its length is unknown


# --- warmup records -------------------------------------------------------------------------------------


def test_server_config_travels_to_worker_processes_intact(tmp_path: Path) -> None:
    from builder.server.config import ServerConfig, config_from_json, config_to_json
    from builder.server.core.model_config import ModelSource

    config = ServerConfig(model_path=tmp_path / "m.tflite", model_name="digits", version=3, runtime="openvino",
                          runtime_reason="auto: faster", workers=4, threads=2, batching=BatchingConfig(16, 250),
                          max_body_bytes=4096, dispatch="threads")
    assert config_from_json(config_to_json(config)) == config
    # paths, optional paths and the model sources (nested dataclasses, tuples, labels) come back as they went
    sources = (ModelSource("digits", tmp_path / "base", "specific", 2, (1, 3), {"stable": 1}),
               ModelSource("other", tmp_path / "other"))
    config = ServerConfig(model_path=tmp_path / "base", model_name="digits", samples_path=tmp_path / "samples.npz",
                          sources=sources, poll_seconds=1.5, tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "k.pem",
                          access_log=True, signature_name="predict", signature_required=True)
    assert config_from_json(config_to_json(config)) == config


# --- the package workflow on the fake engine ------------------------------------------------------------

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "serve" / "tiny_conv.tflite"




def test_booleans_among_numbers_are_refused_unless_the_body_has_none() -> None:
    from builder.server.protocols.jsoncodec import may_hold_booleans, to_typed_array

    spec = TensorSpec("x", "float32", (None, 2))
    with pytest.raises(RequestError, match="booleans"):
        to_typed_array([[0.5, True]], spec, "x")
    assert to_typed_array([[0.5, 1]], spec, "x").tolist() == [[0.5, 1.0]]
    assert may_hold_booleans(b'{"instances": [[true, 1]]}') and not may_hold_booleans(b'{"instances": [[0, 1]]}')
    with pytest.raises(RequestError, match="out of range"):  # rounds to float32's max, still refused
        to_typed_array([[3.4028235e38 * (1 + 2**-30), 0.0]], spec, "x")
