"""`tfsmith package`: a ServePlan (plain data) -> a rendered build context -> an image built on the Engine.

The plan is computed without I/O from the artifact, the options and the target, so what an image will hold
(base, labels, command, wheels) is testable without Docker. Rendering writes a self-contained context: the
Dockerfile, the server code (`builder/server` plus the stdlib-only preflight guard), the model and the
server's wheels, so the image builds offline and fast (`pip install --no-index`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from builder.engine.base import Engine, Image
from builder.errors import InputError, TfsmithError
from builder.staging import staged_dir
from builder.server.artifacts import Artifact

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the `builder` package
DEFAULT_BASE_IMAGE = "tfsmith/python:bookworm"
DEFAULT_TFSERVING_BASE = "tensorflow/serving:2.19.0"
PACKAGE_RUNTIMES = ("litert", "tfserving")
#: What the server needs in every image: the runtime, REST (FastAPI on uvicorn), gRPC on 8500 and metrics.
SERVER_BASE = ("ai-edge-litert", "numpy", "fastapi", "uvicorn", "httptools", "uvloop", "grpcio", "protobuf",
               "prometheus-client")
SERVER_DISTRIBUTIONS = {
    "litert": SERVER_BASE,
    "openvino": (*SERVER_BASE, "openvino"),
    # nncf (and its dependencies) only in images that quantize at start: it is big
    "openvino-nncf": (*SERVER_BASE, "openvino", "nncf"),
}
LABEL_PREFIX = "io.tfsmith"
GRPC_PORT = 8500

Say = Callable[[str], None]


@dataclass(frozen=True)
class PackageOptions:
    """What the user asked for (flags of `tfsmith package`)."""

    runtime: str = "litert"  # image kind: litert | tfserving
    #: inside a litert image: litert | openvino | openvino-nncf | auto; None = what optimize measured fastest
    #: for the chosen file (report.json `chosen_runtime`), else litert
    server_runtime: str | None = None
    target: str | None = None
    base_image: str | None = None
    tag: str | None = None
    version: int = 1
    port: int = 8501
    workers: int = 2
    threads: int = 1
    max_batch: int = 1
    batch_timeout_us: int = 0


@dataclass(frozen=True)
class ServePlan:
    """Everything one serving image is; rendered into a context by `render_context`."""

    runtime: str
    model_name: str
    version: int
    model_sha256: str
    summary: str
    base_image: str
    tag: str
    target_name: str
    target_features: tuple[str, ...]
    target_copts: tuple[str, ...]
    server_runtime: str
    runtime_reason: str
    port: int
    workers: int
    threads: int
    max_batch: int
    batch_timeout_us: int
    requirements: tuple[str, ...] = ()
    python_version: str = "3.11"
    arch: str = "x86_64"
    model_file: str = "model.tflite"
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def grpc_port(self) -> int:
        """TensorFlow Serving's gRPC port, which its clients expect."""
        return GRPC_PORT

    @property
    def model_dir(self) -> str:
        return f"/models/{self.model_name}/{self.version}"

    @property
    def command(self) -> list[str]:
        """The server's arguments (the image's CMD; the guard and the interpreter are the ENTRYPOINT)."""
        from builder.server.options import to_argv

        return [f"{self.model_dir}/{self.model_file}", *to_argv({
            "host": "0.0.0.0", "port": self.port, "grpc_port": self.grpc_port, "model_name": self.model_name,
            "model_version": self.version,
            "runtime": self.server_runtime, "workers": self.workers, "threads": self.threads,
            "max_batch": self.max_batch, "batch_timeout_us": self.batch_timeout_us,
        })]

    @property
    def labels(self) -> dict[str, str]:
        """Image labels: what the image serves, for whom, and why this runtime."""
        labels = {
            "org.opencontainers.image.title": f"{self.model_name} ({self.runtime} serving)",
            f"{LABEL_PREFIX}.kind": f"serve-{self.runtime}",
            f"{LABEL_PREFIX}.model.name": self.model_name,
            f"{LABEL_PREFIX}.model.version": str(self.version),
            f"{LABEL_PREFIX}.model.sha256": self.model_sha256,
            f"{LABEL_PREFIX}.report.summary": self.summary,
            f"{LABEL_PREFIX}.target": self.target_name,
            f"{LABEL_PREFIX}.runtime": self.server_runtime,
            f"{LABEL_PREFIX}.runtime.reason": self.runtime_reason,
        }
        labels.update(self.extra_labels)
        return labels


