"""A TF Serving JSON predict body read straight into numpy, for the common case: one numeric input.

Decoding a nested list of numbers into Python lists and then into an array is most of a JSON predict's
cost: ~37 ms for a 1x224x224x3 MobileNetV2 body (3.2 MB) with msgspec, where the model itself takes ~7 ms.
simdjson validates the whole document and copies the numbers into one flat buffer of doubles without
making a Python object per number; measured on this kind of host (2 cores, median of 21):

    MobileNetV2 body (3.2 MB)     msgspec + np.asarray 27-37 ms    simdjson + structure check 5.3 ms

simdjson flattens ragged lists silently (`[[1, 2, 3], [4]]` gives four numbers), so the structure is
checked separately and exactly: with every digit, sign, dot, exponent and blank deleted, the body must be
byte for byte the body of a rectangular tensor of the signature's shape (`[[,,],[,,]]` for 2x3) inside
the envelope simdjson found. That one `bytes.translate` pass costs ~1.8 ms on the same body.

This is only a faster route to the same answer. Whatever it does not recognise with certainty (several or
named inputs, string, boolean or dynamic-shaped inputs, booleans among numbers, integers beyond what the
dtype holds, numbers a double cannot hold, escaped keys, NaN literals, anything malformed) returns None and
the request takes the general path (`protocol.parse_predict`), which accepts or refuses it with the message
it always did. A tensor returned here equals the general path's, element for element and in dtype.

Large bodies can be read on two cores (a `HalfReader`: `decode_helper.DecodeHelper`, a process of its own,
since simdjson holds the GIL and two threads of one process could only take turns). The tensor's text is cut
at a comma between two values; one half is read by the helper and the other by this thread, and the two
halves' numbers and skeletons are joined and checked exactly as one body's are. The envelope around the
tensor (the keys before it, and nothing after it but `}`) is read by the standard library. A body still
arriving has its first part read by the helper meanwhile (`ReadAhead`); a body already whole has its second
half read by the helper (`parse_predict`'s `halves`). An Open Inference Protocol body's longest `data` list
is read the same way once the body is whole (`v2_document`'s `halves`).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from builder.server.protocol import PredictCall, RequestError, SignatureSpec, choose_signature

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
#: JSON's blank space (bytes.strip's default would also take \x0b and \x0c, which JSON refuses).
BLANKS = b" \t\r\n"
#: Bodies at least this large are read in two halves at once when a `HalfReader` is given. Measured on a
#: 2-core host with requests paced as one client sends them (median of 30, one core vs two): 565 KiB
#: 2.77 vs 3.04 ms, 1005 KiB 4.50 vs 4.48 ms, 1571 KiB 6.35 vs 4.75 ms, 3078 KiB 8.59 vs 7.51 ms.
SPLIT_MIN_BYTES = 1024 * 1024
#: What simdjson and the checks raise for a body they cannot read (the general path decides about it).
READ_ERRORS = (ValueError, TypeError, RuntimeError, KeyError, IndexError)
#: The same, plus the general path's own refusals (a signature it would refuse): also left to it.
_GENERAL_DECIDES = (*READ_ERRORS, RequestError)
_local = threading.local()


class HalfReader(Protocol):
    """Reads part of a tensor's text (`read_half`) elsewhere while this thread reads the rest: one body at a
    time, from `submit` (or `reserve` then `start`) to `collect` (or `release`)."""

    def submit(self, text: bytes, floats: bool) -> bool:
        """Start reading `text`, a second half; False when the reader cannot take it now (busy, or gone)."""

    def reserve(self, length: int) -> Any:
        """Writable memory for a body of `length` bytes (None when busy or gone); the reader is the caller's."""

    def start(self, offset: int, length: int, floats: bool, first: bool) -> bool:
        """Start reading `memory[offset:offset + length]` of the reserved memory; False: released, not asked."""

    def release(self) -> None:
        """Give up a reservation never started."""

    def collect(self) -> tuple[np.ndarray, bytes] | None:
        """The numbers and skeleton of the text it read; None when it could not read them."""


def parse_predict(body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int,
                  default: str | None = None, halves: HalfReader | None = None) -> PredictCall | None:
    """The request's one numeric input as an array of its dtype, or None where the general path must decide.
    With `halves`, a large body is read on two cores where it can be (the same answer either way)."""
    if simdjson is None:
        return None
    if halves is not None and len(body) >= SPLIT_MIN_BYTES:
        try:
            call = _parse_in_halves(body, signatures, max_batch, default, halves)
        except _GENERAL_DECIDES:
            call = None
        if call is not None:
            return call
    try:
        return _parse(_parser(), body, signatures, max_batch, default)
    except _GENERAL_DECIDES:
        return None


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


