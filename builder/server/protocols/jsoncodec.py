"""JSON in and out of the server, fast, with the standard library's meaning kept exactly: the text as values
and back (`loads`, `dumps`), JSON values as arrays of a signature's dtypes (`to_typed_array`, the rule both JSON
protocols share), and the fast path that reads a numeric tensor straight from the text into numpy (`read_predict`,
`read_v2`). One module, so a JSON request enters it to be read and to be answered, and nowhere else.

Text and values.
Decoding nested lists of numbers is most of a JSON predict's cost (a 1x224x224x3 float image is ~3 MB of
text), so bodies are decoded with msgspec. Chosen by measurement on this host (2 cores, median of 20;
decode, then `np.asarray` of the decoded lists, which is what a predict does next):

    body                          json (stdlib)     orjson            msgspec
    MobileNetV2 1x224x224x3 rows  69.1 + 9.9 ms     23.7 + 13.5 ms    25.5 + 9.9 ms
    digits 1x28x28x1 rows         0.35 + 0.12 ms    0.08 + 0.13 ms    0.09 + 0.13 ms
    1x1000 answer, encode         0.57 ms           0.05 ms           0.05 ms

orjson and msgspec decode about alike, but msgspec's lists turn into an array faster, and msgspec keeps
an integer beyond 64 bits an exact Python int as the standard library does (orjson makes it a float,
so a too-large integer would reach a float input as a silently rounded value instead of being refused).
Reading the numbers' brackets with byte operations and decoding one flat list was measured too: the
extra passes over a 3 MB body cost as much as the nesting saves, so it is not done.
What msgspec refuses but the standard library reads (NaN/Infinity literals, numbers beyond a double,
lone surrogate escapes) and every malformed body go through `json.loads` as before: a request accepted
or refused before is accepted or refused now, with the same message. Answers are encoded by msgspec
unless they carry a non-finite float (msgspec would write `null`; the standard library writes `NaN` as
TF Serving does) or a string msgspec cannot encode.


The fast path: a numeric tensor read straight into numpy.
Decoding a nested list of numbers into Python lists and then into an array is most of a JSON predict's
cost: ~37 ms for a 1x224x224x3 MobileNetV2 body (3.2 MB) with msgspec, where the model itself takes ~7 ms.
simdjson validates the whole document and copies the numbers into one flat buffer of doubles without
making a Python object per number; measured on this kind of host (2 cores, median of 21):

    MobileNetV2 body (3.2 MB)     msgspec + np.asarray 27-37 ms    simdjson + structure check 5.3 ms

simdjson flattens ragged lists silently (`[[1, 2, 3], [4]]` gives four numbers), so the structure is
checked separately and exactly: with every digit, sign, dot, exponent and blank deleted, the body must be
byte for byte the body of a rectangular tensor of the signature's shape (`[[,,],[,,]]` for 2x3) inside
the envelope simdjson found. That one `bytes.translate` pass costs ~1.9 ms on the same body.

That pass is the one step that needs the whole text again, so it comes last: `read_predict_unconfirmed` and
`read_v2_unconfirmed` return what they read as `Unconfirmed`, and `read_predict` and `read_v2` make the pass
(`Unconfirmed.confirmed()`) before they return; a reading the pass does not confirm goes to the general path.

This is only a faster route to the same answer, and each body is read by it once. Whatever it does not
recognise with certainty (several or named inputs, string, boolean or dynamic-shaped inputs, booleans among
numbers, integers beyond what the dtype holds, numbers a double cannot hold, escaped keys, NaN literals,
anything malformed) is left to the general path (`tfs_rest.parse_predict`, `v2.parse_inputs`), which reads
it once more and accepts or refuses it with the message it always did: `Left.PARSED` when simdjson read the
text (msgspec reads it next), `Left.UNREADABLE` when simdjson refused it (the standard library reads it next:
msgspec refuses what simdjson refuses, and the standard library's refusal is the message a client gets).
A tensor returned here equals the general path's, element for element and in dtype.

A second core for large bodies (a helper process reading half the text) was measured and dropped: it saved
~1 ms of 8.6 on a 3 MB body alone in flight, less than the noise of a whole request, and nothing under load.
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import json
import math
import operator
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from builder.model.signature import STRING, SignatureSpec, TensorSpec
from builder.server.core.call import Call, RequestError, choose_signature
from builder.wire.tensors import BFLOAT16_MAX

try:
    import msgspec
except ImportError:  # an image whose wheels predate it: the standard library alone, slower, same meaning
    msgspec = None  # type: ignore[assignment]


def loads(body: bytes | str, standard: bool = False) -> Any:
    """The JSON value of `body`; raises what `json.loads` raises for what it refuses. `standard`: read it
    with the standard library straight away (a body simdjson refused, which msgspec refuses too)."""
    if msgspec is None or standard:
        return json.loads(body)
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:  # ValidationError (a number beyond a double) is one too
        return json.loads(body)


def dumps(content: Any) -> bytes:
    """Compact JSON bytes of plain lists, dicts, strings and numbers (non-finite floats as NaN/Infinity)."""
    if msgspec is None:
        return json.dumps(content, separators=(",", ":")).encode()
    try:
        text = msgspec.json.encode(content)
    except (TypeError, UnicodeEncodeError, msgspec.EncodeError):  # e.g. a lone surrogate in a string
        return json.dumps(content, separators=(",", ":")).encode()
    if b"null" in text:  # NaN/Infinity became null (or a string holds the word): the standard library writes it
        return json.dumps(content, separators=(",", ":")).encode()
    return text


# --- JSON values as typed arrays ----------------------------------------------------------------------------


def parse_json(body: bytes, standard: bool = False) -> Any:
    """The request body as JSON; a 400 naming the problem otherwise (`standard`: see `loads`)."""
    try:
        return loads(body, standard)
    except (UnicodeDecodeError, ValueError) as error:  # json.JSONDecodeError is a ValueError
        raise RequestError(f"malformed JSON body: {error}") from None
    except RecursionError:
        raise RequestError("malformed JSON body: nested too deeply") from None


def to_typed_array(value: Any, spec: TensorSpec, where: str, booleans: bool = True) -> np.ndarray:
    """A JSON value as an array of the spec's dtype, refusing values the dtype cannot hold exactly.

    numpy turns `[0.5, true]` into floats silently; a `true` among the numbers of a numeric input is refused
    like an all-boolean one. Looking for one costs a walk over the values, so callers that know the body
    has no `true`/`false` at all (a byte search) pass `booleans=False` to skip it. A string input takes
    JSON strings and `{"b64": ...}` objects (`to_string_array`)."""
    if spec.dtype == STRING:
        return to_string_array(value, where)
    if _contains_b64(value):
        raise RequestError(f"{where}: binary ({{\"b64\": ...}}) values are not supported for {spec.dtype} input")
    try:
        raw = np.asarray(value)
    except (ValueError, TypeError, RecursionError) as error:
        raise RequestError(f"{where}: not a rectangular tensor ({error})") from None
    if raw.dtype == object or raw.dtype.kind in "USV":
        raise RequestError(f"{where}: expected numbers of type {spec.dtype}, got a ragged or non-numeric value")
    want = np.dtype(spec.dtype)
    if want.kind != "b" and (raw.dtype.kind == "b" or (booleans and _has_bool(value))):
        raise RequestError(f"{where}: expected {spec.dtype}, got booleans")
    if want.kind in "iu":
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
                raise RequestError(f"{where}: expected integers for {spec.dtype} input, got fractional values")
        info = np.iinfo(want)
        if raw.size and (raw.min() < info.min or raw.max() > info.max):
            raise RequestError(f"{where}: value out of range for {spec.dtype} [{info.min}, {info.max}]")
    elif want.kind == "b" and raw.dtype.kind != "b":
        raise RequestError(f"{where}: expected booleans")
    elif (want.kind == "f" or want.name == "bfloat16") and raw.dtype.kind in "fiu" and raw.size \
            and want.itemsize < raw.dtype.itemsize:
        # Finite values beyond the dtype's largest are refused, also those a cast would round down to it
        # (two reductions first: the exact test with its temporaries runs only when one is out of range).
        limit = float(np.finfo(want).max) if want.kind == "f" else BFLOAT16_MAX
        if (raw.max() > limit or raw.min() < -limit) and np.any(np.abs(raw[np.isfinite(raw)]) > limit):
            raise RequestError(f"{where}: value out of range for {spec.dtype}")
        return raw.astype(want)
    return raw.astype(want, copy=False)


def to_string_array(value: Any, where: str) -> np.ndarray:
    """A (nested) list of JSON strings and `{"b64": "..."}` objects as an object array of bytes.

    TF Serving's JSON mapping: a string is its UTF-8 bytes, binary data is Base64 in an object whose only
    key is `b64`. The shape is read off the first element at each depth and every list must match it: numpy
    would silently turn ragged lists into an array of lists when asked for dtype=object."""
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    flat: list[bytes] = []
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:  # depth-first, children pushed in reverse so `flat` is in row-major order
        item, depth = stack.pop()
        if depth == len(shape):
            flat.append(string_value(item, where))
            continue
        if not isinstance(item, list) or len(item) != shape[depth]:
            raise RequestError(f"{where}: not a rectangular tensor of strings")
        stack.extend((child, depth + 1) for child in reversed(item))
    array = np.empty(len(flat), dtype=object)
    array[:] = flat
    return array.reshape(shape)


def string_value(item: Any, where: str) -> bytes:
    """One JSON value of a string tensor as bytes: a string (UTF-8) or `{"b64": "<Base64>"}`."""
    if isinstance(item, str):
        return item.encode("utf-8", "surrogatepass")  # JSON can carry lone surrogates; they are bytes too
    if isinstance(item, dict):
        if set(item) != {"b64"} or not isinstance(item["b64"], str):
            raise RequestError(f'{where}: a binary value is an object with one key, {{"b64": "<Base64>"}}')
        try:
            return base64.b64decode(item["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise RequestError(f"{where}: malformed Base64 in a b64 value") from None
    raise RequestError(f"{where}: expected strings (or {{\"b64\": ...}} objects), got {type(item).__name__}")


def _has_bool(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif item is True or item is False:
            return True
    return False


def may_hold_booleans(body: bytes) -> bool:
    """False when a JSON body certainly holds no boolean: `true` has an r, `false` an f, and JSON numbers
    have neither, so a body with no r and no f has none. Two single-byte searches (memchr) cost ~0.2 ms on
    a 3.6 MB MobileNetV2 body where searching for the words costs ~3.4 ms; a body whose keys hold those
    letters (`signature_name`, some input names) only takes the slower exact walk."""
    return b"r" in body or b"f" in body


def _contains_b64(value: Any) -> bool:
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, dict) and "b64" in value


# --- the fast path -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TfsCall(Call):
    """A TF Serving predict as the data plane's call (made here by the fast path, and by `tfs_rest`'s
    general path), plus how the client sent it: rows (`instances`, answered
    as `predictions`) or columns (`inputs`, answered as `outputs`)."""

    row_format: bool = False


try:
    import simdjson
except ImportError:  # an image whose wheels predate it: every body takes the general path, same answers
    simdjson = None  # type: ignore[assignment]

#: What a JSON number (and blank space) is made of; deleting these leaves a numeric body's structure.
NUMBER_BYTES = b"0123456789.eE+- \t\r\n"
#: Integers up to this magnitude are exact as doubles (larger ones would be rounded differently than the
#: general path's int64-then-cast does).
EXACT_INTEGER = 2.0**53
_KEYS = {"instances", "inputs", "signature_name"}
#: What simdjson and the checks raise for a body they cannot read (the general path decides about it).
READ_ERRORS = (ValueError, TypeError, RuntimeError, KeyError, IndexError)
#: The same, plus the general path's own refusals (a signature it would refuse): also left to it.
_GENERAL_DECIDES = (*READ_ERRORS, RequestError)
_local = threading.local()
V = TypeVar("V")


class Left(enum.Enum):
    """Why a body is left to the general path, and so which decoder reads it there (once)."""

    PARSED = "simdjson read the text; it is not the fast case"
    UNREADABLE = "simdjson refused the text"


@dataclass(frozen=True)
class Unconfirmed(Generic[V]):
    """What the fast path read from `body`, right only if the body's skeleton (`skeleton`) is one `fits`
    accepts; until `confirmed()` says so, nothing may be answered from `value`. When it says no, the body
    is the general path's, which reads it with msgspec (simdjson read it: `Left.PARSED`)."""

    value: V
    body: bytes
    fits: Callable[[bytes], bool]

    def confirmed(self) -> bool:
        return self.fits(skeleton(self.body))


