"""The HTTP API's contract as OpenAPI, derived from the route table: every route's path, method and parameters
(`routes.ROUTES`), the request bodies of the served models' signatures and every status the server answers.

What a route table cannot say (bodies read by hand for speed, the error statuses raised deep in the protocol
code) is declared here, next to nothing else, so the document and the server can be checked against each
other by a schema-driven fuzzer (schemathesis, `tests/e2e/test_serve_contract.py`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from builder.server.protocols import jsoncodec

from builder.server import routes
from builder.server.process.messages import Answer, Request
from builder.wire.tensors import wire_shape

if TYPE_CHECKING:
    from builder.server.routes import Context

OPENAPI_VERSION = "3.1.0"
TITLE = "tfsmith model server"

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"], "properties": {"error": {"type": "string"}},
}
ERROR_STATUSES = {
    "400": "malformed request: bad JSON, wrong names, dtypes or shapes",
    "404": "unknown model, version or route",
    "405": "method not allowed here; `Allow` lists the ones that are",
    "413": "body larger than the server's limit (--max-body-bytes), as sent or decoded",
    "415": "unsupported Content-Encoding (identity and gzip are)",
    "503": "not ready: loading, or draining after SIGTERM",
}
BODY_STATUSES = ("400", "404", "413", "415")


def paths() -> dict[str, dict[str, Any]]:
    """The document's paths, one operation per route of the table (as FastAPI derived them from its routes)."""
    found: dict[str, dict[str, Any]] = {}
    for route in routes.ROUTES:
        if route.path in routes.UNDOCUMENTED:
            continue
        method = route.method.lower()
        operation: dict[str, Any] = {
            "summary": route.summary,
            "operationId": re.sub(r"\W+", "_", f"{route.handler}{route.path}").strip("_") + f"_{method}",
            "responses": {"200": {"description": "Successful Response"}},
        }
        names = routes.parameters(route.path)
        if names:
            operation["parameters"] = [{"name": name, "in": "path", "required": True,
                                        "schema": {"type": "string", "title": name.title()}} for name in names]
        found.setdefault(route.path, {})[method] = operation
    return found


def document(context: Context) -> dict[str, Any]:
    """The OpenAPI document of what this server serves now (built once, again after a version switch)."""
    if context.document is None:
        models = context.plane.models
        described = {
            "openapi": OPENAPI_VERSION,
            "info": {"title": TITLE, "version": "1",
                     "description": "TensorFlow Serving-compatible REST API (and the Open Inference Protocol) "
                                    "serving " + ", ".join(f"`{name}`" for name in models.models) + "."},
            "paths": paths(),
        }
        from builder.wire.v2_binary import DATATYPE_OF

        context.document = finish_document(described, models, context.config.max_request_batch, DATATYPE_OF)
    return context.document


async def openapi_json(context: Context, request: Request) -> Answer:
    from builder.server.protocols.answers import JSON

    return Answer(200, jsoncodec.dumps(document(context)), JSON)


async def docs(context: Context, request: Request) -> Answer:
    from builder.server.protocols import api_page

    return Answer(200, api_page.page(document(context), context.plane.models).encode(),
                  ((b"content-type", b"text/html; charset=utf-8"),))


#: Base64 as `base64.b64decode(validate=True)` takes it: whole 4-character groups, padding only at the end.
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
#: One value of a string input in TF Serving's JSON: text, or binary as `{"b64": "<Base64>"}`.
STRING_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string"},
    {"type": "object", "required": ["b64"], "additionalProperties": False,
     "properties": {"b64": {"type": "string", "pattern": BASE64_PATTERN}}},
]}


def _number_schema(dtype: str, binary: bool = True) -> dict[str, Any]:
    """JSON Schema for one value of a numpy dtype, bounded to what the dtype holds (out of range is a 400);
    a string (object) value is text or, where `binary`, a `{"b64": ...}` object."""
    import numpy as np

    if dtype == "object":
        return STRING_SCHEMA if binary else {"type": "string"}
    kind = np.dtype(dtype)
    if kind.kind == "b":
        return {"type": "boolean"}
    if kind.kind in "iu":
        info = np.iinfo(kind)
        return {"type": "integer", "minimum": int(info.min), "maximum": int(info.max)}
    limit = float(np.finfo(kind).max)
    return {"type": "number", "minimum": -limit, "maximum": limit}


def _tensor_schema(shape: tuple[int, ...], dtype: str, max_batch: int | None) -> dict[str, Any]:
    """Nested arrays of exactly `shape` (-1: any size >= 1; the first, when `max_batch`, at most that)."""
    schema = _number_schema(dtype)
    for position in range(len(shape) - 1, -1, -1):
        size = shape[position]
        bounds: dict[str, Any] = {"minItems": size, "maxItems": size} if size >= 0 else {"minItems": 1}
        if position == 0 and max_batch is not None and size < 0:
            bounds["maxItems"] = max_batch
        schema = {"type": "array", "items": schema, **bounds}
    return schema


