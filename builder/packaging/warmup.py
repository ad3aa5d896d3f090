"""TF Serving warmup records, written (and read back) without TensorFlow Serving's Python package.

`assets.extra/tf_serving_warmup_requests` is a TFRecord file of `PredictionLog` protos. The
`tensorflow-serving-api` wheel pins its own TensorFlow and is not available for TF 2.21, so this module
encodes the handful of messages involved directly in protobuf's wire format, and frames them as TFRecords
(u64 LE length, masked CRC32C of the length, data, masked CRC32C of the data). Pure standard library, so the
same file can check a warmup file inside a slim container.

Messages used (tensorflow_serving/apis/*.proto, tensorflow/core/framework/*.proto):
  PredictionLog { PredictLog predict_log = 6; }
  PredictLog    { PredictRequest request = 1; }
  PredictRequest{ ModelSpec model_spec = 1; map<string, TensorProto> inputs = 2; }
  ModelSpec     { string name = 1; Int64Value version = 2; string signature_name = 3; }
  TensorProto   { DataType dtype = 1; TensorShapeProto tensor_shape = 2; bytes tensor_content = 4; }
  TensorShapeProto { repeated Dim dim = 2; }   Dim { int64 size = 1; }
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

# --- CRC32C (Castagnoli), as TFRecord frames use it ---------------------------------------------------

_CRC_TABLE: list[int] = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def read_tfrecords(blob: bytes) -> Iterator[bytes]:
    """The records of a TFRecord file; ValueError on a truncated frame or a CRC mismatch."""
    offset = 0
    while offset < len(blob):
        if offset + 12 > len(blob):
            raise ValueError(f"truncated record header at byte {offset}")
        header = blob[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[offset + 8 : offset + 12])
        if length_crc != masked_crc32c(header):
            raise ValueError(f"bad length CRC at byte {offset}")
        start, end = offset + 12, offset + 12 + length
        if end + 4 > len(blob):
            raise ValueError(f"truncated record at byte {offset}")
        data = blob[start:end]
        if struct.unpack("<I", blob[end : end + 4])[0] != masked_crc32c(data):
            raise ValueError(f"bad data CRC at byte {offset}")
        yield data
        offset = end + 4


# --- protobuf wire format ------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field_varint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _field_bytes(number: int, value: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(value)) + value


def decode_message(data: bytes) -> dict[int, list[int | bytes]]:
    """A message's fields by number (varints as int, length-delimited as bytes); enough to check records."""
    fields: dict[int, list[int | bytes]] = {}
    offset = 0

    def read_varint() -> int:
        nonlocal offset
        shift, result = 0, 0
        while True:
            if offset >= len(data):
                raise ValueError("truncated varint")
            byte = data[offset]
            offset += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    while offset < len(data):
        key = read_varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value: int | bytes = read_varint()
        elif wire == 2:
            length = read_varint()
            value = data[offset : offset + length]
            if len(value) != length:
                raise ValueError("truncated field")
            offset += length
        elif wire == 1:
            value, offset = data[offset : offset + 8], offset + 8
        elif wire == 5:
            value, offset = data[offset : offset + 4], offset + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


@dataclass(frozen=True)
class Tensor:
    """A dense tensor as TensorProto carries it: DataType number, shape, little-endian bytes."""

    dtype: int
    shape: tuple[int, ...]
    content: bytes


def encode_tensor(tensor: Tensor) -> bytes:
    dims = b"".join(_field_bytes(2, _field_varint(1, size)) for size in tensor.shape)
    return _field_varint(1, tensor.dtype) + _field_bytes(2, dims) + _field_bytes(4, tensor.content)


def decode_tensor(data: bytes) -> Tensor:
    fields = decode_message(data)
    shape_fields = decode_message(bytes(fields.get(2, [b""])[0]))  # type: ignore[arg-type]
    dims = tuple(int(decode_message(bytes(d)).get(1, [0])[0]) for d in shape_fields.get(2, []))  # type: ignore[arg-type]
    return Tensor(int(fields[1][0]), dims, bytes(fields.get(4, [b""])[0]))  # type: ignore[arg-type]


def encode_prediction_log(model_name: str, signature_name: str, inputs: Mapping[str, Tensor],
                          version: int | None = None) -> bytes:
    spec = _field_bytes(1, model_name.encode())
    if version is not None:
        spec += _field_bytes(2, _field_varint(1, version))  # google.protobuf.Int64Value { int64 value = 1; }
    spec += _field_bytes(3, signature_name.encode())
    request = _field_bytes(1, spec)
    for key in sorted(inputs):
        entry = _field_bytes(1, key.encode()) + _field_bytes(2, encode_tensor(inputs[key]))
        request += _field_bytes(2, entry)
    predict_log = _field_bytes(1, request)
    return _field_bytes(6, predict_log)


@dataclass(frozen=True)
class WarmupRequest:
    model_name: str
    signature_name: str
    version: int | None
    inputs: Mapping[str, Tensor]


def decode_prediction_log(data: bytes) -> WarmupRequest:
    """A PredictionLog holding a PredictLog; ValueError for anything else."""
    log = decode_message(data)
    if 6 not in log:
        raise ValueError("PredictionLog without predict_log (field 6)")
    request = decode_message(bytes(decode_message(bytes(log[6][0])).get(1, [b""])[0]))  # type: ignore[arg-type]
    spec = decode_message(bytes(request.get(1, [b""])[0]))  # type: ignore[arg-type]
    version = None
    if 2 in spec:
        version = int(decode_message(bytes(spec[2][0])).get(1, [0])[0])  # type: ignore[arg-type]
    inputs = {}
    for entry in request.get(2, []):
        item = decode_message(bytes(entry))  # type: ignore[arg-type]
        inputs[bytes(item[1][0]).decode()] = decode_tensor(bytes(item[2][0]))  # type: ignore[arg-type]
    return WarmupRequest(
        model_name=bytes(spec.get(1, [b""])[0]).decode(),  # type: ignore[arg-type]
        signature_name=bytes(spec.get(3, [b""])[0]).decode(),  # type: ignore[arg-type]
        version=version,
        inputs=inputs,
    )


def write_warmup(records: Sequence[bytes]) -> bytes:
    """The warmup file's bytes (TF Serving reads at most 1000 records)."""
    if len(records) > 1000:
        raise ValueError("TF Serving reads at most 1000 warmup records")
    return b"".join(tfrecord_frame(record) for record in records)


def read_warmup(blob: bytes) -> list[WarmupRequest]:
    return [decode_prediction_log(record) for record in read_tfrecords(blob)]


if __name__ == "__main__":  # `python3 warmup.py FILE`: summarize a warmup file (used inside images)
    import json
    import sys

    with open(sys.argv[1], "rb") as handle:
        parsed = read_warmup(handle.read())
    print(json.dumps([
        {"model": r.model_name, "signature": r.signature_name, "version": r.version,
         "inputs": {k: {"dtype": t.dtype, "shape": list(t.shape), "bytes": len(t.content)} for k, t in r.inputs.items()}}
        for r in parsed
    ]))
