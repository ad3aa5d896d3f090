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

import builder.engine.emulation as emulation
from builder.engine.base import EngineUnavailable
from builder.say import Say

DOCKER_SOCKET = Path("/var/run/docker.sock")
DEFAULT_BASE_IMAGE = "tfsmith/python:bookworm"
#: Where the hand-started engine keeps its log (not the `state_dir` setting, which is per project).
STATE_DIR = Path(os.environ.get("TFSMITH_ENGINE_DIR", Path.home() / ".cache" / "tfsmith"))
DEBIAN_MIRROR = os.environ.get("TFSMITH_DEBIAN_MIRROR", "http://deb.debian.org/debian")



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
QEMU = Requirement("qemu-aarch64-static", "qemu-user-static", "runs arm64 programs (and containers) on x86 hosts")
BINFMT = Requirement("update-binfmts", "binfmt-support", "registers QEMU with the kernel's binfmt_misc")
#: Everything beyond a bare Debian machine that tfsmith's engine set-up and its test suite run.
REQUIREMENTS: tuple[Requirement, ...] = (ENGINE, BUILDKIT_CLI, DEBOOTSTRAP, REGISTRY, QEMU, BINFMT)
#: This machine's architecture in Docker's (and Debian's) words: amd64, arm64.
DOCKER_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


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


def host_arch() -> str:
    """This machine's architecture in Docker's words (amd64, arm64); the name itself when Docker has none."""
    machine = os.uname().machine
    return DOCKER_ARCH.get(machine, machine)


def docker_arch(arch: str) -> str:
    """`x86_64`/`amd64` -> amd64, `aarch64`/`arm64` -> arm64, `linux/arm64` -> arm64; EngineUnavailable else."""
    name = arch.rpartition("/")[2] if arch.startswith("linux/") else arch
    if name not in DOCKER_ARCH:
        raise EngineUnavailable(f"unknown architecture {arch!r}: tfsmith builds amd64 and arm64 images")
    return DOCKER_ARCH[name]


def base_image_ref(arch: str | None = None) -> str:
    """The local base image's tag for `arch`: the plain tag is this machine's own architecture, another one
    gets its name as a suffix (`tfsmith/python:bookworm-arm64` on an x86 host)."""
    wanted = docker_arch(arch) if arch else host_arch()
    return DEFAULT_BASE_IMAGE if wanted == host_arch() else f"{DEFAULT_BASE_IMAGE}-{wanted}"


def image_arch(ref: str) -> str | None:
    """The architecture an image says it is for (`docker image inspect`), None when there is no such image."""
    probe = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Architecture}}", ref],
        capture_output=True, text=True, check=False,
    )
    return probe.stdout.strip() if probe.returncode == 0 else None


def image_exists(ref: str) -> bool:
    return image_arch(ref) is not None


def ensure_emulation(arch: str = "arm64", say: Say = _quiet) -> None:
    """Make `arch` programs (and containers) run on this machine through QEMU user mode; no-op when native.

    Installs qemu-user-static and binfmt-support when missing, mounts binfmt_misc where it is not mounted,
    registers `qemu-<arch>` with the F flag (re-registering an entry that lacks it), then proves it by
    running a tiny arm64 program. Every step needs root, as `ensure_engine` does; nothing is done twice.
    """
    wanted = docker_arch(arch)
    if wanted == host_arch():
        return
    if wanted != "arm64":
        raise EngineUnavailable(f"tfsmith emulates arm64 on x86 hosts only, not {wanted} on {host_arch()}")
    entry_file = emulation.entry_path(wanted)
    if _entry_ready(entry_file) and _probe_runs():
        return
    ensure_programs((QEMU, BINFMT), say)
    if not (emulation.BINFMT_DIR / "register").exists():
        say(f"mounting binfmt_misc on {emulation.BINFMT_DIR}")
        _root(["mount", "-t", "binfmt_misc", "binfmt_misc", str(emulation.BINFMT_DIR)], "mount binfmt_misc")
    if entry_file.exists() and not _entry_ready(entry_file):
        say(f"re-registering {entry_file.name}: it lacks the F flag containers need")
        entry_file.write_text("-1\n")  # the kernel's way to remove an entry
    if not entry_file.exists():
        say(f"registering {entry_file.name} with binfmt_misc")
        _root(["update-binfmts", "--enable", entry_file.name], f"update-binfmts --enable {entry_file.name}")
    if not entry_file.exists():  # binfmt-support thought it was enabled already: import Debian's entry again
        _root(["update-binfmts", "--import", entry_file.name], f"update-binfmts --import {entry_file.name}")
    state = emulation.parse_entry(entry_file.read_text()) if entry_file.exists() else None
    if state is None or not state.enabled or not state.fixed:
        raise EngineUnavailable(
            f"{entry_file} is {'missing' if state is None else f'flags {state.flags!r}'}; arm64 containers need it "
            "enabled with the F flag (qemu-user-static registers it so)"
        )
    if not _probe_runs():
        raise EngineUnavailable(f"{entry_file.name} is registered but an arm64 program still does not run here")
    say(f"arm64 emulation ready ({state.interpreter}, flags {state.flags})")