def plan_package(
    artifact: Artifact,
    options: PackageOptions,
    *,
    target: Any | None = None,
    server_runtime: str = "litert",
    runtime_reason: str = "requested",
    requirements: tuple[str, ...] = (),
    python_version: str = "3.11",
) -> ServePlan:
    """The plan for one image; pure (the model's digest is read from the artifact)."""
    if options.runtime not in PACKAGE_RUNTIMES:
        raise InputError(f"unknown package runtime {options.runtime!r}; choose litert or tfserving")
    if not 1 <= options.port <= 65535:
        raise InputError(f"--port {options.port}: not a TCP port")
    digest = artifact.sha256
    base = options.base_image or (DEFAULT_TFSERVING_BASE if options.runtime == "tfserving" else DEFAULT_BASE_IMAGE)
    tag = options.tag or f"tfsmith/serve-{artifact.name.lower()}:{options.runtime}-{digest[:12]}"
    return ServePlan(
        runtime=options.runtime,
        model_name=artifact.name,
        version=options.version,
        model_sha256=digest,
        summary=artifact.summary(),
        base_image=base,
        tag=tag,
        target_name=getattr(target, "name", None) or "any",
        target_features=tuple(sorted(getattr(target, "features", ()) or ())),
        target_copts=tuple(getattr(target, "copts", ()) or ()),
        server_runtime=server_runtime,
        runtime_reason=runtime_reason,
        port=options.port if options.runtime == "litert" else 8501,
        workers=options.workers,
        threads=options.threads,
        max_batch=options.max_batch,
        batch_timeout_us=options.batch_timeout_us,
        requirements=requirements,
        python_version=python_version,
        arch=getattr(target, "arch", None) or "x86_64",
    )


def pinned_requirements(server_runtime: str) -> tuple[str, ...]:
    """The server's distributions pinned to the versions installed here (what the tests ran against)."""
    pins = []
    for name in SERVER_DISTRIBUTIONS.get(server_runtime, SERVER_DISTRIBUTIONS["litert"]):
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            raise InputError(f"{name} is not installed here; install the serve extra: pip install 'tfsmith[serve]'") from None
    return tuple(pins)


# --- rendering ------------------------------------------------------------------------------------------


def _docker_quote(value: object) -> str:
    """A double-quoted Dockerfile word (LABEL/ENV values): backslash, quote, dollar and newlines escaped."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("\n", " ")
    return f'"{text}"'


def environment() -> Any:
    """The serving templates (shipped inside the package, so an installed tfsmith finds them too)."""
    from builder.resources import template_environment

    env = template_environment("serve", compact=False)
    env.filters["docker_quote"] = _docker_quote
    return env


def render_dockerfile(plan: ServePlan, template: str | None = None, **extra: Any) -> str:
    name = template or f"{plan.runtime}.Dockerfile.j2"
    return environment().get_template(name).render(plan=plan, **extra)


#: What a serving image runs: the server package and the small standard-library modules it imports (with the
#: package's __init__), nothing else of tfsmith.
SERVER_PACKAGE = "server"
SERVER_SUPPORT = ("__init__.py", "errors.py", "digest.py", "report.py")


def copy_server_code(dest: Path) -> None:
    """`builder/server` plus the few modules it imports and the stdlib-only guard, as /opt/tfsmith."""
    package = dest / "builder"
    (package / SERVER_PACKAGE).mkdir(parents=True, exist_ok=True)
    for name in SERVER_SUPPORT:
        shutil.copy2(PACKAGE_ROOT / name, package / name)
    for source in sorted((PACKAGE_ROOT / SERVER_PACKAGE).glob("*.py")):
        shutil.copy2(source, package / SERVER_PACKAGE / source.name)
    guard = PACKAGE_ROOT / "guard.py"
    if not guard.is_file():
        raise TfsmithError(f"{guard} is missing: the preflight guard ships with tfsmith (reinstall it)")
    shutil.copy2(guard, dest / "guard.py")


def render_context(plan: ServePlan, artifact: Artifact, dest: Path, wheels: Path | None) -> Path:
    """Write the litert build context into `dest` (Dockerfile, app/, model/, wheels/)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "Dockerfile").write_text(render_dockerfile(plan))
    copy_server_code(dest / "app")
    model_dir = dest / "model"
    model_dir.mkdir(exist_ok=True)
    shutil.copy2(artifact.model_path, model_dir / plan.model_file)
    if artifact.report is not None:
        (model_dir / "report.json").write_text(artifact.report.to_json())
    if plan.server_runtime == "openvino-nncf":
        if artifact.samples_path is None:
            raise InputError("runtime openvino-nncf needs the calibration samples in the image; the artifact has none")
        # the server quantizes at start from these, found beside the model as the report names them
        shutil.copy2(artifact.samples_path, model_dir / artifact.samples_path.name)
    (dest / "wheels").mkdir(exist_ok=True)
    if wheels is not None:
        for wheel in sorted(wheels.glob("*.whl")):
            target = dest / "wheels" / wheel.name
            try:
                target.hardlink_to(wheel)
            except OSError:
                shutil.copy2(wheel, target)
    (dest / ".dockerignore").write_text("**/__pycache__\n")
    return dest


