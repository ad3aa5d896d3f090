"""The Open Inference Protocol (KServe v2) over REST, with the binary tensor data extension.

What Triton, KServe, MLServer and their clients (`tritonclient`, the `kserve` SDK) speak (declared in `routes`):
  GET  /v2/health/live, /v2/health/ready        liveness; readiness (`health`: loaded and warmed, not draining)
  GET  /v2                                       server metadata and extensions
  GET  /v2/models/{m}[/versions/{v}]             model metadata (typed inputs/outputs)
  GET  /v2/models/{m}[/versions/{v}]/ready       model readiness
  POST /v2/models/{m}[/versions/{v}]/infer       typed tensors; JSON `data` or raw bytes after the JSON
                                                 header (`Inference-Header-Content-Length`)
The binary extension is the fast path for real-size inputs: the tensor bytes are used as they arrive
(`np.frombuffer`, no per-value decoding), which JSON can never match for a 224x224x3 image. String tensors
are the BYTES datatype: JSON strings in `data`, or in binary each element as a 4-byte little-endian length
followed by its bytes (the extension's framing, what tritonclient writes).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from builder.model.signature import STRING, SignatureSpec, TensorSpec
from builder.server.protocols import health, jsoncodec
from builder.server.protocols.answers import json_answer
from builder.server.core.dataplane import ModelMetadata, ServedModel
from builder.server.process.messages import Answer, Request
from builder.server.core.call import Call, RequestError, choose_signature, make_call
from builder.server.protocols.jsoncodec import may_hold_booleans, parse_json, to_typed_array
from builder.wire.tensors import wire_shape
from builder.wire.tensors import WireError
from builder.wire.v2_binary import DATATYPE_OF, DATATYPES, HEADER_LENGTH, decode_bytes, encode_bytes

if TYPE_CHECKING:
    from builder.server.routes import Context

HEADER_LENGTH_KEY = HEADER_LENGTH.lower().encode()
#: numpy dtype -> v2 datatype, and each dtype's little-endian form (the wire's byte order), looked up by dtype
#: (a dtype's name is built anew each time it is read: too slow for every request).
DATATYPE_OF_DTYPE = {np.dtype(numpy): v2 for numpy, v2 in DATATYPE_OF.items()}
LITTLE_ENDIAN = {numpy: np.dtype(numpy).newbyteorder("<") for numpy in DATATYPES.values()}
LITTLE_ENDIAN_OF = {np.dtype(numpy): np.dtype(numpy).newbyteorder("<") for numpy in DATATYPES.values()}
NATIVE_IS_LITTLE = sys.byteorder == "little"
TENSOR_KEYS = {"name", "shape", "datatype", "data", "parameters"}
REQUEST_KEYS = {"id", "inputs", "outputs", "parameters"}


def _check_parameters(value: Any, known: dict[str, type], where: str) -> dict[str, Any]:
    """A `parameters` object holding only the parameters this server acts on, of their types (400 otherwise:
    a parameter silently ignored would be a request answered differently from what was asked)."""
    if not isinstance(value, dict):
        raise RequestError(f"{where} must be an object")
    for key, item in value.items():
        if key not in known:
            raise RequestError(f"{where}: unsupported parameter {key!r} (supported: {', '.join(known)})")
        if not isinstance(item, known[key]) or (known[key] is int and isinstance(item, bool)):
            raise RequestError(f"{where}.{key} must be {known[key].__name__}")
    return value


def model_metadata(metadata: ModelMetadata) -> dict[str, Any]:
    """The v2 model metadata: the default signature's tensors, typed."""
    def tensors(specs: tuple[TensorSpec, ...]) -> list[dict[str, Any]]:
        return [{"name": s.name, "datatype": DATATYPE_OF.get(s.dtype, s.dtype.upper()), "shape": wire_shape(s)}
                for s in specs]

    signature = metadata.signature()
    return {"name": metadata.name, "versions": [str(v) for v in metadata.versions], "platform": metadata.platform,
            "inputs": tensors(signature.inputs), "outputs": tensors(signature.outputs)}


