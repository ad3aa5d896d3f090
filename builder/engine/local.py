"""Bring up a local Docker engine, a local base image and a local registry on a bare machine.

Users of `make build` and the test suite often start on a machine with the Docker client but no daemon and
no registry access. This module does what a person would do by hand: install the Debian packages whose
programs are missing (root + apt only), start dockerd without systemd, wait for it, and create a Python
base image with debootstrap when it cannot be pulled. Every program tfsmith or its tests call that a bare
Debian machine lacks is listed in `REQUIREMENTS`, with the package that provides it, so "what does a fresh
machine need" has one answer. Every step says what it does; nothing here runs unless asked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from builder.engine.base import EngineUnavailable

DOCKER_SOCKET = Path("/var/run/docker.sock")
DEFAULT_BASE_IMAGE = "tfsmith/python:bookworm"
#: Where the hand-started engine keeps its log (not the `state_dir` setting, which is per project).
STATE_DIR = Path(os.environ.get("TFSMITH_ENGINE_DIR", Path.home() / ".cache" / "tfsmith"))
DEBIAN_MIRROR = os.environ.get("TFSMITH_DEBIAN_MIRROR", "http://deb.debian.org/debian")

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Requirement:
    """A program we call and the Debian package that provides it (Debian's names: the images are bookworm)."""

    program: str  # a name looked up on PATH, or an absolute path when only that build will do
    package: str
    why: str


ENGINE = Requirement("dockerd", "docker.io", "the Docker daemon (and /usr/bin/docker, a CLI with BuildKit built in)")
BUILDKIT_CLI = Requirement("/usr/bin/docker", "docker.io", "builds with RUN --mount without the buildx plugin")
DEBOOTSTRAP = Requirement("debootstrap", "debootstrap", "creates the base image when no registry can be reached")
REGISTRY = Requirement("docker-registry", "docker-registry", "a local registry to push to and pull from")
#: Everything beyond a bare Debian machine that tfsmith's engine set-up and its test suite run.
REQUIREMENTS: tuple[Requirement, ...] = (ENGINE, BUILDKIT_CLI, DEBOOTSTRAP, REGISTRY)


def packages_to_install(
    needed: Iterable[Requirement], found: Callable[[str], str | None] = shutil.which
) -> list[str]:
    """The Debian packages to install so every needed program is there: pure, in order, each once.

    `found` answers "where is this program" (shutil.which by default); a program that is found costs nothing.
    """
    packages: list[str] = []
    for requirement in needed:
        if found(requirement.program) is None and requirement.package not in packages:
            packages.append(requirement.package)
    return packages


def ensure_programs(needed: Iterable[Requirement], say: Say = _quiet) -> None:
    """Install (one apt-get run) the packages of whichever needed programs are missing; no-op when all are there."""
    needed = tuple(needed)
    packages = packages_to_install(needed, found=shutil.which)
    if packages:
        _apt_install(packages, say)
        still = [r.program for r in needed if shutil.which(r.program) is None]
        if still:
            raise EngineUnavailable(f"installed {' '.join(packages)} but still missing: {', '.join(still)}")


def engine_answers(docker_cli: str = "docker") -> bool:
    """True when a daemon answers on the default socket (checked with the CLI, a few ms)."""
    if not DOCKER_SOCKET.exists() or shutil.which(docker_cli) is None:
        return False
    probe = subprocess.run(
        [docker_cli, "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return probe.returncode == 0 and bool(probe.stdout.strip())


def _apt_install(packages: list[str], say: Say) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise EngineUnavailable(
            f"{', '.join(packages)} missing and cannot be installed here (needs root and apt-get); "
            f"install it (Debian: apt-get install --no-install-recommends {' '.join(packages)}), then retry"
        )
    say(f"installing Debian packages: {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _apt_update()
    result = subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise EngineUnavailable(f"apt-get install {' '.join(packages)} failed: {' '.join(tail)}")


@cache
def _apt_update() -> None:
    """`apt-get update`, once per process: a fresh machine's package lists may be missing or stale."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise EngineUnavailable(f"apt-get update failed: {' '.join(tail)}")


def ensure_engine(say: Say = _quiet, wait_s: float = 60.0) -> None:
    """Make sure a Docker daemon answers on /var/run/docker.sock, starting (and installing) one if needed."""
    if engine_answers():
        return
    ensure_programs((ENGINE, BUILDKIT_CLI), say)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    log_path = STATE_DIR / "dockerd.log"
    say(f"starting dockerd (log: {log_path})")
    with open(log_path, "ab") as log:
        subprocess.Popen(  # noqa: S603 - fixed argv
            ["dockerd", "--host", f"unix://{DOCKER_SOCKET}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if engine_answers():
            return
        time.sleep(0.5)
    raise EngineUnavailable(f"dockerd did not answer within {wait_s:.0f} s; see {log_path}")


def image_exists(ref: str) -> bool:
    probe = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False)
    return probe.returncode == 0


def ensure_base_image(
    ref: str = DEFAULT_BASE_IMAGE,
    say: Say = _quiet,
    packages: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates"),
) -> str:
    """A local Debian bookworm image with Python 3.11, made with debootstrap when it is not there.

    No registry is needed: the root filesystem is bootstrapped from Debian's archive and imported.
    """
    if image_exists(ref):
        return ref
    ensure_programs((DEBOOTSTRAP,), say)
    say(f"creating base image {ref} with debootstrap (about a minute)")
    with tempfile.TemporaryDirectory(prefix="tfsmith-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        result = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise EngineUnavailable(f"debootstrap failed: {' | '.join(tail)}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / cache, ignore_errors=True)
            (rootfs / cache).mkdir(parents=True, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "--change", 'CMD ["/bin/bash"]', "-", ref],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        tar.wait()
        if imported.returncode != 0:
            raise EngineUnavailable(f"docker import failed: {imported.stderr.strip()}")
    return ref


def ensure_registry(say: Say = _quiet) -> str:
    """The path of Debian's `docker-registry` program (installed when missing), for a registry on loopback."""
    ensure_programs((REGISTRY,), say)
    path = shutil.which(REGISTRY.program)
    assert path is not None  # ensure_programs raised otherwise
    return path