def _entry_ready(entry_file: Path) -> bool:
    try:
        state = emulation.parse_entry(entry_file.read_text())
    except OSError:
        return False
    return state.enabled and state.fixed


def _probe_runs() -> bool:
    """Run the 132-byte arm64 probe: True when it exits with its own code (so QEMU really ran it)."""
    with tempfile.TemporaryDirectory(prefix="tfsmith-probe-") as tmp:
        probe = Path(tmp) / "probe-arm64"
        probe.write_bytes(emulation.probe_binary())
        probe.chmod(0o755)
        try:
            ran = subprocess.run([str(probe)], capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):  # Exec format error: nothing handles arm64 binaries
            return False
    return ran.returncode == emulation.PROBE_EXIT


def _root(argv: list[str], what: str) -> None:
    if os.geteuid() != 0:
        raise EngineUnavailable(f"{what} needs root; run it as root (or ask an administrator), then retry")
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise EngineUnavailable(f"{what} failed: {' '.join(tail) or f'exit {result.returncode}'}")


def ensure_base_image(
    ref: str | None = None,
    say: Say = _quiet,
    packages: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates"),
    *,
    arch: str | None = None,
) -> str:
    """A local Debian bookworm image with Python 3.11 for `arch` (default: this machine's), made with
    debootstrap when it is not there; returns its tag (`base_image_ref(arch)` unless `ref` is given).

    No registry is needed: the root filesystem is bootstrapped from Debian's archive and imported with the
    image architecture set, so BuildKit takes it for `--platform linux/<arch>` builds. Another
    architecture's root filesystem is configured under QEMU (`ensure_emulation`): a few minutes instead of
    one, once; the image is kept and reused.
    """
    wanted = docker_arch(arch) if arch else host_arch()
    ref = ref or base_image_ref(wanted)
    found = image_arch(ref)
    if found is not None:
        if found != wanted:
            raise EngineUnavailable(f"image {ref} is for {found}, not {wanted}; remove it or pass another tag")
        return ref
    ensure_programs((DEBOOTSTRAP,), say)
    foreign = wanted != host_arch()
    if foreign:
        ensure_emulation(wanted, say)
    duration = "several minutes under emulation" if foreign else "about a minute"
    say(f"creating base image {ref} ({wanted}) with debootstrap ({duration})")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfsmith-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        result = subprocess.run(
            [
                "debootstrap",
                f"--arch={wanted}",
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
            STATE_DIR.mkdir(parents=True, exist_ok=True)
            log_path = STATE_DIR / f"debootstrap-{wanted}.log"
            log_path.write_text(result.stdout + result.stderr, encoding="utf-8")
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
            raise EngineUnavailable(f"debootstrap ({wanted}) failed: {' '.join(tail)}; full log: {log_path}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / cache, ignore_errors=True)
            (rootfs / cache).mkdir(parents=True, exist_ok=True)
        _load_rootfs(rootfs, ref, wanted, Path(tmp) / "layer.tar")
    if image_arch(ref) != wanted:
        raise EngineUnavailable(f"docker load made {ref} for {image_arch(ref)}, not {wanted}")
    say(f"base image {ref} ({wanted}) made in {time.monotonic() - started:.0f} s")
    return ref


def _load_rootfs(rootfs: Path, ref: str, arch: str, layer: Path) -> None:
    """Tar the root filesystem into one layer and `docker load` it as `ref` for `arch` (see rootfs_image)."""
    from builder.engine.rootfs_image import write_archive

    packed = subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(layer), "."],
                            capture_output=True, text=True, check=False)
    if packed.returncode != 0:
        raise EngineUnavailable(f"tar of the root filesystem failed: {packed.stderr.strip()[-300:]}")
    loader = subprocess.Popen(["docker", "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    assert loader.stdin is not None and loader.stdout is not None
    try:
        write_archive(layer, ref, arch, loader.stdin)
    except BrokenPipeError:
        pass  # docker load stopped reading: its own message below says why
    finally:
        loader.stdin.close()
    said = loader.stdout.read().decode("utf-8", "replace").strip()
    if loader.wait() != 0:
        raise EngineUnavailable(f"docker load of {ref} failed: {said.splitlines()[-1] if said else 'no output'}")


def ensure_registry(say: Say = _quiet) -> str:
    """The path of Debian's `docker-registry` program (installed when missing), for a registry on loopback."""
    ensure_programs((REGISTRY,), say)
    path = shutil.which(REGISTRY.program)
    assert path is not None  # ensure_programs raised otherwise
    return path
