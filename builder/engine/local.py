"""Bring up a local Docker engine and a local base image on a bare machine.

Users of `make build` and the test suite often start on a machine with the Docker client but no daemon and
no registry access (FACTS §1). This module does what a person would do by hand: install Debian's
docker.io when dockerd is missing (root + apt only), start dockerd without systemd, wait for it, and create
a Python base image with debootstrap when it cannot be pulled. Every step says what it does; nothing here
runs unless asked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from builder.engine.base import EngineUnavailable

DOCKER_SOCKET = Path("/var/run/docker.sock")
DEFAULT_BASE_IMAGE = "tfsmith/python:bookworm"
STATE_DIR = Path(os.environ.get("TFSMITH_STATE_DIR", Path.home() / ".cache" / "tfsmith"))
DEBIAN_MIRROR = os.environ.get("TFSMITH_DEBIAN_MIRROR", "http://deb.debian.org/debian")

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


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
            "install Docker and start its daemon, then retry"
        )
    say(f"installing Debian packages: {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
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


def ensure_engine(say: Say = _quiet, wait_s: float = 60.0) -> None:
    """Make sure a Docker daemon answers on /var/run/docker.sock, starting (and installing) one if needed."""
    if engine_answers():
        return
    if shutil.which("dockerd") is None:
        _apt_install(["docker.io"], say)
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
    if shutil.which("debootstrap") is None:
        _apt_install(["debootstrap"], say)
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
