"""OpenVINO's own IR as a user meets it: `tfsmith optimize` converts the SavedModel with OpenVINO's converter and
quantizes it to int8 with NNCF on the calibration rows, judges both against the original like every artifact,
and `tfsmith serve` runs the int8 IR with OpenVINO alone (neither TensorFlow nor LiteRT reads it back), under
the original's names, answering as the same file does here; what cannot run an IR is refused in one line. The
model is the small digits CNN `tfsmith example` trains in seconds (random weights would make int8 agreement
meaningless).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder.model.artifact import load_samples, resolve_artifact
from builder.packaging.smoke import MIN_AGREEMENT, check_server
from builder.report import Report
from tests.e2e.test_serve import HTTP, REPO, STOPPED, TFSMITH, Server

pytestmark = pytest.mark.tf
QUIET = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tfsmith optimize` of the example CNN with a recipe that builds int8 (so both IRs are written)."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    work = tmp_path_factory.mktemp("openvino-ir")
    subprocess.run([str(TFSMITH), "example", "--out", str(work / "ex"), "--epochs", "4"], check=True,
                   capture_output=True, timeout=300, env=QUIET)
    (work / "int8.toml").write_text('[quantization]\nmodes = ["int8"]\n[export]\ntflite_fp32 = false\n')
    done = subprocess.run([str(TFSMITH), "optimize", str(work / "ex" / "digits_cnn.keras"), "--data",
                           str(work / "ex" / "digits.npz"), "--recipe", str(work / "int8.toml"), "--out",
                           str(work / "opt"), "--latency-runs", "10"], capture_output=True, text=True, timeout=600,
                          env=QUIET, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return work / "opt"


def test_optimize_writes_both_irs_judged_against_the_original(folder: Path) -> None:
    report = Report.load(folder)
    irs = {a.format: a for a in report.artifacts if a.format.startswith("openvino_ir")}
    assert set(irs) == {"openvino_ir_fp32", "openvino_ir_int8"}
    for artifact in irs.values():
        xml = folder / artifact.path
        assert artifact.runtime == "openvino" and artifact.accepted and artifact.contract_kept, artifact.reason
        assert artifact.size_bytes == xml.stat().st_size + xml.with_suffix(".bin").stat().st_size  # graph + weights
        assert artifact.metric("probs").agreement >= 0.95
    assert irs["openvino_ir_int8"].size_bytes < irs["openvino_ir_fp32"].size_bytes * 0.5  # int8 weights
    timed = {(c.artifact, c.runtime): c for c in report.selection.candidates}
    assert timed[("openvino_int8.xml", "openvino")].precision == "int8"
    assert timed[("openvino_fp32.xml", "openvino-bf16")].precision == "bf16"  # timed; judged by the gate where it could be chosen
    assert timed[("openvino_int8.xml", "openvino")].p50_us is not None
    assert report.capacity is not None and any(n.startswith("serving: ") and "one core" in n for n in report.notes)


#: Reads the IR back with TensorFlow and LiteRT made unimportable: what an OpenVINO image has.
READ_BACK = r"""
import sys, importlib.abc
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "ai_edge_litert", "tf_keras"):
            raise ImportError(f"{name} is not in an OpenVINO image")
