"""TensorFlow Serving's REST API: its routes, and its JSON as pure functions (JSON bodies in, numpy arrays out,
and back); one module, since a predict is read and answered in TF Serving's terms and nothing else speaks them.

Its routes (TF Serving's, so existing clients and probes work unchanged; declared in `routes`):
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]            model status (every served version AVAILABLE)
  GET  /v1/models/<name>[/versions/<v>|/labels/<l>]/metadata   signatures: inputs/outputs, dtypes, shapes
  POST /v1/models/<name>[/versions/<v>|/labels/<l>]:predict    row (`instances`) or columnar (`inputs`) predict
A predict body (as the front handed it, gzip already decoded) is read into numpy by one fast path
(`jsoncodec.read_predict`, simdjson straight into an array for one numeric input) or else the general path
once (`parse_predict` over `jsoncodec`), and the outputs are written back in the request's form (`format_outputs`).
Lookup, readiness and decoding off the event loop are the data plane's (`dataplane.read`), the call and its
rules `core/call`'s; errors are raised, and answered and counted by the route table's router (`core.outcome`).

Existing TF Serving clients and probes must work unchanged against a LiteRT model, so the JSON follows TF
Serving's shapes exactly: row form (`instances`, one entry per example) answers `predictions`, columnar form
(`inputs`, one batched tensor per input) answers `outputs`; errors are `{"error": "..."}`. Everything a
client can get wrong raises `RequestError` with the HTTP status to answer; the JSON functions do no I/O, so
the whole request surface is unit-tested without a server. Reading JSON values into typed arrays
(`to_typed_array`, `may_hold_booleans`) is the Open Inference Protocol's rule too (`v2`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from builder.model.signature import SignatureSpec, TensorSpec
from builder.server.core.call import RequestError, batch_of, check_shape, choose_signature
from builder.server.process.messages import JSON, Answer, Request
from builder.server.protocols import jsoncodec
from builder.server.protocols.answers import json_answer
from builder.server.protocols.jsoncodec import TfsCall, may_hold_booleans, parse_json, to_typed_array

if TYPE_CHECKING:
    from builder.server.routes import Context

PREDICT_METHOD = "tensorflow/serving/predict"

from builder.wire.tensors import TF_DTYPES, wire_shape  # noqa: E402 - what every wire format shares

#: Outputs whose name ends so are always answered as `{"b64": ...}` (TF Serving's rule for binary strings).
BYTES_SUFFIX = "_bytes"


def string_json(value: bytes, binary: bool) -> str | dict[str, str]:
    """One string output value in TF Serving's JSON: `{"b64": ...}` for a binary output (named `*_bytes`)
    or bytes that are not UTF-8 (a JSON string cannot hold them), else the text itself."""
    if not binary:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(value).decode("ascii")}


def json_values(array: np.ndarray, name: str) -> Any:
    """An output array as nested JSON lists; string outputs by `string_json`."""
    if array.dtype != object:
        return array.tolist()
    binary = name.endswith(BYTES_SUFFIX)
    flat = np.empty(array.size, dtype=object)
    flat[:] = [string_json(bytes(v), binary) for v in array.reshape(-1)]
    return flat.reshape(array.shape).tolist()


def parse_predict(body: Any, signatures: Mapping[str, SignatureSpec], max_batch: int = 4096,
                  booleans: bool = True, default: str | None = None) -> TfsCall:
    """Validate a decoded predict body against the model's signatures (TF Serving's row and columnar forms)."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object with 'instances' or 'inputs'")
    has_rows, has_columns = "instances" in body, "inputs" in body
    if has_rows == has_columns:
        raise RequestError("request must contain exactly one of 'instances' (row format) or 'inputs' (columnar)")
    unknown = set(body) - {"signature_name", "instances", "inputs"}
    if unknown:
        raise RequestError(f"unknown request fields: {', '.join(sorted(unknown))}")
    signature = choose_signature(body.get("signature_name"), signatures, default)
    if has_rows:
        inputs = _parse_rows(body["instances"], signature, max_batch, booleans)
    else:
        inputs = _parse_columns(body["inputs"], signature, max_batch, booleans)
    return TfsCall(signature=signature.name, inputs=inputs, batch=batch_of(inputs), row_format=has_rows)


