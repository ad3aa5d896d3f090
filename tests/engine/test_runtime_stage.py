"""The rendered runtime stage really builds on the real Docker engine, from a prebuilt wheel.

The stand-in for a wheel we compiled is the PyPI TensorFlow 2.21.0 wheel for the local base image's Python
(tfsmith/python:bookworm: Debian's 3.11), downloaded once into tfsmith's cache. pip inside the build fetches
TensorFlow's dependencies from PyPI and needs the host's CA bundle, which travels as the BuildKit secret
`ca_bundle`, never as a layer. Two images share every layer up to the guard: one for x86-64-v3 (this host
runs it) and one for sapphirerapids (this host cannot: AMX is not exposed here), built once per module.
Every build, inspect, run and removal goes through the Engine interface (`DockerEngine`).
"""

from __future__ import annotations

import contextlib

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from builder.build.plan import BuildPlan, reference_build_facts
from builder.build.settings import BuildConfig
from builder.engine.base import BuildRequest, Engine
from builder.engine.docker import DockerEngine
from builder.guard import missing_features, read_cpu_flags
from builder.build.render import render_context
from builder.build.from_settings import plan_from_settings
from tests import tf_image

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
IMAGE = "tfsmith-test-render-runtime"
HOSTILE_LABEL = 'quotes " and $HOME and `id` and back\\slash'
TARGETS = ("x86-64-v3", "sapphirerapids")

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the stand-in wheel is x86_64")


class Ran(NamedTuple):
    """A finished container: exit code and its two streams, read apart."""

    code: int
    stdout: str
    stderr: str