def _parse(parser: Any, body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int,
           default: str | None) -> PredictCall | None:
    document = parser.parse(body)
    try:
        if not isinstance(document, simdjson.Object):
            return None
        keys = list(document.keys())
        if len(keys) != len(set(keys)) or not set(keys) <= _KEYS or ("instances" in keys) == ("inputs" in keys):
            return None
        envelope = {"signature_name": document["signature_name"]} if "signature_name" in keys else {}
        if not isinstance(envelope.get("signature_name", ""), str):
            return None
        signature = choose_signature(envelope, signatures, default)
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
    if expected is None or body.translate(None, NUMBER_BYTES) != expected:
        return None
    return _call(signature, spec, flat, batch, dims, want, key)


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
    per_row = int(np.prod(dims, dtype=np.int64))
    if per_row == 0 or flat.size == 0 or flat.size % per_row:
        return None
    batch = flat.size // per_row
    return None if batch > max_batch or not _holds(flat, want) else batch


def _call(signature: SignatureSpec, spec: Any, flat: np.ndarray, batch: int, dims: tuple[int, ...], want: np.dtype,
          key: str) -> PredictCall:
    array = flat.reshape((batch, *dims)).astype(want, copy=False)
    return PredictCall(signature=signature.name, inputs={spec.name: array}, row_format=key == "instances",
                       batch=batch)


# --- a large body read in two halves at once ---------------------------------------------------------------

def _parse_in_halves(body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int, default: str | None,
                     halves: HalfReader) -> PredictCall | None:
    """`_parse`'s answer for a body whose tensor is its last value, read in two halves at once; None where
    this cannot be sure (the caller then reads the body whole).

    The body must be `{<keys>: ..., "instances" or "inputs": <tensor>}`: the text before the tensor's first
    `[` is read by the standard library (keys, signature name), and after its last `]` only `}` may follow.
    The tensor is cut at a comma near its middle that stands between two numbers. Each half is read by
    `read_half`; the halves' skeletons joined by that comma must be the skeleton of a rectangular tensor of
    the signature's shape, and their numbers, joined, exactly the examples it holds: then the tensor's text
    is what one body's checks accept (every slot of the skeleton holds exactly one number)."""
    around = _around_tensor(body, signatures, default)
    if around is None:
        return None
    start, end, key, signature, (spec, dims, want) = around
    both = _read_in_halves(body, start, end, want.kind == "f", halves)
    return None if both is None else _joined(*both, signature, spec, dims, want, key, max_batch)


def _read_in_halves(body: bytes, start: int, end: int, floats: bool, halves: HalfReader
                    ) -> tuple[tuple[np.ndarray, bytes], tuple[np.ndarray, bytes]] | None:
    """`read_half` of `body[start:end + 1]` cut at a comma (`_cut`): the second part by `halves`, the first
    here at the same time; None when there is no cut or the reader cannot take or read its part."""
    cut = _cut(body, start, end)
    if cut is None or not halves.submit(body[cut + 1:end + 1], floats):
        return None
    try:
        first = read_half(body[start:cut], floats, first=True)
    finally:
        second = halves.collect()  # always: the reader is free for the next body only once collected
    return None if second is None else (first, second)


def _around_tensor(body: bytes, signatures: Mapping[str, SignatureSpec], default: str | None
                   ) -> tuple[int, int, str, SignatureSpec, tuple[Any, tuple[int, ...], np.dtype]] | None:
    """(tensor's first `[`, its last `]`, tensor key, signature, `numeric_input`) of a body whose tensor is its
    last value: the text before it read by `_head`, only `}` after it; None for any other body."""
    start, end = body.find(b"["), body.rfind(b"]")
    if start < 0 or end < start or body[end + 1:].strip(BLANKS) != b"}":
        return None
    head = _head(body[:start])
    if head is None:
        return None
    try:
        signature = choose_signature(head[1], signatures, default)
    except RequestError:  # the general path's refusal
        return None
    numeric = numeric_input(signature)
    return None if numeric is None else (start, end, head[0], signature, numeric)


def _joined(first: tuple[np.ndarray, bytes], second: tuple[np.ndarray, bytes], signature: SignatureSpec, spec: Any,
            dims: tuple[int, ...], want: np.dtype, key: str, max_batch: int) -> PredictCall | None:
    """The call from a tensor's two halves (numbers and skeletons, cut at a comma), or None unless together
    they are exactly a rectangular tensor of whole examples."""
    flat = np.concatenate((first[0], second[0]))
    batch = _batch(flat, dims, want, max_batch)
    if batch is None or first[1] + b"," + second[1] != _tensor_skeleton((batch, *dims)):
        return None
    return _call(signature, spec, flat, batch, dims, want, key)


