"""The Open Inference Protocol's binary tensor data extension, both ends: what a client writes and reads, and
the framing and datatypes the server parses with.

A request or answer is a JSON header followed by raw tensor bytes; `Inference-Header-Content-Length` says
where the JSON ends, each tensor's `parameters.binary_data_size` how many bytes are its own. Numbers travel
as little-endian values; strings (datatype BYTES) as a 4-byte little-endian length before each element.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from builder.wire.tensors import TF_DTYPES, WireError

HEADER_LENGTH = "inference-header-content-length"
#: v2 datatype <-> numpy dtype name ("object": numpy object arrays of bytes).
DATATYPES = {
    "BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "INT8": "int8",
    "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16", "FP32": "float32", "FP64": "float64",
    "BYTES": "object",
}
if "bfloat16" in TF_DTYPES:  # where numpy can spell it (`builder.wire.tensors`)
    DATATYPES["BF16"] = "bfloat16"
DATATYPE_OF = {numpy: v2 for v2, numpy in DATATYPES.items()}


def encode_bytes(array: np.ndarray) -> bytes:
    """An array of strings (bytes or str) in the BYTES framing, row-major."""
    items = [v.encode() if isinstance(v, str) else bytes(v) for v in array.reshape(-1)]
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def decode_bytes(data: memoryview | bytes, count: int, where: str) -> np.ndarray:
    """A BYTES tensor's binary data as an object array of `count` bytes values; WireError when the framing
    does not hold exactly that many."""
    values: list[bytes] = []
    view, offset = memoryview(data), 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise WireError(f"{where}: BYTES data ends inside a 4-byte length prefix")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise WireError(f"{where}: BYTES element of {length} bytes runs past its binary_data_size")
        values.append(bytes(view[offset:offset + length]))
        offset += length
    if len(values) != count:
        raise WireError(f"{where}: {len(values)} BYTES elements in the binary data for {count} values")
    array = np.empty(count, dtype=object)
    array[:] = values
    return array


def tensor_bytes(array: np.ndarray) -> tuple[str, bytes]:
    """(datatype, binary data) of one tensor."""
    if array.dtype.kind in "OSU":
        return "BYTES", encode_bytes(array)
    array = np.ascontiguousarray(array)
    return DATATYPE_OF[array.dtype.name], array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def infer_request(inputs: Mapping[str, np.ndarray], binary_output: bool = True,
                  request_id: str | None = None) -> tuple[bytes, dict[str, str]]:
    """A client's infer body with every input as binary data, and the headers it needs."""
    payloads = {name: tensor_bytes(np.asarray(value)) for name, value in inputs.items()}
    document: dict[str, Any] = {
        "inputs": [{"name": name, "shape": list(np.shape(inputs[name])), "datatype": datatype,
                    "parameters": {"binary_data_size": len(data)}} for name, (datatype, data) in payloads.items()],
        "parameters": {"binary_data_output": binary_output},
    }
    if request_id is not None:
        document["id"] = request_id
    header = json.dumps(document).encode()
    body = header + b"".join(data for _, data in payloads.values())
    return body, {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}


def infer_outputs(body: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """A client's reading of an infer answer (JSON `data` or binary data) as arrays by output name."""
    cut = int(header_length) if header_length is not None else len(body)
    document = json.loads(body[:cut])
    outputs: dict[str, np.ndarray] = {}
    offset = cut
    for tensor in document["outputs"]:
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        count = int(np.prod(tensor["shape"], dtype=np.int64))
        if tensor["datatype"] == "BYTES":
            if size is None:
                values = np.empty(count, dtype=object)
                values[:] = [v.encode() if isinstance(v, str) else v for v in np.asarray(tensor["data"]).reshape(-1)]
            else:
                values = decode_bytes(body[offset:offset + size], count, tensor["name"])
                offset += size
            outputs[tensor["name"]] = values.reshape(tensor["shape"])
            continue
        dtype = np.dtype(DATATYPES[tensor["datatype"]])
        if size is None:
            outputs[tensor["name"]] = np.asarray(tensor["data"], dtype=dtype).reshape(tensor["shape"])
            continue
        outputs[tensor["name"]] = np.frombuffer(body[offset:offset + size], dtype=dtype.newbyteorder("<")).astype(
            dtype).reshape(tensor["shape"])
        offset += size
    return outputs
