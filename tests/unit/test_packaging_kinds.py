"""Image kinds: which kind serves an artifact, which TensorFlow image a `tensorflow` image is built FROM, and what
its Dockerfile runs — decisions tested on the fake engine (the real builds are in tests/engine/test_package.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from builder.engine.base import Image, ImageConfig
from builder.engine.fake import FakeEngine
from builder.errors import InputError
from builder.packaging.context import render_dockerfile, server_requirements
from builder.packaging.kinds import TensorFlowKind, choose_kind, kind_named, tensorflow_image_for
from builder.packaging.plan import BaseImage, PackageOptions, plan_package
from builder.packaging.workflow import default_signature
from builder.model.artifact import Artifact
from tests.report_fixture import make_report


@dataclass(frozen=True)
class _Cuda:
    capabilities: tuple[str, ...] = ("8.0", "9.0")


@dataclass(frozen=True)
class _Target:
    name: str = "x86-64-v3"
    arch: str = "x86_64"
    features: frozenset[str] = field(default_factory=lambda: frozenset({"avx2", "fma"}))
    copts: tuple[str, ...] = ("-march=haswell",)
    cuda: _Cuda | None = None

    @property
    def tag_token(self) -> str:
        return f"{self.name}-cu12.5-cc80-cc90-ptx90" if self.cuda else f"{self.name}-cpu"


GUARDED = ImageConfig(entrypoint=("/usr/local/bin/tfsmith-guard", "--"), cmd=("python3",))


def _tf_image(ident: str, target: str, token: str, created: str, tag: str) -> Image:
    labels = {"io.tfsmith.spec-digest": "d" * 12, "io.tfsmith.target": target,
              "io.tfsmith.tag": f"tf2.21.0-py3.11-{token}", "org.opencontainers.image.created": created,
              "org.opencontainers.image.description": f"TensorFlow 2.21.0 (Python 3.11) from prebuilt wheel x.whl, "
                                                      f"guarded for {target}"}
    return Image(ident, (tag,), labels, GUARDED)


_SERVED_FROM_TF = {"io.tfsmith.spec-digest": "d" * 12, "io.tfsmith.target": "x86-64-v3",
                   "io.tfsmith.tag": "tf2.21.0-py3.11-x86-64-v3-cpu", "io.tfsmith.kind": "serve-tensorflow",
                   "org.opencontainers.image.created": "2027-01-01T00:00:00Z"}
IMAGES = [
    _tf_image("sha256:old", "x86-64-v3", "x86-64-v3-cpu", "2026-11-01T00:00:00Z", "tfsmith/tensorflow:old"),
    _tf_image("sha256:new", "x86-64-v3", "x86-64-v3-cpu", "2026-11-20T00:00:00Z", "tfsmith/tensorflow:new"),
    _tf_image("sha256:cuda", "x86-64-v3", "x86-64-v3-cu12.5-cc80-cc90-ptx90", "2026-11-21T00:00:00Z",
              "tfsmith/tensorflow:cuda"),
    _tf_image("sha256:v4", "x86-64-v4", "x86-64-v4-cpu", "2026-11-22T00:00:00Z", "tfsmith/tensorflow:v4"),
    Image("sha256:serve", ("tfsmith/serve-x:litert-1",), {"io.tfsmith.target": "x86-64-v3", "io.tfsmith.kind": "serve-litert"}),
    # a serving image built FROM a TensorFlow image inherits its labels, and is newer: never its base
    Image("sha256:served", ("tfsmith/serve-x:tensorflow-1",), _SERVED_FROM_TF),
]


def test_the_tensorflow_image_for_a_target_is_its_newest_own_and_cuda_only_for_cuda_targets() -> None:
    assert tensorflow_image_for(IMAGES, _Target()).id == "sha256:new"
    assert tensorflow_image_for(IMAGES, _Target(cuda=_Cuda())).id == "sha256:cuda"
    assert tensorflow_image_for(IMAGES, _Target(name="x86-64-v4")).id == "sha256:v4"
    assert tensorflow_image_for(IMAGES, _Target(name="sapphirerapids")) is None
    assert tensorflow_image_for(IMAGES[-1:], _Target()) is None  # a serving image is not a TensorFlow image


def _engine(images: list[Image]) -> FakeEngine:
    engine = FakeEngine(images={image.id: image for image in images})
    for image in images:
        engine.run_results[image.tags[0]] = (0, "3.11\n")
    return engine


def test_tensorflow_kind_builds_from_the_targets_image_and_keeps_its_guard() -> None:
    base = TensorFlowKind().base(PackageOptions(), _Target(), _engine(IMAGES))
    assert base.ref == "tfsmith/tensorflow:new" and base.python == "3.11" and base.has_guard
    assert "x86-64-v3" in base.why and "prebuilt wheel" in base.why  # honest provenance, from the image's labels
    cuda = TensorFlowKind().base(PackageOptions(), _Target(cuda=_Cuda()), _engine(IMAGES))
    assert cuda.ref == "tfsmith/tensorflow:cuda"


def test_tensorflow_kind_without_an_image_says_how_to_build_one() -> None:
    with pytest.raises(InputError, match=r"no TensorFlow image for sapphirerapids-cpu .*tfsmith build --target sapphirerapids"):
        TensorFlowKind().base(PackageOptions(), _Target(name="sapphirerapids"), _engine(IMAGES))
    with pytest.raises(InputError, match="--cuda-cc 8.0,9.0"):
        TensorFlowKind().base(PackageOptions(), _Target(name="icelake", cuda=_Cuda()), _engine(IMAGES))
    with pytest.raises(InputError, match="pass --target"):
        TensorFlowKind().base(PackageOptions(), None, _engine(IMAGES))
    with pytest.raises(InputError, match="not on this engine"):
        TensorFlowKind().base(PackageOptions(base_image="nope:1"), _Target(), _engine(IMAGES))


def _saved_model(tmp_path: Path, signature: str = "serving_default") -> Artifact:
    folder = tmp_path / "out" / "saved_model"
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    report = make_report(chosen="saved_model", artifacts=[("saved_model", "saved_model")])
    report = replace(report, chosen_runtime="tensorflow", chosen_signature=signature)
    return Artifact(folder, "gru", report)


def test_choose_kind_serves_what_only_tensorflow_runs_on_tensorflow(tmp_path: Path) -> None:
    saved = _saved_model(tmp_path)
    assert choose_kind("auto", saved, None)[0] == "tensorflow"
    flex = tmp_path / "model_select_tf.tflite"
    flex.write_bytes(b"x")
    report = make_report(chosen="model_select_tf.tflite", artifacts=[("model_select_tf.tflite", "tflite_select_tf")])
    report = replace(report, chosen_runtime="tensorflow",
                     artifacts=tuple(replace(a, runtime="tensorflow") for a in report.artifacts))
    assert choose_kind("auto", Artifact(flex, "gru", report), None)[0] == "tensorflow"
    plain = tmp_path / "model.tflite"
    plain.write_bytes(b"x")
    assert choose_kind("auto", Artifact(plain, "m"), None)[0] == "litert"
    assert choose_kind("auto", Artifact(plain, "m"), "tensorflow")[0] == "tensorflow"
    assert choose_kind("litert", saved, None) == ("litert", "requested (--kind)")


def test_a_litert_image_refuses_the_tensorflow_runtime_in_one_line() -> None:
    with pytest.raises(InputError, match="use --kind tensorflow"):
        kind_named("litert").check_runtime("tensorflow")
    with pytest.raises(InputError, match="unknown image kind"):
        kind_named("torchserve")


def test_tensorflow_dockerfile_runs_the_server_on_the_images_tensorflow_behind_its_guard(tmp_path: Path) -> None:
    artifact = _saved_model(tmp_path, "serving_xla")
    base = TensorFlowKind().base(PackageOptions(), _Target(), _engine(IMAGES))
    plan = plan_package(artifact, PackageOptions(), kind="tensorflow", base=base, target=_Target(),
                        runtime="tensorflow", requirements=server_requirements("tensorflow"),
                        signature=default_signature(None, artifact))
    text = render_dockerfile(plan)
    assert "FROM tfsmith/tensorflow:new\n" in text
    assert "/opt/venv/bin/python -m pip install --no-cache-dir --no-index" in text
    assert not any(line.strip().startswith('"tensorflow') for line in text.splitlines())  # TF comes from the base
    entrypoint = json.loads(text.split("\nENTRYPOINT ", 1)[1].splitlines()[0])
    assert entrypoint == ["/usr/local/bin/tfsmith-guard", "--", "/opt/venv/bin/python", "-m", "builder.server"]
    cmd = json.loads(text.split("\nCMD ", 1)[1].splitlines()[0])
    assert cmd[0] == "/models/gru/1/saved_model" and cmd[cmd.index("--runtime") + 1] == "tensorflow"
    assert cmd[cmd.index("--signature-name") + 1] == "serving_xla"
    assert plan.labels["io.tfsmith.kind"] == "serve-tensorflow" and plan.labels["io.tfsmith.signature"] == "serving_xla"
    assert plan.labels["io.tfsmith.spec-digest"] == "" and plan.labels["io.tfsmith.tag"] == ""  # not its base
    assert "\nUSER root\n" in text and text.rstrip().splitlines()[-1].startswith("CMD ")
    assert "prebuilt wheel" in plan.labels["io.tfsmith.base.reason"]
    assert plan.tag.startswith("tfsmith/serve-gru:tensorflow-")


def test_the_default_signature_is_the_one_optimize_chose_unless_asked(tmp_path: Path) -> None:
    assert default_signature(None, _saved_model(tmp_path / "a")) is None  # serving_default: nothing to say
    assert default_signature(None, _saved_model(tmp_path / "b", "predict")) == "predict"
    assert default_signature("other", _saved_model(tmp_path / "c", "predict")) == "other"


def test_an_arm64_target_plans_an_arm64_image(tmp_path: Path) -> None:
    model = tmp_path / "m.tflite"
    model.write_bytes(b"x")
    plan = plan_package(Artifact(model, "m"), PackageOptions(), kind="litert",
                        base=BaseImage("tfsmith/python:bookworm-arm64"), target=_Target(name="neoverse_v1", arch="aarch64"))
    assert plan.platform == "linux/arm64" and plan.tag.endswith("-arm64")
    assert plan.labels["io.tfsmith.platform"] == "linux/arm64"


def test_package_takes_the_target_optimize_recorded(tmp_path: Path) -> None:
    from builder.packaging.workflow import recorded_target

    here = replace(make_report(chosen="saved_model", artifacts=[("saved_model", "saved_model")],
                               chosen_runtime="tensorflow"),
                   target={"name": "host (sapphirerapids)", "arch": "x86_64", "is_host": True})
    named = replace(here, target={"name": "x86-64-v3", "arch": "x86_64", "is_host": False})
    assert recorded_target(Artifact(tmp_path / "saved_model", "m", here)) == "host"
    assert recorded_target(Artifact(tmp_path / "saved_model", "m", named)) == "x86-64-v3"
    assert recorded_target(Artifact(tmp_path / "saved_model", "m", replace(here, target={}))) is None
    assert recorded_target(Artifact(tmp_path / "m.tflite", "m")) is None  # no report: nothing recorded


def test_a_tensorflow_precision_optimize_chose_needs_a_tensorflow_image(tmp_path: Path) -> None:
    folder = tmp_path / "saved_model"
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(b"")
    report = make_report(chosen="saved_model", artifacts=[("saved_model", "saved_model")],
                         chosen_runtime="tensorflow-bf16")
    artifact = Artifact(folder, "m", report)
    assert artifact.runtime == "tensorflow-bf16"  # what optimize measured, served as measured
    assert choose_kind("auto", artifact, None)[0] == "tensorflow"
    assert "tensorflow-bf16" in TensorFlowKind().runtimes
