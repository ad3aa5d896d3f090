"""`/docs`: the API a person reads in a browser, written by the server from what it serves, with nothing fetched
from elsewhere.

Why not Swagger UI: its page loads its script and style from a CDN, so in a cluster without internet access (where
inference servers often run) `/docs` was a blank page. This one is plain HTML in one answer: the models served
with each signature's inputs and outputs (names, dtypes, shapes), one example request per protocol, and every
route of the table with its parameters' values and the statuses it answers, all read from the same OpenAPI
document `/openapi.json` serves, so the two cannot disagree.
"""

from __future__ import annotations

from html import escape
from typing import Any

from builder.wire.tensors import wire_shape

STYLE = ("body{font-family:system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;"
         "text-align:left;vertical-align:top}th{background:#f3f3f3}code,pre{background:#f6f6f6}"
         "pre{padding:.6em;overflow-x:auto}")


def shape_text(shape: list[int]) -> str:
    """A wire shape as a reader takes it: `[any, 28, 28, 1]`."""
    return "[" + ", ".join("any" if d < 0 else str(d) for d in shape) + "]"


def example_requests(name: str, signature: Any) -> str:
    """One request for a batch of one on each protocol, the values left for the reader to fill in: a real
    row of a 224x224 image would not fit on a page."""
    from builder.wire.v2_binary import DATATYPE_OF

    rows = ", ".join(f'"{escape(spec.name)}": &lt;{escape(spec.dtype)} {shape_text(wire_shape(spec)[1:])}&gt;'
                     for spec in signature.inputs)
    v2 = ", ".join(f'{{"name": "{escape(spec.name)}", "shape": '
                   f"{shape_text([1, *wire_shape(spec)[1:]]).replace('any', '&lt;n&gt;')}, "
                   f'"datatype": "{escape(DATATYPE_OF.get(spec.dtype, spec.dtype))}", '
                   '"data": [&lt;values, row-major&gt;]}' for spec in signature.inputs)
    quoted = escape(name)
    return (f"<pre>POST /v1/models/{quoted}:predict\n{{\"instances\": [{{{rows}}}]}}\n\n"
            f"POST /v2/models/{quoted}/infer\n{{\"inputs\": [{v2}]}}</pre>")


def _tensors(specs: Any) -> str:
    cells = "".join(f"<tr><td><code>{escape(s.name)}</code></td><td>{escape(s.dtype)}</td>"
                    f"<td>{shape_text(wire_shape(s))}</td></tr>" for s in specs)
    return f"<table><tr><th>name</th><th>dtype</th><th>shape</th></tr>{cells}</table>"


def models_section(models: Any) -> str:
    """Each served model: its versions, and each signature's inputs and outputs (the default first)."""
    parts = ["<h2>Models</h2>"]
    for name in sorted(models.models):
        served = models.get(name)
        versions = ", ".join(str(v) for v in sorted(models.models[name]))
        parts.append(f"<h3><code>{escape(name)}</code> (versions {escape(versions)})</h3>")
        default = served.signature("")
        for signature in [default, *(s for key, s in sorted(served.signatures.items()) if s is not default)]:
            label = " (the default)" if signature is default else ""
            parts.append(f"<h4>signature <code>{escape(signature.name)}</code>{label}</h4>")
            parts.append("<p>inputs</p>" + _tensors(signature.inputs) + "<p>outputs</p>" + _tensors(signature.outputs))
        parts.append("<p>a request for one row</p>" + example_requests(name, default))
    return "".join(parts)


def _parameters(operation: dict[str, Any]) -> str:
    found = []
    for parameter in operation.get("parameters", []):
        values = parameter.get("schema", {}).get("enum")
        found.append(f"<code>{escape(parameter['name'])}</code>"
                     + (": " + ", ".join(f"<code>{escape(str(v))}</code>" for v in values) if values else ""))
    return "<br>".join(found)


def routes_section(document: dict[str, Any]) -> str:
    """Every documented route: method, path, what it does, its path parameters' values and its statuses."""
    rows = []
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            statuses = ", ".join(sorted(operation.get("responses", {})))
            rows.append(f"<tr><td>{escape(method.upper())}</td><td><code>{escape(path)}</code></td>"
                        f"<td>{escape(operation.get('summary', ''))}</td><td>{_parameters(operation)}</td>"
                        f"<td>{escape(statuses)}</td></tr>")
    return ("<h2>Routes</h2><table><tr><th>method</th><th>path</th><th>what it does</th><th>path parameters</th>"
            "<th>statuses</th></tr>" + "".join(rows) + "</table>")


def page(document: dict[str, Any], models: Any) -> str:
    """The whole page (pure: the same document and models give the same page)."""
    info = document.get("info", {})
    title = escape(info.get("title", ""))
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>{STYLE}</style>"
            f"</head><body><h1>{title}</h1><p>{escape(info.get('description', ''))}</p>"
            "<p>Every route and request body exactly: <a href=\"/openapi.json\">/openapi.json</a> (OpenAPI "
            f"{escape(document.get('openapi', ''))}).</p>{models_section(models)}{routes_section(document)}"
            "</body></html>")