def predict_body(signature: Any, signature_names: list[str], max_batch: int) -> dict[str, Any]:
    """TF Serving's predict body for a signature: row (`instances`) or columnar (`inputs`), exactly."""
    names = {"signature_name": {"enum": [None, "", *signature_names]}}  # null and "" mean the default
    if len(signature.inputs) == 1:
        spec = signature.inputs[0]
        row = _tensor_schema(wire_shape(spec)[1:], spec.dtype, None)
        rows = {"type": "array", "items": row, "minItems": 1, "maxItems": max_batch}
        batched = _tensor_schema(wire_shape(spec), spec.dtype, max_batch)
        columns: dict[str, Any] = {"anyOf": [batched, {"type": "object", "properties": {spec.name: batched},
                                                        "required": [spec.name], "additionalProperties": False}]}
    else:
        rows = {"type": "array", "minItems": 1, "maxItems": max_batch, "items": {
            "type": "object", "additionalProperties": False, "required": [s.name for s in signature.inputs],
            "properties": {s.name: _tensor_schema(wire_shape(s)[1:], s.dtype, None) for s in signature.inputs}}}
        columns = {"type": "object", "additionalProperties": False, "required": [s.name for s in signature.inputs],
                   "properties": {s.name: _tensor_schema(wire_shape(s), s.dtype, max_batch) for s in signature.inputs}}
    return {"oneOf": [
        {"type": "object", "additionalProperties": False, "required": ["instances"],
         "properties": {**names, "instances": rows}},
        {"type": "object", "additionalProperties": False, "required": ["inputs"],
         "properties": {**names, "inputs": columns}},
    ]}


def v2_infer_body(signature: Any, datatype_of: dict[str, str]) -> dict[str, Any]:
    """An Open Inference Protocol request with every input as JSON `data` for a batch of one."""
    items = []
    for spec in signature.inputs:
        shape = [1 if i == 0 and d < 0 else max(d, 1) for i, d in enumerate(wire_shape(spec))]
        count = 1
        for d in shape:
            count *= d
        items.append({"type": "object", "required": ["name", "shape", "datatype", "data"], "properties": {
            "name": {"type": "string", "enum": [spec.name]},
            "shape": {"type": "array", "items": {"type": "integer"}, "enum": [shape]},
            "datatype": {"type": "string", "enum": [datatype_of.get(spec.dtype, spec.dtype)]},
            "data": {"type": "array", "items": _number_schema(spec.dtype, binary=False), "minItems": count,
                     "maxItems": count},
        }, "additionalProperties": False})
    outputs = [spec.name for spec in signature.outputs]
    return {"type": "object", "required": ["inputs"], "additionalProperties": False, "properties": {
        "id": {"type": "string"},
        "parameters": {"type": "object", "additionalProperties": False,
                       "properties": {"binary_data_output": {"type": "boolean"}}},
        "outputs": {"type": "array", "items": {
            "type": "object", "required": ["name"], "additionalProperties": False, "properties": {
                "name": {"type": "string", "enum": outputs},
                "parameters": {"type": "object", "additionalProperties": False,
                               "properties": {"binary_data": {"type": "boolean"}}}}}},
        "inputs": {"type": "array", "items": items, "minItems": len(items), "maxItems": len(items)}
        if len(items) > 1 else {"type": "array", "items": items[0], "minItems": 1, "maxItems": 1},
    }}


def finish_document(document: dict[str, Any], models: Any, max_batch: int, datatype_of: dict[str, str]) -> dict[str, Any]:
    """The table's document made exact: path parameters as the values served (names, versions, labels), the
    bodies of the served models' signatures, and every status the server answers (no 422: it never
    validates with pydantic). `models` is the server's ModelSet; a reload rebuilds the document."""
    latest = [models.get(name) for name in sorted(models.models)]
    predicts = [predict_body(s.signature(""), sorted(s.signatures), max_batch) for s in latest]
    infers = [v2_infer_body(s.signature(""), datatype_of) for s in latest]
    predict = predicts[0] if len(predicts) == 1 else {"anyOf": predicts}
    infer = infers[0] if len(infers) == 1 else {"anyOf": infers}
    names = sorted(models.models)
    versions = sorted({str(v) for name in names for v in models.models[name]})
    labels = sorted({label for name in names for label in models.labels.get(name, {})})
    error = {"application/json": {"schema": ERROR_SCHEMA}}
    if not labels:  # without version labels these routes can only answer 404: not part of this server's API
        document["paths"] = {p: ops for p, ops in document.get("paths", {}).items() if "{label}" not in p}
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter["name"] == "name":
                    parameter["schema"] = {"type": "string", "enum": names}
                elif parameter.get("in") == "path" and parameter["name"] == "version":
                    parameter["schema"] = {"type": "string", "enum": versions}
                elif parameter.get("in") == "path" and parameter["name"] == "label":
                    parameter["schema"] = {"type": "string", "enum": labels}
            statuses = ["405"]
            if "{name}" in path:
                statuses.append("404")
            if method == "post":
                statuses += BODY_STATUSES
                body = predict if path.startswith("/v1/") else infer
                operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
            if path.endswith("/ready"):
                statuses.append("503")
            for status in statuses:
                responses[status] = {"description": ERROR_STATUSES[status], "content": error,
                                     **({"headers": {"Allow": {"schema": {"type": "string"},
                                                               "description": "the methods served here"}}}
                                        if status == "405" else {})}
            ok = responses.setdefault("200", {"description": "OK"})
            if path == "/monitoring/prometheus/metrics":
                ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
            elif path.endswith("/infer"):
                ok["content"] = {"application/json": {"schema": {"type": "object"}},
                                 "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
            else:
                ok["content"] = {"application/json": {"schema": {"type": "object"}}}
    return document
