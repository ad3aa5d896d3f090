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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import builder.engine.emulation as emulation
from builder.engine.base import EngineUnavailable
from builder.engine.foreign_rootfs import finish_second_stage, first_stage_packages, not_repeated
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
#: Host tools that finish another architecture's root filesystem (`foreign_rootfs`); a bare Debian machine has
#: them (so they are not in REQUIREMENTS), they are checked all the same.
FOREIGN_ROOTFS = (
    Requirement("openssl", "openssl", "hashes the CA certificates of another architecture's base image"),
    Requirement("pam-auth-update", "libpam-runtime", "writes /etc/pam.d/common-* of another architecture's base image"),
)
REGISTRY = Requirement("docker-registry", "docker-registry", "a local registry to push to and pull from")
#: Everything beyond a bare Debian machine that tfsmith's engine set-up and its test suite run. (QEMU is not
#: here: Debian's own is too old for LiteRT; `ensure_qemu` fetches trixie's without installing it.)
REQUIREMENTS: tuple[Requirement, ...] = (ENGINE, BUILDKIT_CLI, DEBOOTSTRAP, REGISTRY)
#: Where trixie's qemu-aarch64 is kept (its private apt state beside it): one 16 MB static binary.
QEMU_DIR = STATE_DIR / "qemu"
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


def engine_socket(env: Mapping[str, str] = os.environ) -> Path | None:
    """The unix socket the engine is reached on: DOCKER_HOST's when it names one (`unix:///path`), the default
    socket when DOCKER_HOST is unset; None for an engine elsewhere (tcp://, ssh://), which only its CLI can ask."""
    host = env.get("DOCKER_HOST", "")
    if not host:
        return DOCKER_SOCKET
    return Path(host.removeprefix("unix://")) if host.startswith("unix://") else None


