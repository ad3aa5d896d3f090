"""TensorFlow Serving's gRPC API (port 8500): PredictionService.Predict/GetModelMetadata, ModelService.GetModelStatus.

The front listens (`grpc_front`) and hands each call's serialized message to a model host, where `Servicer`
answers it through the same data plane, batcher and interpreters as a REST request. Handlers are generic (`method_handlers_generic_handler`) over
our own message classes (`tfs_proto`): no generated stubs, no TensorFlow. Errors are gRPC status codes as
TF Serving uses them: INVALID_ARGUMENT for a bad request, NOT_FOUND for an unknown model or version.
Replies carry `tensor_content` (raw bytes) when the request did, else the typed value fields, so clients
that read `float_val` directly keep working and `tf.make_ndarray` reads either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from builder.server.answers import failure
from builder.server.dataplane import CLIENT_GONE, Address, DataPlane
from builder.server.protocol import PREDICT_METHOD, PredictCall, RequestError, wire_shape
from builder.server.served import ServedModel, check_output_names, pick_outputs
from builder.wire import tfs_proto as pb
from builder.wire.tensors import ENUM_OF_DTYPE, WireError, fill_proto, read_tensor

CODE_OF_HTTP = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,
                413: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.UNAVAILABLE,
                CLIENT_GONE: grpc.StatusCode.CANCELLED, 500: grpc.StatusCode.INTERNAL}
ENTRYPOINT = "GRPC"


def _address(spec: Any) -> Address:
    """The model a ModelSpec names (its version is a wrapped integer, set or not)."""
    return Address(spec.name, spec.version.value if spec.HasField("version") else None, spec.version_label or None)


@dataclass(frozen=True)
class PredictCodec:
    """A PredictRequest's tensors into a call, and the outputs into a PredictResponse (raw `tensor_content`
    when the request sent it, else the typed value fields). `contents`: inputs' tensor_content read in place
    where they were cut out of the message before it was parsed (`predict_split`)."""

    contents: Mapping[str, Any] = field(default_factory=dict)

    def size(self, body: Any) -> int:
        return 0  # protobuf has decoded it: the tensors are views of its bytes

    def decode(self, served: ServedModel, body: Any) -> tuple[PredictCall, tuple[list[str], bool]]:
        """The call, and what its reply needs: the outputs asked for, and whether every input came as raw
        `tensor_content` (decided here, where each tensor's bytes are read once: every read of a protobuf
        bytes field copies it, ~16 µs for a 600 KB image on a warm cache)."""
        signature = served.signature(body.model_spec.signature_name)
        try:
            read = {name: read_tensor(tensor, f"inputs.{name}", self.contents.get(name))
                    for name, tensor in body.inputs.items()}
        except WireError as error:
            raise RequestError(str(error)) from None
        raw = bool(read) and all(content for _, content in read.values())
        call = served.call(signature, {name: array for name, (array, _) in read.items()})
        return call, (check_output_names(signature, list(body.output_filter)), raw)

    def encode(self, served: ServedModel, call: PredictCall, wanted_raw: tuple[list[str], bool],
               outputs: Mapping[str, np.ndarray]) -> Any:
        signature = served.signatures[call.signature]
        wanted, content = wanted_raw
        response = pb.PredictResponse()
        _spec(response.model_spec, served.name, served.version, signature.name)
        for name, value in pick_outputs(outputs, signature, wanted).items():
            fill_proto(response.outputs[name], value, content)
        return response


class Servicer:
    """The three RPCs over the data plane; every failure becomes a status code, never a dead stream."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    async def _answer(self, context: grpc.aio.ServicerContext, work: Callable[[], Any]) -> Any:
        """`work()`'s reply, or its failure as TF Serving's status code (`answers.failure`'s message)."""
        try:
            return await work()
        except grpc.aio.AbortError:
            raise
        except Exception as error:  # noqa: BLE001 - one failed call, the server lives on
            answer = failure(error)
            await context.abort(CODE_OF_HTTP.get(answer.status, grpc.StatusCode.INVALID_ARGUMENT), answer.message)

    async def predict(self, request: Any, context: grpc.aio.ServicerContext,
                      contents: Mapping[str, Any] | None = None) -> Any:
        async def read() -> Any:
            return request

        return await self._answer(context, lambda: self.plane.infer(
            ENTRYPOINT, _address(request.model_spec), read, PredictCodec(contents or {})))

    async def get_model_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            async with self.plane.request(ENTRYPOINT, "metadata", request.model_spec.name):
                address = _address(request.model_spec)
                metadata = self.plane.metadata(address.name, address.version, address.label)
                fields = list(request.metadata_field)
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
                return response

        return await self._answer(context, work)

    async def get_model_status(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            async with self.plane.request(ENTRYPOINT, "status", request.model_spec.name):
                address = _address(request.model_spec)
                response = pb.GetModelStatusResponse()
                for version in self.plane.status(address.name, address.version, address.label):
                    status = response.model_version_status.add(version=version, state=pb.MODEL_STATES["AVAILABLE"])
                    status.status.error_code = 0
                return response

        return await self._answer(context, work)


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


#: The RPCs the front accepts (any other is answered UNIMPLEMENTED by gRPC itself).