def split_body(body: bytes, header_length: str | None, standard: bool = False) -> tuple[Any, memoryview]:
    """(the JSON request, the binary tail) of an infer body; the tail is empty without the extension.
    `standard`: the JSON is read by the standard library straight away (`jsoncodec.loads`)."""
    if header_length is None:
        return parse_json(body, standard), memoryview(b"")
    if not header_length.strip().isdigit() or int(header_length) > len(body):
        raise RequestError(f"Inference-Header-Content-Length {header_length!r} does not fit a {len(body)}-byte body")
    cut = int(header_length)
    return parse_json(bytes(body[:cut]), standard), memoryview(body)[cut:]


def parse_inputs(request: Any, signature: SignatureSpec, binary: memoryview, booleans: bool = True
                 ) -> dict[str, np.ndarray]:
    """The request's `inputs` as arrays of the model's dtypes; RequestError 400 naming what is wrong."""
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list) or not request["inputs"]:
        raise RequestError("infer request must be a JSON object with a non-empty 'inputs' list")
    if not isinstance(request.get("id", ""), str):
        raise RequestError("'id' must be a string")
    unknown = sorted(set(request) - REQUEST_KEYS)
    if unknown:
        raise RequestError(f"unknown request field(s) {', '.join(unknown)}")
    _check_parameters(request.get("parameters", {}), {"binary_data_output": bool}, "parameters")
    specs = {s.name: s for s in signature.inputs}
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for i, tensor in enumerate(request["inputs"]):
        where = f"inputs[{i}]"
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
            raise RequestError(f"{where}: needs 'name', 'shape', 'datatype' and 'data' (or binary_data_size)")
        name = tensor["name"]
        where = f"inputs[{i}] ({name})"
        unknown = sorted(set(tensor) - TENSOR_KEYS)
        if unknown:
            raise RequestError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if name not in specs:
            raise RequestError(f"{where}: unknown input; this model takes {', '.join(specs)}")
        if name in arrays:
            raise RequestError(f"{where}: input given twice")
        shape = tensor.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise RequestError(f"{where}: 'shape' must be a list of non-negative integers")
        datatype = tensor.get("datatype")
        dtype = DATATYPES.get(datatype) if isinstance(datatype, str) else None
        if dtype is None:
            raise RequestError(f"{where}: unsupported datatype {tensor.get('datatype')!r}; use one of "
                               f"{', '.join(DATATYPES)}")
        if dtype != specs[name].dtype:
            raise RequestError(f"{where}: datatype {tensor['datatype']} does not match the model's "
                               f"{DATATYPE_OF.get(specs[name].dtype, specs[name].dtype)}")
        size = math.prod(shape)
        parameters = _check_parameters(tensor.get("parameters", {}), {"binary_data_size": int}, f"{where}.parameters")
        if "binary_data_size" in parameters:
            length = parameters["binary_data_size"]
            if not isinstance(length, int) or isinstance(length, bool) or length < 0:
                raise RequestError(f"{where}: binary_data_size must be a non-negative integer")
            if offset + length > len(binary):
                raise RequestError(f"{where}: binary_data_size {length} runs past the end of the body")
            if dtype == STRING:
                try:
                    arrays[name] = decode_bytes(binary[offset:offset + length], size, where).reshape(shape)
                except WireError as error:
                    raise RequestError(str(error)) from None
                offset += length
                continue
            wire = LITTLE_ENDIAN[dtype]
            if length != size * wire.itemsize:
                raise RequestError(f"{where}: binary_data_size {length} does not fit shape {shape} of {dtype}")
            array = np.frombuffer(binary[offset:offset + length], dtype=wire)
            offset += length
            arrays[name] = (array if NATIVE_IS_LITTLE else array.astype(dtype)).reshape(shape)
            continue
        if "data" not in tensor:
            raise RequestError(f"{where}: needs 'data' or parameters.binary_data_size")
        if not isinstance(tensor["data"], (list, np.ndarray)):  # an array: numbers read by `jsoncodec`'s fast path
            raise RequestError(f"{where}: 'data' must be a list of values")
        data = tensor["data"]
        if isinstance(data, np.ndarray) and data.dtype == dtype:  # read and typed by `jsoncodec.read_v2`
            flat = data.reshape(-1)
        else:
            flat = to_typed_array(data, TensorSpec(name, dtype, ()), where, booleans).reshape(-1)
        if flat.size != size:
            raise RequestError(f"{where}: {flat.size} values in 'data' for shape {shape} ({size} values)")
        arrays[name] = flat.reshape(shape)
    if offset != len(binary):
        raise RequestError(f"{len(binary) - offset} bytes of binary data after the inputs that none declares")
    return arrays