def skeleton(body: bytes) -> bytes:
    """The body with every number and blank deleted: one pass over every byte (~1.9 ms on a 3 MB body)."""
    return body.translate(None, NUMBER_BYTES)


def read_predict(body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int,
                 default: str | None = None) -> TfsCall | Left:
    """A TF Serving predict body's one numeric input as an array of its dtype, or why the general path must
    decide."""
    reading = read_predict_unconfirmed(body, signatures, max_batch, default)
    if isinstance(reading, Left):
        return reading
    return reading.value if reading.confirmed() else Left.PARSED


def read_predict_unconfirmed(body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int,
                             default: str | None = None) -> Unconfirmed[TfsCall] | Left:
    """`read_predict` without its last pass over the text: the call, to be confirmed before it is answered."""
    if simdjson is None:
        return Left.UNREADABLE
    parser = _parser()
    try:
        document = parser.parse(body)
    except READ_ERRORS:
        return Left.UNREADABLE
    try:
        reading = _parse(document, body, signatures, max_batch, default)
    except _GENERAL_DECIDES:
        reading = None
    finally:
        del document  # the parser can be reused only once nothing refers to its last document
    return reading or Left.PARSED


def parse_predict(body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int,
                  default: str | None = None) -> TfsCall | None:
    """`read_predict`'s call, or None where the general path must decide."""
    call = read_predict(body, signatures, max_batch, default)
    return None if isinstance(call, Left) else call


