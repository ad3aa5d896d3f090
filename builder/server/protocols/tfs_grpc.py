"""TensorFlow Serving's gRPC API (port 8500): PredictionService.Predict/GetModelMetadata, ModelService.GetModelStatus.

The front listens (`grpc_front`) and hands each call's serialized message to a model server, where these
handlers (declared in `routes`, as every REST route is) answer it through the same data plane, batcher and
interpreters as a REST request, over our own message classes (`tfs_proto`): no generated stubs, no
TensorFlow. Errors are raised and written by the router as gRPC status codes as TF Serving uses them
(`core.outcome`): INVALID_ARGUMENT for a bad request, NOT_FOUND for an unknown model or version.
Replies carry `tensor_content` (raw bytes) when the request did, else the typed value fields, so clients
that read `float_val` directly keep working and `tf.make_ndarray` reads either. A large PredictRequest is read
in place (`parse_predict`): its tensors' bytes are used where they lie, in the shared memory the front wrote them to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from builder.server.process.messages import Answer, Request
from builder.server.core.call import Call, RequestError, choose_signature, make_call
from builder.server.protocols.tfs_rest import PREDICT_METHOD
from builder.wire.tensors import wire_shape
from builder.server.core.dataplane import ServedModel
from builder.wire import tfs_proto as pb
from builder.wire.tensors import ENUM_OF_DTYPE, WireError, fill_protos, read_tensors

if TYPE_CHECKING:
    from builder.server.routes import Context

def _address(spec: Any) -> tuple[str, int | None, str | None]:
    """The model a ModelSpec names: its name, version (a wrapped integer, set or not) and label."""
    return spec.name, spec.version.value if spec.HasField("version") else None, spec.version_label or None


@dataclass(frozen=True)
class PredictCodec:
    """A PredictRequest's tensors into a call, and the outputs into a PredictResponse (raw `tensor_content`
    when the request sent it, else the typed value fields). `contents`: inputs' tensor_content read in place
    where they were cut out of the message before it was parsed (`parse_predict`)."""

    contents: Mapping[str, Any] = field(default_factory=dict)

    def decode(self, served: ServedModel, body: Any) -> tuple[Call, bool]:
        """The call (with the outputs asked for), and what its reply needs: whether every input came as raw
        `tensor_content` (decided here, where each tensor's bytes are read once: every read of a protobuf
        bytes field copies it, ~16 µs for a 600 KB image on a warm cache)."""
        signature = choose_signature(body.model_spec.signature_name, served.signatures, served.default_signature)
        try:
            arrays, raw = read_tensors(body.inputs, self.contents, "inputs")
        except WireError as error:
            raise RequestError(str(error)) from None
        call = make_call(signature, arrays, served.max_request_batch, list(body.output_filter))
        return call, raw

    def encode(self, served: ServedModel, call: Call, content: bool, outputs: Mapping[str, np.ndarray]) -> Any:
        """The reply: the outputs the call asked for (the data plane answered only those), in the order asked,
        else in the signature's; as raw `tensor_content` when every input came so."""
        signature = served.signatures[call.signature]
        response = pb.PredictResponse()
        _spec(response.model_spec, served.name, served.version, signature.name)
        picked = outputs if call.outputs else {spec.name: outputs[spec.name] for spec in signature.outputs}
        fill_protos(response.outputs, picked, content)
        return response


def _message(kind: Any, body: Any) -> Any:
    try:
        return kind.FromString(body)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: not a message of this kind
        raise RequestError("malformed request message") from None


def read_predict(body: Any) -> tuple[str, tuple[Any, Mapping[str, Any]]]:
    """A PredictRequest as the route table reads it: the model it names, and the message with its large
    tensors read where they lie (`parse_predict`)."""
    try:
        message, contents = parse_predict(body)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: not a message of this kind
        raise RequestError("malformed request message") from None
    return message.model_spec.name, (message, contents)


def read_metadata(body: Any) -> tuple[str, Any]:
    message = _message(pb.GetModelMetadataRequest, body)
    return message.model_spec.name, message