#: Where a large body is cut when its first part goes to the helper as it arrives (`ReadAhead`), as a share
#: of its length: the helper starts while the rest arrives, so it reads the larger part.
AHEAD_SHARE = 0.55


class ReadAhead:
    """A large TF Serving body whose first part the helper reads while the rest is still arriving.

    The request's body is copied into the helper's memory as it arrives (`feed`, on the event loop; about
    0.1 ms a MiB). Once `AHEAD_SHARE` of its declared length is there, the text before the tensor is read
    (`_head`), the tensor is cut at the first comma between two values from there on, and the helper starts
    on the first half. When the body is complete, `finish` (on the decode thread) reads the second half and
    joins the two exactly as `_parse_in_halves` does, checking everything again against the whole body.
    Anything in doubt leaves the body to `parse_predict`; `close` frees the helper of a body that never got
    to `finish`."""

    def __init__(self, halves: HalfReader, memory: Any, length: int, signatures: Mapping[str, SignatureSpec],
                 default: str | None) -> None:
        self.halves, self.memory, self.length = halves, memory, length
        self.signatures, self.default = signatures, default
        self.received = 0
        self.open = True  # still copying what arrives
        self.started: tuple[int, int, bool] | None = None  # (tensor start, cut, floats) the helper was given

    @classmethod
    def begin(cls, halves: HalfReader | None, content_length: str | None, content_encoding: str | None,
              signatures: Mapping[str, SignatureSpec], default: str | None) -> ReadAhead | None:
        """A read-ahead for a plain (not gzip) body declared at least `SPLIT_MIN_BYTES` long, when the reader
        is free; None otherwise."""
        if halves is None or simdjson is None or content_length is None or not content_length.strip().isdigit():
            return None
        if (content_encoding or "identity").strip().lower() not in ("", "identity"):
            return None
        length = int(content_length)
        if length < SPLIT_MIN_BYTES:
            return None
        memory = halves.reserve(length)
        return None if memory is None else cls(halves, memory, length, signatures, default)

    def feed(self, chunk: bytes) -> None:
        """One more piece of the body, as it arrived."""
        if not self.open:
            return
        end = self.received + len(chunk)
        if end > self.length:  # more than declared: the server refuses it; nothing to read ahead
            self._stop()
            return
        self.memory[self.received:end] = chunk
        self.received = end
        if end >= self.length * AHEAD_SHARE + _CUT_REACH + 1:
            self._hand_over()

    def _hand_over(self) -> None:
        self.open = False
        try:
            start = self.memory.find(b"[", 0, self.received)
            head = _head(self.memory[:start]) if start >= 0 else None
            numeric = None if head is None else numeric_input(choose_signature(head[1], self.signatures,
                                                                                self.default))
            cut = None if numeric is None else _cut(self.memory, start, self.received - _CUT_REACH - 1,
                                                    at=int(self.length * AHEAD_SHARE))
        except _GENERAL_DECIDES:
            cut = None
        if cut is None:
            self.halves.release()
            return
        assert numeric is not None
        floats = numeric[2].kind == "f"
        if self.halves.start(start, cut - start, floats, first=True):
            self.started = (start, cut, floats)

    def _stop(self) -> None:
        self.open = False
        self.halves.release()

    def finish(self, body: bytes, signatures: Mapping[str, SignatureSpec], max_batch: int,
               default: str | None) -> PredictCall | None:
        """The call for the whole body, its first half read by the helper; None where `parse_predict` must
        decide (then the helper is free again)."""
        if self.open:  # the body ended before the hand-over (shorter than declared)
            self._stop()
        if self.started is None:
            return None
        start, cut, floats = self.started
        self.started = None
        try:
            second = self._second_half(body, start, cut, floats, signatures, default)
        finally:
            first = self.halves.collect()
        if first is None or second is None:
            return None
        key, signature, numeric, halves = second
        return _joined(first, halves, signature, *numeric, key, max_batch)

    def _second_half(self, body: bytes, start: int, cut: int, floats: bool, signatures: Mapping[str, SignatureSpec],
                     default: str | None) -> tuple[str, SignatureSpec, Any, tuple[np.ndarray, bytes]] | None:
        """What `_parse_in_halves` checks of the whole body, and the second half read here."""
        around = _around_tensor(body, signatures, default) if len(body) == self.length else None
        if around is None:
            return None
        found_start, end, key, signature, numeric = around
        if found_start != start or end <= cut or (numeric[2].kind == "f") != floats:
            return None
        try:
            return key, signature, numeric, read_half(body[cut + 1:end + 1], floats, first=False)
        except READ_ERRORS:
            return None

    @property
    def pending(self) -> bool:
        """Whether the helper is still this body's (copying, or reading its first part)."""
        return self.open or self.started is not None

    def close(self) -> None:
        """Free the helper for the next body when this one never reached `finish` (refused, client gone):
        its answer, if it was asked, is waited for and dropped."""
        if self.open:
            self._stop()
        if self.started is not None:
            self.started = None
            self.halves.collect()