def _parser() -> Any:
    """This thread's simdjson parser (one may parse only one document at a time; its buffers are reused)."""
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    return parser


def fast_dtype(dtype: str) -> np.dtype | None:
    """The dtype when its numbers can be read as doubles or int64s; None for the general path's (strings,
    booleans, and uint64, which may go beyond int64)."""
    want = np.dtype(dtype)
    return want if want.kind in "fiu" and want != np.uint64 else None


def _flat(array: Any, want: np.dtype) -> np.ndarray:
    """Every number of a simdjson array, flattened: doubles for a float dtype, int64 for an integer one
    (TypeError when one is not a number of that kind)."""
    floats = want.kind == "f"
    return np.frombuffer(array.as_buffer(of_type="d" if floats else "i"), dtype=np.float64 if floats else np.int64)


def _exact(flat: np.ndarray) -> bool:
    """False when a double's magnitude reaches 2**53, beyond which integers are not all exact (the general
    path would have carried an integer there as int64, rounded differently)."""
    return flat.dtype.kind != "f" or not flat.size or max(-float(flat.min()), float(flat.max())) < EXACT_INTEGER


def _parse(document: Any, body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int,
           default: str | None) -> Unconfirmed[TfsCall] | None:
    try:
        if not isinstance(document, simdjson.Object):
            return None
        keys = list(document.keys())
        if len(keys) != len(set(keys)) or not set(keys) <= _KEYS or ("instances" in keys) == ("inputs" in keys):
            return None
        envelope = {"signature_name": document["signature_name"]} if "signature_name" in keys else {}
        if not isinstance(envelope.get("signature_name", ""), str):
            return None
        signature = choose_signature(envelope.get("signature_name"), signatures, default)
        numeric = numeric_input(signature)
        if numeric is None:
            return None
        spec, dims, want = numeric
        key = "instances" if "instances" in keys else "inputs"
        value = document[key]
        if not isinstance(value, simdjson.Array):
            return None
        flat = _flat(value, want)
    finally:
        del document  # the parser can be reused only once nothing refers to its last document
    batch = _batch(flat, dims, want, max_batch)
    if batch is None:
        return None
    expected = _envelope_skeleton(keys, key, envelope.get("signature_name"), _tensor_skeleton((batch, *dims)))
    if expected is None:
        return None
    return Unconfirmed(_call(signature, spec, flat, batch, dims, want, key), body, functools.partial(operator.eq,
                                                                                                   expected))