def binary_outputs(request: Mapping[str, Any], names: list[str]) -> tuple[list[str], set[str]]:
    """(outputs to answer, those to answer as raw bytes) from the request's `outputs` and `parameters`."""
    every = bool((request.get("parameters") or {}).get("binary_data_output", False))
    if "outputs" not in request:
        return names, set(names) if every else set()
    requested = request["outputs"]
    if not isinstance(requested, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str)
                                                  for o in requested):
        raise RequestError("'outputs' must be a list of objects with a 'name'")
    for i, output in enumerate(requested):
        if set(output) - {"name", "parameters"}:
            raise RequestError(f"outputs[{i}]: unknown field(s) {', '.join(sorted(set(output) - {'name', 'parameters'}))}")
        _check_parameters(output.get("parameters", {}), {"binary_data": bool}, f"outputs[{i}].parameters")
    wanted = [o["name"] for o in requested]
    binary = {o["name"] for o in requested if (o.get("parameters") or {}).get("binary_data", every)}
    return wanted, binary


def json_data(value: np.ndarray) -> list[Any] | None:
    """An output's flat JSON `data`; BYTES as strings, None when they are not UTF-8 (JSON cannot hold them:
    the answer then carries that output as binary data, which the extension lets a server do)."""
    if value.dtype != object:
        return value.reshape(-1).tolist()
    try:
        return [bytes(v).decode("utf-8") for v in value.reshape(-1)]
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class InferAnswer:
    """A v2 answer's body and its content headers (the binary extension's header length among them)."""

    body: bytes
    headers: tuple[tuple[bytes, bytes], ...]


JSON_ANSWER = ((b"content-type", b"application/json"),)


def infer_response(served: ServedModel, version: int, request: Mapping[str, Any], outputs: Mapping[str, np.ndarray],
                   order: list[str], binary: set[str]) -> InferAnswer:
    """The v2 answer: JSON, or JSON then raw output bytes (header length in Inference-Header-Content-Length)."""
    tensors, tail = [], []
    for name in order:
        value = np.asarray(outputs[name])
        entry: dict[str, Any] = {"name": name, "datatype": DATATYPE_OF_DTYPE[value.dtype], "shape": list(value.shape)}
        data = None if name in binary else json_data(value)
        if data is None:
            raw = (encode_bytes(value) if value.dtype == object
                   else np.ascontiguousarray(value, dtype=LITTLE_ENDIAN_OF[value.dtype]).tobytes())
            entry["parameters"] = {"binary_data_size": len(raw)}
            tail.append(raw)
        else:
            entry["data"] = data
        tensors.append(entry)
    answer: dict[str, Any] = {"model_name": served.name, "model_version": str(version), "outputs": tensors}
    if isinstance(request.get("id"), str):
        answer["id"] = request["id"]
    header = jsoncodec.dumps(answer)
    if not tail:
        return InferAnswer(header, JSON_ANSWER)
    return InferAnswer(b"".join([header, *tail]), ((b"content-type", b"application/octet-stream"),
                                                    (HEADER_LENGTH.encode(), str(len(header)).encode())))


#: What an infer answer needs of its request: the document, the outputs in order, those sent as binary.
Kept = tuple[Any, list[str], set[str]]
Decoded = tuple[Call, Kept]