def read_status(body: Any) -> tuple[str, Any]:
    message = _message(pb.GetModelStatusRequest, body)
    return message.model_spec.name, message


async def predict(context: Context, request: Request, read: tuple[Any, Mapping[str, Any]]) -> Answer:
    """PredictionService.Predict: the message's tensors into a call, the call run, the outputs into a reply."""
    message, contents = read
    served = context.plane.resolve(*_address(message.model_spec))
    codec = PredictCodec(contents)
    call, kept = codec.decode(served, message)
    reply = codec.encode(served, call, kept, await served.predict(call))
    return Answer(0, reply.SerializeToString())


async def get_model_metadata(context: Context, request: Request, message: Any) -> Answer:
    """PredictionService.GetModelMetadata: the signatures, as TF Serving packs them."""
    metadata = context.plane.metadata(*_address(message.model_spec))
    fields = list(message.metadata_field)
    if not fields:
        raise RequestError("GetModelMetadataRequest must specify at least one metadata_field")
    unsupported = [f for f in fields if f != "signature_def"]
    if unsupported:
        raise RequestError(f"Metadata field {unsupported[0]} is not supported")
    response = pb.GetModelMetadataResponse()
    _spec(response.model_spec, metadata.name, metadata.version, "")
    signature_map = signature_def_map(metadata.signatures)
    entry = response.metadata["signature_def"]
    entry.type_url = pb.TYPE_URL_PREFIX + signature_map.DESCRIPTOR.full_name
    entry.value = signature_map.SerializeToString()
    return Answer(0, response.SerializeToString())


async def get_model_status(context: Context, request: Request, message: Any) -> Answer:
    """ModelService.GetModelStatus: every served version, or the one addressed, AVAILABLE."""
    response = pb.GetModelStatusResponse()
    for version in context.plane.status(*_address(message.model_spec)):
        status = response.model_version_status.add(version=version, state=pb.MODEL_STATES["AVAILABLE"])
        status.status.error_code = 0
    return Answer(0, response.SerializeToString())


def _spec(target: Any, name: str, version: int, signature: str) -> None:
    target.name = name
    target.version.value = version
    target.signature_name = signature


def signature_def_map(signatures: Mapping[str, Any]) -> Any:
    """The model's signatures as TF Serving's `SignatureDefMap` (what GetModelMetadata packs into an Any)."""
    result = pb.SignatureDefMap()
    for signature in signatures.values():
        target = result.signature_def[signature.name]
        target.method_name = PREDICT_METHOD
        for specs, infos in ((signature.inputs, target.inputs), (signature.outputs, target.outputs)):
            for spec in specs:
                info = infos[spec.name]
                info.name = spec.name
                info.dtype = ENUM_OF_DTYPE.get(spec.dtype, 0)
                for size in wire_shape(spec):
                    info.tensor_shape.dim.add(size=size)
    return result


# --- reading a PredictRequest in place -------------------------------------------------------------------------
#
# A large PredictRequest read without copying its tensors: each input's `tensor_content` is found where it lies
# in the serialized message and handed on as a view of it.
#
# Parsing a message with protobuf (upb) copies it, and every read of a bytes field copies that field again: for
# a 600 KB image that is two copies of 600 KB before the model's own, each ~16 us on a warm cache and several
# times that on the cold one a large model's call leaves behind. Here the message is walked once at the wire
# level, every input's `tensor_content` is cut out, and protobuf parses only what is left (names, dtypes, shapes:
# a few dozen bytes). The tensors' bytes are then read in place: in a model process, in the shared memory the
# front wrote the message to.
#
# Only what this walk reads with certainty is taken: anything unusual (a map entry holding its tensor in two
# pieces to be merged, a group, a truncated field, a name that is not UTF-8) returns None and the message is
# parsed whole by protobuf, which accepts or refuses it as it always does. Protobuf's rules are kept where they
# apply: the last of several `tensor_content` fields counts, and so does the last map entry for a name.

