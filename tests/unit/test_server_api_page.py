"""`/docs` (`builder.server.protocols.api_page`): one HTML page written from what the server serves, with nothing
fetched from elsewhere, so it reads the same in a cluster without internet access.

Through the model server over the recorded `tiny_conv.tflite` (LiteRT), as the front hands it a request; the
page's escaping over a stand-in model set whose names hold HTML."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from builder.model.signature import SignatureSpec, TensorSpec
from builder.server.config import ServerConfig
from builder.server.model_server import ModelServer
from builder.server.process.messages import HTTP, Request
from builder.server.protocols import api_page

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "serve" / "tiny_conv.tflite"


@pytest.fixture(scope="module")
def docs_page() -> Iterator[tuple[int, dict[bytes, bytes], str]]:
    loop = asyncio.new_event_loop()
    server = ModelServer(ServerConfig(model_path=TINY, model_name="tiny", workers=1, threads=1))
    loop.run_until_complete(server.start())
    try:
        answer = loop.run_until_complete(server.answer(Request(HTTP, "GET", b"", "/docs", client="127.0.0.1:5000")))
        yield answer.status, dict(answer.headers), bytes(answer.body).decode()
    finally:
        loop.run_until_complete(server.stop())
        loop.close()


def test_the_page_is_html_that_fetches_nothing(docs_page: tuple[int, dict[bytes, bytes], str]) -> None:
    status, headers, text = docs_page
    assert status == 200 and headers[b"content-type"].startswith(b"text/html")
    assert text.startswith("<!DOCTYPE html>") and text.endswith("</html>")
    assert "<script" not in text and " src=" not in text and "@import" not in text
    assert re.findall(r'href="([^"]*)"', text) == ["/openapi.json"]


def test_the_page_names_the_model_its_tensors_and_an_example_request(
        docs_page: tuple[int, dict[bytes, bytes], str]) -> None:
    text = docs_page[2]
    assert "<code>tiny</code> (versions 1)" in text
    assert "<td><code>input_1</code></td><td>float32</td><td>[any, 8, 8, 1]</td>" in text
    assert "<td><code>dense</code></td><td>float32</td>" in text
    assert "POST /v1/models/tiny:predict" in text and "POST /v2/models/tiny/infer" in text
    assert '{"name": "input_1", "shape": [1, 8, 8, 1], "datatype": "FP32"' in text


def test_the_page_lists_every_route_of_the_openapi_document(docs_page: tuple[int, dict[bytes, bytes], str]) -> None:
    text = docs_page[2]
    for path in ("/v1/models/{name}:predict", "/v2/models/{name}/infer", "/v2/health/ready",
                 "/monitoring/prometheus/metrics"):
        assert f"<code>{path}</code>" in text
    assert "<code>name</code>: <code>tiny</code>" in text  # a path parameter with the values served


def test_names_from_the_model_are_escaped() -> None:
    spec = TensorSpec("x<script>", "float32", (None, 3))
    signature = SignatureSpec("serving_default", (spec,), (TensorSpec("y&z", "float32", (None, 1)),))
    served = SimpleNamespace(signature=lambda name: signature, signatures={"serving_default": signature})
    models = SimpleNamespace(models={"m<b>": {1: served}}, get=lambda name: served)
    document = {"info": {"title": "t", "description": "serving `m<b>`"}, "openapi": "3.1.0",
                "paths": {"/v1/models/{name}": {"get": {
                    "summary": "status", "responses": {"200": {}},
                    "parameters": [{"name": "name", "schema": {"enum": ["m<b>"]}}]}}}}
    text = api_page.page(document, models)
    assert "<script" not in text and "<b>" not in text
    assert "x&lt;script&gt;" in text and "y&amp;z" in text and "m&lt;b&gt;" in text
