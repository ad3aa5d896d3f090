"""A large PredictRequest read without copying its tensors: each input's `tensor_content` is found where it lies
in the serialized message and handed on as a view of it.

Parsing a message with protobuf (upb) copies it, and every read of a bytes field copies that field again: for
a 600 KB image that is two copies of 600 KB before the model's own, each ~16 us on a warm cache and several
times that on the cold one a large model's call leaves behind. Here the message is walked once at the wire
level, every input's `tensor_content` is cut out, and protobuf parses only what is left (names, dtypes, shapes:
a few dozen bytes). The tensors' bytes are then read in place: in a model process, in the shared memory the
front wrote the message to.

Only what this walk reads with certainty is taken: anything unusual (a map entry holding its tensor in two
pieces to be merged, a group, a truncated field, a name that is not UTF-8) returns None and the message is
parsed whole by protobuf, which accepts or refuses it as it always does. Protobuf's rules are kept where they
apply: the last of several `tensor_content` fields counts, and so does the last map entry for a name.
"""

from __future__ import annotations

from typing import Any

from builder.wire import tfs_proto as pb

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