def numeric_input(signature: SignatureSpec) -> tuple[Any, tuple[int, ...], np.dtype] | None:
    """(spec, per-example dims, dtype) of a signature's one input when its numbers can be read here."""
    if len(signature.inputs) != 1:
        return None
    spec = signature.inputs[0]
    dims = spec.shape[1:]
    want = fast_dtype(spec.dtype)
    if want is None or any(d is None for d in dims) or not len(spec.shape):
        return None
    return spec, dims, want


def _batch(flat: np.ndarray, dims: tuple[int, ...], want: np.dtype, max_batch: int) -> int | None:
    """How many examples `flat` holds, or None when it is not whole examples the dtype holds exactly."""
    per_row = math.prod(dims)
    if per_row == 0 or flat.size == 0 or flat.size % per_row:
        return None
    batch = flat.size // per_row
    return None if batch > max_batch or not _holds(flat, want) else batch


def _call(signature: SignatureSpec, spec: Any, flat: np.ndarray, batch: int, dims: tuple[int, ...], want: np.dtype,
          key: str) -> TfsCall:
    array = flat.reshape((batch, *dims)).astype(want, copy=False)
    return TfsCall(signature=signature.name, inputs={spec.name: array}, batch=batch, row_format=key == "instances")


def _holds(flat: np.ndarray, want: np.dtype) -> bool:
    """True when every value reaches `want` exactly as the general path would carry it there."""
    if flat.dtype.kind == "f":
        largest = max(-float(flat.min()), float(flat.max()))
        return largest < EXACT_INTEGER and (want.itemsize == 8 or largest <= float(np.finfo(want).max))
    info = np.iinfo(want)
    return int(flat.min()) >= info.min and int(flat.max()) <= info.max