def _parse_rows(instances: Any, signature: SignatureSpec, max_batch: int, booleans: bool) -> dict[str, np.ndarray]:
    if not isinstance(instances, list) or not instances:
        raise RequestError("'instances' must be a non-empty list")
    if len(instances) > max_batch:
        raise RequestError(f"too many instances: {len(instances)} > {max_batch}")
    scalars = [spec.name for spec in signature.inputs if not spec.shape]
    if scalars:  # each instance is one row of every input: a scalar has no rows to give (TF Serving: 400)
        raise RequestError(f"input(s) {', '.join(scalars)} of this signature are scalars (shape []), which the row "
                           "format ('instances') cannot carry; send the request in the columnar format ('inputs')")
    names = [spec.name for spec in signature.inputs]
    named = all(_is_named(row) for row in instances)
    if not named and any(_is_named(row) for row in instances):
        raise RequestError("'instances' mixes named (object) and plain rows")
    if not named and len(names) != 1:
        raise RequestError(f"this signature has several inputs ({', '.join(names)}): send each instance as an object")
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for i, row in enumerate(instances):
        if named:
            missing, extra = set(names) - set(row), set(row) - set(names)
            if missing or extra:
                raise RequestError(_names_message(f"instances[{i}]", missing, extra))
            for name in names:
                columns[name].append(row[name])
        else:
            columns[names[0]].append(row)
    result: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        rows = [to_typed_array(v, spec, f"instances[{i}]" + (f".{spec.name}" if named else ""), booleans)
                for i, v in enumerate(columns[spec.name])]
        for i, row in enumerate(rows):
            check_shape(row, spec, f"instances[{i}]" + (f".{spec.name}" if named else ""), batched=False)
        if len({row.shape for row in rows}) > 1:
            raise RequestError(f"instances of input {spec.name!r} have different shapes")
        result[spec.name] = np.stack(rows)
    return result


def _is_named(row: Any) -> bool:
    """A row object names inputs, unless it is a binary value (`{"b64": ...}`) of a one-input signature."""
    return isinstance(row, dict) and set(row) != {"b64"}


def _parse_columns(inputs: Any, signature: SignatureSpec, max_batch: int, booleans: bool) -> dict[str, np.ndarray]:
    names = [spec.name for spec in signature.inputs]
    if isinstance(inputs, dict):
        missing, extra = set(names) - set(inputs), set(inputs) - set(names)
        if missing or extra:
            raise RequestError(_names_message("inputs", missing, extra))
        values = inputs
    else:
        if len(names) != 1:
            raise RequestError(f"this signature has several inputs ({', '.join(names)}): send 'inputs' as an object")
        values = {names[0]: inputs}
    result: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        where = f"inputs.{spec.name}"
        array = to_typed_array(values[spec.name], spec, where, booleans)
        check_shape(array, spec, where, batched=True)
        if array.ndim and array.shape[0] > max_batch:
            raise RequestError(f"{where}: batch {array.shape[0]} > {max_batch}")
        result[spec.name] = array
    batch_of(result)  # batched inputs share their first dimension
    return result


def _names_message(where: str, missing: set[str], extra: set[str]) -> str:
    parts = []
    if missing:
        parts.append(f"missing input(s) {', '.join(sorted(missing))}")
    if extra:
        parts.append(f"unknown input(s) {', '.join(sorted(extra))}")
    return f"{where}: {'; '.join(parts)}"


def format_outputs(outputs: Mapping[str, np.ndarray], signature: SignatureSpec, row_format: bool) -> dict[str, Any]:
    """TF Serving's answer: `predictions` (one entry per instance) or `outputs` (batched tensors)."""
    names = [spec.name for spec in signature.outputs]
    if row_format:
        batched_rows(outputs, names)
        if len(names) == 1:
            return {"predictions": json_values(outputs[names[0]], names[0])}
        lists = {name: json_values(outputs[name], name) for name in names}
        batch = len(lists[names[0]])
        return {"predictions": [{name: lists[name][i] for name in names} for i in range(batch)]}
    if len(names) == 1:
        return {"outputs": json_values(outputs[names[0]], names[0])}
    return {"outputs": {name: json_values(outputs[name], name) for name in names}}


def batched_rows(outputs: Mapping[str, np.ndarray], names: Sequence[str]) -> None:
    """Rows can carry only outputs that all have the same batch: an output without a batch dimension (a scalar
    beside the batched ones), or one whose first dimension differs, is refused as TF Serving refuses it (400),
    instead of failing while the answer is written. The column format (`inputs`) carries them."""
    sizes: dict[str, int] = {}
    for name in names:
        shape = np.shape(outputs[name])
        if not shape:
            raise RequestError(f"Tensor name: {name} has no shape information; ask with \"inputs\" (the column "
                               "format) for an output without a batch")
        sizes[name] = shape[0]
    if len(set(sizes.values())) > 1:
        raise RequestError("the outputs' batch sizes differ (" + ", ".join(f"{n}: {b}" for n, b in sizes.items())
                           + "), so they cannot be answered as rows; ask with \"inputs\" (the column format)")


