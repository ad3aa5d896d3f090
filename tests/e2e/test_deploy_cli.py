"""`tfsmith deploy` run as a user runs it: the example model's fleet for x86-64-v3, x86-64-v4 and
sapphirerapids (and a two-architecture one, x86-64-v3 + neoverse_v1) is written and every object validates
offline (Kubernetes OpenAPI schemas pinned in tests/unit/test_deploy_manifests.py; no cluster exists on these
machines). DOCKER_HOST points nowhere: explicit targets and images must not need an engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import archspec.cpu
import pytest
import yaml

from tests.report_fixture import make_report
from tests.unit.test_deploy_manifests import K8S_VERSION, validate

REPO = Path(__file__).resolve().parents[2]
TFSMITH = Path(sys.executable).parent / "tfsmith"
CPUINFO = REPO / "tests" / "fixtures" / "cpuinfo"
FLEET = ["--model-name", "digits-cnn", "--served-name", "digits_cnn",
         "--targets", "x86-64-v3,x86-64-v4,sapphirerapids", "--image-prefix", "registry.example/digits"]


def tfsmith(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    return subprocess.run([str(TFSMITH), *args], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)


def load(folder: Path) -> list[dict]:
    return [doc for path in sorted(folder.glob("*.yaml")) if path.name != "kustomization.yaml"
            for doc in yaml.safe_load_all(path.read_text())]


def test_the_example_fleet_is_written_and_validates(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    result = tfsmith("deploy", *FLEET, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == [
        "1. digits-cnn-sapphirerapids: registry.example/digits:sapphirerapids-cpu (sapphirerapids)",
        "2. digits-cnn-x86-64-v4: registry.example/digits:x86-64-v4-cpu (x86-64-v4)",
        "3. digits-cnn-x86-64-v3: registry.example/digits:x86-64-v3-cpu (x86-64-v3)",
    ]
    assert "NFD cannot see" not in result.stdout  # every feature these targets require is NFD-visible
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == ["digits-cnn.yaml"]
    objects = load(out)
    assert [o["kind"] for o in objects].count("Deployment") == 3
    for obj in objects:
        validate(obj, K8S_VERSION)


def test_kustomize_kserve_and_measured_resources(tmp_path: Path) -> None:
    typed = make_report(chosen="model_int8.tflite", artifacts=[("model_int8.tflite", "tflite_int8")])
    typed = replace(typed, artifacts=(replace(typed.chosen_artifact, threads=2, size_bytes=250_000),))
    report = typed.write(tmp_path)
    out = tmp_path / "kserve"
    result = tfsmith("deploy", *FLEET, "--out", str(out), "--format", "kustomize", "--kserve", "--namespace", "ml",
                     "--report", str(report), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["resources"]["cpu"] == "2000m" and summary["resources"]["memory"] == "320Mi"
    custom = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert "namespace" not in custom  # each namespaced object carries it; the cluster-scoped rule must not
    assert set(custom["resources"]) == {p.name for p in out.glob("*.yaml")} - {"kustomization.yaml"}
    objects = load(out)
    assert sorted(o["kind"] for o in objects).count("InferenceService") == 3
    for obj in objects:
        validate(obj, K8S_VERSION)
        assert obj["metadata"].get("namespace") == (None if obj["kind"] == "NodeFeatureRule" else "ml")


@pytest.mark.parametrize(("fixture", "runs"), [
    ("this-vm-amd-epyc-zen3", "digits-cnn-x86-64-v3"),
    # AMX hidden, but the SPR image's code needs none of it (intrinsic-only): it runs the SPR image
    ("xeon-spr-guest-amx-hidden", "digits-cnn-sapphirerapids"),
    ("xeon-spr-vm-amx-hints-hidden", "digits-cnn-sapphirerapids"),  # waitpkg, serialize, ... hidden
    ("amd-epyc-9454-zen4-guest", "digits-cnn-x86-64-v4"),  # AVX-512 without FP16: not the SPR image
    ("old-xeon-e5-2670-sandybridge", None),  # no AVX2: none of these images
])
def test_explain_node_says_which_image_a_machine_runs(tmp_path: Path, fixture: str, runs: str | None) -> None:
    result = tfsmith("deploy", *FLEET, "--out", str(tmp_path / "o"), "--explain-node", str(CPUINFO / fixture), "--json")
    assert result.returncode == 0, result.stderr
    node = json.loads(result.stdout)["explain_node"]
    assert node["best"] == ([runs] if runs else [])


ARCHSPEC_SPR = Path(archspec.cpu.__file__).resolve().parents[1] / "json" / "tests" / "targets" / "linux-unknown-sapphirerapids"


@pytest.mark.parametrize("machine", [
    CPUINFO / "this-vm-amd-epyc-zen3", CPUINFO / "xeon-spr-guest-amx-hidden", CPUINFO / "old-xeon-e5-2670-sandybridge",
    CPUINFO / "amd-epyc-9454-zen4-guest", ARCHSPEC_SPR, CPUINFO / "xeon-spr-vm-amx-hints-hidden",
    CPUINFO / "aws-m6i-xeon-icelake-server-umip-hidden",
])
def test_placement_agrees_with_tfsmith_check(tmp_path: Path, machine: Path) -> None:
    """The same question asked of the two commands a user has: may this machine run the image?"""
    targets = ["x86-64-v3", "x86-64-v4", "haswell", "icelake", "sapphirerapids"]
    result = tfsmith("deploy", "--model-name", "m", "--targets", ",".join(targets), "--image-prefix", "reg/m",
                     "--out", str(tmp_path / "o"), "--explain-node", str(machine), "--json")
    assert result.returncode == 0, result.stderr
    placed = set(json.loads(result.stdout)["explain_node"]["may_run"])
    for target in targets:
        check = tfsmith("check", "--target", target, "--cpuinfo", str(machine))
        assert check.returncode in (0, 3), check.stderr
        assert (check.returncode == 0) == (f"m-{target}" in placed), (machine.name, target, check.stderr)


@pytest.mark.parametrize("args", [
    ["--targets", "x86-64-v3", "--image-prefix", "reg/d", "--model-name", "Digits!"],
    ["--targets", "x86-64-v3", "--model-name", "d"],
    ["--targets", "zen9", "--image-prefix", "reg/d", "--model-name", "d"],
    ["--image", "x86-64-v3", "--model-name", "d"],
    ["--targets", "x86-64-v3", "--image", "x86-64-v3=reg/d:1", "--image-prefix", "reg/d", "--model-name", "d"],
    ["--targets", "x86-64-v3", "--image-prefix", "reg/d", "--model-name", "d", "--cpu", "fast"],
    ["--targets", "x86-64-v3", "--image-prefix", "reg/d", "--model-name", "d", "--format", "helm"],
    ["--from-images", "reg/d:v3"],  # no engine answers at DOCKER_HOST
    ["--targets", "x86-64-v3", "--image-prefix", "reg/d", "--model-name", "d", "--report", "/nonexistent/report.json"],
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "out"
    result = tfsmith("deploy", *args, "--out", str(out))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfsmith: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


ARCHSPEC_DUMPS = ARCHSPEC_SPR.parent


@pytest.mark.parametrize(("machine", "runs"), [
    (CPUINFO / "aws-graviton3-neoverse-v1-sve", "digits-neoverse-v1"),
    (CPUINFO / "this-vm-amd-epyc-zen3", "digits-x86-64-v3"),
    (ARCHSPEC_DUMPS / "linux-amazon-neoverse_n1", None),  # arm64 without SVE: neither image
])
def test_a_two_architecture_fleet_runs_each_image_on_its_own_architecture(
    tmp_path: Path, machine: Path, runs: str | None
) -> None:
    out = tmp_path / "k8s"
    result = tfsmith("deploy", "--model-name", "digits", "--targets", "x86-64-v3,neoverse_v1", "--image-prefix",
                     "registry.example/digits", "--out", str(out), "--explain-node", str(machine), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["explain_node"]["may_run"] == ([runs] if runs else [])
    arch = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
            for o in load(out) if o["kind"] == "Deployment"}
    wanted = {"digits-neoverse-v1": ["arm64"], "digits-x86-64-v3": ["amd64"]}
    for name, expressions in arch.items():
        assert {"key": "kubernetes.io/arch", "operator": "In", "values": wanted[name]} in expressions
