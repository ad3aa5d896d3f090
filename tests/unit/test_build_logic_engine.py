"""Pure parts of the Docker engine: reading BuildKit's plain output, FROM lines, refs, and refusing old daemons.

BuildKit output comes from recorded real builds (tests/fixtures/buildkit/, Docker 20.10's CLI).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.engine import docker as docker_engine
from builder.engine.base import EngineUnavailable
from builder.engine.buildlog import StepTracker
from builder.engine.docker import DockerEngine, base_image_platforms, base_images, split_tag


def _feed(path: Path) -> StepTracker:
    tracker = StepTracker()
    for line in path.read_text().splitlines():
        tracker.feed(line)
    return tracker


def test_failed_build_names_the_failing_step_and_its_output(fixtures_dir: Path) -> None:
    tracker = _feed(fixtures_dir / "buildkit" / "failed-run.plain")
    reason, tail = tracker.failure_summary()
    assert reason == "[3/3] RUN echo out; false: executor failed running [/bin/sh -c echo out; false]: exit code: 1"
    assert tail == ("out",)
    assert not tracker.cached_all


def test_cached_steps_are_recognised(fixtures_dir: Path) -> None:
    tracker = _feed(fixtures_dir / "buildkit" / "cached-runtime.plain")
    states = {s.title.split("]")[0] + "]": s.state for s in tracker.user_steps if " RUN " in s.title}
    assert states == {"[2/5]": "cached", "[3/5]": "cached"}
    assert not tracker.cached_all  # the two COPY steps ran
    assert tracker.failed_step() is None
    assert all(not s.title.startswith("[internal]") for s in tracker.user_steps)


def test_failure_without_a_step_uses_the_trailer() -> None:
    tracker = StepTracker()
    for line in ["#1 [internal] load build definition from Dockerfile", "#1 DONE 0.0s", "error: dockerfile parse error"]:
        tracker.feed(line)
    assert tracker.failure_summary() == ("error: dockerfile parse error", ("error: dockerfile parse error",))


def test_base_images_expand_global_args_and_skip_stages_and_scratch() -> None:
    dockerfile = (
        "ARG BASE=tfsmith/python:bookworm\nARG TOOLS=debian:bookworm-slim\n"
        "FROM ${TOOLS} AS toolchain\nRUN true\nFROM toolchain AS build\nFROM scratch AS wheel\n"
        "FROM --platform=linux/amd64 $BASE AS runtime\nARG BASE=ignored-after-from\n"
    )
    assert base_images(dockerfile, {}) == ["debian:bookworm-slim", "tfsmith/python:bookworm"]
    assert base_images(dockerfile, {"BASE": "mirror.local:5000/py:3.11"}) == [
        "debian:bookworm-slim", "mirror.local:5000/py:3.11",
    ]  # fmt: skip


def test_a_stage_on_the_build_platform_wants_its_base_for_the_building_machine() -> None:
    """An arm64 build on an amd64 machine: the packages stage (`--platform=$BUILDPLATFORM`) needs its base for
    linux/amd64, the runtime stage for linux/arm64; a native build needs one image for one platform."""
    dockerfile = (
        "FROM --platform=$BUILDPLATFORM tfsmith/python:bookworm AS packages\nRUN true\n"
        "FROM tfsmith/python:bookworm-arm64 AS runtime\nCOPY --from=packages /opt/venv /opt/venv\n"
    )
    assert base_image_platforms(dockerfile, {}, "linux/arm64", "linux/amd64") == [
        ("tfsmith/python:bookworm", "linux/amd64"), ("tfsmith/python:bookworm-arm64", "linux/arm64"),
    ]  # fmt: skip
    native = dockerfile.replace("bookworm-arm64", "bookworm")
    assert base_image_platforms(native, {}, "linux/amd64", "linux/amd64") == [("tfsmith/python:bookworm", "linux/amd64")]
    assert base_images(dockerfile, {}) == ["tfsmith/python:bookworm", "tfsmith/python:bookworm-arm64"]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("127.0.0.1:5000/tfsmith/tensorflow:tf2.21.0-py3.11-x86-64-v3-cpu",
         ("127.0.0.1:5000/tfsmith/tensorflow", "tf2.21.0-py3.11-x86-64-v3-cpu")),
        ("registry:5000/name", ("registry:5000/name", "latest")),
        ("name:tag", ("name", "tag")),
    ],
)  # fmt: skip
def test_split_tag_keeps_the_registry_port(ref: str, expected: tuple[str, str]) -> None:
    assert split_tag(ref) == expected


class _OldDaemon:
    def version(self) -> dict[str, str]:
        return {"Version": "18.06.3-ce", "ApiVersion": "1.38"}


def test_a_daemon_without_buildkit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import docker

    monkeypatch.setattr(docker, "from_env", lambda **_: _OldDaemon())
    with pytest.raises(EngineUnavailable, match=r"18\.06\.3-ce \(API 1\.38\) is too old for BuildKit"):
        DockerEngine().client  # noqa: B018


def test_cli_choice_skips_a_cli_without_buildkit(monkeypatch: pytest.MonkeyPatch) -> None:
    helps = {
        "/usr/local/bin/docker": "ERROR: BuildKit is enabled but the buildx component is missing or broken.",
        "/usr/bin/docker": "      --secret stringArray      Secret file to expose to the build",
    }
    monkeypatch.setattr(docker_engine.shutil, "which", lambda name: name)
    monkeypatch.setattr(docker_engine, "_build_help", lambda cli: helps[cli])
    monkeypatch.setattr(docker_engine, "CLI_CANDIDATES", ("/usr/local/bin/docker", "/usr/bin/docker"))
    assert DockerEngine().cli == "/usr/bin/docker"
    with pytest.raises(EngineUnavailable, match="no docker CLI here can build with BuildKit"):
        DockerEngine(cli="/usr/local/bin/docker").cli  # noqa: B018
