"""TensorFlow Serving's gRPC messages, declared here field by field: the wire format without TensorFlow.

A protobuf wire format is fixed by field numbers and types, not by where the classes come from. TensorFlow
Serving's Python stubs (`tensorflow-serving-api`) need all of TensorFlow (~570 MB) and the `.proto` sources
ship in no wheel, so the image builds the few messages the server speaks from this table at import time
(`descriptor_pb2` + `message_factory`, in a private descriptor pool so they never clash with the real
classes when both are loaded). The numbers and types are the public ones of tensorflow/core/framework and
tensorflow_serving/apis; a unit test compares every declared field with the real descriptors and
round-trips messages through the real classes byte for byte. Fields the server never reads or writes
(resource/variant tensors, streamed-predict options, sparse tensor infos) are left out: protobuf keeps
unknown fields, so they still pass through unharmed.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

_F = descriptor_pb2.FieldDescriptorProto
INT32, INT64, UINT32, UINT64 = _F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_UINT32, _F.TYPE_UINT64
FLOAT, DOUBLE, BOOL, STRING, BYTES = _F.TYPE_FLOAT, _F.TYPE_DOUBLE, _F.TYPE_BOOL, _F.TYPE_STRING, _F.TYPE_BYTES
MESSAGE, ENUM = _F.TYPE_MESSAGE, _F.TYPE_ENUM
REPEATED = "repeated"
MAP = "map"

#: tensorflow/core/framework/types.proto (the values the server can meet; unknown numbers still parse).
DATA_TYPES = (
    "DT_INVALID", "DT_FLOAT", "DT_DOUBLE", "DT_INT32", "DT_UINT8", "DT_INT16", "DT_INT8", "DT_STRING",
    "DT_COMPLEX64", "DT_INT64", "DT_BOOL", "DT_QINT8", "DT_QUINT8", "DT_QINT32", "DT_BFLOAT16", "DT_QINT16",
    "DT_QUINT16", "DT_UINT16", "DT_COMPLEX128", "DT_HALF", "DT_RESOURCE", "DT_VARIANT", "DT_UINT32", "DT_UINT64",
)
#: tensorflow.error.Code (tsl/protobuf/error_codes.proto), the same numbers as gRPC's status codes.
ERROR_CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)
MODEL_STATES = {"UNKNOWN": 0, "START": 10, "LOADING": 20, "AVAILABLE": 30, "UNLOADING": 40, "END": 50}

# Field = (name, number, type, label or None, type name or None, oneof or None); a MAP field's type is its
# value type (keys are strings in every map here).
Field = tuple[str, int, int, str | None, str | None, str | None]
TF_MESSAGES: dict[str, list[Field]] = {
    "TensorShapeProto": [("dim", 2, MESSAGE, REPEATED, ".tensorflow.TensorShapeProto.Dim", None),
                         ("unknown_rank", 3, BOOL, None, None, None)],
    "TensorShapeProto.Dim": [("size", 1, INT64, None, None, None), ("name", 2, STRING, None, None, None)],
    "TensorProto": [
        ("dtype", 1, ENUM, None, ".tensorflow.DataType", None),
        ("tensor_shape", 2, MESSAGE, None, ".tensorflow.TensorShapeProto", None),
        ("version_number", 3, INT32, None, None, None),
        ("tensor_content", 4, BYTES, None, None, None),
        ("half_val", 13, INT32, REPEATED, None, None),
        ("float_val", 5, FLOAT, REPEATED, None, None),
        ("double_val", 6, DOUBLE, REPEATED, None, None),
        ("int_val", 7, INT32, REPEATED, None, None),
        ("string_val", 8, BYTES, REPEATED, None, None),
        ("scomplex_val", 9, FLOAT, REPEATED, None, None),
        ("int64_val", 10, INT64, REPEATED, None, None),
        ("bool_val", 11, BOOL, REPEATED, None, None),
        ("dcomplex_val", 12, DOUBLE, REPEATED, None, None),
        ("uint32_val", 16, UINT32, REPEATED, None, None),
        ("uint64_val", 17, UINT64, REPEATED, None, None),
        ("float8_val", 18, BYTES, None, None, None),
    ],
    "TensorInfo": [
        ("name", 1, STRING, None, None, "encoding"),
        ("dtype", 2, ENUM, None, ".tensorflow.DataType", None),
        ("tensor_shape", 3, MESSAGE, None, ".tensorflow.TensorShapeProto", None),
    ],
    "SignatureDef": [
        ("inputs", 1, MESSAGE, MAP, ".tensorflow.TensorInfo", None),
        ("outputs", 2, MESSAGE, MAP, ".tensorflow.TensorInfo", None),
        ("method_name", 3, STRING, None, None, None),
        ("defaults", 4, MESSAGE, MAP, ".tensorflow.TensorProto", None),
    ],
}
SERVING_MESSAGES: dict[str, list[Field]] = {
    "ModelSpec": [
        ("name", 1, STRING, None, None, None),
        ("version", 2, MESSAGE, None, ".google.protobuf.Int64Value", "version_choice"),
        ("version_label", 4, STRING, None, None, "version_choice"),
        ("signature_name", 3, STRING, None, None, None),
    ],
    "PredictRequest": [
        ("model_spec", 1, MESSAGE, None, ".tensorflow.serving.ModelSpec", None),
        ("inputs", 2, MESSAGE, MAP, ".tensorflow.TensorProto", None),
        ("output_filter", 3, STRING, REPEATED, None, None),
    ],
    "PredictResponse": [
        ("model_spec", 2, MESSAGE, None, ".tensorflow.serving.ModelSpec", None),
        ("outputs", 1, MESSAGE, MAP, ".tensorflow.TensorProto", None),
    ],
    "SignatureDefMap": [("signature_def", 1, MESSAGE, MAP, ".tensorflow.SignatureDef", None)],
    "GetModelMetadataRequest": [
        ("model_spec", 1, MESSAGE, None, ".tensorflow.serving.ModelSpec", None),
        ("metadata_field", 2, STRING, REPEATED, None, None),
    ],
    "GetModelMetadataResponse": [
        ("model_spec", 1, MESSAGE, None, ".tensorflow.serving.ModelSpec", None),
        ("metadata", 2, MESSAGE, MAP, ".google.protobuf.Any", None),
    ],
    "StatusProto": [
        ("error_code", 1, ENUM, None, ".tensorflow.error.Code", None),
        ("error_message", 2, STRING, None, None, None),
    ],
    "GetModelStatusRequest": [("model_spec", 1, MESSAGE, None, ".tensorflow.serving.ModelSpec", None)],
    "ModelVersionStatus": [
        ("version", 1, INT64, None, None, None),
        ("state", 2, ENUM, None, ".tensorflow.serving.ModelVersionStatus.State", None),
        ("status", 3, MESSAGE, None, ".tensorflow.serving.StatusProto", None),
    ],
    "GetModelStatusResponse": [
        ("model_version_status", 1, MESSAGE, REPEATED, ".tensorflow.serving.ModelVersionStatus", None),
    ],
}


def file_proto(name: str, package: str, messages: dict[str, list[Field]], deps: list[str],
          enums: dict[str, dict[str, int]]) -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file of the given messages; `Outer.Inner` names nest, MAP fields get their entry type."""
    proto = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3", dependency=deps)
    built: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full in messages:  # parents before their nested messages
        outer, _, inner = full.rpartition(".")
        if outer:
            built[full] = built[outer].nested_type.add(name=inner)
        else:
            built[full] = proto.message_type.add(name=full)
    for enum_path, values in enums.items():
        outer, _, inner = enum_path.rpartition(".")
        target = built[outer].enum_type.add(name=inner) if outer else proto.enum_type.add(name=inner)
        for value_name, number in values.items():
            target.value.add(name=value_name, number=number)
    for full, fields in messages.items():
        message = built[full]
        oneofs: list[str] = []
        for field_name, number, kind, label, type_name, oneof in fields:
            field = message.field.add(name=field_name, number=number, type=kind, label=_F.LABEL_OPTIONAL)
            if label == MAP:
                entry_name = "".join(part.capitalize() for part in field_name.split("_")) + "Entry"
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=STRING, label=_F.LABEL_OPTIONAL)
                value = entry.field.add(name="value", number=2, type=kind, label=_F.LABEL_OPTIONAL)
                if type_name:
                    value.type_name = type_name
                field.type = MESSAGE
                field.label = _F.LABEL_REPEATED
                field.type_name = f".{package}.{full}.{entry_name}"
                continue
            if label == REPEATED:
                field.label = _F.LABEL_REPEATED
            if type_name:
                field.type_name = type_name
            if oneof:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    message.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs.index(oneof)
    return proto


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for well_known in (any_pb2.DESCRIPTOR, wrappers_pb2.DESCRIPTOR):
        copied = descriptor_pb2.FileDescriptorProto()
        well_known.CopyToProto(copied)
        pool.Add(copied)
    errors = descriptor_pb2.FileDescriptorProto(name="tfsmith/tf_error_codes.proto", package="tensorflow.error",
                                                syntax="proto3")
    code = errors.enum_type.add(name="Code")
    for number, value_name in enumerate(ERROR_CODES):
        code.value.add(name=value_name, number=number)
    pool.Add(errors)
    pool.Add(file_proto("tfsmith/tf_framework.proto", "tensorflow", TF_MESSAGES, [],
                   {"DataType": dict(zip(DATA_TYPES, range(len(DATA_TYPES))))}))
    pool.Add(file_proto("tfsmith/tf_serving_apis.proto", "tensorflow.serving", SERVING_MESSAGES,
                   ["google/protobuf/any.proto", "google/protobuf/wrappers.proto", "tfsmith/tf_error_codes.proto",
                    "tfsmith/tf_framework.proto"],
                   {"ModelVersionStatus.State": MODEL_STATES}))
    return pool


POOL = _build_pool()


def message(full_name: str) -> Any:
    """The message class for a full name (`tensorflow.TensorProto`, `tensorflow.serving.PredictRequest`)."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


TensorProto = message("tensorflow.TensorProto")
TensorShapeProto = message("tensorflow.TensorShapeProto")
SignatureDef = message("tensorflow.SignatureDef")
ModelSpec = message("tensorflow.serving.ModelSpec")
PredictRequest = message("tensorflow.serving.PredictRequest")
PredictResponse = message("tensorflow.serving.PredictResponse")
SignatureDefMap = message("tensorflow.serving.SignatureDefMap")
GetModelMetadataRequest = message("tensorflow.serving.GetModelMetadataRequest")
GetModelMetadataResponse = message("tensorflow.serving.GetModelMetadataResponse")
GetModelStatusRequest = message("tensorflow.serving.GetModelStatusRequest")
GetModelStatusResponse = message("tensorflow.serving.GetModelStatusResponse")

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
TYPE_URL_PREFIX = "type.googleapis.com/"
