"""TensorFlow's `TensorProto` to numpy and back, as TensorFlow itself reads and writes it.

Clients send either `tensor_content` (the raw little-endian bytes: what `tf.make_tensor_proto` writes for
an ndarray, and the fast path: no per-value work) or the typed repeated fields (`float_val`, `int_val`, ...,
`half_val` holding float16 and bfloat16 bit patterns, `scomplex_val`/`dcomplex_val` (real, imaginary) pairs). TensorFlow's rules are followed: a typed field with one value
fills the whole shape, an empty one means zeros, any other count must match the shape exactly. Strings
(DT_STRING) are always `string_val`, one bytes value per element (TensorFlow never packs them into
`tensor_content`), and become numpy object arrays of bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: How the wire formats spell a dimension of any size (TF Serving's metadata, v2 metadata, TensorShapeProto);
#: a model's signature says None (`builder.model.signature`).
WIRE_DYNAMIC = -1


def wire_shape(spec: Any) -> list[int]:
    """A signature tensor's shape (`builder.model.signature.TensorSpec`) as the wire formats write it: -1 for a
    dimension of any size."""
    return [WIRE_DYNAMIC if d is None else d for d in spec.shape]


# numpy dtype name -> TensorFlow DataType enum name and number (tensorflow/core/framework/types.proto).
TF_DTYPES: dict[str, tuple[str, int]] = {
    "float32": ("DT_FLOAT", 1),
    "float64": ("DT_DOUBLE", 2),
    "int32": ("DT_INT32", 3),
    "uint8": ("DT_UINT8", 4),
    "int16": ("DT_INT16", 5),
    "int8": ("DT_INT8", 6),
    "int64": ("DT_INT64", 9),
    "bool": ("DT_BOOL", 10),
    "uint16": ("DT_UINT16", 17),
    "float16": ("DT_HALF", 19),
    "uint32": ("DT_UINT32", 22),
    "uint64": ("DT_UINT64", 23),
    "complex64": ("DT_COMPLEX64", 8),
    "complex128": ("DT_COMPLEX128", 18),
    "object": ("DT_STRING", 7),  # strings: numpy object arrays of bytes
}


#: bfloat16 where numpy can spell it: `ml_dtypes` (what TensorFlow and LiteRT install) registers it with numpy,
#: as TensorFlow's own `tf.bfloat16.as_numpy_dtype`; without it the dtype is refused like any unknown one
try:
    import ml_dtypes  # noqa: F401 - registers the dtype

    TF_DTYPES["bfloat16"] = ("DT_BFLOAT16", 14)
except ImportError:  # pragma: no cover - both optimize and serve extras install it
    pass
#: 16-bit floats whose typed field is `half_val`, holding each value's bit pattern
HALF_FIELD = ("float16", "bfloat16")
#: bfloat16's largest finite value (numpy's finfo does not know the dtype ml_dtypes adds)
BFLOAT16_MAX = 3.3895313892515355e38


class WireError(ValueError):
    """A message that does not hold what it says (a server answers it 400 INVALID_ARGUMENT)."""

DTYPE_OF_ENUM: dict[int, np.dtype] = {number: np.dtype(name) for name, (_, number) in TF_DTYPES.items()}
ENUM_OF_DTYPE: dict[str, int] = {name: number for name, (_, number) in TF_DTYPES.items()}
ENUM_NAME: dict[int, str] = {number: enum for _, (enum, number) in TF_DTYPES.items()}

#: The typed field TensorFlow uses for each dtype (tensor.proto's comments).
VALUE_FIELD: dict[str, str] = {
    "float32": "float_val", "float64": "double_val", "int32": "int_val", "int16": "int_val", "int8": "int_val",
    "uint8": "int_val", "uint16": "int_val", "int64": "int64_val", "bool": "bool_val", "float16": "half_val",
    "uint32": "uint32_val", "uint64": "uint64_val", "object": "string_val",
    "complex64": "scomplex_val", "complex128": "dcomplex_val", "bfloat16": "half_val",
}
#: complex values go in their typed field as (real, imaginary) pairs, each part in the dtype's float
COMPLEX_PARTS: dict[str, np.dtype] = {"complex64": np.dtype(np.float32), "complex128": np.dtype(np.float64)}


def dtype_name(number: int) -> str:
    return ENUM_NAME.get(number, f"DataType {number}")


def to_array(proto: Any, where: str) -> np.ndarray:
    """A TensorProto as an ndarray; WireError naming `where` when it is malformed or unsupported."""
    return read_tensor(proto, where)[0]


def read_tensor(proto: Any, where: str, content: Any = None) -> tuple[np.ndarray, bool]:
    """`to_array`, and whether the values came as raw `tensor_content` (a server answers in the form it was
    asked in; reading the field again to find out would copy it again). `content`: the tensor_content when it
    was cut out of the message before parsing (`tfs_grpc.parse_predict`), read in place."""
    dtype = DTYPE_OF_ENUM.get(proto.dtype)
    if dtype is None:
        raise WireError(f"{where}: unsupported dtype {dtype_name(proto.dtype)}")
    if proto.tensor_shape.unknown_rank:
        raise WireError(f"{where}: tensor_shape must be known")
    shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
    if any(d < 0 for d in shape):
        raise WireError(f"{where}: negative dimension in tensor_shape {list(shape)}")
    size = math.prod(shape)
    if content is None:
        content = proto.tensor_content  # read once: each read of a bytes field is a fresh copy of it
    if dtype == object:
        if content:
            raise WireError(f"{where}: DT_STRING values go in string_val, not tensor_content")
        return _strings(proto, shape, size, where), False
    if content:
        if len(content) != size * dtype.itemsize:
            raise WireError(f"{where}: tensor_content has {len(content)} bytes, shape {list(shape)} of "
                               f"{dtype.name} needs {size * dtype.itemsize}")
        return np.frombuffer(content, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(shape), True
    values = getattr(proto, VALUE_FIELD[dtype.name])
    count = len(values)
    if dtype.name in COMPLEX_PARTS:
        if count % 2:
            raise WireError(f"{where}: {count} values in {VALUE_FIELD[dtype.name]}: complex values come as (real, "
                            "imaginary) pairs")
        flat = np.asarray(values, dtype=COMPLEX_PARTS[dtype.name]).view(dtype)
        count //= 2
    elif dtype.name in HALF_FIELD:
        flat = np.asarray(values, dtype=np.uint16).view(dtype)
    else:
        try:
            flat = np.asarray(values, dtype=dtype)
        except OverflowError:
            raise WireError(f"{where}: value out of range for {dtype.name}") from None
    if count == size:
        return flat.reshape(shape), False
    if count == 0:
        return np.zeros(shape, dtype=dtype), False
    if count == 1:
        return np.full(shape, flat[0], dtype=dtype), False
    raise WireError(f"{where}: {count} values in {VALUE_FIELD[dtype.name]} for shape {list(shape)} "
                       f"({size} values)")


def _strings(proto: Any, shape: tuple[int, ...], size: int, where: str) -> np.ndarray:
    """A DT_STRING tensor's `string_val` as an object array of bytes (one value fills the shape, none is b"")."""
    values = list(proto.string_val)
    if len(values) not in (size, 0, 1):
        raise WireError(f"{where}: {len(values)} values in string_val for shape {list(shape)} ({size} values)")
    flat = np.empty(size, dtype=object)
    flat[:] = values if len(values) == size else [values[0] if values else b""] * size
    return flat.reshape(shape)