sys.meta_path.insert(0, Refuse())
from pathlib import Path
import numpy as np
from builder.model.create import create_backend
backend = create_backend("openvino", Path(sys.argv[1]), 1)
(key, spec), = backend.signatures.items()
answer = backend.predict(key, {"image": np.zeros((2, 8, 8, 1), np.float32)})
print(key, [s.name for s in spec.inputs], [s.name for s in spec.outputs], answer["probs"].shape)
"""


def test_the_ir_reads_back_without_tensorflow_or_litert(folder: Path) -> None:
    done = subprocess.run([sys.executable, "-c", READ_BACK, str(folder / "openvino_int8.xml")], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "serving_default ['image'] ['probs'] (2, 10)"


def test_the_int8_ir_serves_the_contract_and_agrees_with_the_original(folder: Path) -> None:
    from builder.model.create import create_backend

    xml = folder / "openvino_int8.xml"
    running = Server(str(xml), "--model-name", "digits", "--processes", "1", grpc=True)
    try:
        health = HTTP.get(f"{running.url}/healthz").json()
        assert health["runtime"] == "openvino"
        signature = HTTP.get(f"{running.url}/v1/models/digits/metadata").json()[
            "metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert set(signature["inputs"]) == {"image"} and set(signature["outputs"]) == {"probs"}
        samples = load_samples(folder / "samples.npz")
        x = samples.inputs["image"]
        got = np.asarray(HTTP.post(f"{running.url}/v1/models/digits:predict",
                                   json={"instances": x.tolist()}).json()["predictions"], np.float32)
        want = create_backend("openvino", xml, 1).predict("serving_default", {"image": x})["probs"]
        assert np.allclose(got, want, rtol=1e-5, atol=1e-6)  # the file's own int8 answers, not approximations
        assert np.mean(got.argmax(1) == samples.expected["probs"].argmax(1)) >= MIN_AGREEMENT
        # the packaging smoke check against this server (REST row and columnar, gRPC, v2), as an image gets it
        result = check_server(running.url, resolve_artifact(xml), "digits", 1,
                              grpc_address=("127.0.0.1", running.grpc_port), runtime="openvino")
        assert result.reference == "the same IR on OpenVINO here" and result.local_agreement is None
        assert {"REST row", "gRPC", "v2"} <= set(result.protocols)
        assert all(f.passed for f in result.fidelity) and result.fidelity
    finally:
        assert running.stop() in STOPPED


@pytest.mark.parametrize(("model", "args", "needle"), [
    ("openvino_int8.xml", ("--runtime", "litert"), "an OpenVINO IR runs on runtime openvino or openvino-bf16, "
                                                   "not litert"),
    (".", ("--runtime", "openvino-nncf"), "invalid choice: 'openvino-nncf'"),  # quantizing at start is gone
    ("lonely.xml", (), "weights lonely.bin are missing"),
])
def test_what_cannot_serve_an_ir_is_refused_in_one_line(folder: Path, tmp_path: Path, model: str,
                                                         args: tuple[str, ...], needle: str) -> None:
    path = folder / model
    if model == "lonely.xml":  # a graph whose weights were left behind
        path = tmp_path / model
        path.write_bytes((folder / "openvino_fp32.xml").read_bytes())
    done = subprocess.run([str(TFSMITH), "serve", str(path), *args, "--port", "0"], capture_output=True,
                          text=True, timeout=60, env=QUIET)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert len(errors) == 1 and needle in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_version_folders_of_bare_irs_are_served_on_openvino(folder: Path, tmp_path: Path) -> None:
    """TF Serving's `<base>/<version>/` layout holding OpenVINO IRs (as OpenVINO Model Server's repository does),
    named in a model config file: each version answers as its own file does, on OpenVINO, chosen without
    --runtime."""
    import shutil

    from builder.model.create import create_backend

    for version, stem in ((1, "openvino_fp32"), (2, "openvino_int8")):
        (tmp_path / "digits" / str(version)).mkdir(parents=True)
        for suffix in (".xml", ".bin"):
            shutil.copy(folder / f"{stem}{suffix}", tmp_path / "digits" / str(version) / f"model{suffix}")
    config = tmp_path / "models.config"
    config.write_text('model_config_list { config { name: "digits" base_path: "digits" model_platform: "openvino" '
                      'model_version_policy { all {} } } }')
    running = Server("--model-config-file", str(config), "--processes", "1")
    try:
        assert HTTP.get(f"{running.url}/healthz").json()["runtime"] == "openvino"
        x = load_samples(folder / "samples.npz").inputs["image"][:4]
        for version, stem in ((1, "openvino_fp32"), (2, "openvino_int8")):
            answer = HTTP.post(f"{running.url}/v1/models/digits/versions/{version}:predict",
                               json={"instances": x.tolist()})
            assert answer.status_code == 200, answer.text
            want = create_backend("openvino", folder / f"{stem}.xml", 1).predict("serving_default", {"image": x})
            np.testing.assert_allclose(answer.json()["predictions"], want["probs"], rtol=1e-5, atol=1e-6)
    finally:
        assert running.stop() in STOPPED