@functools.lru_cache(maxsize=64)
def _tensor_skeleton(shape: tuple[int, ...]) -> bytes:
    """What is left of a rectangular tensor's JSON once the numbers are deleted: `[[,,],[,,]]` for 2x3."""
    text = b"[" + b"," * (shape[-1] - 1) + b"]"
    for size in reversed(shape[:-1]):
        text = b"[" + b",".join([text] * size) + b"]"
    return text


def _envelope_skeleton(keys: list[str], key: str, signature_name: str | None, tensor: bytes) -> bytes | None:
    """The whole body's skeleton, keys in the order the client sent them; None when a key or the signature
    name is spelled in a way this cannot reproduce (escapes)."""
    parts = []
    for name in keys:
        if name == key:
            parts.append(b'"' + name.encode() + b'":' + tensor)
        else:  # signature_name
            text = json.dumps(signature_name, ensure_ascii=False)
            if "\\" in text:
                return None
            parts.append(b'"signature_name":' + text.encode())
    return skeleton(b"{" + b",".join(parts) + b"}")


# --- the Open Inference Protocol's JSON body --------------------------------------------------------------

#: How the skeleton of a body writes an input's `data` key just before its list (see `v2_document`).
_DATA_KEY = b'"data":'


def read_v2(body: bytes, dtypes: Mapping[str, str]) -> Any:
    """The JSON document of a v2 infer body as `json.loads` reads it, except that each input's flat list of
    numbers in `data` arrives as a flat numpy array of the datatype's dtype (`to_typed_array`'s values:
    what the general path makes of that list; one it would refuse is left to it as a list). `dtypes` maps v2 datatypes to numpy dtype names.
    A `Left` where the general path must decide, as for `read_predict`.

    A `data` list is taken only when the body's skeleton shows it flat: with no backslash in the body no
    string can hold a quote, so every `"data":` in the skeleton is a key, one per input that has one, in
    order; each must be followed by `[` and one comma fewer than the numbers simdjson found, then `]`."""
    reading = read_v2_unconfirmed(body, dtypes)
    if isinstance(reading, Left):
        return reading
    return reading.value if reading.confirmed() else Left.PARSED


