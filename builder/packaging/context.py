"""Everything `tfsmith package` writes or fetches, in one place: templates, the server's code, the model,
the server's wheels, kept contexts, and the build itself.

A context is rendered into a temporary folder and only published (`--context`) once complete, so nothing
half-written is ever left behind. The server's wheels are downloaded once per (requirements, Python, CPU) into
a cache folder that is complete or absent, and bind-mounted into the build, so images build offline and fast
(`pip install --no-index`). Dockerfile values go through one escaper, `builder.build.render.dockerfile_string`,
which refuses what it cannot write safely (a newline) rather than changing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import py_compile
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from builder.engine.base import BuildRequest, Engine, Image
from builder.errors import InputError, TfsmithError
from builder.packaging.plan import ServePlan
from builder.model import registry
from builder.model.artifact import Artifact
from builder.staging import staged_dir
from builder.say import Say

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the `builder` package

#: What the server needs in every image: its HTTP front (httptools on uvloop; every route is the server's own route
#: table, no web framework), gRPC on 8500 and metrics, plus the runtime.
SERVER_BASE = ("numpy", "httptools", "uvloop", "grpcio", "protobuf", "prometheus-client", "msgspec",
               "pysimdjson")


def server_requirements(runtime: str, format: str | None = None) -> tuple[str, ...]:
    """The server's distributions for `runtime` reading an artifact of `format` (the registry's: OpenVINO alone
    for its IR, OpenVINO and LiteRT for a .tflite on OpenVINO; TensorFlow comes with a TensorFlow image's base),
    pinned to the versions installed here (what the tests ran)."""
    pins = []
    for name in (*SERVER_BASE, *registry.distributions(runtime, format)):
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            raise InputError(f"{name} is not installed here; install the serve extra: pip install 'tfsmith[serve]'") from None
    return tuple(pins)


# --- templates ------------------------------------------------------------------------------------------


def environment() -> Any:
    """The serving templates (shipped inside the package, so an installed tfsmith finds them too)."""
    from builder.build.render import dockerfile_string
    from builder.template_files import template_environment

    env = template_environment("serve", compact=False)
    env.filters["docker_quote"] = lambda value: f'"{dockerfile_string(str(value))}"'
    return env


#: The slim kinds (a Python base, the server and its runtime's wheels) share one template; others have their own.
TEMPLATES = {"litert": "slim.Dockerfile.j2", "openvino": "slim.Dockerfile.j2"}


def render_dockerfile(plan: ServePlan, template: str | None = None, **extra: Any) -> str:
    name = template or TEMPLATES.get(plan.kind, f"{plan.kind}.Dockerfile.j2")
    return environment().get_template(name).render(plan=plan, **extra)


# --- the server's code, the model and the wheels ------------------------------------------------------

#: What a serving image runs: the server package, the model layer, the measurement package its start-up
#: self-test and sizing time with (standard library only), the wire formats, and the small modules they
#: import (with the package's __init__); nothing else.
SERVER_PACKAGE = "server"
SERVER_PACKAGES = (SERVER_PACKAGE, "model", "measure", "wire")
SERVER_SUPPORT = ("__init__.py", "errors.py", "digest.py", "report.py")


def copy_server_code(dest: Path) -> None:
    """`builder/server`, `builder/model`, `builder/measure` and `builder/wire` plus the few modules they import and the
    stdlib-only guard, as /opt/tfsmith."""
    package = dest / "builder"
    package.mkdir(parents=True, exist_ok=True)
    for name in SERVER_SUPPORT:
        shutil.copy2(PACKAGE_ROOT / name, package / name)
    for folder in SERVER_PACKAGES:
        for source in sorted((PACKAGE_ROOT / folder).rglob("*.py")):  # subpackages too (`builder/server/front/`)
            target = package / source.relative_to(PACKAGE_ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    guard = PACKAGE_ROOT / "guard.py"
    if not guard.is_file():
        raise TfsmithError(f"{guard} is missing: the preflight guard ships with tfsmith (reinstall it)")
    shutil.copy2(guard, dest / "guard.py")


def copy_model(plan: ServePlan, artifact: Artifact, model_dir: Path) -> None:
    """The served model (a .tflite file, OpenVINO's IR: its .xml and .bin, or a SavedModel folder) under its
    in-image name, with its report. The samples stay out: they can be large, and nothing in an image
    calibrates (an int8 model is a file optimize made and judged)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    if artifact.model_path.is_dir():
        shutil.copytree(artifact.model_path, model_dir / plan.model_file)
    else:
        shutil.copy2(artifact.model_path, model_dir / plan.model_file)
    if artifact.ir:  # the weights, beside the graph under the same stem
        shutil.copy2(artifact.model_path.with_suffix(registry.IR_WEIGHTS_SUFFIX),
                     (model_dir / plan.model_file).with_suffix(registry.IR_WEIGHTS_SUFFIX))
    if artifact.report is not None:
        (model_dir / "report.json").write_text(artifact.report.to_json())


def link_wheels(wheels: Path | None, dest: Path) -> None:
    """The downloaded wheels into the context (hard links: they are tens of MB)."""
    dest.mkdir(exist_ok=True)
    if wheels is None:
        return
    for wheel in sorted(wheels.glob("*.whl")):
        _link_or_copy(str(wheel), str(dest / wheel.name))


def render_server_context(plan: ServePlan, artifact: Artifact, dest: Path, wheels: Path | None) -> Path:
    """The build context of an image that runs tfsmith's server (kinds litert and tensorflow):
    Dockerfile, app/ (the server), model/ (the model, report, samples), wheels/; for an image of another CPU
    family than this machine's, site-packages/ instead of wheels/ (`install_on_host`)."""
    dest.mkdir(parents=True, exist_ok=True)
    on_host = (plan.kind in TEMPLATES or plan.kind == "tensorflow") and wheels is not None and foreign(plan.platform)
    compiled = False
    if on_host:
        assert wheels is not None
        compiled = install_on_host(plan.requirements, wheels, plan.python_version, plan.arch, dest / "site-packages")
    (dest / "Dockerfile").write_text(render_dockerfile(plan, site_packages=on_host, compile_site_packages=not compiled))
    copy_server_code(dest / "app")
    copy_model(plan, artifact, dest / "model")
    link_wheels(None if on_host else wheels, dest / "wheels")
    (dest / ".dockerignore").write_text("**/__pycache__\n")
    return dest


def foreign(platform: str, machine: str | None = None) -> bool:
    """Whether an image for `platform` (linux/arm64) would run under emulation on this machine."""
    machine = machine or os.uname().machine
    native = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}
    return native.get(machine) != platform


