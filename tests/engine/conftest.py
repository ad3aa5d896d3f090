"""Engine tests run against a real Docker engine, brought up by the suite itself when none runs.

The engine and a local Python base image (debootstrap, no registry) are prepared once per session; so is a
local registry for push tests, and an arm64 base image run under QEMU emulation for the arm64 tests.
Whatever a bare machine lacks for these (docker.io, debootstrap, docker-registry, trixie's qemu-aarch64,
binfmt-support) is installed by `builder.engine.local`, the same set-up `make engine` and `tfsmith
engine-up` use, never assumed. Every test in this folder is marked `engine`.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.engine.local import DEFAULT_BASE_IMAGE, ensure_base_image, ensure_emulation, ensure_engine, ensure_registry
from tests.locks import one_at_a_time


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.engine)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker daemon answering on /var/run/docker.sock."""
    with one_at_a_time("docker-engine"):
        ensure_engine(say=print)


@pytest.fixture(scope="session")
def base_image(docker_engine: None) -> str:
    """Tag of a local Debian bookworm image with python3 (3.11) and venv."""
    with one_at_a_time("base-image"):
        return ensure_base_image(DEFAULT_BASE_IMAGE, say=print)


@pytest.fixture(scope="session")
def arm64_base_image(docker_engine: None, base_image: str) -> str:
    """Tag of a local arm64 Debian bookworm image with python3 and venv (this machine's own base on an arm64
    host; on x86, QEMU emulation is installed and registered for the checks, and the image is made once by
    debootstrap's first stage and configured on this machine, not under emulation). An image built on it
    installs its Python packages in a stage on this machine's platform, from `base_image`."""
    with one_at_a_time("arm64-base-image"):
        ensure_emulation("arm64", say=print)
        return ensure_base_image(say=print, arch="arm64")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def registry(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local registry (Debian's docker-registry, installed when missing) on 127.0.0.1:<free port>.

    dockerd trusts registries on 127.0.0.0/8 without TLS, so pushing there needs no daemon configuration.
    """
    program = ensure_registry(say=print)
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    log = root / "registry.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([program, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"docker-registry exited ({process.returncode}): {log.read_text()[-500:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        else:
            pytest.fail(f"docker-registry did not listen: {log.read_text()[-500:]}")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
