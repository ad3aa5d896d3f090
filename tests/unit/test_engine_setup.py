"""What the project's own set-up installs on a bare machine: the decision (pure) and the apt-get it runs.

A fresh machine has Debian's base packages and nothing else; every program the engine set-up or the test
suite calls beyond that must be installed by `builder.engine.local`, never by hand. Processes are recorded,
not started.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.engine import local
from builder.engine.base import EngineUnavailable
from builder.engine.local import (
    BUILDKIT_CLI,
    DEBOOTSTRAP,
    ENGINE,
    REGISTRY,
    REQUIREMENTS,
    packages_to_install,
)


def test_a_bare_machine_gets_every_package_once_in_order() -> None:
    assert packages_to_install(REQUIREMENTS, found=lambda _: None) == [
        "docker.io", "debootstrap", "docker-registry"
    ]


def test_nothing_is_installed_when_every_program_is_there() -> None:
    assert packages_to_install(REQUIREMENTS, found=lambda program: f"/usr/bin/{program}") == []


def test_only_the_missing_programs_packages_are_asked_for() -> None:
    found = {"dockerd": "/usr/sbin/dockerd", "/usr/bin/docker": "/usr/bin/docker", "debootstrap": "/usr/sbin/debootstrap"}
    assert packages_to_install(REQUIREMENTS, found=found.get) == ["docker-registry"]
    # a modern CLI elsewhere on PATH is not the BuildKit-capable one the engine needs
    assert packages_to_install((ENGINE, BUILDKIT_CLI), found={"dockerd": "/usr/sbin/dockerd"}.get) == ["docker.io"]


def test_the_push_tests_registry_is_a_requirement() -> None:
    assert (REGISTRY.program, REGISTRY.package) == ("docker-registry", "docker-registry")
    # no Debian QEMU: bookworm's is too old for LiteRT; ensure_qemu fetches trixie's binary instead
    assert {r.package for r in REQUIREMENTS} == {"docker.io", "debootstrap", "docker-registry"}
    assert DEBOOTSTRAP in REQUIREMENTS


class _Machine:
    """A bare machine: programs appear once their package is "installed"; apt-get calls are recorded."""

    provides = {"docker.io": ("dockerd", "/usr/bin/docker"), "debootstrap": ("debootstrap",),
                "docker-registry": ("docker-registry",)}  # fmt: skip

    def __init__(self) -> None:
        self.installed: set[str] = set()
        self.apt: list[list[str]] = []

    def which(self, program: str) -> str | None:
        if program == "apt-get":
            return "/usr/bin/apt-get"
        for package in self.installed:
            if program in self.provides[package]:
                return program if program.startswith("/") else f"/usr/bin/{program}"
        return None

    def run(self, argv: list[str], **_: object) -> object:
        self.apt.append(list(argv))
        if argv[:2] == ["apt-get", "install"]:
            self.installed.update(a for a in argv[2:] if not a.startswith("-"))

        class Done:
            returncode = 0
            stdout = stderr = ""

        return Done()


@pytest.fixture()
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Machine]:
    bare = _Machine()
    monkeypatch.setattr(local.shutil, "which", bare.which)
    monkeypatch.setattr(local.subprocess, "run", bare.run)
    monkeypatch.setattr(local.os, "geteuid", lambda: 0)
    local._apt_update.cache_clear()
    yield bare
    local._apt_update.cache_clear()


def test_ensure_registry_installs_docker_registry_without_recommends(machine: _Machine) -> None:
    said: list[str] = []
    assert local.ensure_registry(say=said.append) == "/usr/bin/docker-registry"
    assert machine.apt == [
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "docker-registry"],
    ]
    assert said == ["installing Debian packages: docker-registry"]
    machine.apt.clear()
    local.ensure_registry()
    assert machine.apt == []  # there now: nothing to do


def test_package_lists_are_updated_once_per_process(machine: _Machine) -> None:
    local.ensure_programs((DEBOOTSTRAP,))
    local.ensure_programs((REGISTRY,))
    assert [argv[1] for argv in machine.apt] == ["update", "install", "install"]


def test_a_package_that_does_not_provide_the_program_is_an_error(machine: _Machine) -> None:
    machine.provides = {**machine.provides, "docker-registry": ()}
    with pytest.raises(EngineUnavailable, match="installed docker-registry but still missing: docker-registry"):
        local.ensure_registry()


def test_without_root_it_says_what_to_install(machine: _Machine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    with pytest.raises(EngineUnavailable, match=r"^docker-registry missing and cannot be installed here") as caught:
        local.ensure_registry()
    assert "apt-get install --no-install-recommends docker-registry" in str(caught.value)
    assert "\n" not in str(caught.value) and machine.apt == []


def test_an_engine_that_answers_needs_no_install(machine: _Machine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "engine_answers", lambda docker_cli="docker": True)
    local.ensure_engine()
    assert machine.apt == []


def test_the_engine_socket_follows_docker_host() -> None:
    assert local.engine_socket({}) == local.DOCKER_SOCKET
    assert local.engine_socket({"DOCKER_HOST": "unix:///run/other.sock"}) == Path("/run/other.sock")
    assert local.engine_socket({"DOCKER_HOST": "tcp://10.0.0.2:2375"}) is None


def test_an_engine_docker_host_names_is_never_started_in_its_place(
    machine: _Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/absent.sock")
    monkeypatch.setattr(local, "engine_answers", lambda docker_cli="docker": False)
    with pytest.raises(EngineUnavailable, match=r"^no Docker engine answers at DOCKER_HOST=unix:///run/absent.sock"):
        local.ensure_engine()
    assert machine.apt == []