def _head(text: bytes) -> tuple[str, dict[str, Any]] | None:
    """(tensor key, envelope) from the text before the tensor, `{"signature_name": "x", "instances":` say;
    None unless the standard library reads it, completed, as an object of known, unrepeated keys whose last
    is the tensor's."""
    if not text.rstrip(BLANKS).endswith(b":"):
        return None
    try:
        pairs = json.loads(text.decode("utf-8") + "0}", object_pairs_hook=list)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
        return None
    if not isinstance(pairs, list) or not pairs:
        return None
    keys = [name for name, _ in pairs]
    if len(keys) != len(set(keys)) or not set(keys) <= _KEYS or keys[-1] not in ("instances", "inputs") \
            or ("instances" in keys) == ("inputs" in keys):
        return None
    envelope = dict(pairs[:-1])
    if not isinstance(envelope.get("signature_name", ""), str):
        return None
    return keys[-1], envelope


#: How far from a cut the values beside it may start or end (farther: the body is read whole).
_CUT_REACH = 64
#: How many commas from `FIRST_SHARE` on are tried as the cut.
_CUT_TRIES = 8
#: The share of the tensor's text this thread reads; the helper's half costs it ~0.9 ms more to hand over
#: and back for a 3 MB body (copies, two wake-ups), so the halves are cut a little past the middle.
FIRST_SHARE = 0.56


def _cut(body: Any, start: int, end: int, at: int | None = None) -> int | None:
    """A comma in `body[start:end]` from `at` on (else before it; by default at `FIRST_SHARE` of it) that
    stands between two values: a number or an array just before it, and just after it (so neither half leaves
    a slot empty). `body` is bytes or the helper's memory (an mmap): both find, and slice to bytes."""
    at = start + int((end - start) * FIRST_SHARE) if at is None else min(max(at, start), end)
    forward = [body.find(b",", at, end)]
    while forward[-1] >= 0 and len(forward) < _CUT_TRIES:
        forward.append(body.find(b",", forward[-1] + 1, end))
    for cut in [*forward, body.rfind(b",", start, at)]:
        if cut < 0:
            continue
        before = body[max(start, cut - _CUT_REACH):cut].rstrip(BLANKS)
        after = body[cut + 1:cut + 1 + _CUT_REACH].lstrip(BLANKS)
        if before and after and (before[-1:].isdigit() or before[-1:] == b"]") and after[0] in b"-0123456789[":
            return cut
    return None


def read_half(text: bytes, floats: bool, first: bool) -> tuple[np.ndarray, bytes]:
    """The numbers of one half of a tensor's text cut at a comma (doubles, or int64 when not `floats`), and
    its skeleton (`NUMBER_BYTES` deleted). The first half leaves brackets open and the second closes brackets
    it never opened: as many are added at the cut's side to make it one JSON array simdjson reads. Raises
    ValueError (or TypeError) where it is no such array of numbers."""
    skeleton = text.translate(None, NUMBER_BYTES)
    opened = skeleton.count(b"[") - skeleton.count(b"]")
    if (opened if first else -opened) < 0:
        raise ValueError("unbalanced half")
    document = _parser().parse(text + b"]" * opened if first else b"[" * -opened + text)
    try:
        if not isinstance(document, simdjson.Array):
            raise ValueError("not an array")
        return _flat(document, np.dtype(np.float64 if floats else np.int64)), skeleton
    finally:
        del document


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
    return (b"{" + b",".join(parts) + b"}").translate(None, NUMBER_BYTES)


# --- the Open Inference Protocol's JSON body --------------------------------------------------------------

#: How the skeleton of a body writes an input's `data` key just before its list (see `v2_document`).
_DATA_KEY = b'"data":'


