"""Calls a serving image's smoke test makes over gRPC and the Open Inference Protocol, with the host's own
small dependencies: grpcio plus the server's message module (no tensorflow-serving-api, which needs all of
TensorFlow) and the standard library's HTTP client (no tritonclient). Each returns the outputs as arrays,
so the caller compares them with what the model should answer; failures raise `ProtocolCheckError` with
one line saying which call failed and why.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping

import numpy as np

from builder.errors import TfsmithError


class ProtocolCheckError(TfsmithError):
    """A protocol call of the smoke test failed (the image answers wrongly or not at all)."""


def check_grpc(host: str, port: int, model_name: str, version: int | None,
               inputs: Mapping[str, np.ndarray], timeout_s: float = 30.0) -> dict[str, np.ndarray]:
    """TF Serving's `PredictionService/Predict` with `tensor_content` inputs; the outputs by name.

    Also asks `ModelService/GetModelStatus` first: the version must be AVAILABLE."""
    import grpc

    import builder.server.tfs_proto as pb
    from builder.server.tensors import fill_proto, to_array

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        status_call = channel.unary_unary(f"/{pb.MODEL_SERVICE}/GetModelStatus",
                                          request_serializer=pb.GetModelStatusRequest.SerializeToString,
                                          response_deserializer=pb.GetModelStatusResponse.FromString)
        predict_call = channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/Predict",
                                           request_serializer=pb.PredictRequest.SerializeToString,
                                           response_deserializer=pb.PredictResponse.FromString)
        status_request = pb.GetModelStatusRequest()
        status_request.model_spec.name = model_name
        request = pb.PredictRequest()
        request.model_spec.name = model_name
        if version is not None:
            status_request.model_spec.version.value = version
            request.model_spec.version.value = version
        for name, value in inputs.items():
            fill_proto(request.inputs[name], np.asarray(value), content=True)
        try:
            status = status_call(status_request, timeout=timeout_s)
            states = [s.state for s in status.model_version_status]
            if pb.MODEL_STATES["AVAILABLE"] not in states:
                raise ProtocolCheckError(f"gRPC GetModelStatus {host}:{port}: {model_name} is not AVAILABLE "
                                         f"(states {states})")
            answer = predict_call(request, timeout=timeout_s)
        except grpc.RpcError as error:
            raise ProtocolCheckError(f"gRPC {host}:{port} {model_name}: {error.code().name}: "
                                     f"{error.details()}") from None
    return {name: to_array(tensor, name) for name, tensor in answer.outputs.items()}


V2_DATATYPES = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "int8": "INT8",
    "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16", "float32": "FP32", "float64": "FP64",
}
NUMPY_OF_V2 = {v2: numpy for numpy, v2 in V2_DATATYPES.items()}


def tensor_bytes(array: np.ndarray) -> tuple[str, bytes]:
    """(v2 datatype, binary data) of one tensor: raw little-endian values, or for strings (BYTES) each
    element as a 4-byte little-endian length and its bytes, as the binary tensor extension frames them."""
    if array.dtype.kind in "OSU":
        items = [v.encode() if isinstance(v, str) else bytes(v) for v in array.reshape(-1)]
        return "BYTES", b"".join(len(item).to_bytes(4, "little") + item for item in items)
    array = np.ascontiguousarray(array)
    return V2_DATATYPES[array.dtype.name], array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def unframe_bytes(data: bytes) -> list[bytes]:
    """The elements of a BYTES tensor's binary data (4-byte little-endian length, then the bytes, repeated)."""
    items, offset = [], 0
    while offset < len(data):
        length = int.from_bytes(data[offset:offset + 4], "little")
        items.append(bytes(data[offset + 4:offset + 4 + length]))
        offset += 4 + length
    return items


def check_v2(base_url: str, model_name: str, inputs: Mapping[str, np.ndarray],
             timeout_s: float = 30.0) -> dict[str, np.ndarray]:
    """Open Inference Protocol: `/v2/health/ready`, then `/v2/models/<m>/infer` with the binary tensor data
    extension both ways; the outputs by name."""
    base = base_url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=timeout_s) as ready:
            if ready.status != 200:
                raise ProtocolCheckError(f"{base}/v2/health/ready answered {ready.status}")
    except (urllib.error.URLError, OSError) as error:
        raise ProtocolCheckError(f"{base}/v2/health/ready: {error}") from None
    payloads = {name: tensor_bytes(np.asarray(value)) for name, value in inputs.items()}
    header = json.dumps({
        "inputs": [{"name": name, "shape": list(np.shape(inputs[name])), "datatype": datatype,
                    "parameters": {"binary_data_size": len(data)}} for name, (datatype, data) in payloads.items()],
        "parameters": {"binary_data_output": True},
    }).encode()
    body = header + b"".join(data for _, data in payloads.values())
    request = urllib.request.Request(f"{base}/v2/models/{model_name}/infer", data=body, method="POST", headers={
        "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            raw = answer.read()
            length = answer.headers.get("Inference-Header-Content-Length")
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace").strip()
        raise ProtocolCheckError(f"v2 infer {model_name}: HTTP {error.code}: "
                                 f"{text.splitlines()[0] if text else 'no body'}") from None
    except (urllib.error.URLError, OSError) as error:
        raise ProtocolCheckError(f"v2 infer {model_name}: {error}") from None
    cut = int(length) if length is not None else len(raw)
    document = json.loads(raw[:cut])
    outputs: dict[str, np.ndarray] = {}
    offset = cut
    for tensor in document["outputs"]:
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if tensor["datatype"] == "BYTES":
            if size is None:
                values = [v.encode() if isinstance(v, str) else v for v in np.asarray(tensor["data"]).reshape(-1)]
            else:
                values = unframe_bytes(raw[offset:offset + size])
                offset += size
            array = np.empty(len(values), dtype=object)
            array[:] = values
            outputs[tensor["name"]] = array.reshape(tensor["shape"])
            continue
        dtype = np.dtype(NUMPY_OF_V2[tensor["datatype"]])
        if size is None:
            outputs[tensor["name"]] = np.asarray(tensor["data"], dtype=dtype).reshape(tensor["shape"])
            continue
        outputs[tensor["name"]] = np.frombuffer(raw[offset:offset + size], dtype=dtype.newbyteorder("<")).astype(
            dtype).reshape(tensor["shape"])
        offset += size
    return outputs
