"""The HTTP API's contract as OpenAPI: request bodies and every status code the server really answers.

FastAPI derives paths and parameters from the routes; what it cannot see (bodies read by hand for speed,
the error statuses raised deep in the protocol code) is declared here, next to nothing else, so the
document and the server can be checked against each other by a schema-driven fuzzer.
"""

from __future__ import annotations

from typing import Any

PREDICT_BODY_SCHEMA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "TF Serving predict request: exactly one of `instances` (row) or `inputs` "
                    "(columnar).",
                    "properties": {
                        "signature_name": {"type": "string", "default": "serving_default"},
                        "instances": {"type": "array", "description": "one entry per example"},
                        "inputs": {"description": "a batched tensor, or an object of them by input name"},
                    },
                },
                "example": {"instances": [[0.0, 0.5, 1.0]]},
            }
        },
    },
    "responses": {
        "200": {"description": "`predictions` (row form) or `outputs` (columnar form)"},
        "400": {"description": "malformed JSON, wrong shape or dtype: `{\"error\": ...}`"},
        "404": {"description": "unknown model or version"},
        "413": {"description": "body larger than the server's limit"},
    },
}

V2_READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {"description": "not ready: loading, or draining after SIGTERM (`{\"error\": ...}`)"},
}

V2_INFER_SCHEMA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["inputs"],
                    "properties": {
                        "id": {"type": "string"},
                        "inputs": {"type": "array", "items": {"type": "object"}},
                        "outputs": {"type": "array", "items": {"type": "object"}},
                        "parameters": {"type": "object"},
                    },
                },
            },
            "application/octet-stream": {
                "schema": {"type": "string", "format": "binary",
                           "description": "JSON header (Inference-Header-Content-Length bytes), then tensor bytes"},
            },
        },
    },
    "responses": {
        "200": {"description": "outputs as JSON, or JSON then raw bytes (binary tensor data extension)"},
        "400": {"description": "malformed request, wrong datatype/shape: `{\"error\": ...}`"},
        "404": {"description": "unknown model or version"},
        "413": {"description": "body larger than the server's limit"},
    },
}
