"""The build plan: everything one TensorFlow image build needs, computed as plain frozen data.

`plan_build(target, options, build_machine)` is a pure function. Rendering (`builder.build.render`), `--dry-run`
output, the image's labels and the build engine all read the same `BuildPlan`, so what a user previews is
exactly what gets built. Nothing here touches the file system, the network or the engine.

Every value that ends up in a Dockerfile, a bazelrc or a shell command is validated here, against a tight
character set, before it can reach a template: a hostile target name, base image, git ref, URL or flag is
refused with an `InputError`, never quoted into place and hoped for the best.

Two digests identify a plan:
- `spec_digest`: sha256 over the canonical image spec (TF version, Python, target, every copt, CUDA,
  toolchain, base images, source, wheel). Build-machine details (jobs, RAM, host-tool flags, remote cache,
  CA bundle) are excluded: they change how fast the image is built, not what is in it.
- `wheel_digest`: the same over the parts that decide the wheel alone (not the runtime base or labels), so a
  change that only touches the runtime stage can reuse a wheel built earlier.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from builder.engine.local import DEFAULT_BASE_IMAGE as LOCAL_BASE_IMAGE  # the build machine's; `<it>-<arch>` others'
from builder.errors import IncompatibleError, InputError
from builder.hardware import reference as _reference
from builder.target_types import BuildTarget

MANIFEST_SCHEMA = 1
DEFAULT_TF_VERSION = "2.21.0"
DEFAULT_PYTHON = "3.12"
DEFAULT_TOOLCHAIN_BASE = "debian:bookworm-slim"
DEFAULT_REPOSITORY = "tfsmith/tensorflow"
DEFAULT_TF_REPO = "https://github.com/tensorflow/tensorflow.git"
WHEEL_TARGET = "//tensorflow/tools/pip_package:wheel"
WHEEL_OUTPUT_DIR = "bazel-bin/tensorflow/tools/pip_package/wheel_house"
RAM_PER_JOB_MB = 2048  # TensorFlow C++ compile actions peak near 2 GB; fewer jobs beat an OOM kill
RAM_HEADROOM = 0.85  # bazel's own JVM and the page cache need the rest
LABEL_PREFIX = "io.tfsmith"
LLVM_PREFIX = "/opt/llvm"  # where the toolchain stage unpacks clang
CLANG_PATH = f"{LLVM_PREFIX}/bin/clang"

# Stage names, in Dockerfile order. `--target wheel` exports the wheel; `runtime` is the image.
STAGE_TOOLCHAIN = "toolchain"
STAGE_SOURCE = "source"
STAGE_BUILD = "build"
STAGE_WHEEL = "wheel"
STAGE_PACKAGES = "packages"
STAGE_RUNTIME = "runtime"
SOURCE_CONTEXT_NAME = "tf-source"  # named build context for `--tf-source DIR`
CA_SECRET_ID = "ca_bundle"

# --- validation: the only characters that may reach a Dockerfile, bazelrc or shell line ----------------
_FLAG = re.compile(r"^-[A-Za-z0-9][A-Za-z0-9_.,+:-]*(?:=[A-Za-z0-9][A-Za-z0-9_.,+:=-]*)?$")  # -name[=value]
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_TF_VERSION = re.compile(r"^\d+\.\d+\.\d+(?:-?rc\d+)?$")
_PYTHON = re.compile(r"^3\.\d{1,2}$")
# Docker reference: [host[:port]/]path[:tag][@sha256:hex], lowercase path components.
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
_REPOSITORY = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*$"
)
_GIT_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_URL = re.compile(r"^(?:https?|grpcs?)://[A-Za-z0-9._~:/@%+=-]+$")  # no shell or bazelrc metacharacters
_LABEL_KEY = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
_SHA256 = re.compile(r"^[a-f0-9]{64}$")
_CUDA_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
_CAPABILITY = re.compile(r"^\d+\.\d+$")
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+-]+\.whl$")


def _check(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value and what == "git ref":
        raise InputError(f"invalid {what} {value!r}: only plain names, versions and flags are accepted")
    return value


def _check_flag(value: str, what: str) -> str:
    if "native" in value:
        raise InputError(f"{what} {value!r} refused: -march=native makes an image that crashes on other CPUs")
    return _check(_FLAG, value, what)


# --- inputs -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BuildOptions:
    """How to build, as the user asked (flags / config file); validated on construction.

    `tf_version` and `python` default to the target's (None = take them from the BuildTarget); when given
    they must agree with it. `base_image` is the runtime base and must provide `python3` with `venv` at the
    same Python minor as the wheel; None means the official slim image `python:<python>-slim-bookworm`
    (pass a local or mirrored image on air-gapped hosts; the test suite passes `tfsmith/python:bookworm`).
    `toolchain_base_image` is the Debian-family image the compiler stages start from.

    Source: `tf_source_dir` (a local checkout, handed to the build as the named build context
    `tf-source`) or `tf_ref` (a git tag, branch or commit of `tf_repo`; default `v<tf_version>`).
    `wheel` + `wheel_sha256` build only the runtime stage from a wheel built elsewhere.
    `ca_bundle` (a PEM file, e.g. a TLS-intercepting proxy's CA) makes every networked RUN step trust the
    BuildKit secret `ca_bundle`; it is never stored in a layer and does not change the spec digest. `jobs` / `local_ram_mb` override what the build machine's resources suggest.
    """

    tf_version: str | None = None
    python: str | None = None
    base_image: str | None = None
    toolchain_base_image: str = DEFAULT_TOOLCHAIN_BASE
    repository: str = DEFAULT_REPOSITORY
    tf_ref: str | None = None
    tf_repo: str = DEFAULT_TF_REPO
    tf_source_dir: Path | None = None
    remote_cache: str | None = None
    jobs: int | None = None
    local_ram_mb: int | None = None
    wheel: Path | None = None
    wheel_sha256: str | None = None
    ca_bundle: Path | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.tf_version is not None:
            _check(_TF_VERSION, self.tf_version, "TensorFlow version")
        if self.python is not None:
            _check(_PYTHON, self.python, "Python version")
        if self.base_image is not None:
            _check(_IMAGE, self.base_image, "base image")
        _check(_IMAGE, self.toolchain_base_image, "toolchain base image")
        _check(_REPOSITORY, self.repository, "image repository")
        if self.tf_ref is not None:
            _check(_GIT_REF, self.tf_ref, "git ref")
        _check(_URL, self.tf_repo, "TensorFlow git URL")
        if self.tf_ref is not None and self.tf_source_dir is not None:
            raise InputError("give either a TensorFlow git ref or a local source directory, not both")
        if self.remote_cache is not None:
            _check(_URL, self.remote_cache, "remote cache URL")
        for number, what in ((self.jobs, "--jobs"), (self.local_ram_mb, "local RAM (MB)")):
            if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
                raise InputError(f"{what} must be a positive whole number, got {number!r}")
        if self.wheel is not None:
            _check(_WHEEL_NAME, Path(self.wheel).name, "wheel file name")
            if self.wheel_sha256 is None:
                raise InputError("a prebuilt wheel needs its sha256 (it identifies the image)")
        if self.wheel_sha256 is not None:
            _check(_SHA256, self.wheel_sha256, "wheel sha256")
        if self.wheel is not None and (self.tf_ref is not None or self.tf_source_dir is not None):
            raise InputError("--wheel builds from a finished wheel: drop --tf-source")
        for key, value in self.labels:
            _check(_LABEL_KEY, key, "label key")
            if not isinstance(value, str) or any(ch in value for ch in "\n\r\0"):
                raise InputError(f"label {key!r}: values must be one line of text")
            if key.startswith(("org.opencontainers.image.", f"{LABEL_PREFIX}.")):
                raise InputError(f"label {key!r} is set by tfsmith itself")


@dataclass(frozen=True)
class BuildMachine:
    """What the build may use: usable cores and memory (cgroup-aware when taken from host facts)."""

    cpus: int
    memory_bytes: int
    name: str = "this host"

    @classmethod
    def from_facts(cls, facts: _HasCpuFacts) -> BuildMachine:
        """From `HostFacts` (builder.hardware): `facts.cpu.usable_cpus`, `facts.cpu.usable_memory_bytes`."""
        cpus = max(1, int(facts.cpu.usable_cpus))
        memory = facts.cpu.usable_memory_bytes
        if not memory:  # unknown: assume the bare minimum per core rather than the host's total
            memory = cpus * RAM_PER_JOB_MB * 1024 * 1024
        gib = memory / 1024**3
        return cls(cpus=cpus, memory_bytes=int(memory), name=f"this host: {cpus} cores, {gib:.0f} GiB usable")


# The fixed, recorded machine the canonical dockerfiles/ are rendered for, so they do not change with
# whichever host runs `make dockerfiles`. A modest CI runner: 16 cores, 64 GiB.
REFERENCE_BUILD_MACHINE = BuildMachine(cpus=_reference.CPUS, memory_bytes=_reference.MEMORY_BYTES,
                                       name=_reference.NAME)


def reference_build_facts(arch: str) -> Any:
    """Host facts of the reference build machine for `arch` (`builder.hardware.reference`, the one
    definition): fixed data, never this host, so `make dockerfiles` gives the same bytes everywhere."""
    return _reference.reference_build_facts(arch)


class _CpuFacts(Protocol):
    usable_cpus: int
    usable_memory_bytes: int | None


class _HasCpuFacts(Protocol):
    cpu: _CpuFacts


@dataclass(frozen=True)
class Download:
    """One pinned download of the toolchain stage. `sha256` None: the Dockerfile requires a build arg."""

    url: str
    sha256: str | None
    arg: str  # build-arg name that carries (or must be given) the checksum


@dataclass(frozen=True)
class Toolchain:
    """The compiler, Bazel and hermetic CUDA that one TensorFlow version is built with (compat table)."""

    tf_version: str
    clang: str
    bazel: str
    cuda: str | None
    cudnn: str | None
    bazel_configs: frozenset[str]
    python_min: str
    python_max: str


@dataclass(frozen=True)
class Resources:
    """Bazel's parallelism, derived from the build machine (or given)."""

    jobs: int
    local_ram_mb: int
    local_cpus: int
    machine: str


# --- the plan ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BuildPlan:
    """One image build, fully resolved. Read by render, `--dry-run`, labels and the build engine."""

    target: BuildTarget
    options: BuildOptions
    toolchain: Toolchain
    resources: Resources
    tf_version: str
    python: str
    runtime_base: str
    wheel_name: str  # distribution name bazel gives the wheel: tensorflow_cpu or tensorflow (CUDA)
    bazel_flags: tuple[str, ...]  # image-defining flags, on the `bazel build` line of the Dockerfile
    bazelrc_lines: tuple[str, ...]  # build-machine tuning, in the context's bazelrc
    downloads: Mapping[str, Download]  # "clang", "bazel" for the target's architecture
    stages: tuple[str, ...]
    source: Mapping[str, str]  # {"kind": "git", "repo": ..., "ref": ...} | {"kind": "dir", "context": ...}
    tag: str
    extra_labels: tuple[tuple[str, str], ...] = field(default=())

    @property
    def image_ref(self) -> str:
        return f"{self.options.repository}:{self.tag}"

    @property
    def from_wheel(self) -> bool:
        return self.options.wheel is not None

    @property
    def wheel_file(self) -> str | None:
        """File name of the prebuilt wheel inside the context (None when compiling)."""
        return Path(self.options.wheel).name if self.options.wheel is not None else None

    @property
    def docker_arch(self) -> str:
        return "arm64" if self.target.arch == "aarch64" else "amd64"

    @property
    def platform(self) -> str:
        """The image's platform, `linux/amd64` or `linux/arm64`: what the engine builds for (under QEMU
        emulation when the build machine is the other architecture) and what the image's config says."""
        return f"linux/{self.docker_arch}"

    @property
    def packages_base(self) -> str:
        """The image the packages stage runs in, on the build machine's own platform (`packages_base_for`)."""
        return packages_base_for(self.runtime_base)

    @property
    def extra_requirements(self) -> tuple[str, ...]:
        """pip requirements installed with the wheel. CUDA targets: `tensorflow[and-cuda]==<version>`, which
        pip satisfies with the wheel itself (given on the same command line) plus the CUDA libraries its
        extra names (cuDNN, cuBLAS, ...). The wheel ships none of them: without the extra, TensorFlow 2.21
        finds no GPU libraries and silently runs on the CPU."""
        return (f"{self.wheel_name}[and-cuda]=={self.tf_version}",) if self.target.cuda is not None else ()

    @property
    def guard_features(self) -> tuple[str, ...]:
        return tuple(sorted(self.target.features))

    @property
    def build_contexts(self) -> dict[str, Path]:
        """Named build contexts the engine must pass (`--build-context NAME=DIR`)."""
        if self.options.tf_source_dir is not None:
            return {SOURCE_CONTEXT_NAME: Path(self.options.tf_source_dir)}
        return {}

    @property
    def secrets(self) -> dict[str, Path]:
        """BuildKit secrets the build needs, id -> the file the engine passes (`--secret id=...,src=...`)."""
        return {CA_SECRET_ID: Path(self.options.ca_bundle)} if self.options.ca_bundle is not None else {}

    @property
    def build_args(self) -> dict[str, str]:
        """Build args the Dockerfile declares with defaults; an engine only passes overrides."""
        return {d.arg: d.sha256 for d in self.downloads.values() if d.sha256 is not None}

    def spec(self) -> dict[str, Any]:
        """What the image is made of: everything that changes its content, nothing about the build machine."""
        cuda = self.target.cuda
        return {
            "schema": MANIFEST_SCHEMA,
            "tensorflow": {"version": self.tf_version, "wheel_name": self.wheel_name},
            "python": self.python,
            "target": {
                "name": self.target.name,
                "arch": self.target.arch,
                "features": list(self.guard_features),
                "copts": list(self.target.copts),
            },
            "cuda": None
            if cuda is None
            else {
                "version": cuda.version,
                "cudnn": cuda.cudnn,
                "capabilities": list(cuda.capabilities),
                "ptx": cuda.ptx,
                "hermetic_compute_capabilities": cuda.hermetic_list,
            },
            "toolchain": None
            if self.from_wheel
            else {
                "compiler": self.target.compiler,
                "clang": self.toolchain.clang,
                "bazel": self.toolchain.bazel,
                "base_image": self.options.toolchain_base_image,
            },
            "source": None if self.from_wheel else dict(self.source),
            "prebuilt_wheel": None
            if not self.from_wheel
            else {"file": self.wheel_file, "sha256": self.options.wheel_sha256},
            "bazel_flags": [] if self.from_wheel else list(self.bazel_flags),
            "runtime_base": self.runtime_base,
            # What the runtime stage adds around the wheel: pip extras and the guard's environment names.
            "runtime": {"pip_extras": list(self.extra_requirements), "guard_env": sorted(self.target.guard_env),
                        "packages": PACKAGES_INSTALL},
            "tag": self.tag,
            "labels": dict(self.extra_labels),
        }

    def build_settings(self) -> dict[str, Any]:
        """How it is built on this machine: excluded from the digests on purpose."""
        return {
            "machine": self.resources.machine,
            "jobs": self.resources.jobs,
            "local_ram_mb": self.resources.local_ram_mb,
            "local_cpus": self.resources.local_cpus,
            "host_copts": list(self.target.host_copts),
            "bazelrc": list(self.bazelrc_lines),
            "remote_cache": self.options.remote_cache,
            "ca_bundle_secret": self.options.ca_bundle is not None,
            "stages": list(self.stages),
            "packages_base": self.packages_base,
            "platform": self.platform,
        }

    @property
    def spec_digest(self) -> str:
        return _digest(self.spec())

    @property
    def wheel_digest(self) -> str:
        """Identity of the wheel alone: the spec minus the runtime base, tag and labels."""
        spec = self.spec()
        for key in ("runtime_base", "runtime", "tag", "labels"):
            spec.pop(key)
        return _digest(spec)

    def manifest(self) -> dict[str, Any]:
        """The fully resolved plan as written to manifest.json."""
        return {
            "spec": self.spec(),
            "spec_digest": self.spec_digest,
            "wheel_digest": self.wheel_digest,
            "image": self.image_ref,
            "build": self.build_settings(),
        }

    def to_json(self) -> str:
        return json.dumps(self.manifest(), indent=2, sort_keys=True) + "\n"

    def labels(self) -> dict[str, str]:
        """OCI and tfsmith labels of the runtime image (the Dockerfile writes them last)."""
        spec_json = json.dumps(self.spec(), sort_keys=True, separators=(",", ":"))
        labels = {
            "org.opencontainers.image.title": "TensorFlow for " + self.target.tag_token,
            # Honest provenance: a prebuilt wheel was compiled elsewhere (its flags are not ours to claim);
            # the image is only guarded for the target.
            "org.opencontainers.image.description": (
                f"TensorFlow {self.tf_version} (Python {self.python}) from prebuilt wheel {self.wheel_file},"
                f" guarded for {self.target.name}"
                if self.from_wheel
                else f"TensorFlow {self.tf_version} (Python {self.python}) built by tfsmith for {self.target.name}"
            ),
            "org.opencontainers.image.version": self.tf_version,
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.base.name": self.runtime_base,
            f"{LABEL_PREFIX}.spec-digest": self.spec_digest,
            f"{LABEL_PREFIX}.wheel-digest": self.wheel_digest,
            f"{LABEL_PREFIX}.target": self.target.name,
            f"{LABEL_PREFIX}.tag": self.tag,
            f"{LABEL_PREFIX}.manifest": spec_json,
        }
        labels.update(dict(self.extra_labels))
        return labels


#: How the runtime's Python packages are put in (part of the spec: a change here changes what images hold).
PACKAGES_INSTALL = "venv made by the build machine's pip for the image's platform, copied in"


def packages_base_for(runtime_base: str) -> str:
    """The packages stage's image: the runtime base itself, pulled or found for the build machine's platform (an
    official Python image has every platform under one name), except tfsmith's local base for another CPU family
    (`tfsmith/python:bookworm-arm64` on an x86 machine), an image of that one platform whose twin for the build
    machine is `tfsmith/python:bookworm`: the same Debian and Python at the same paths."""
    prefix = LOCAL_BASE_IMAGE + "-"
    if runtime_base.startswith(prefix) and runtime_base[len(prefix):] in ("arm64", "amd64"):
        return LOCAL_BASE_IMAGE
    return runtime_base


def _digest(data: Mapping[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


# --- planning ---------------------------------------------------------------------------------------------
def toolchain_for(tf_version: str) -> Toolchain:
    """The compatibility table's row for this TensorFlow version, via `builder.compat`."""
    from builder import compat  # imported when planning: `tfsmith detect` never loads the tables

    row = compat.lookup(tf_version)
    return Toolchain(
        tf_version=row.tf_version,  # the minor version ("2.21"): one toolchain serves every patch release
        clang=str(row.clang),
        bazel=str(row.bazel),
        cuda=getattr(row, "cuda", None),
        cudnn=getattr(row, "cudnn", None),
        bazel_configs=frozenset(row.bazel_configs),
        python_min=str(row.python_min),
        python_max=str(row.python_max),
    )


def resources_for(machine: BuildMachine, options: BuildOptions) -> Resources:
    """Bazel parallelism that fits the machine: ~2 GB per job, never more jobs than usable cores."""
    total_mb = machine.memory_bytes // (1024 * 1024)
    ram_mb = options.local_ram_mb or max(RAM_PER_JOB_MB, int(total_mb * RAM_HEADROOM))
    jobs = options.jobs or max(1, min(machine.cpus, ram_mb // RAM_PER_JOB_MB))
    return Resources(jobs=jobs, local_ram_mb=ram_mb, local_cpus=max(1, machine.cpus), machine=machine.name)


def _validate_target(target: BuildTarget) -> None:
    _check(_TOKEN, target.name, "target name")
    if target.arch not in ("x86_64", "aarch64"):
        raise InputError(f"unsupported architecture {target.arch!r} (x86_64 or aarch64)")
    for feature in target.features:
        _check(_TOKEN, feature, "CPU feature")
    for flag in target.copts:
        _check_flag(flag, "target compiler flag")
    for flag in target.host_copts:
        _check_flag(flag, "host compiler flag")
    _check(_TOKEN, target.compiler, "compiler")
    _check(_TF_VERSION, target.tf_version, "TensorFlow version")
    _check(_PYTHON, target.python, "Python version")
    if target.cuda is not None:
        _check(_CUDA_VERSION, target.cuda.version, "CUDA version")
        _check(_CUDA_VERSION, target.cuda.cudnn, "cuDNN version")
        for cc in (*target.cuda.capabilities, target.cuda.ptx):
            _check(_CAPABILITY, cc, "CUDA capability")
        if not target.cuda.capabilities:
            raise InputError("a CUDA target needs at least one compute capability")


def _check_wheel_fits(file_name: str, python: str, arch: str) -> None:
    """A prebuilt wheel must match the image's Python and CPU family (PEP 427 file name tags)."""
    parts = file_name[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise InputError(f"{file_name!r} is not a wheel file name (name-version-python-abi-platform.whl)")
    python_tag, platform_tag = parts[-3], parts[-1]
    wanted = "cp" + python.replace(".", "")
    if wanted not in python_tag.split("."):
        raise IncompatibleError(
            f"wheel {file_name} is for {python_tag}, the image is for Python {python}: pass --python to match"
        )
    if arch not in platform_tag:
        raise IncompatibleError(f"wheel {file_name} is for {platform_tag}, the target is {arch}")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _bazel_flags(target: BuildTarget, toolchain: Toolchain, python: str, wheel_name: str) -> tuple[str, ...]:
    """The image-defining bazel flags: wheel layout, hermetic Python/CUDA, the target's copts."""
    configs: list[str] = []
    flags = [
        # What TF's ./configure writes for clang, given directly: no `./configure`, no `--config=opt`.
        f"--repo_env=CC={CLANG_PATH}",
        f"--repo_env=BAZEL_COMPILER={CLANG_PATH}",
        f"--action_env=CLANG_COMPILER_PATH={CLANG_PATH}",
        "--repo_env=USE_PYWRAP_RULES=1",
        f"--repo_env=WHEEL_NAME={wheel_name}",
        f"--repo_env=HERMETIC_PYTHON_VERSION={python}",
    ]
    if target.cuda is not None:
        configs += ["cuda", "cuda_wheel"]
        flags += [
            f"--repo_env=HERMETIC_CUDA_VERSION={target.cuda.version}",
            f"--repo_env=HERMETIC_CUDNN_VERSION={target.cuda.cudnn}",
            f"--repo_env=HERMETIC_CUDA_COMPUTE_CAPABILITIES={target.cuda.hermetic_list}",
        ]
    missing = [name for name in configs if name not in toolchain.bazel_configs]
    if missing:
        raise IncompatibleError(
            f"TensorFlow {toolchain.tf_version}'s .bazelrc has no --config={missing[0]}; "
            "this combination cannot be built with that version"
        )
    flags = [f"--config={name}" for name in configs] + flags
    flags += [f"--copt={flag}" for flag in target.copts]
    return tuple(flags)


def _bazelrc_lines(target: BuildTarget, resources: Resources, options: BuildOptions) -> tuple[str, ...]:
    """Build-machine tuning for the context's bazelrc: parallelism, host-tool flags, caches."""
    lines = [
        f"build --jobs={resources.jobs}",
        f"build --local_ram_resources={resources.local_ram_mb}",
        f"build --local_cpu_resources={resources.local_cpus}",
        *(f"build --host_copt={flag}" for flag in target.host_copts),
        "build --disk_cache=/root/.cache/bazel-disk",
        "build --verbose_failures",
        "build --show_timestamps",
        "build --curses=no",
        "build --color=no",
    ]
    if options.remote_cache:
        lines += [f"build --remote_cache={options.remote_cache}", "build --remote_upload_local_results=true"]
    return tuple(lines)


# Pinned sha256 of the upstream release files the toolchain stage downloads, (tool, version, arch) -> hex.
# Each was read from projects that pin the same file (TensorFlow/XLA's own hermetic-toolchain repository
# rules for LLVM 18.1.8; bazel binary tables in build scripts for Bazel). A combination missing here renders
# a Dockerfile that REQUIRES the checksum as a build arg and stops with a clear message without it:
# tfsmith never invents a checksum and never downloads unverified.
PINNED_SHA256: dict[tuple[str, str, str], str] = {
    ("clang", "18.1.8", "x86_64"): "54ec30358afcc9fb8aa74307db3046f5187f9fb89fb37064cdde906e062ebf36",
    ("clang", "18.1.8", "aarch64"): "dcaa1bebbfbb86953fdfbdc7f938800229f75ad26c5c9375ef242edad737d999",
    ("clang", "17.0.6", "aarch64"): "6dd62762285326f223f40b8e4f2864b5c372de3f7de0731cb7cd55ca5287b75a",
    ("bazel", "6.5.0", "x86_64"): "a40ac69263440761199fcb8da47ad4e3f328cbe79ffbf4ecc14e5ba252857307",
    ("bazel", "6.5.0", "aarch64"): "5afe973cadc036496cac66f1414ca9be36881423f576db363d83afc9084c0c2f",
    ("bazel", "7.4.1", "x86_64"): "c97f02133adce63f0c28678ac1f21d65fa8255c80429b588aeeba8a1fac6202b",
    ("bazel", "7.4.1", "aarch64"): "d7aedc8565ed47b6231badb80b09f034e389c5f2b1c2ac2c55406f7c661d8b88",
}


def _clang_url(version: str, arch: str) -> str:
    """LLVM's release tarball name changed over time; these are the names of the 17.x/18.x releases."""
    if arch == "aarch64":
        name = f"clang+llvm-{version}-aarch64-linux-gnu"
    elif _version_tuple(version) >= (18,):
        name = f"clang+llvm-{version}-x86_64-linux-gnu-ubuntu-18.04"
    else:
        name = f"clang+llvm-{version}-x86_64-linux-gnu-ubuntu-22.04"
    return f"https://github.com/llvm/llvm-project/releases/download/llvmorg-{version}/{name}.tar.xz"


def _downloads(toolchain: Toolchain, arch: str) -> dict[str, Download]:
    _check(_TF_VERSION, toolchain.clang, "clang version")
    _check(_TF_VERSION, toolchain.bazel, "bazel version")
    bazel_arch = "arm64" if arch == "aarch64" else "x86_64"
    return {
        "clang": Download(
            url=_clang_url(toolchain.clang, arch),
            sha256=PINNED_SHA256.get(("clang", toolchain.clang, arch)),
            arg="CLANG_SHA256",
        ),
        "bazel": Download(
            url=(
                f"https://github.com/bazelbuild/bazel/releases/download/{toolchain.bazel}/"
                f"bazel-{toolchain.bazel}-linux-{bazel_arch}"
            ),
            sha256=PINNED_SHA256.get(("bazel", toolchain.bazel, arch)),
            arg="BAZEL_SHA256",
        ),
    }


def plan_build(
    target: BuildTarget,
    options: BuildOptions | None = None,
    build_machine: BuildMachine | _HasCpuFacts | None = None,
    *,
    toolchain: Toolchain | None = None,
) -> BuildPlan:
    """Resolve one build: validate everything, pick toolchain and flags, size bazel for the machine.

    `build_machine`: a `BuildMachine`, host facts (anything with `.cpu.usable_cpus` and
    `.cpu.usable_memory_bytes`), or None for the fixed `REFERENCE_BUILD_MACHINE`. `toolchain` defaults to
    the compatibility table's row for the TF version (tests may pass one).
    """
    options = options or BuildOptions()
    _validate_target(target)
    tf_version = options.tf_version or target.tf_version
    python = options.python or target.python
    if tf_version != target.tf_version:
        raise InputError(f"TensorFlow {tf_version} asked, but the target was resolved for {target.tf_version}")
    if python != target.python:
        raise InputError(f"Python {python} asked, but the target was resolved for Python {target.python}")
    toolchain = toolchain or toolchain_for(tf_version)
    if not (_version_tuple(toolchain.python_min) <= _version_tuple(python) <= _version_tuple(toolchain.python_max)):
        raise IncompatibleError(
            f"TensorFlow {tf_version} supports Python {toolchain.python_min}–{toolchain.python_max}, not {python}"
        )
    if target.compiler != "clang":
        raise IncompatibleError(f"TensorFlow {tf_version} is built with clang, not {target.compiler}")
    build_arch = getattr(getattr(build_machine, "cpu", None), "arch", None)
    if build_arch in ("x86_64", "aarch64") and build_arch != target.arch:
        # Built for another architecture, every build step (bazel's host tools included) runs under emulation
        # as the target's architecture: the build machine's own host flags would not even compile there.
        from builder.targets import host_copts

        target = replace(target, host_copts=host_copts(reference_build_facts(target.arch), toolchain.clang))
    if isinstance(build_machine, BuildMachine):
        machine = build_machine
    elif build_machine is None:
        machine = REFERENCE_BUILD_MACHINE
    else:
        machine = BuildMachine.from_facts(build_machine)
    if options.wheel is not None:
        _check_wheel_fits(Path(options.wheel).name, python, target.arch)
        if target.cuda is not None and Path(options.wheel).name.startswith("tensorflow_cpu-"):
            raise IncompatibleError(
                f"--wheel {Path(options.wheel).name} is CPU-only and cannot use a GPU: a --cuda-cc image needs the "
                "`tensorflow` wheel (e.g. `pip download tensorflow --no-deps`)"
            )
    resources = resources_for(machine, options)
    wheel_name = "tensorflow" if target.cuda is not None else "tensorflow_cpu"
    runtime_base = options.base_image or f"python:{python}-slim-bookworm"
    if options.wheel is not None:
        stages: tuple[str, ...] = (STAGE_PACKAGES, STAGE_RUNTIME)
        source: dict[str, str] = {"kind": "wheel"}
    else:
        stages = (STAGE_TOOLCHAIN, STAGE_SOURCE, STAGE_BUILD, STAGE_WHEEL, STAGE_PACKAGES, STAGE_RUNTIME)
        if options.tf_source_dir is not None:
            source = {"kind": "dir", "context": SOURCE_CONTEXT_NAME}
        else:
            source = {"kind": "git", "repo": options.tf_repo, "ref": options.tf_ref or f"v{tf_version}"}
    tag = _check(_TOKEN, f"tf{tf_version}-py{python}-{target.tag_token}", "image tag")
    return BuildPlan(
        target=target,
        options=options,
        toolchain=toolchain,
        resources=resources,
        tf_version=tf_version,
        python=python,
        runtime_base=runtime_base,
        wheel_name=wheel_name,
        bazel_flags=_bazel_flags(target, toolchain, python, wheel_name),
        bazelrc_lines=_bazelrc_lines(target, resources, options),
        downloads=_downloads(toolchain, target.arch),
        stages=stages,
        source=source,
        tag=tag,
        extra_labels=tuple(sorted(options.labels)),
    )
