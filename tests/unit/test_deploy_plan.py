"""Inputs, plan and output of `tfsmith deploy`: what is accepted, what is refused in one line, what the
resources come from, and that a written folder is all-or-nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from builder.deploy import inputs, manifests, output, plan
from builder.engine.base import Image, ImageConfig
from builder.engine.fake import FakeEngine
from builder.errors import InputError
from builder.report import Latency, Report
from tests.report_fixture import make_report



def measured_report() -> Report:
    """The typed report fixture with the chosen int8 file measured on 2 threads, 3 MiB + 1 byte, p50 28.4 us."""
    report = make_report(chosen="model_int8.tflite", artifacts=[("model_fp32.tflite", "tflite_fp32"),
                                                                ("model_int8.tflite", "tflite_int8")])
    int8 = replace(report.chosen_artifact, threads=2, size_bytes=3 * 2**20 + 1, latency_us=Latency(28.4, 40.0, 100))
    return replace(report, artifacts=(report.artifacts[0], int8))


REPORT = measured_report()


def example(**kw: object) -> plan.DeployPlan:
    images = inputs.from_targets("x86-64-v3,x86-64-v4,sapphirerapids", "registry.example/digits")
    options = {"model_name": "digits", **kw}
    return plan.plan_fleet(images, plan.DeployOptions(**options), plan.default_resources())  # type: ignore[arg-type]


def test_targets_resolve_to_images_named_by_tag_token_and_rank_by_demand() -> None:
    fleet = example()
    assert [m.name for m in fleet.members] == ["digits-sapphirerapids", "digits-x86-64-v4", "digits-x86-64-v3"]
    assert [m.image.image for m in fleet.members] == [
        "registry.example/digits:sapphirerapids-cpu", "registry.example/digits:x86-64-v4-cpu",
        "registry.example/digits:x86-64-v3-cpu"]
    spr, v4, v3 = fleet.members
    assert spr.better == () and v4.better == (spr.placement.rule_label,)
    assert set(v3.better) == {spr.placement.rule_label, v4.placement.rule_label}
    assert v3.placement.labelled == ("AVX", "AVX2", "FMA3", "LAHF", "MOVBE")  # xsave: never emitted, not required
    assert set(v3.placement.rule_only) == {"BMI1", "BMI2", "CX16", "F16C", "LZCNT", "MMX", "POPCNT", "SSE", "SSE2",
                                           "SSE3", "SSE4", "SSE42", "SSSE3"}
    assert spr.placement.invisible == ()  # clflushopt, clwb, rdpid: intrinsic-only, never required
    assert not any("clflushopt" in note for note in fleet.notes)  # nothing the guard needs is invisible to NFD


def test_the_plan_digest_is_stable_and_changes_with_the_inputs() -> None:
    assert example().digest == example().digest
    assert example().digest != example(replicas=3).digest


def test_explicit_pairs_and_gpu_targets() -> None:
    images = inputs.from_pairs(["x86-64-v3=reg/d:v3", "icelake=reg/d:icx"], cuda_cc="8.0,9.0")
    assert [(i.target.name, i.image) for i in images] == [("x86-64-v3", "reg/d:v3"), ("icelake", "reg/d:icx")]
    fleet = plan.plan_fleet(images, plan.DeployOptions(model_name="d"), plan.default_resources())
    assert [m.slug for m in fleet.members] == ["icelake-cc80-cc90", "x86-64-v3-cc80-cc90"]
    assert fleet.members[0].placement.gpu == plan.GpuPlacement(exact=((8, 0), (9, 0)), newer_than_major=9)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: inputs.from_pairs(["x86-64-v3"]), "use TARGET=IMAGE"),
    (lambda: inputs.from_targets("host", "reg/d"), "target 'host' means this machine"),
    (lambda: inputs.from_targets("x86-64-v9", "reg/d"), "unknown target"),
    (lambda: inputs.from_targets("x86-64-v3", "reg/d:tag"), "a repository without a tag"),
    (lambda: inputs.from_targets("", "reg/d"), "--targets is empty"),
    (lambda: inputs.from_targets("x86-64-v3", "reg/d", cuda_cc="12.0"), "Blackwell"),
    (lambda: plan.plan_fleet(inputs.from_targets("x86-64-v3,x86_64_v3", "reg/d"), plan.DeployOptions(model_name="d"),
                             plan.default_resources()), "given twice"),
    (lambda: plan.plan_fleet((), plan.DeployOptions(model_name="d"), plan.default_resources()), "nothing to deploy"),
    (lambda: example(model_name="Digits_CNN"), "--model-name"),
    (lambda: example(replicas=3, max_replicas=2), "below --replicas"),
    (lambda: example(namespace="Bad NS"), "--namespace"),
    (lambda: example(model_name="a" * 40, kserve=True), "longer than 53 characters"),  # KServe adds -predictor
    (lambda: plan.plan_fleet(inputs.from_pairs(["x86-64-v3=Reg/D:v3"]), plan.DeployOptions(model_name="d"),
                             plan.default_resources()), "not a valid image reference"),
    (lambda: plan.parse_cpu("lots"), "--cpu"),
    (lambda: plan.parse_memory("512MB"), "--memory"),
    (lambda: plan.resources_from_report(replace(REPORT, chosen="gone.tflite")), "not among its artifacts"),
])
def test_bad_input_is_one_clear_line(call: object, message: str) -> None:
    with pytest.raises(Exception) as caught:
        call()  # type: ignore[operator]
    assert isinstance(caught.value, InputError) or type(caught.value).__name__ == "IncompatibleError"
    text = str(caught.value)
    assert message in text and "\n" not in text


def test_images_serving_different_models_are_refused() -> None:
    images = (
        plan.FleetImage(inputs.resolve("x86-64-v3"), "reg/d:v3", model_sha256="a" * 64),
        plan.FleetImage(inputs.resolve("x86-64-v4"), "reg/d:v4", model_sha256="b" * 64),
    )
    with pytest.raises(InputError, match="different models"):
        plan.plan_fleet(images, plan.DeployOptions(model_name="d"), plan.default_resources())


def test_resources_from_a_report_and_from_flags() -> None:
    measured = plan.resources_from_report(REPORT)
    assert (measured.cpu_millis, measured.threads, measured.p50_us) == (2000, 2, 28.4)
    assert measured.memory_mib == 320  # 256 + 4 x ceil(3.000001 MiB) = 272, rounded up to a multiple of 64
    assert "model_int8.tflite" in measured.source and "estimate" in measured.source
    assert (measured.cpu_limit_millis, measured.memory_limit_mib) == (2000, 640)  # CPU: the quota it sizes to
    overridden = plan.resources_from_report(REPORT, cpu="500m", memory="1Gi")
    assert (overridden.cpu_millis, overridden.memory_mib) == (500, 1024) and "override" in overridden.source
    default = plan.default_resources()
    assert (default.cpu_millis, default.memory_mib) == (1000, 512)
    assert plan.parse_cpu("1.5") == 1500 and plan.parse_memory("2Gi") == 2048


def test_from_engine_reads_targets_digests_and_cuda_from_the_images() -> None:
    engine = FakeEngine()
    labels = {"io.tfsmith.target": "icelake", "io.tfsmith.model.sha256": "c" * 64, "io.tfsmith.model.name": "digits_cnn"}
    engine.images["sha256:1"] = Image("sha256:1", ("reg/d:icx",), labels,
                                      ImageConfig(env={"TFSMITH_IMAGE_CUDA_CC": "8.0", "TFSMITH_IMAGE_TARGET": "icelake"}))
    engine.images["sha256:2"] = Image("sha256:2", ("reg/d:v3",), labels | {"io.tfsmith.target": "x86-64-v3"})
    images, served = inputs.from_engine("reg/d:icx,reg/d:v3", engine)
    assert served == "digits_cnn"
    assert [(i.target.name, i.target.cuda is not None, i.model_sha256) for i in images] == [
        ("icelake", True, "c" * 64), ("x86-64-v3", False, "c" * 64)]
    with pytest.raises(InputError, match="not on this engine"):
        inputs.from_engine("reg/d:missing", engine)
    engine.images["sha256:3"] = Image("sha256:3", ("reg/other:1",), {})
    with pytest.raises(InputError, match="no io.tfsmith.target label"):
        inputs.from_engine("reg/other:1", engine)
    engine.images["sha256:4"] = Image("sha256:4", ("reg/any:1",), labels | {"io.tfsmith.target": "any"})
    with pytest.raises(InputError, match="packaged without a target"):
        inputs.from_engine("reg/any:1", engine)


def test_write_is_all_or_nothing_and_replaces_only_its_own_output(tmp_path: Path) -> None:
    fleet = example()
    files = output.layout(fleet, manifests.fleet(fleet), "kustomize")
    out = tmp_path / "k8s"
    output.write(out, files)
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    assert json.loads((out / output.MARKER).read_text())["deploy_digest"] == fleet.digest
    # `kubectl apply -f DIR` sends every .json/.yaml/.yml file in DIR (hidden ones too): only objects may be there
    for path in out.iterdir():
        if path.suffix in (".json", ".yaml", ".yml"):
            assert all({"apiVersion", "kind"} <= set(doc) for doc in yaml.safe_load_all(path.read_text())), path.name
    # a second run replaces the folder (stale files from the first run disappear)
    (out / "stale.yaml").write_text("old")
    output.write(out, output.layout(fleet, manifests.fleet(fleet), "yaml"))
    assert sorted(p.name for p in out.iterdir()) == sorted([output.MARKER, "digits.yaml"])
    # a folder somebody else wrote is left alone
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(InputError, match="not written by tfsmith deploy"):
        output.write(foreign, files)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    # a failure while writing leaves neither a half folder nor staging debris
    broken = dict(files)
    broken["sub/x.yaml"] = "no such folder"
    with pytest.raises(OSError):
        output.write(tmp_path / "half", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k8s", "mine"]
    with pytest.raises(InputError, match="--format"):
        output.layout(fleet, [], "helm")


def test_no_preference_between_targets_nfd_cannot_tell_apart() -> None:
    """zen2 needs only clwb more than zen, and NFD cannot see clwb: preferring "not where zen2 fits" would
    push the zen image off every node (with --exclusive, forever Pending)."""
    images = inputs.from_targets("zen,zen2,x86-64-v3", "reg/d")
    fleet = plan.plan_fleet(images, plan.DeployOptions(model_name="d", exclusive=True), plan.default_resources())
    better = {m.image.target.name: m.better for m in fleet.members}
    assert better["zen2"] == () and better["zen"] == ()
    assert set(better["x86-64-v3"]) == {plan.rule_label(inputs.resolve("zen")), plan.rule_label(inputs.resolve("zen2"))}