@dataclass(frozen=True)
class InferCodec:
    """A v2 infer body (JSON `data`, read straight into numpy where `jsoncodec`'s fast path is sure, else the general
    path once; or the binary extension) into a call, and the outputs into the v2 answer."""

    header_length: str | None  # Inference-Header-Content-Length: the JSON's length before the binary data

    def size(self, body: bytes) -> int:
        """Only the JSON costs decoding time: a binary tail is used as it arrives (np.frombuffer)."""
        length = self.header_length
        return len(body) if length is None or not length.strip().isdigit() else min(len(body), int(length))

    def decode(self, served: ServedModel, body: bytes) -> Decoded:
        """The fast path's call once its structure check agrees (`jsoncodec.read_v2`: read and checked in one
        call); else the general path's. A request the fast path's document makes invalid is refused only once
        the check agrees (else the general path's document decides, and its refusal is the one a client
        gets)."""
        fast = jsoncodec.Left.PARSED if self.header_length is not None else jsoncodec.read_v2(body, DATATYPES)
        if isinstance(fast, jsoncodec.Left):
            return self._decode(served, body, fast)
        return self._call(served, body, fast, memoryview(b""))

    def _decode(self, served: ServedModel, body: bytes, left: jsoncodec.Left) -> Decoded:
        """The general path: the body decoded once by the decoder `left` names."""
        document, tail = split_body(body, self.header_length, standard=left is jsoncodec.Left.UNREADABLE)
        return self._call(served, body, document, tail)

    @staticmethod
    def _call(served: ServedModel, body: bytes, document: Any, tail: memoryview) -> Decoded:
        signature = carried(choose_signature("", served.signatures, served.default_signature))
        inputs = document.get("inputs") if isinstance(document, dict) else None
        lists = isinstance(inputs, list) and any(isinstance(tensor, dict) and isinstance(tensor.get("data"), list)
                                                 for tensor in inputs)  # only lists can hold a stray boolean
        arrays = parse_inputs(document, signature, tail,
                              lists and may_hold_booleans(bytes(body[:len(body) - len(tail)])))
        order, binary = binary_outputs(document, [s.name for s in signature.outputs])
        return make_call(signature, arrays, served.max_request_batch, order), (document, order, binary)

    def encode(self, served: ServedModel, call: Call, request: Kept,
               outputs: Mapping[str, np.ndarray]) -> InferAnswer:
        document, order, binary = request
        return infer_response(served, served.version, document, outputs, order, binary)


SERVER_METADATA = {"name": "tfsmith", "version": "1", "extensions": ["binary_tensor_data"]}


async def server_metadata(context: Context, request: Request) -> Answer:
    return json_answer(SERVER_METADATA)


async def metadata(context: Context, request: Request, name: str, version: str | None = None) -> Answer:
    """The model's typed inputs and outputs."""
    return json_answer(model_metadata(context.plane.metadata(name, version)))


async def model_ready(context: Context, request: Request, name: str, version: str | None = None) -> Answer:
    if context.plane.model_ready(name, version):
        return json_answer({"name": name, "ready": True})
    return health.not_ready()


def carried(signature: Any) -> Any:
    """The signature v2 calls, when v2 has a datatype for every tensor of it; else RequestError 400 in one line:
    v2 has no complex datatype. Checked where the request is decoded, so it costs no step of its own."""
    for kind, specs in (("input", signature.inputs), ("output", signature.outputs)):
        for spec in specs:
            if spec.dtype not in DATATYPE_OF:
                raise RequestError(f"{kind} {spec.name!r} is {spec.dtype}: v2 has no {spec.dtype.rstrip('0123456789')} "
                                   "datatype; ask over gRPC")
    return signature


async def infer(context: Context, request: Request, name: str, version: str | None = None) -> Answer:
    """Inference: JSON, or the binary extension (whose tensors stay where they lie: in a model process, in the
    shared memory the front wrote them to)."""
    plane = context.plane
    length = next((value for key, value in request.headers if key == HEADER_LENGTH_KEY), None)
    header_length = None if length is None else length.decode("latin-1")
    body = request.body
    if header_length is None and not isinstance(body, bytes):
        body = bytes(body)  # all of it is JSON
    codec = InferCodec(header_length)
    served, (call, kept) = await plane.read(name, version, None, codec.size(body),
                                            lambda served: codec.decode(served, body))
    answer = codec.encode(served, call, kept, await served.predict(call))
    return Answer(200, answer.body, answer.headers)
