"""`tfsmith package` of an optimize folder whose choice is OpenVINO's IR, on the real engine: `--kind auto` makes the
slim `openvino` image (the same base, server and protocols as a litert image, OpenVINO alone: no TensorFlow, no
LiteRT), smoke-tested by the command itself against the same IR run here and the original model's answers; the
image holds the IR's two files and nothing to calibrate, and keeps the guard as its entry point."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.engine.docker import DockerEngine
from builder.model.artifact import resolve_artifact
from tests.e2e.test_serve import make_models
from tests.report_fixture import write_report

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
TAG = "tfsmith-test-serve/digits:openvino"
#: The float IR of the SavedModel through optimize's own converter (in a process of its own: TensorFlow).
CONVERT = """
import sys
from pathlib import Path
from builder.optimize import openvino_ir
out = Path(sys.argv[1])
openvino_ir.write_ir(openvino_ir.convert_saved_model(out / "saved_model", "serving_default"), out / "openvino_fp32.xml")
"""


@pytest.fixture(scope="session")
def ir_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An optimize-style --out folder that chose OpenVINO's float IR (beside its SavedModel and samples)."""
    pytest.importorskip("openvino")
    models = make_models(tmp_path_factory.mktemp("openvino-models"))
    out = tmp_path_factory.mktemp("digits-ir")
    shutil.copytree(models / "saved_model", out / "saved_model")
    shutil.copy2(models / "samples.npz", out / "samples.npz")
    subprocess.run([sys.executable, "-c", CONVERT, str(out)], check=True, capture_output=True, timeout=300, cwd=REPO,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    write_report(out, chosen="openvino_fp32.xml", chosen_runtime="openvino",
                 artifacts=[("openvino_fp32.xml", "openvino_ir_fp32"), ("saved_model", "saved_model")])
    return out


@pytest.fixture(scope="session")
def openvino_image(docker_engine: None, base_image: str, ir_dir: Path) -> Iterator[str]:
    """Built and smoke-tested by the CLI exactly as a user runs it (`--kind auto`)."""
    done = subprocess.run(
        [str(TFSMITH), "package", str(ir_dir), "--base-image", base_image, "--tag", TAG, "--model-name", "digits",
         "--smoke"], capture_output=True, text=True, timeout=900, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "image kind: openvino (the chosen artifact is OpenVINO's IR" in done.stdout
    assert "every answer matches the same IR on OpenVINO here" in done.stdout
    assert "probs top-1 agreement 1.000" in done.stdout and "gRPC, v2)" in done.stdout
    yield TAG
    DockerEngine().remove_image(TAG)


def test_the_openvino_image_carries_openvino_alone_and_the_irs_two_files(openvino_image: str, ir_dir: Path) -> None:
    engine = DockerEngine()
    image = engine.inspect(openvino_image)
    assert image.labels["io.tfsmith.runtime"] == "openvino" and image.labels["io.tfsmith.kind"] == "serve-openvino"
    assert image.labels["io.tfsmith.model.sha256"] == resolve_artifact(ir_dir).sha256
    assert image.config.user == "10001:10001" and "guard.py" in " ".join(image.config.entrypoint)
    code, output = engine.run(openvino_image, ["-c", "import importlib.util as u; print(*(u.find_spec(m) is not None "
                                                     "for m in ('openvino', 'ai_edge_litert', 'tensorflow', 'nncf')))"],
                              entrypoint=["/opt/venv/bin/python"], timeout=120)
    assert code == 0 and output.strip().splitlines()[-1] == "True False False False", output
    code, output = engine.run(openvino_image, ["/models/digits/1"], entrypoint=["ls"], timeout=60)
    assert code == 0 and output.split() == ["model.bin", "model.xml", "report.json"], output  # no samples
