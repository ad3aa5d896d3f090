"""Serving images on the host: plans, labels, rendered contexts, artifacts from optimize folders, warm-up
records, and what the image copies. Pure (the fake engine stands in where a build would run)."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from builder.errors import InputError
from builder.packaging import warmup
from builder.packaging.context import environment, render_dockerfile
from builder.packaging.plan import BaseImage, PackageOptions, plan_package
from builder.packaging.tfserving import BatchingParameters, build_options, server_flags, warmup_records
from builder.report import Latency, Report
from builder.model.artifact import Artifact, model_name_for, resolve_artifact
from tests.report_fixture import make_report, write_report

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "serve" / "tiny_conv.tflite"


def test_crc32c_known_value_and_masking() -> None:
    assert warmup.crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert warmup.masked_crc32c(b"") == 0xA282EAD8


def test_warmup_records_round_trip() -> None:
    x = np.arange(2 * 4, dtype=np.float32).reshape(2, 2, 2)
    blob = warmup.write_warmup(warmup_records("digits", {"input_1": x, "ids": np.array([[7], [9]], np.int64)}, version=3))
    parsed = warmup.read_warmup(blob)
    assert len(parsed) == 2
    assert parsed[1].model_name == "digits" and parsed[1].version == 3 and parsed[1].signature_name == "serving_default"
    tensor = parsed[1].inputs["input_1"]
    assert tensor.dtype == 1 and tensor.shape == (1, 2, 2)
    assert np.frombuffer(tensor.content, dtype="<f4").tolist() == [4, 5, 6, 7]
    ids = parsed[1].inputs["ids"]
    assert ids.dtype == 9 and ids.shape == (1, 1) and np.frombuffer(ids.content, dtype="<i8").tolist() == [9]


def test_warmup_reader_detects_corruption() -> None:
    blob = bytearray(warmup.write_warmup(warmup_records("m", {"x": np.zeros((1, 2), np.float32)}, 1)))
    blob[-6] ^= 0xFF
    with pytest.raises(ValueError, match="CRC"):
        warmup.read_warmup(bytes(blob))
    with pytest.raises(ValueError, match="truncated"):
        warmup.read_warmup(bytes(blob[:-3]))
    assert struct.unpack("<Q", bytes(blob[:8]))[0] == len(blob) - 16


def test_tfserving_files() -> None:
    text = BatchingParameters(16, 500, 2, 10).text()
    assert "max_batch_size { value: 16 }" in text and "batch_timeout_micros { value: 500 }" in text
    assert build_options(("-march=haswell", "-mtune=haswell")) == "--config=release --copt=-march=haswell --copt=-mtune=haswell"
    assert "--prefer_tflite_model=true" in server_flags(saved_model=False)
    assert "--prefer_tflite_model=true" not in server_flags(saved_model=True)


# --- artifacts, plans, Dockerfiles ----------------------------------------------------------------------


class _Target:
    name = "x86-64-v3"
    arch = "x86_64"
    features = frozenset({"avx2", "fma", "avx"})
    copts = ("-march=haswell",)


SLIM = BaseImage("tfsmith/python:bookworm", "3.11", "the slim Python base image")


def _artifact(tmp_path: Path, report: Report | None = None) -> Artifact:
    model = tmp_path / "model_int8.tflite"
    model.write_bytes(b"TFL3-not-a-real-model")
    return Artifact(model, "digits", report)


def test_plan_labels_and_command(tmp_path: Path) -> None:
    _artifact(tmp_path)
    report = make_report(chosen="model_int8.tflite", artifacts=[("model_int8.tflite", "tflite_int8")], folder=tmp_path)
    plan = plan_package(_artifact(tmp_path, report), PackageOptions(workers=3), kind="litert", base=SLIM,
                        target=_Target(), requirements=("numpy==2",))
    import hashlib

    assert plan.labels["io.tfsmith.model.sha256"] == hashlib.sha256(b"TFL3-not-a-real-model").hexdigest()
    assert plan.labels["io.tfsmith.report.summary"] == "model_int8.tflite tflite_int8 21 B probs disagreement 0 p50 10us"
    assert plan.target_features == ("avx", "avx2", "fma")
    assert plan.tag.startswith("tfsmith/serve-digits:litert-")
    assert plan.command[:1] == ["/models/digits/1/model.tflite"] and "--interpreters" in plan.command
    assert plan.labels["io.tfsmith.kind"] == "serve-litert" and plan.labels["io.tfsmith.runtime"] == "litert"
    assert plan.platform == "linux/amd64"
    for bad in (PackageOptions(kind="torchserve"), PackageOptions(port=0), PackageOptions(workers=0),
                PackageOptions(port=8500), PackageOptions(version=0)):
        with pytest.raises(InputError):
            plan_package(_artifact(tmp_path), bad, kind="litert", base=SLIM)


def test_rendered_litert_dockerfile(tmp_path: Path) -> None:
    plan = plan_package(_artifact(tmp_path), PackageOptions(), kind="litert", base=SLIM, target=_Target(),
                        requirements=("numpy==2", "fastapi==1"))
    text = render_dockerfile(plan)
    assert text.startswith("# Rendered") and "FROM tfsmith/python:bookworm\n" in text
    assert "USER 10001:10001" in text and "HEALTHCHECK" in text and "/v2/health/ready" in text
    assert "EXPOSE 8500 8501" in text and plan.command[plan.command.index("--grpc-port") + 1] == "8500"
    assert '"numpy==2" \\\n       "fastapi==1" \\\n    && ' in text
    assert "TFSMITH_IMAGE_FEATURES=avx,avx2,fma" in text
    assert 'ENTRYPOINT ["/opt/venv/bin/python", "/opt/tfsmith/guard.py", "--"' in text
    cmd = json.loads(text.split("\nCMD ", 1)[1].splitlines()[0])
    assert cmd == plan.command
    assert "--pull" not in text and "# syntax" not in text


def test_dockerfile_values_are_escaped_and_a_newline_is_refused() -> None:
    quote = environment().filters["docker_quote"]
    assert quote('a "b" $HOME \\ x') == '"a \\"b\\" \\$HOME \\\\ x"'
    with pytest.raises(InputError, match="multi-line"):
        quote("x\ny")


def test_resolve_artifact(tmp_path: Path) -> None:
    out = tmp_path / "digits-out"
    out.mkdir()
    (out / "model_fp32.tflite").write_bytes(b"a")
    (out / "model_int8.tflite").write_bytes(b"b")
    with pytest.raises(InputError, match="cannot tell"):
        resolve_artifact(out)
    write_report(out, chosen="model_int8.tflite", artifacts=[("model_int8.tflite", "tflite_int8")])
    np.savez(out / "samples.npz", **{"x/pixels": np.zeros((2, 1))})
    art = resolve_artifact(out)
    assert art.model_path.name == "model_int8.tflite" and art.name == "digits"  # the trained model's name
    assert art.samples_path == out / "samples.npz"
    with pytest.raises(InputError):
        resolve_artifact(tmp_path / "missing.tflite")
    with pytest.raises(InputError):
        resolve_artifact(out / "report.json")
    (out / "report.json").write_text(json.dumps({"schema": 1, "chosen": "model_int8.tflite"}))
    with pytest.raises(InputError, match="run tfsmith optimize again"):
        resolve_artifact(out)
    with pytest.raises(InputError):
        resolve_artifact(out / "model_int8.tflite", name="bad/name")
    assert model_name_for(Path("/x/My Model!.tflite")) == "My-Model"


def test_tfserving_package_refuses_before_building(tmp_path: Path) -> None:
    from builder.engine.base import Image
    from builder.engine.fake import FakeEngine
    from builder.packaging.workflow import package_model

    engine = FakeEngine()
    options = PackageOptions(kind="tfserving", base_image="stand-in:1", tag="t:1")
    with pytest.raises(InputError, match="not on this engine"):
        package_model(TINY, options, smoke=False, engine=engine, say=lambda _: None)
    engine.images["sha256:base"] = Image("sha256:base", ("stand-in:1",))
    engine.run_results["stand-in:1"] = (1, "")  # `command -v tensorflow_model_server` fails: no server inside
    with pytest.raises(InputError, match="no tensorflow_model_server"):
        package_model(TINY, options, smoke=True, engine=engine, say=lambda _: None)
    assert engine.builds == []


def test_tfserving_package_builds_the_layout_context(tmp_path: Path) -> None:
    from builder.engine.base import Image
    from builder.engine.fake import FakeEngine
    from builder.packaging.workflow import package_model

    engine = FakeEngine(images={"sha256:base": Image("sha256:base", ("stand-in:1",))})
    options = PackageOptions(kind="tfserving", base_image="stand-in:1", tag="t:1", max_batch=4)
    plan, image = package_model(TINY, options, model_name="tiny", smoke=False, keep_context=tmp_path / "ctx",
                                engine=engine, say=lambda _: None)
    assert [b.tags for b in engine.builds] == [("t:1",)] and "t:1" in image.tags
    ctx = tmp_path / "ctx"
    assert (ctx / "models" / "tiny" / "1" / "model.tflite").read_bytes() == TINY.read_bytes()
    records = warmup.read_warmup((ctx / "models" / "tiny" / "1" / "assets.extra" / "tf_serving_warmup_requests").read_bytes())
    assert len(records) == 10 and set(records[0].inputs) == {"input_1"}
    assert records[0].inputs["input_1"].shape == (1, 8, 8, 1)
    assert "max_batch_size { value: 4 }" in (ctx / "models" / "batching_parameters.txt").read_text()
    dockerfile = (ctx / "Dockerfile").read_text()
    assert "FROM stand-in:1" in dockerfile and "--prefer_tflite_model=true" in dockerfile
    assert plan.labels["io.tfsmith.runtime"] == "tfserving"


def test_litert_backend_reads_the_recorded_model() -> None:
    from builder.model.backend import LiteRTBackend
    from builder.model.inputs import sample_inputs

    backend = LiteRTBackend(TINY)
    sig = backend.signatures["serving_default"]
    spec = sig.inputs[0]
    assert (spec.name, spec.dtype, tuple(spec.shape[1:])) == ("input_1", "float32", (8, 8, 1))
    assert spec.shape[0] in (None, -1)  # the dynamic batch dimension
    out = backend.predict("serving_default", sample_inputs(sig, batch=3))
    assert out["dense"].shape == (3, 10) and np.allclose(out["dense"].sum(axis=1), 1.0, atol=1e-5)


def test_resolve_artifact_takes_the_fastest_accepted_tflite_when_a_saved_model_was_chosen(tmp_path: Path) -> None:
    """optimize picks the SavedModel for GPU targets; a LiteRT server needs a .tflite from the same run."""
    out = tmp_path / "gpu-out"
    out.mkdir()
    for name in ("model_fp32.tflite", "model_float16.tflite", "model_int8.tflite"):
        (out / name).write_bytes(b"x")
    formats = [("saved_model", "saved_model"), ("model_fp32.tflite", "tflite_fp32"),
             ("model_float16.tflite", "tflite_float16"), ("model_int8.tflite", "tflite_int8")]
    report = make_report(chosen="saved_model", artifacts=formats)
    timed = {"saved_model": (500.0, True), "model_fp32.tflite": (40.0, True), "model_float16.tflite": (30.0, True),
             "model_int8.tflite": (10.0, False)}
    artifacts = tuple(replace(a, latency_us=Latency(timed[a.path][0], timed[a.path][0], 10), accepted=timed[a.path][1])
                      for a in report.artifacts)
    replace(report, artifacts=artifacts).write(out)
    assert resolve_artifact(out).model_path.name == "model_float16.tflite"
    replace(report, artifacts=artifacts[:1]).write(out)
    with pytest.raises(InputError, match="--runtime tfserving"):
        resolve_artifact(out)


def test_server_code_copied_into_images_has_every_tfsmith_module_it_imports(tmp_path: Path) -> None:
    """Images get a subset of tfsmith; every module-level `builder.*` import of that code must be in it.

    (Imports inside functions are host-side paths — packaging, `--runtime auto` — that images never run.)
    """
    import ast

    from builder.packaging.context import copy_server_code

    copy_server_code(tmp_path)
    copied = {
        ".".join(path.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__")
        for path in tmp_path.rglob("*.py")
    }
    missing = set()
    for path in (tmp_path / "builder").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("builder"):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.startswith("builder")]
            else:
                continue
            missing.update(name for name in names if name not in copied)
    assert "builder.server.routes" in copied and not missing


class _ArmTarget(_Target):
    name = "neoverse_v1"
    arch = "aarch64"
    features = frozenset({"asimd", "sve"})
    copts = ("-mcpu=neoverse-v1",)


def test_a_slim_image_for_another_cpu_family_copies_site_packages_in(tmp_path: Path) -> None:
    """Assembled by COPY (the building machine's pip installed the wheels for the image's platform): no pip and
    nothing from the wheels runs in the image's build, which would be under emulation."""
    plan = plan_package(_artifact(tmp_path), PackageOptions(), kind="litert", base=SLIM, target=_ArmTarget(),
                        requirements=("numpy==2",))
    assert plan.platform == "linux/arm64"
    text = render_dockerfile(plan, site_packages=True, compile_site_packages=False)
    assert "RUN python3 -m venv --without-pip /opt/venv\n" in text
    assert "COPY site-packages/ /opt/venv/lib/python3.11/site-packages/\n" in text
    assert "pip install" not in text and "--mount" not in text and "compileall -q /opt/venv" not in text
    recompiled = render_dockerfile(plan, site_packages=True, compile_site_packages=True)
    assert "compileall -q /opt/venv/lib/python3.11/site-packages" in recompiled
    assert "pip install" in render_dockerfile(plan)  # the same plan built natively: pip in the image