def v2_document(body: bytes, dtypes: Mapping[str, str], halves: HalfReader | None = None) -> Any | None:
    """The JSON document of a v2 infer body as `json.loads` reads it, except that each input's flat list of
    numbers in `data` arrives as a flat numpy array (float64 for a float datatype, int64 for an integer one):
    the values the general path would make of that list. `dtypes` maps v2 datatypes to numpy dtype names.
    None where the general path must decide, as for `parse_predict`. With `halves`, the longest `data` list
    of a large body is read on two cores where it can be (`_v2_in_halves`; the same document either way).

    A `data` list is taken only when the body's skeleton shows it flat: with no backslash in the body no
    string can hold a quote, so every `"data":` in the skeleton is a key, one per input that has one, in
    order; each must be followed by `[` and one comma fewer than the numbers simdjson found, then `]`."""
    if simdjson is None or b"\\" in body:
        return None
    if halves is not None and len(body) >= SPLIT_MIN_BYTES:
        try:
            document = _v2_in_halves(body, dtypes, halves)
        except READ_ERRORS:
            document = None
        if document is not None:
            return document
    try:
        return _v2(_parser(), body, dtypes)
    except READ_ERRORS:
        return None


def _v2_in_halves(body: bytes, dtypes: Mapping[str, str], halves: HalfReader) -> Any | None:
    """`_v2`'s document for a body whose longest `data` list holds most of it, that list read in two halves at
    once; None where this cannot be sure (the caller then reads the body whole).

    The rest of the body, with that list written `[]`, is read by `_v2` (every check on keys, inputs and
    other `data` lists included); it must take the list's input as numbers of a datatype read here. The list
    (from its `[` to the first `]` after it) is cut at a comma between two numbers and each part read by
    `read_half`: the parts' skeletons joined by that comma must be `[`, one comma fewer than their numbers,
    and `]`, so the list held only numbers, flat, every slot filled."""
    span = _longest_data(body)
    if span is None:
        return None
    start, end, index = span
    if 2 * (end - start) < len(body):
        return None
    document = _v2(_parser(), body[:start] + b"[]" + body[end + 1:], dtypes)
    inputs = None if document is None else document.get("inputs")
    if not isinstance(inputs, list):
        return None
    with_data = [tensor for tensor in inputs if "data" in tensor]
    if len(with_data) <= index or not isinstance(with_data[index]["data"], np.ndarray):
        return None
    both = _read_in_halves(body, start, end, with_data[index]["data"].dtype.kind == "f", halves)
    if both is None:
        return None
    (first, first_skeleton), (second, second_skeleton) = both
    flat = np.concatenate((first, second))
    # built here, not by `_tensor_skeleton`: its cache holds a signature's few shapes, and list lengths vary
    if first_skeleton + b"," + second_skeleton != b"[" + b"," * (flat.size - 1) + b"]" or not _exact(flat):
        return None
    with_data[index]["data"] = flat
    return document


def _longest_data(body: bytes) -> tuple[int, int, int] | None:
    """(its `[`, the first `]` after it, how many `data` keys come before it) of the longest list written
    after a `"data"` key in a body with no backslash (where `"data"` followed by `:` can only be a key, the
    skeleton's `"data":`); None when there is none. Quotes are few in such a body and found by one-byte
    searches, which are ~20x faster than searching for `"data"` itself (0.1 vs 1.9 ms through 3 MB)."""
    longest: tuple[int, int, int] | None = None
    size, keys, at = 0, 0, body.find(b'"')
    while at >= 0:
        colon = _past_blanks(body, at + len(b'"data"')) if body.startswith(b'"data"', at) else -1
        if colon >= 0 and body[colon:colon + 1] == b":":
            start = _past_blanks(body, colon + 1)
            end = body.find(b"]", start)
            if body[start:start + 1] == b"[" and end - start > size:
                longest, size = (start, end, keys), end - start
            keys += 1
        at = body.find(b'"', at + 1)
    return longest


def _past_blanks(body: bytes, at: int) -> int:
    """The first position from `at` on that is not JSON blank space."""
    while at < len(body) and body[at] in BLANKS:
        at += 1
    return at


def _v2(parser: Any, body: bytes, dtypes: Mapping[str, str]) -> Any | None:
    document = parser.parse(body)
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
    skeleton = body.translate(None, NUMBER_BYTES)
    if skeleton.count(_DATA_KEY) != len(counts):
        return None
    at = 0
    for count in counts:
        at = skeleton.index(_DATA_KEY, at) + len(_DATA_KEY)
        if count is not None and not skeleton.startswith(b"[" + b"," * (count - 1) + b"]" if count else b"[]", at):
            return None
    return result


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
    return flat if _exact(flat) else _plain(data)


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