#: Below this a message is parsed whole: the copies cost less than the walk (~15 us of Python).
SPLIT_FROM_BYTES = 64 * 1024
#: Field numbers: PredictRequest.inputs (a map: entries of key 1, value 2) and TensorProto.tensor_content.
_INPUTS, _KEY, _VALUE, _CONTENT = 2, 1, 2, 4
_LENGTH_DELIMITED = 2


class _Unusual(Exception):
    """A layout this walk leaves to protobuf."""


def parse_predict(body: bytes | bytearray | memoryview) -> tuple[Any, dict[str, memoryview]]:
    """The PredictRequest in `body`, and for a large one each input's `tensor_content` as a view of `body` (cut
    out of the parsed message, whose `tensor_content` is then empty); protobuf's DecodeError for a malformed one."""
    if len(body) >= SPLIT_FROM_BYTES:
        split = split_contents(body)
        if split is not None:
            stripped, contents = split
            try:
                return pb.PredictRequest.FromString(stripped), contents
            except Exception:  # noqa: BLE001 - protobuf's DecodeError: let it judge the whole message below
                pass
    return pb.PredictRequest.FromString(body), {}


def split_contents(body: bytes | bytearray | memoryview) -> tuple[bytes, dict[str, memoryview]] | None:
    """(the message without any input's `tensor_content`, {input name: its tensor_content as a view of body}),
    or None when the layout is one to leave to protobuf."""
    view = memoryview(body).cast("B")
    pieces: list[bytes | memoryview] = []
    contents: dict[str, memoryview] = {}
    try:
        for number, wire, tag_start, payload, end in _fields(view, 0, len(view)):
            if number != _INPUTS or wire != _LENGTH_DELIMITED:
                pieces.append(view[tag_start:end])
                continue
            name, tensor, content = _entry(view, payload, end)
            entry = _field(_KEY, name.encode()) + _field(_VALUE, tensor)
            pieces.append(_field(_INPUTS, entry))
            if content is None:
                contents.pop(name, None)  # a later entry for a name replaces an earlier one whole
            else:
                contents[name] = content
    except _Unusual:
        return None
    return b"".join(pieces), contents


def _entry(view: memoryview, start: int, end: int) -> tuple[str, bytes, memoryview | None]:
    """A map entry's name, its TensorProto without tensor_content, and that content (None: it had none)."""
    name: str | None = None
    tensor: bytes | None = None
    content: memoryview | None = None
    for number, wire, _tag_start, payload, field_end in _fields(view, start, end):
        if wire != _LENGTH_DELIMITED or number not in (_KEY, _VALUE):
            raise _Unusual()
        if number == _KEY:
            if name is not None:
                raise _Unusual()
            try:
                name = str(view[payload:field_end], "utf-8")
            except UnicodeDecodeError:
                raise _Unusual() from None
        else:
            if tensor is not None:
                raise _Unusual()  # two pieces of one tensor, merged by protobuf
            kept: list[memoryview] = []
            for inner, inner_wire, inner_tag, inner_payload, inner_end in _fields(view, payload, field_end):
                if inner == _CONTENT and inner_wire == _LENGTH_DELIMITED:
                    content = view[inner_payload:inner_end]  # the last one counts
                else:
                    kept.append(view[inner_tag:inner_end])
            tensor = b"".join(kept)
    return name or "", tensor or b"", content


def _fields(view: memoryview, start: int, end: int) -> Any:
    """(number, wire type, where its tag starts, where its payload starts, where it ends) of each field."""
    position = start
    while position < end:
        tag_start = position
        tag, position = _varint(view, position, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, field_end = _varint(view, position, end)
        elif wire == 1:
            field_end = position + 8
        elif wire == 5:
            field_end = position + 4
        elif wire == _LENGTH_DELIMITED:
            length, position = _varint(view, position, end)
            field_end = position + length
        else:
            raise _Unusual()  # groups
        if number == 0 or field_end > end:
            raise _Unusual()
        yield number, wire, tag_start, position, field_end
        position = field_end


def _varint(view: memoryview, position: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while position < end and shift < 64:
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    raise _Unusual()


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _encode_varint(number << 3 | _LENGTH_DELIMITED) + _encode_varint(len(payload)) + payload


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