def test_a_tensorflow_image_for_another_cpu_family_puts_the_servers_packages_ahead_of_its_venvs(tmp_path: Path) -> None:
    """FROM the TensorFlow image of another CPU family: the server's packages come in by COPY, ahead of the venv
    on the module path (where `pip install` into the venv would have put their versions), and the image's own
    CPU (emulated) only checks that TensorFlow and the server's imports load together."""
    base = BaseImage("tfsmith/tensorflow:tf2.21.0-py3.11-neoverse_v1-cpu", "3.11", "the TensorFlow image",
                     python_bin="/opt/venv/bin/python", has_guard=True)
    plan = plan_package(_artifact(tmp_path), PackageOptions(), kind="tensorflow", base=base, target=_ArmTarget(),
                        requirements=("numpy==2", "httptools==0.6"))
    text = render_dockerfile(plan, site_packages=True)
    assert "COPY site-packages/ /opt/tfsmith-packages/\n" in text
    assert "PYTHONPATH=/opt/tfsmith:/opt/tfsmith-packages " in text
    assert 'RUN /opt/venv/bin/python -c "import tensorflow, httptools, grpc"\n' in text
    assert "pip install" not in text and "--mount" not in text
    native = render_dockerfile(plan)
    assert "pip install" in native and "/opt/tfsmith-packages" not in native and "PYTHONPATH=/opt/tfsmith " in native


def test_the_host_pip_installs_only_the_targets_binary_wheels(tmp_path: Path) -> None:
    from builder.packaging.context import foreign, install_argv

    argv = install_argv(("numpy==2",), tmp_path / "wheels", "3.11", "arm64", tmp_path / "site")
    assert argv[-3:] == ["--target", str(tmp_path / "site"), "numpy==2"]
    assert {"--no-index", "--only-binary=:all:", "--no-compile"} <= set(argv)
    platforms = [argv[i + 1] for i, word in enumerate(argv) if word == "--platform"]
    assert platforms and all(p.endswith("_aarch64") for p in platforms)
    assert argv[argv.index("--python-version") + 1] == "3.11" and "cp311" in argv
    assert foreign("linux/arm64", "x86_64") and not foreign("linux/amd64", "x86_64")
    assert not foreign("linux/arm64", "aarch64") and foreign("linux/amd64", "aarch64")