def engine_answers(docker_cli: str = "docker") -> bool:
    """True when a daemon answers where the CLI looks (DOCKER_HOST or the default socket; a few ms)."""
    socket = engine_socket()
    if (socket is not None and not socket.exists()) or shutil.which(docker_cli) is None:
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
    """Make sure a Docker daemon answers on /var/run/docker.sock (or DOCKER_HOST), starting (and installing) one
    on the default socket if needed. An engine DOCKER_HOST names is the user's: it is used, never started."""
    if engine_answers():
        return
    if os.environ.get("DOCKER_HOST"):
        raise EngineUnavailable(
            f"no Docker engine answers at DOCKER_HOST={os.environ['DOCKER_HOST']}; start that engine, or unset "
            "DOCKER_HOST to have one started on the default socket"
        )
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

    Fetches a QEMU new enough for what tfsmith ships (`ensure_qemu`), mounts binfmt_misc where it is not
    mounted, registers `qemu-aarch64` with the F flag (replacing an entry that lacks F or runs an older QEMU,
    such as bookworm's 7.2), then proves it by running a tiny arm64 program. Every step needs root, as
    `ensure_engine` does; nothing is done twice: a ready entry is left alone.
    """
    wanted = docker_arch(arch)
    if wanted == host_arch():
        return
    if wanted != "arm64":
        raise EngineUnavailable(f"tfsmith emulates arm64 on x86 hosts only, not {wanted} on {host_arch()}")
    entry_file = emulation.entry_path(wanted)
    if _entry_ready(entry_file) and _probe_runs():
        return
    interpreter = ensure_qemu(say)
    if not (emulation.BINFMT_DIR / "register").exists():
        say(f"mounting binfmt_misc on {emulation.BINFMT_DIR}")
        _root(["mount", "-t", "binfmt_misc", "binfmt_misc", str(emulation.BINFMT_DIR)], "mount binfmt_misc")
    if entry_file.exists():
        old = emulation.parse_entry(entry_file.read_text())
        say(f"replacing {entry_file.name} ({old.interpreter or '?'}, flags {old.flags or '-'}) with {interpreter}")
        _write_root(entry_file, "-1", f"remove {entry_file}")  # the kernel's way to remove an entry
    say(f"registering {interpreter} for arm64 programs with binfmt_misc (flag F)")
    _write_root(emulation.BINFMT_DIR / "register", emulation.register_line(str(interpreter)), "register qemu-aarch64")
    state = emulation.parse_entry(entry_file.read_text()) if entry_file.exists() else None
    if state is None or not state.enabled or not state.fixed:
        raise EngineUnavailable(
            f"{entry_file} is {'missing' if state is None else f'flags {state.flags!r}'} after registering it; "
            "arm64 containers need it enabled with the F flag"
        )
    if not _probe_runs():
        raise EngineUnavailable(f"{entry_file.name} is registered but an arm64 program still does not run here")
    say(f"arm64 emulation ready ({state.interpreter}, flags {state.flags})")


def ensure_qemu(say: Say = _quiet) -> Path:
    """A static qemu-aarch64 at least `emulation.MIN_QEMU` (Debian trixie's), fetched once into QEMU_DIR.

    Only this one binary is taken: `apt-get download` through a private sources file naming trixie (its own
    lists and cache; the system's sources and installed packages are untouched), then `dpkg-deb` extracts
    /usr/bin/qemu-aarch64, a static-pie binary that runs on bookworm. Needs root only to be registered."""
    binary = QEMU_DIR / "qemu-aarch64"
    if _qemu_version(str(binary)) >= emulation.MIN_QEMU:
        return binary
    for program in ("apt-get", "dpkg-deb"):
        if shutil.which(program) is None:
            raise EngineUnavailable(
                f"{program} is missing: arm64 emulation needs QEMU >= {'.'.join(map(str, emulation.MIN_QEMU))} "
                f"(Debian {emulation.QEMU_SUITE}'s {emulation.QEMU_PACKAGE}); install it by hand, then retry"
            )
    state = QEMU_DIR / "apt"
    for directory in (state / "lists" / "partial", state / "cache" / "archives" / "partial", QEMU_DIR / "deb"):
        directory.mkdir(parents=True, exist_ok=True)
    (state / "sources.list").write_text(emulation.sources_list(DEBIAN_MIRROR), encoding="utf-8")
    options = emulation.apt_options(state)
    say(f"fetching {emulation.QEMU_PACKAGE} from Debian {emulation.QEMU_SUITE} (a QEMU that runs LiteRT; the system is not upgraded)")
    _run_apt([*options, "-q", "update"], QEMU_DIR, f"apt-get update ({emulation.QEMU_SUITE} only)")
    for old in (QEMU_DIR / "deb").glob("*.deb"):
        old.unlink()
    _run_apt([*options, "-q", "download", emulation.QEMU_PACKAGE], QEMU_DIR / "deb", f"apt-get download {emulation.QEMU_PACKAGE}")
    debs = sorted((QEMU_DIR / "deb").glob("*.deb"))
    if not debs:
        raise EngineUnavailable(f"apt-get download {emulation.QEMU_PACKAGE} wrote no package into {QEMU_DIR / 'deb'}")
    _extract(debs[-1], "./usr/bin/qemu-aarch64", binary)
    for deb in debs:
        deb.unlink()
    version = _qemu_version(str(binary))
    if version < emulation.MIN_QEMU:
        raise EngineUnavailable(
            f"{binary} from {emulation.QEMU_SUITE}'s {emulation.QEMU_PACKAGE} is QEMU {'.'.join(map(str, version))}, "
            f"older than {'.'.join(map(str, emulation.MIN_QEMU))}"
        )
    say(f"QEMU {'.'.join(map(str, version))} ready at {binary}")
    return binary


def _run_apt(args: list[str], cwd: Path, what: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(["apt-get", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise EngineUnavailable(f"{what} failed: {' '.join(tail) or f'exit {result.returncode}'}")


def _extract(deb: Path, member: str, dest: Path) -> None:
    """One file of a .deb, through `dpkg-deb --fsys-tarfile` (the whole package is ~450 MB unpacked)."""
    import tarfile

    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for info in tar:
                if info.name == member and info.isfile():
                    handle = tar.extractfile(info)
                    assert handle is not None
                    partial = dest.with_suffix(".partial")
                    partial.write_bytes(handle.read())
                    partial.chmod(0o755)
                    partial.replace(dest)
                    break
        proc.stdout.read()  # let dpkg-deb finish writing
    if not dest.exists():
        raise EngineUnavailable(f"{deb.name} has no {member.lstrip('.')}")


def _qemu_version(binary: str) -> tuple[int, int]:
    """QEMU's version as (major, minor); (0, 0) when the binary is missing or says something else."""
    return _qemu_version_cached(binary, _mtime(binary))


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return -1.0


@cache
def _qemu_version_cached(binary: str, _mtime: float) -> tuple[int, int]:
    if _mtime < 0:
        return (0, 0)
    try:
        ran = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return (0, 0)
    return emulation.parse_qemu_version(ran.stdout) or (0, 0)


def _entry_ready(entry_file: Path) -> bool:
    """Registered, enabled, with F, and its interpreter a QEMU new enough for what tfsmith ships."""
    try:
        state = emulation.parse_entry(entry_file.read_text())
    except OSError:
        return False
    return state.enabled and state.fixed and _qemu_version(state.interpreter) >= emulation.MIN_QEMU


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


def _write_root(path: Path, text: str, what: str) -> None:
    """Write to a kernel control file (binfmt_misc): root only, one clear line when refused."""
    if os.geteuid() != 0:
        raise EngineUnavailable(f"{what} needs root; run it as root (or ask an administrator), then retry")
    try:
        path.write_text(text)
    except OSError as error:
        raise EngineUnavailable(f"{what} failed: {error.strerror}") from None


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
    image architecture set, so BuildKit takes it for `--platform linux/<arch>` builds. Another architecture's
    root filesystem is not configured under QEMU: debootstrap's first stage (`--foreign`) fetches and unpacks,
    and `foreign_rootfs.finish_second_stage` does the rest with the host's tools (the arm64 image in 31 s on
    an x86 host, against 188 s with the second stage emulated; both cold); only its `ldconfig` runs emulated, which is
    why emulation is made ready first.
    """
    wanted = docker_arch(arch) if arch else host_arch()
    ref = ref or base_image_ref(wanted)
    found = image_arch(ref)
    if found is not None:
        if found != wanted:
            raise EngineUnavailable(f"image {ref} is for {found}, not {wanted}; remove it or pass another tag")
        return ref
    foreign = wanted != host_arch()
    ensure_programs((DEBOOTSTRAP, *(FOREIGN_ROOTFS if foreign else ())), say)
    if foreign:
        ensure_emulation(wanted, say)
    how = "debootstrap --foreign, configured on this machine" if foreign else "debootstrap"
    say(f"creating base image {ref} ({wanted}) with {how} (about a minute)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfsmith-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        result = subprocess.run(
            [
                "debootstrap",
                f"--arch={wanted}",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                *(["--foreign"] if foreign else []),
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise _debootstrap_failed(result, wanted, "debootstrap")
        if foreign:
            _second_stage(rootfs, wanted, say)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / cache, ignore_errors=True)
            (rootfs / cache).mkdir(parents=True, exist_ok=True)
        _load_rootfs(rootfs, ref, wanted, Path(tmp) / "layer.tar")
    if image_arch(ref) != wanted:
        raise EngineUnavailable(f"docker load made {ref} for {image_arch(ref)}, not {wanted}")
    say(f"base image {ref} ({wanted}) made in {time.monotonic() - started:.0f} s")
    return ref


def _second_stage(rootfs: Path, arch: str, say: Say) -> None:
    """Finish a `debootstrap --foreign` root filesystem: on the host when every maintainer script in it is one
    `foreign_rootfs` repeats, else (another package set, a new Debian point release) as debootstrap does it,
    emulated, rather than guess what an unread script does."""
    packages = first_stage_packages(rootfs)
    unknown = not_repeated(packages)
    if not unknown:
        finish_second_stage(rootfs, packages)
        return
    say(f"maintainer scripts of {', '.join(unknown)} are not repeated on this machine: running debootstrap's "
        "second stage under emulation (several minutes)")
    result = subprocess.run(["chroot", str(rootfs), "/debootstrap/debootstrap", "--second-stage"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise _debootstrap_failed(result, arch, "debootstrap --second-stage")


def _debootstrap_failed(result: subprocess.CompletedProcess[str], arch: str, what: str) -> EngineUnavailable:
    """One line for a debootstrap stage that failed: its last line, and its whole output in a log it names."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    log_path = STATE_DIR / f"debootstrap-{arch}.log"
    log_path.write_text(result.stdout + result.stderr, encoding="utf-8")
    tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
    return EngineUnavailable(f"{what} ({arch}) failed: {' '.join(tail)}; full log: {log_path}")


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