def fill_proto(proto: Any, array: np.ndarray, content: bool = True) -> Any:
    """Write `array` into an (empty) TensorProto: raw `tensor_content`, or the typed field when not `content`
    (strings: always `string_val`). Strings may come as bytes, str, or numpy `S`/`U` arrays (a runtime's scalar
    string answer is a bare `bytes`): all are DT_STRING, UTF-8 bytes per element."""
    array = _strings_as_objects(np.asarray(array))
    proto.dtype = ENUM_OF_DTYPE[array.dtype.name]
    for size in array.shape:
        proto.tensor_shape.dim.add(size=int(size))
    if array.dtype == object:
        proto.string_val.extend(bytes(v) for v in array.reshape(-1))
    elif content:
        proto.tensor_content = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    elif array.dtype.name in HALF_FIELD:
        proto.half_val.extend(np.ascontiguousarray(array).reshape(-1).view(np.uint16).tolist())
    elif array.dtype.name in COMPLEX_PARTS:
        getattr(proto, VALUE_FIELD[array.dtype.name]).extend(
            np.ascontiguousarray(array).reshape(-1).view(COMPLEX_PARTS[array.dtype.name]).tolist())
    else:
        getattr(proto, VALUE_FIELD[array.dtype.name]).extend(array.reshape(-1).tolist())
    return proto


def _strings_as_objects(array: np.ndarray) -> np.ndarray:
    """`S` and `U` arrays (of any rank, 0-d included) as object arrays of bytes, the form DT_STRING is written from."""
    if array.dtype.kind not in "SU":
        return array
    flat = np.empty(array.size, dtype=object)
    flat[:] = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.reshape(-1).tolist()]
    return flat.reshape(array.shape)


def read_tensors(protos: Mapping[str, Any], contents: Mapping[str, Any], prefix: str
                 ) -> tuple[dict[str, np.ndarray], bool]:
    """Every tensor of a map (a PredictRequest's inputs) as arrays by name (`read_tensor`, each named
    `<prefix>.<name>` in a WireError), and whether all came as raw `tensor_content`. `contents`: the
    tensor_contents cut out of the message before it was parsed, by name."""
    arrays: dict[str, np.ndarray] = {}
    raw = bool(protos)
    for name, proto in protos.items():
        arrays[name], content = read_tensor(proto, f"{prefix}.{name}", contents.get(name))
        raw = raw and content
    return arrays, raw


def fill_protos(protos: Any, arrays: Mapping[str, np.ndarray], content: bool = True) -> None:
    """`fill_proto` for each array into the TensorProto map `protos` (a PredictResponse's outputs), in order."""
    for name, array in arrays.items():
        fill_proto(protos[name], array, content)