# --- wheels ---------------------------------------------------------------------------------------------

WHEEL_CACHE = Path.home() / ".cache" / "tfsmith" / "serve-wheels"
MANYLINUX = [f"manylinux_2_{minor}" for minor in range(36, 16, -1)] + ["manylinux2014"]


def fetch_wheels(requirements: tuple[str, ...], python_version: str, arch: str, say: Say) -> Path:
    """The requirements' wheels for the image's Python and CPU, downloaded once into a cache folder."""
    key = hashlib.sha256(json.dumps([requirements, python_version, arch]).encode()).hexdigest()[:16]
    folder = WHEEL_CACHE / key
    if (folder / ".complete").exists():
        return folder
    say(f"downloading server wheels for Python {python_version} {arch} into {folder}")
    argv = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp",
            "--abi", f"cp{python_version.replace('.', '')}", "--abi", "abi3", "--abi", "none"]
    for platform in MANYLINUX:
        argv += ["--platform", f"{platform}_{arch}"]
    with staged_dir(folder) as tmp:  # a cache folder is complete or absent, never half-downloaded
        result = subprocess.run([*argv, "--dest", str(tmp), *requirements], capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            lines = ([line for line in result.stderr.splitlines() if line.startswith("ERROR")]
                     or result.stderr.splitlines())
            raise TfsmithError(f"could not download the server's wheels: {(lines or ['pip failed'])[-1]}")
        (tmp / ".complete").write_text("\n".join(requirements))
    return folder


# --- engine ---------------------------------------------------------------------------------------------


def default_engine() -> Engine:
    """The Docker engine (issue 4's DockerEngine); one place to swap it."""
    from builder.engine.docker import DockerEngine

    return DockerEngine()


def base_python_version(engine: Engine, base_image: str) -> str:
    """The base image's python3 version (`3.11`), which decides the wheels; one clear error without one."""
    from builder.engine.base import ImageNotFound

    try:
        engine.inspect(base_image)
    except ImageNotFound:
        raise InputError(f"base image {base_image} is not on this engine (tfsmith never pulls; build or load it)") from None
    code, output = engine.run(
        base_image, ["-c", "import sys; print('%d.%d' % sys.version_info[:2])"], entrypoint=["python3"], timeout=60
    )
    version = output.strip().splitlines()[-1] if output.strip() else ""
    if code != 0 or not version[:1].isdigit():
        raise InputError(f"base image {base_image} has no working python3 (exit {code}): {output.strip()[:200]}")
    return version


def build_image(engine: Engine, plan: ServePlan, context: Path, log: Say) -> Image | None:
    from builder.engine.base import BuildRequest

    return engine.build(BuildRequest(context=context, tags=(plan.tag,)), log=log)


# --- placing finished folders ---------------------------------------------------------------------


def _link_or_copy(source: str, dest: str) -> None:
    """Hard-link where possible (the wheels are tens of MB), copy across file systems."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def publish_folder(source: Path, dest: Path) -> None:
    """Copy a finished folder into place, never half-written (the one staging helper does the swap)."""
    with staged_dir(Path(dest).resolve()) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True, copy_function=_link_or_copy)