def run(
    engine: Engine,
    ref: str,
    command: Sequence[str] | None = None,
    *,
    entrypoint: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> Ran:
    """Run to completion like `Engine.run`, but keep stdout and stderr apart (the guard speaks on stderr)."""
    with engine.start(ref, command, entrypoint=entrypoint, env=env) as container:
        code = container.wait(timeout)
        return Ran(code, container.logs(stderr=False), container.logs(stdout=False))


@pytest.fixture(scope="module")
def engine(docker_engine: None) -> DockerEngine:
    return DockerEngine()


@pytest.fixture(scope="module")
def base_python(engine: DockerEngine, base_image: str) -> str:
    probe = run(engine, base_image, ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    assert probe.code == 0, probe.stderr
    return probe.stdout.strip()


@pytest.fixture(scope="module")
def stand_in_wheel(base_python: str) -> Path:
    """The PyPI tensorflow 2.21.0 manylinux x86_64 wheel for the base image's Python (cached across runs)."""
    return tf_image.stand_in_wheel(base_python)


@pytest.fixture(scope="module")
def images(
    engine: DockerEngine,
    base_image: str,
    base_python: str,
    stand_in_wheel: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, tuple[BuildPlan, str]]]:
    """target name -> (plan, image tag), both built from the stand-in wheel through the rendered context."""
    built: dict[str, tuple[BuildPlan, str]] = {}
    with contextlib.ExitStack() as held:
        held.enter_context(tf_image.another_tf_image_for(*TARGETS))
        held.callback(lambda: [engine.remove_image(tag) for _, tag in built.values()])
        for name in TARGETS:
            settings = BuildConfig(
                target=name,
                tf_version="2.21.0",
                python=base_python,
                base_image=base_image,
                wheel=stand_in_wheel,
                ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
                labels=(("com.example.note", HOSTILE_LABEL),),
            )
            plan = plan_from_settings(settings, host=reference_build_facts("x86_64"))
            context = render_context(plan, tmp_path_factory.mktemp("ctx") / name)
            tag = f"{IMAGE}:{name}"
            request = BuildRequest(
                context=context,
                tags=(tag,),
                secrets=plan.secrets,
                log_file=tmp_path_factory.mktemp("log") / f"{name}.log",
            )
            built[name] = (plan, tag)  # removed afterwards even when the build fails halfway
            image = engine.build(request)
            assert image is not None and tag in image.tags
        yield built


def test_tensorflow_imports_in_the_built_image(engine: DockerEngine, images: dict[str, tuple[BuildPlan, str]]) -> None:
    _, tag = images["x86-64-v3"]
    ran = run(engine, tag, ["python", "-c", "import tensorflow as tf; print('tf', tf.__version__)"])
    assert ran.code == 0, ran.stderr[-2000:]
    assert "tf 2.21.0" in ran.stdout


def test_labels_carry_the_manifest(engine: DockerEngine, images: dict[str, tuple[BuildPlan, str]]) -> None:
    for plan, tag in images.values():
        image = engine.inspect(tag)
        labels = image.labels
        assert json.loads(labels["io.tfsmith.manifest"]) == plan.spec()
        assert labels["io.tfsmith.spec-digest"] == plan.spec_digest
        assert labels["io.tfsmith.target"] == plan.target.name
        assert labels["org.opencontainers.image.version"] == "2.21.0"
        assert labels["com.example.note"] == HOSTILE_LABEL  # escaped in the Dockerfile, read back exactly
        assert not any(var.startswith("PIP_CERT") for var in image.config.env)  # the CA was a secret, not ENV
        assert image.config.entrypoint == ("/usr/local/bin/tfsmith-guard", "--")


def test_the_spec_is_baked_into_the_image(engine: DockerEngine, images: dict[str, tuple[BuildPlan, str]]) -> None:
    plan, tag = images["x86-64-v3"]
    ran = run(engine, tag, ["cat", "/etc/tfsmith/spec.json"])
    assert ran.code == 0, ran.stderr
    assert json.loads(ran.stdout) == {"spec": plan.spec(), "spec_digest": plan.spec_digest}
    no_secret = run(engine, tag, ["sh", "-c", "test ! -e /run/secrets/ca_bundle && echo clean"])
    assert no_secret.stdout.strip() == "clean"


def test_guard_passes_for_a_target_this_host_runs(
    engine: DockerEngine, images: dict[str, tuple[BuildPlan, str]]
) -> None:
    plan, tag = images["x86-64-v3"]
    if missing_features(plan.target.features, read_cpu_flags()):
        pytest.skip("this host cannot run x86-64-v3 code")
    ran = run(engine, tag, ["python", "-c", "print('guard let me through')"])
    assert ran.code == 0, ran.stderr
    assert ran.stdout.strip() == "guard let me through"
    assert "tfsmith-guard" not in ran.stderr


def test_guard_refuses_a_target_this_host_cannot_run(
    engine: DockerEngine, images: dict[str, tuple[BuildPlan, str]]
) -> None:
    plan, tag = images["sapphirerapids"]
    missing = missing_features(plan.target.features, read_cpu_flags())
    if not missing:
        pytest.skip("this host has every feature sapphirerapids code needs (its AMX and hints are never required)")
    ran = run(engine, tag, ["python", "-c", "print('should never run')"])
    assert ran.code == 3
    assert "should never run" not in ran.stdout
    message = ran.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert "sapphirerapids" in message and "cannot run" in message
    assert all(feature in message for feature in missing)
    assert "Illegal instruction" not in message


def test_the_image_sets_no_tfsmith_setting(engine: DockerEngine, images: dict[str, tuple[BuildPlan, str]]) -> None:
    """tfsmith run inside a built image must plan from its own settings, not from the image's guard env."""
    from builder.build.settings import SETTINGS_ENV, env_values

    _, tag = images["x86-64-v3"]
    ran = run(engine, tag, entrypoint=["env"])
    assert ran.code == 0, ran.stderr
    env = dict(line.split("=", 1) for line in ran.stdout.splitlines() if "=" in line)
    assert env.get("TFSMITH_IMAGE_TARGET") == "x86-64-v3"
    assert env_values(env) == {} and not set(env) & set(SETTINGS_ENV.values())


def test_a_cuda_image_without_a_gpu_or_its_libraries_says_so(
    engine: DockerEngine, images: dict[str, tuple[BuildPlan, str]]
) -> None:
    """The guard of a CUDA image in a container with no GPU and TensorFlow without [and-cuda] (this image's
    stand-in wheel was installed plainly): one warning line and the command runs; refused when required."""
    plan, tag = images["x86-64-v3"]
    if missing_features(plan.target.features, read_cpu_flags()):
        pytest.skip("this host cannot run x86-64-v3 code")
    cuda = {"TFSMITH_IMAGE_CUDA_CC": "8.0,9.0", "TFSMITH_IMAGE_PTX": "9.0"}
    ran = run(engine, tag, ["python", "-c", "print('ran on the CPU')"], env=cuda)
    assert ran.code == 0, ran.stderr
    assert ran.stdout.strip() == "ran on the CPU"
    warning = ran.stderr.strip()
    assert len(warning.splitlines()) == 1 and warning.startswith("tfsmith-guard: warning:"), warning
    assert "tensorflow[and-cuda]" in warning and "CPU only" in warning
    required = run(engine, tag, ["python", "-c", "print(1)"], env={**cuda, "TFSMITH_IMAGE_REQUIRE_GPU": "1"})
    assert required.code == 3 and required.stdout == ""
    assert "TensorFlow's CUDA 12 libraries are missing: nvidia-cudnn-cu12" in required.stderr
    assert "tensorflow[and-cuda]" in required.stderr
