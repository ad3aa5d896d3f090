"""Platforms through the Engine interface: what the fake mirrors of the Docker engine, and how the Docker
implementation reads an image's architecture and digests and writes `--platform`.

The real engine's behaviour (an arm64 image built and run under QEMU, an index pushed and pulled back) is
tested in tests/engine/test_arm64.py and test_multiarch.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from builder.engine import docker as docker_engine
from builder.engine.base import BuildRequest, EngineError, PushedIndex
from builder.engine.docker import DockerEngine, _loopback, _to_image
from builder.engine.fake import FakeEngine

# An excerpt of `docker image inspect` of the arm64 base on Docker 20.10 (after a pull by digest).
ARM64_INSPECT = {
    "Id": "sha256:" + "a" * 64,
    "RepoTags": ["tfsmith/python:bookworm-arm64"],
    "RepoDigests": ["127.0.0.1:5000/tfsmith-test-multiarch@sha256:" + "b" * 64],
    "Architecture": "arm64",
    "Os": "linux",
    "Config": {"Cmd": ["/bin/bash"], "Env": ["PATH=/usr/bin:/bin"]},
}


def test_the_docker_engine_reads_architecture_and_digests() -> None:
    raw = SimpleNamespace(id=ARM64_INSPECT["Id"], tags=ARM64_INSPECT["RepoTags"], attrs=ARM64_INSPECT)
    image = _to_image(raw)
    assert (image.architecture, image.os, image.platform) == ("arm64", "linux", "linux/arm64")
    assert image.digests == tuple(ARM64_INSPECT["RepoDigests"])  # type: ignore[arg-type]


def test_a_platform_becomes_the_clis_platform_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = DockerEngine(cli="/usr/bin/docker")
    monkeypatch.setattr(engine, "_cli", "/usr/bin/docker")
    monkeypatch.setattr(engine, "_named_contexts", False)
    argv = engine._build_argv(BuildRequest(context=tmp_path, tags=("t:1",), target="runtime", platform="linux/arm64"))
    assert argv[argv.index("--platform") + 1] == "linux/arm64"
    assert "--platform" not in engine._build_argv(BuildRequest(context=tmp_path, tags=("t:1",)))


@pytest.mark.parametrize(
    ("repo", "loopback"),
    [("127.0.0.1:5000/app", True), ("localhost:5000/a/b", True), ("registry.example/app", False), ("app", False)],
)
def test_only_registries_on_this_machine_are_spoken_to_in_plain_http(repo: str, loopback: bool) -> None:
    assert _loopback(repo) is loopback


def test_the_fake_builds_for_the_platform_asked_and_its_own_otherwise(tmp_path: Path) -> None:
    engine = FakeEngine()
    arm = engine.build(BuildRequest(context=tmp_path, tags=("app:arm64",), platform="linux/arm64"))
    own = engine.build(BuildRequest(context=tmp_path, tags=("app:amd64",)))
    assert arm is not None and own is not None and arm.id != own.id
    assert (arm.platform, own.platform) == ("linux/arm64", "linux/amd64")
    with engine.start("app:arm64", ["true"], env={"QEMU_CPU": "cortex-a53"}, platform="linux/arm64"):
        assert engine.started[-1].platform == "linux/arm64" and engine.started[-1].env == {"QEMU_CPU": "cortex-a53"}
    with pytest.raises(EngineError, match=r"^app:arm64 is a linux/arm64 image, not linux/amd64$"):
        engine.start("app:arm64", ["true"], platform="linux/amd64")


def test_the_fake_pushes_an_index_whose_platforms_pull_back_by_digest(tmp_path: Path) -> None:
    engine = FakeEngine()
    for platform in ("linux/amd64", "linux/arm64"):
        engine.build(BuildRequest(context=tmp_path, tags=(f"app:{platform[6:]}",), platform=platform))
    index = engine.push_index("reg.example/app:1", ["app:amd64", "app:arm64"])
    assert isinstance(index, PushedIndex) and set(index.platforms) == {"linux/amd64", "linux/arm64"}
    assert engine.pushes == ["reg.example/app:1-amd64", "reg.example/app:1-arm64"]
    arm = index.by_digest("linux/arm64")
    assert arm == f"reg.example/app@{index.platforms['linux/arm64']}"
    assert engine.pull(arm).platform == "linux/arm64"
    with pytest.raises(EngineError, match="one image per platform"):
        engine.push_index("reg.example/app:2", ["app:amd64", "app:amd64"])


def test_an_index_ref_keeps_its_registry_port_in_digest_refs() -> None:
    index = PushedIndex("127.0.0.1:5000/app:1", "sha256:" + "c" * 64, {"linux/arm64": "sha256:" + "d" * 64})
    assert index.by_digest("linux/arm64") == "127.0.0.1:5000/app@sha256:" + "d" * 64
    assert docker_engine.split_tag(index.ref) == ("127.0.0.1:5000/app", "1")