def model_status(versions: Sequence[int]) -> dict[str, Any]:
    """`GET /v1/models/<name>[/versions/<v>]`: every served version is AVAILABLE."""
    return {
        "model_version_status": [
            {"version": str(v), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
            for v in versions
        ]
    }


def _tensor_info(spec: TensorSpec) -> dict[str, Any]:
    return {
        "dtype": TF_DTYPES.get(spec.dtype, ("DT_INVALID", 0))[0],
        "tensor_shape": {"dim": [{"size": str(d), "name": ""} for d in wire_shape(spec)], "unknown_rank": False},
        "name": spec.name,
    }


def model_metadata(name: str, version: int, signatures: Mapping[str, SignatureSpec]) -> dict[str, Any]:
    """`GET /v1/models/<name>/metadata` in TF Serving's SignatureDefMap JSON shape."""
    return {
        "model_spec": {"name": name, "signature_name": "", "version": str(version)},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    sig.name: {
                        "inputs": {s.name: _tensor_info(s) for s in sig.inputs},
                        "outputs": {s.name: _tensor_info(s) for s in sig.outputs},
                        "method_name": PREDICT_METHOD,
                    }
                    for sig in signatures.values()
                }
            }
        },
    }


# --- the routes' handlers ---------------------------------------------------------------------------------------------


def decode_predict(body: bytes, signatures: Mapping[str, Any], max_batch: int, default: str | None) -> TfsCall:
    """The call of a predict body: the fast path's (`jsoncodec.read_predict`, its structure check passed), else the general
    path's, read once."""
    try:
        fast = jsoncodec.read_predict(body, signatures, max_batch, default)
        call = (fast if not isinstance(fast, jsoncodec.Left)
                else decode_general(body, fast, signatures, max_batch, default))
    except RequestError:
        addressed = _addressed(body, signatures, default)
        if addressed is not None:
            json_carries(addressed)  # complex values written somehow: the reason is that JSON has none
        raise
    json_carries(signatures[call.signature])
    return call


def _addressed(body: bytes, signatures: Mapping[str, Any], default: str | None) -> SignatureSpec | None:
    """The signature a body that could not be read addresses, when that much can be read (else None)."""
    import json

    try:
        document = json.loads(body)
        name = document.get("signature_name") if isinstance(document, dict) else None
        return choose_signature(name, signatures, default)
    except (ValueError, TypeError, RequestError):
        return None


def json_carries(signature: SignatureSpec) -> None:
    """TF Serving's JSON has numbers, booleans and strings, no complex values (its REST API refuses a complex
    tensor): a signature with one is refused before the model runs (RequestError 400), in one line."""
    for kind, specs in (("input", signature.inputs), ("output", signature.outputs)):
        for spec in specs:
            if spec.dtype.startswith("complex"):
                raise RequestError(f"{kind} {spec.name!r} is {spec.dtype}: TF Serving's JSON (REST) carries no "
                                   "complex values; ask over gRPC")


def decode_general(body: bytes, left: jsoncodec.Left, signatures: Any, max_batch: int,
                   default: str | None) -> TfsCall:
    """The call of a predict body `jsoncodec`'s fast path left to the general path: decoded once by the decoder it
    names and validated by `parse_predict` (RequestError 400)."""
    document = parse_json(body, standard=left is jsoncodec.Left.UNREADABLE)
    return parse_predict(document, signatures, max_batch, may_hold_booleans(body), default)


async def status(context: Context, request: Request, name: str, version: str | None = None,
                 label: str | None = None) -> Answer:
    """Model status: every served version, or the one addressed."""
    return json_answer(model_status(context.plane.status(name, version, label)))


async def metadata(context: Context, request: Request, name: str, version: str | None = None,
                   label: str | None = None) -> Answer:
    """The addressed version's signatures."""
    found = context.plane.metadata(name, version, label)
    return json_answer(model_metadata(name, found.version, found.signatures))


async def predict(context: Context, request: Request, name: str, version: str | None = None,
                  label: str | None = None) -> Answer:
    """TF Serving's predict: the body (as it lies, or gunzipped) decoded into a call against the addressed
    version's signatures, the call run, the outputs written in the request's form (rows or columns)."""
    plane, config = context.plane, context.config
    body = request.body if isinstance(request.body, bytes) else bytes(request.body)
    served, call = await plane.read(name, version, label, len(body), lambda served: decode_predict(
        body, served.signatures, config.max_request_batch, served.default_signature))
    outputs = await served.predict(call)
    return Answer(200, jsoncodec.dumps(format_outputs(outputs, served.signatures[call.signature], call.row_format)),
                  JSON)
