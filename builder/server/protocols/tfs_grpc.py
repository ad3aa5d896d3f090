"""TensorFlow Serving's gRPC API (port 8500): PredictionService.Predict/GetModelMetadata, ModelService.GetModelStatus.

The front listens (`grpc_front`) and hands each call's serialized message to a model server, where these
handlers (declared in `routes`, as every REST route is) answer it through the same data plane, batcher and
interpreters as a REST request, over our own message classes (`tfs_proto`): no generated stubs, no
TensorFlow. Errors are raised and written by the router as gRPC status codes as TF Serving uses them
(`core.outcome`): INVALID_ARGUMENT for a bad request, NOT_FOUND for an unknown model or version.
Replies carry `tensor_content` (raw bytes) when the request did, else the typed value fields, so clients
that read `float_val` directly keep working and `tf.make_ndarray` reads either.
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
from builder.wire.predict_split import parse_predict
from builder.wire.tensors import ENUM_OF_DTYPE, WireError, fill_proto, read_tensor

if TYPE_CHECKING:
    from builder.server.routes import Context

def _address(spec: Any) -> tuple[str, int | None, str | None]:
    """The model a ModelSpec names: its name, version (a wrapped integer, set or not) and label."""
    return spec.name, spec.version.value if spec.HasField("version") else None, spec.version_label or None


@dataclass(frozen=True)
class PredictCodec:
    """A PredictRequest's tensors into a call, and the outputs into a PredictResponse (raw `tensor_content`
    when the request sent it, else the typed value fields). `contents`: inputs' tensor_content read in place
    where they were cut out of the message before it was parsed (`predict_split`)."""

    contents: Mapping[str, Any] = field(default_factory=dict)

    def decode(self, served: ServedModel, body: Any) -> tuple[Call, bool]:
        """The call (with the outputs asked for), and what its reply needs: whether every input came as raw
        `tensor_content` (decided here, where each tensor's bytes are read once: every read of a protobuf
        bytes field copies it, ~16 µs for a 600 KB image on a warm cache)."""
        signature = choose_signature(body.model_spec.signature_name, served.signatures, served.default_signature)
        try:
            read = {name: read_tensor(tensor, f"inputs.{name}", self.contents.get(name))
                    for name, tensor in body.inputs.items()}
        except WireError as error:
            raise RequestError(str(error)) from None
        raw = bool(read) and all(content for _, content in read.values())
        call = make_call(signature, {name: array for name, (array, _) in read.items()}, served.max_request_batch,
                         list(body.output_filter))
        return call, raw

    def encode(self, served: ServedModel, call: Call, content: bool, outputs: Mapping[str, np.ndarray]) -> Any:
        """The reply: the outputs the call asked for (the data plane answered only those), in the order asked,
        else in the signature's; as raw `tensor_content` when every input came so."""
        signature = served.signatures[call.signature]
        response = pb.PredictResponse()
        _spec(response.model_spec, served.name, served.version, signature.name)
        picked = outputs if call.outputs else {spec.name: outputs[spec.name] for spec in signature.outputs}
        for name, value in picked.items():
            fill_proto(response.outputs[name], value, content)
        return response


def _message(kind: Any, body: Any) -> Any:
    try:
        return kind.FromString(body)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: not a message of this kind
        raise RequestError("malformed request message") from None


def read_predict(body: Any) -> tuple[str, tuple[Any, Mapping[str, Any]]]:
    """A PredictRequest as the route table reads it: the model it names, and the message with its large
    tensors read where they lie (`predict_split`)."""
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

