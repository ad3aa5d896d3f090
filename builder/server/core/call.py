"""The data plane's own vocabulary: the call a request makes of a model version, the errors a request can have, and
the rules a call must satisfy (which signature, which inputs, their dtypes and shapes). Which model and version a
request names is given to the data plane as (name, version or URL path segment, label): `DataPlane.resolve`.

Every protocol (`protocols/`) decodes its wire form into these terms and encodes its answer from them; nothing
here knows any wire format, so `core/` imports no protocol. A model's signature is `builder.model.signature`'s
(`None` for a dimension of any size), the same description the optimize report carries.

Shapes: a tensor of rank 1 or more carries the batch as its first dimension; a rank-0 input (a scalar such as a
sampling temperature beside a batched input) is one value for the whole call. The call's batch is the first
dimension of its batched inputs (1 when every input is a scalar).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.model.signature import DEFAULT_SIGNATURE, SignatureSpec, TensorSpec

class RequestError(Exception):
    """A request the client got wrong (or a model not there to answer it); `status` is the HTTP status that
    says which (`outcome.Outcome` gives its gRPC code and metric label)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Call:
    """What a request asks of a model version: one of its signatures, with named tensors of that signature's
    dtypes and shapes (batched inputs sharing the first dimension, `batch`)."""

    signature: str
    inputs: Mapping[str, np.ndarray]
    batch: int
    #: the outputs asked for, each one of the signature's (checked by `make_call`); empty: all of them
    outputs: tuple[str, ...] = ()


def parse_version(text: str) -> int:
    """A version path segment as TF Serving reads it: a non-negative integer, else 404-worthy."""
    if not text.isdigit():
        raise RequestError(f"malformed version {text!r}: versions are integers", status=404)
    return int(text)


# --- signatures ---------------------------------------------------------------------------------------------


def default_signature(signatures: Mapping[str, SignatureSpec], preferred: str | None = None) -> str | None:
    """The signature a request without a signature name gets: `preferred` (the server's --signature-name or
    the report's choice), else `serving_default`, else the only one; None when that leaves a choice open."""
    if preferred:
        return preferred if preferred in signatures else None
    if DEFAULT_SIGNATURE in signatures:
        return DEFAULT_SIGNATURE
    return next(iter(signatures)) if len(signatures) == 1 else None


def choose_signature(name: Any, signatures: Mapping[str, SignatureSpec], default: str | None = None) -> SignatureSpec:
    """The signature a request names (None or "": the model's default one, `default` when the server sets one)."""
    if name is None or name == "":
        if default:
            return signatures[default]
        if DEFAULT_SIGNATURE in signatures:
            return signatures[DEFAULT_SIGNATURE]
        if len(signatures) == 1:
            return next(iter(signatures.values()))
        raise RequestError("signature_name is required: this model has several signatures")
    if not isinstance(name, str):
        raise RequestError("signature_name must be a string")
    if name not in signatures:
        raise RequestError(f"unknown signature_name {name!r}; this model has: {', '.join(sorted(signatures))}")
    return signatures[name]


# --- inputs: names, dtypes, shapes --------------------------------------------------------------------------


def shape_text(shape: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def check_shape(array: np.ndarray, spec: TensorSpec, where: str, batched: bool) -> None:
    """Rank and fixed dimensions must match the signature (a None dimension takes any size). `batched`: the
    array is the whole tensor, its first dimension the batch; else it is one example (a row), without it. A
    rank-0 input is a scalar either way."""
    expected = spec.shape if batched or not spec.shape else spec.shape[1:]
    if array.ndim != len(expected):
        raise RequestError(
            f"{where}: expected rank {len(expected)} (shape {shape_text(expected)}), got shape {list(array.shape)}"
        )
    leading = 1 if batched and expected else 0  # the batch takes any size; the signature's first dim says so
    for got, want in zip(array.shape[leading:], expected[leading:]):
        if want is not None and got != want:
            raise RequestError(f"{where}: expected shape {shape_text(expected)}, got {list(array.shape)}")
    if leading and array.shape[0] == 0:
        raise RequestError(f"{where}: empty batch")


def batch_of(inputs: Mapping[str, np.ndarray], where: str = "inputs") -> int:
    """The batch the call's tensors share (their first dimension; scalars have none): 1 when every input is a
    scalar; RequestError when batched inputs disagree."""
    sizes = {array.shape[0] for array in inputs.values() if array.ndim}
    if len(sizes) > 1:
        raise RequestError(f"{where} have different batch sizes")
    return sizes.pop() if sizes else 1


def check_names(signature: SignatureSpec, given: Sequence[str], where: str = "inputs") -> None:
    """Every input of the signature given, and nothing else."""
    names = [spec.name for spec in signature.inputs]
    missing, extra = sorted(set(names) - set(given)), sorted(set(given) - set(names))
    if missing or extra:
        parts = ([f"missing input(s) {', '.join(missing)}"] if missing else []) + (
            [f"unknown input(s) {', '.join(extra)}"] if extra else [])
        raise RequestError(f"{where}: {'; '.join(parts)} (this signature takes {', '.join(names)})")


_DTYPES: dict[str, np.dtype] = {}


def check_dtype(array: np.ndarray, spec: TensorSpec, where: str) -> None:
    expected = _DTYPES.get(spec.dtype)
    if expected is None:
        expected = _DTYPES[spec.dtype] = np.dtype(spec.dtype)
    if array.dtype != expected:
        raise RequestError(f"{where}: expects {spec.dtype}, got {array.dtype.name}")


def make_call(signature: SignatureSpec, arrays: Mapping[str, np.ndarray], max_batch: int,
              outputs: Sequence[str] = ()) -> Call:
    """A call from named arrays already of some dtype (gRPC's tensors, v2's) and the outputs asked for: the
    outputs' names checked first (an unknown one is refused before any input is looked at), then the inputs'
    names, dtypes, shapes and the batch against the signature. One call makes the whole call, so a protocol
    hands its request to these rules once."""
    wanted = tuple(check_output_names(signature, outputs)) if outputs else ()
    check_names(signature, list(arrays))
    inputs: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        array = arrays[spec.name]
        where = f"inputs.{spec.name}"
        check_dtype(array, spec, where)
        check_shape(array, spec, where, batched=True)
        if array.ndim and array.shape[0] > max_batch:
            raise RequestError(f"{where}: batch {array.shape[0]} > {max_batch}")
        inputs[spec.name] = array
    return Call(signature=signature.name, inputs=inputs, batch=batch_of(inputs), outputs=wanted)


# --- outputs ------------------------------------------------------------------------------------------------


def check_output_names(signature: SignatureSpec, wanted: Sequence[str]) -> list[str]:
    """`wanted` when every name is an output of the signature; RequestError 400 naming the others."""
    known = {spec.name for spec in signature.outputs}
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise RequestError(f"unknown output(s) {', '.join(unknown)}; this signature has {', '.join(sorted(known))}")
    return list(wanted)

