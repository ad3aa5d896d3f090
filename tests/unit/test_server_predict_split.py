"""A large PredictRequest read in place (`tfs_grpc.parse_predict`) against protobuf reading it whole: the same tensors,
the same other fields, and the same refusals, for messages of every shape a client sends and for broken ones."""

from __future__ import annotations

import random

import numpy as np
import pytest

from builder.wire import tfs_proto as pb
from builder.server.protocols.tfs_grpc import SPLIT_FROM_BYTES, parse_predict, split_contents
from builder.wire.tensors import WireError, fill_proto, read_tensor


def _request(inputs: dict[str, np.ndarray], content: bool = True, version: int | None = 3) -> pb.PredictRequest:
    request = pb.PredictRequest()
    request.model_spec.name = "m"
    request.model_spec.signature_name = "serving_default"
    if version is not None:
        request.model_spec.version.value = version
    for name, array in inputs.items():
        fill_proto(request.inputs[name], array, content)
    request.output_filter.append("probs")
    return request


def _big(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": rng.random((1, 96, 96, 3), dtype=np.float32), "ids": rng.integers(0, 9, (1, 7)).astype(np.int64),
            "mask": rng.random((1, 7)) > 0.5}


def _read(message: pb.PredictRequest, contents: dict[str, memoryview]) -> dict[str, tuple[np.ndarray, bool] | str]:
    """Each input as read for the model, or the refusal a client would get for it."""
    read: dict[str, tuple[np.ndarray, bool] | str] = {}
    for name, tensor in message.inputs.items():
        try:
            read[name] = read_tensor(tensor, name, contents.get(name))
        except WireError as error:
            read[name] = str(error)
    return read


def _same_as_protobuf(body: bytes) -> None:
    whole = pb.PredictRequest.FromString(body)
    message, contents = parse_predict(body)
    ours, theirs = _read(message, contents), _read(whole, {})
    assert ours.keys() == theirs.keys()
    for name in ours:
        if isinstance(theirs[name], str):
            assert ours[name] == theirs[name]  # the same refusal
            continue
        (a, raw_a), (b, raw_b) = ours[name], theirs[name]  # type: ignore[misc]
        same = a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes()  # bit for bit
        assert a.dtype == b.dtype and a.shape == b.shape and same and raw_a == raw_b, name
    for tensor in (*message.inputs.values(), *whole.inputs.values()):
        tensor.ClearField("tensor_content")
    assert message == whole  # every other field alike


def test_a_large_request_has_its_tensors_read_in_place_and_everything_else_as_protobuf_reads_it() -> None:
    body = _request(_big()).SerializeToString()
    assert len(body) >= SPLIT_FROM_BYTES
    message, contents = parse_predict(body)
    assert set(contents) == {"image", "ids", "mask"}
    assert all(view.obj is body or view.nbytes == 0 for view in contents.values())  # views of the message itself
    assert not message.inputs["image"].tensor_content  # cut out before protobuf parsed the rest
    _same_as_protobuf(body)


@pytest.mark.parametrize("content", [True, False])
def test_typed_values_strings_and_small_requests_read_the_same(content: bool) -> None:
    inputs = {**_big(1), "text": np.array([[b"a", b"\xff\x00"]], dtype=object)}
    _same_as_protobuf(_request(inputs, content).SerializeToString())
    _same_as_protobuf(_request({"x": np.ones((1, 3), np.float32)}, content, version=None).SerializeToString())


def test_the_last_entry_for_a_name_counts_as_in_protobuf() -> None:
    first = _request(_big(2)).SerializeToString()
    later = _request({"image": np.zeros((1, 2), np.float32)}, content=False).SerializeToString()
    merged = first + later  # concatenated messages merge: map entries by name, the later one wins
    _same_as_protobuf(merged)
    message, contents = parse_predict(merged)
    assert "image" not in contents and read_tensor(message.inputs["image"], "image", None)[0].shape == (1, 2)


def test_the_last_of_several_tensor_contents_counts() -> None:
    image = np.arange(6, dtype=np.float32).reshape(1, 6)
    tensor = pb.TensorProto()
    fill_proto(tensor, image)
    extra = pb.TensorProto(tensor_content=(image + 1).tobytes()).SerializeToString()  # field 4 once more
    entry = pb.PredictRequest()
    entry.inputs["image"].MergeFromString(tensor.SerializeToString() + extra)
    padded = _request(_big(3))
    padded.inputs["image"].CopyFrom(entry.inputs["image"])
    body = padded.SerializeToString()
    assert split_contents(body) is not None  # read in place, not left to protobuf
    _same_as_protobuf(body)
    message, contents = parse_predict(body)
    assert read_tensor(message.inputs["image"], "image", contents.get("image"))[0].tolist() == [[1, 2, 3, 4, 5, 6]]


def test_a_string_tensor_sent_as_tensor_content_is_refused_as_before() -> None:
    request = _request(_big(4))
    request.inputs["text"].dtype = 7  # DT_STRING
    request.inputs["text"].tensor_shape.dim.add(size=1)
    request.inputs["text"].tensor_content = b"abc"
    message, contents = parse_predict(request.SerializeToString())
    with pytest.raises(WireError, match="DT_STRING values go in string_val"):
        read_tensor(message.inputs["text"], "inputs.text", contents.get("text"))


def test_broken_messages_are_refused_or_read_exactly_as_protobuf_does() -> None:
    body = _request(_big(5)).SerializeToString()
    rng = random.Random(7)
    refused = 0
    for trial in range(600):
        broken = bytearray(body)
        if trial % 3 == 0:
            broken = broken[: rng.randrange(SPLIT_FROM_BYTES, len(broken))]  # cut short
        else:
            for _ in range(rng.randint(1, 3)):  # a few bytes changed, most often in the heads around the tensors
                spot = rng.randrange(0, 200) if rng.random() < 0.7 else rng.randrange(len(broken))
                broken[spot] = rng.randrange(256)
        data = bytes(broken)
        try:
            pb.PredictRequest.FromString(data)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            refused += 1
            with pytest.raises(Exception):  # noqa: B017 - whatever protobuf raises, raised here too
                parse_predict(data)
            continue
        _same_as_protobuf(data)
    assert refused > 50  # the trials did reach broken messages