def read_v2_unconfirmed(body: bytes, dtypes: Mapping[str, str]) -> Unconfirmed[Any] | Left:
    """`read_v2` without its last pass over the text: the document, to be confirmed before it is answered."""
    if simdjson is None:
        return Left.UNREADABLE
    if b"\\" in body:
        return Left.PARSED  # simdjson would read it; the skeleton cannot be trusted
    try:
        document = _parser().parse(body)
    except READ_ERRORS:
        return Left.UNREADABLE
    try:
        read = _v2(document, dtypes)
    except READ_ERRORS:
        read = None
    finally:
        del document
    if read is None:
        return Left.PARSED
    result, counts = read
    return Unconfirmed(result, body, functools.partial(_flat_data_lists, tuple(counts)))


def v2_document(body: bytes, dtypes: Mapping[str, str]) -> Any | None:
    """`read_v2`'s document, or None where the general path must decide."""
    document = read_v2(body, dtypes)
    return None if isinstance(document, Left) else document


def _v2(document: Any, dtypes: Mapping[str, str]) -> tuple[dict[str, Any], list[int | None]] | None:
    counts: list[int | None] = []  # per input with `data`: how many numbers it was read as, None if not numbers
    try:
        if not isinstance(document, simdjson.Object) or not _unique_keys(document):
            return None
        result = {}
        for key in document.keys():
            value = document[key]
            if key != "inputs" or not isinstance(value, simdjson.Array):
                result[key] = _plain(value)
                continue
            tensors = []
            for tensor in value:
                if not isinstance(tensor, simdjson.Object) or not _unique_keys(tensor):
                    return None
                plain = {name: (_numbers(tensor[name], dtypes.get(_datatype(tensor))) if name == "data"
                                else _plain(tensor[name])) for name in tensor.keys()}
                if "data" in plain:
                    counts.append(plain["data"].size if isinstance(plain["data"], np.ndarray) else None)
                tensors.append(plain)
            result[key] = tensors
    finally:
        del document
    return result, counts


def _flat_data_lists(counts: tuple[int | None, ...], text: bytes) -> bool:
    """Whether the skeleton `text` has one `"data":` key per input with data, each numeric one followed by a
    flat list of as many numbers as were read for it."""
    if text.count(_DATA_KEY) != len(counts):
        return False
    at = 0
    for count in counts:
        at = text.index(_DATA_KEY, at) + len(_DATA_KEY)
        if count is not None and not text.startswith(b"[" + b"," * (count - 1) + b"]" if count else b"[]", at):
            return False
    return True


def _datatype(tensor: Any) -> Any:
    return tensor["datatype"] if "datatype" in tensor else None


def _numbers(data: Any, dtype: str | None) -> Any:
    """A numeric input's `data` as a flat array the general path would make of it; other data as Python values."""
    want = None if dtype is None else fast_dtype(dtype)
    if want is None or not isinstance(data, simdjson.Array):
        return _plain(data)
    try:
        flat = _flat(data, want)
    except (TypeError, ValueError):  # booleans, strings, fractions for an integer type: the general path's
        return _plain(data)
    if not _exact(flat):
        return _plain(data)
    try:  # already of the datatype's dtype, so the protocol does not read it again
        return to_typed_array(flat, TensorSpec("data", want.name, ()), "data", booleans=False)
    except RequestError:  # a value the dtype cannot hold: the general path refuses it in its own words
        return _plain(data)


def _unique_keys(value: Any) -> bool:
    keys = list(value.keys())
    return len(keys) == len(set(keys))


def _plain(value: Any) -> Any:
    """A simdjson value as the standard library's Python value."""
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value
