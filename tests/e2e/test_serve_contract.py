"""The OpenAPI document is the server's exact contract: a schema-driven fuzzer (schemathesis, every check on)
finds no request whose answer the document does not describe, and none the server treats otherwise."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_serve import HTTP, REPO, IN_FRONT, STOPPED, Server, models  # noqa: F401 - models is a fixture

#: A 413 is a refusal (negative data) and can also meet a schema-valid body larger than the limit: request
#: size limits are not expressible in JSON Schema, and the document lists 413 on every body.
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = [400, 404, 405, 413, 415]

[checks.positive_data_acceptance]
expected-statuses = ["2xx", 413]
"""


@pytest.fixture(scope="module")
def server(models: Path) -> Iterator[Server]:  # noqa: F811
    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--max-body-bytes", "65536")
    yield running
    assert running.stop() in STOPPED


def test_document_lists_every_status_and_the_model_bodies(server: Server) -> None:
    doc = HTTP.get(f"{server.url}/openapi.json").json()
    predict = doc["paths"]["/v1/models/{name}:predict"]["post"]
    assert {"200", "400", "404", "405", "413", "415"} <= set(predict["responses"]) and "422" not in predict["responses"]
    body = predict["requestBody"]["content"]["application/json"]["schema"]
    rows = body["oneOf"][0]["properties"]["instances"]["items"]
    assert (rows["minItems"], rows["items"]["minItems"], rows["items"]["items"]["maxItems"]) == (8, 8, 1)
    assert doc["paths"]["/v2/health/ready"]["get"]["responses"]["503"]
    name = doc["paths"]["/v2/models/{name}/infer"]["post"]["parameters"][0]
    assert name["schema"]["enum"] == ["digits"]


def test_wrong_methods_are_405_with_allow(server: Server) -> None:
    for method, path, allow in [("GET", "/v1/models/digits:predict", "POST"), ("DELETE", "/v1/models/digits", "GET"),
                                ("PUT", "/v2/models/digits/infer", "POST")]:
        answer = HTTP.request(method, server.url + path)
        assert answer.status_code == 405 and "error" in answer.json(), (method, path)
        assert allow in answer.headers["allow"].split(", "), (method, path, answer.headers["allow"])


def test_schemathesis_finds_nothing(server: Server, tmp_path: Path) -> None:
    binary = shutil.which("schemathesis", path=str(REPO / ".venv" / "bin")) or shutil.which("schemathesis")
    if binary is None:
        pytest.skip("schemathesis (dev extra) not installed")
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    done = subprocess.run([binary, "--config-file", str(config), "run", f"{server.url}/openapi.json", "--checks", "all",
                           "--max-examples", "10", "--generation-deterministic", "--request-timeout", "10"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    summary = [line for line in done.stdout.splitlines() if "generated" in line]
    assert done.returncode == 0, done.stdout[-6000:]
    assert summary and "passed" in summary[-1] and "fail" not in summary[-1], summary
    assert server.alive()