def install_argv(requirements: tuple[str, ...], wheels: Path, python_version: str, arch: str, dest: Path) -> list[str]:
    """This machine's pip installing `requirements` for another CPU family from the downloaded wheels only:
    binary wheels for that platform and Python, no index, no scripts' compiled bytecode (the image's Python is
    not this one)."""
    arch = "aarch64" if arch == "arm64" else arch
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels),
            "--only-binary=:all:", "--no-compile", "--python-version", python_version, "--implementation", "cp",
            "--abi", f"cp{python_version.replace('.', '')}", "--abi", "abi3", "--abi", "none"]
    for platform in MANYLINUX:
        argv += ["--platform", f"{platform}_{arch}"]
    return [*argv, "--target", str(dest), *requirements]


def install_on_host(requirements: tuple[str, ...], wheels: Path, python_version: str, arch: str, dest: Path) -> bool:
    """The server's packages installed into `dest` (a site-packages folder) by this machine's pip for the image's
    platform, so an image for another CPU family is assembled by COPY: under emulation pip would take minutes to
    unpack the same wheels. Console scripts are dropped (their first line names this machine's Python). When
    this Python is the image's version, the bytecode is compiled here too (hash-checked, so it stays valid
    whatever times COPY gives the files); True then, False when the image must compile it."""
    done = subprocess.run(install_argv(requirements, wheels, python_version, arch, dest), capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or done.stderr.splitlines()
        raise TfsmithError(f"could not install the server's wheels for {arch}: {(lines or ['pip failed'])[0]}")
    shutil.rmtree(dest / "bin", ignore_errors=True)
    if f"{sys.version_info.major}.{sys.version_info.minor}" != python_version:
        return False
    import compileall

    # as pip does when it installs: a file that does not compile (a package's own test data) is left as it is
    compileall.compile_dir(dest, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return True


WHEEL_CACHE = Path.home() / ".cache" / "tfsmith" / "serve-wheels"
MANYLINUX = [f"manylinux_2_{minor}" for minor in range(36, 16, -1)] + ["manylinux2014"]


def fetch_wheels(requirements: tuple[str, ...], python_version: str, arch: str, say: Say) -> Path:
    """The requirements' wheels for the image's Python and CPU, downloaded once into a cache folder."""
    arch = "aarch64" if arch == "arm64" else arch
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
            log = WHEEL_CACHE / f"{key}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(result.stdout + result.stderr)
            lines = ([line for line in result.stderr.splitlines() if line.startswith("ERROR")]
                     or result.stderr.splitlines() or ["pip failed"])
            raise TfsmithError(f"could not download the server's wheels: {lines[0]} (pip's whole output: {log})")
        (tmp / ".complete").write_text("\n".join(requirements))
    return folder


# --- building and publishing --------------------------------------------------------------------------


def build_image(engine: Engine, plan: ServePlan, context: Path, log: Say) -> Image:
    """Build the rendered context for the plan's platform; the engine streams the log and keeps it whole."""
    image = engine.build(BuildRequest(context=context, tags=(plan.tag,), platform=plan.platform), log=log)
    if image is None:
        raise TfsmithError(f"the engine built {plan.tag} but returned no image")
    return image


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
