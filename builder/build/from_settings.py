"""Settings -> BuildPlan: the one path from what the user asked to what gets built.

Every command that plans — `render`, `build`, `target`, `matrix`, `dockerfiles` — takes its settings from
`builder.build.settings.load_config` (flags > TFSMITH_* environment > tfsmith.toml > defaults) and turns them into
a target and a plan here, so `render --dry-run` and `build --dry-run` can never plan different images from
the same file. The file-system checks the pure planner must not do (hashing a prebuilt wheel, reading a
facts file) happen here too; host detection only where the settings need it.

Which GPUs the image is built for is decided here once, by `builder.targets.choose_cuda`: with nothing
asked, `--target host` on a host with NVIDIA GPUs builds for them (CPU-only when the driver is too old for
this TensorFlow's CUDA, or `--cuda-cc none` / TFSMITH_CUDA_CC=none / `cuda_cc = "none"` says so), and the
`CudaChoice` comes back with the plan so the build can say first what it found and chose.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from builder.build.plan import DEFAULT_TF_VERSION, BuildMachine, BuildOptions, BuildPlan, plan_build
from builder.build.settings import BuildConfig
from builder.digest import sha256_file
from builder.errors import InputError
from builder.target_types import BuildTarget, CudaChoice

_WHEEL_FILE = re.compile(
    r"^(?P<dist>tensorflow(?:_cpu)?)-(?P<version>\d+\.\d+\.\d+(?:rc\d+)?)-cp(?P<py>3\d{1,2})-[^-]+-[^-]+\.whl$"
)


def wheel_facts(wheel: Path) -> tuple[str, str]:
    """(TensorFlow version, Python minor) from a TensorFlow wheel's file name; InputError otherwise."""
    match = _WHEEL_FILE.match(wheel.name)
    if not match:
        raise InputError(
            f"--wheel: {wheel.name} is not a TensorFlow wheel name (tensorflow[_cpu]-X.Y.Z-cpXYZ-...-PLATFORM.whl)"
        )
    py = match.group("py")
    return match.group("version"), f"{py[0]}.{py[1:]}"


def effective_settings(settings: BuildConfig, only: str | None = None) -> BuildConfig:
    """Settings with `--only ID` (a `tfsmith matrix` entry) applied, and TF/Python taken from a --wheel."""
    if only:
        from builder.build.matrix import parse_id

        entry = parse_id(only)
        # a matrix entry names its CUDA capabilities or is CPU-only: never the host's GPUs by default
        settings = replace(settings, target=entry.target, cuda_cc=entry.cuda_cc or "none")
    if settings.wheel is not None:
        wheel_tf, wheel_py = wheel_facts(settings.wheel)
        if settings.tf_version and settings.tf_version != wheel_tf:
            raise InputError(f"--wheel is TensorFlow {wheel_tf} but --tf-version {settings.tf_version} was asked")
        if settings.python and settings.python != wheel_py:
            raise InputError(f"--wheel is for Python {wheel_py} but --python {settings.python} was asked")
        if settings.tf_source:
            raise InputError("--wheel builds from a finished wheel: drop --tf-source")
        settings = replace(settings, tf_version=wheel_tf, python=wheel_py)
    return settings


def resolve_settings(
    settings: BuildConfig, *, host: Any | None = None, facts: Any | None = None
) -> tuple[BuildTarget, CudaChoice]:
    """The BuildTarget the settings name, and the CUDA choice it was resolved with. `facts` (or the settings'
    facts file, or `host`) is what `host` and `--cuda-cc auto` mean; `host` is the build machine (its own safe
    flags for bazel's tools). None means: detect this machine, when needed."""
    from builder.targets import choose_cuda, resolve_target

    if facts is None and settings.facts is not None:
        from builder.hardware import load_facts

        facts = load_facts(settings.facts)
    machine = facts if facts is not None else host
    probes = settings.target.strip().lower() == "host" or (settings.cuda_cc or "").strip().lower() == "auto"
    if machine is None and probes:
        from builder.hardware import detect_host

        machine = detect_host()
    choice = choose_cuda(settings.target, settings.cuda_cc, machine, settings.tf_version or DEFAULT_TF_VERSION)
    kwargs: dict[str, Any] = {"facts": machine, "build_machine": host, "cuda_cc": choice.cuda_cc}
    if settings.tf_version:
        kwargs["tf_version"] = settings.tf_version
    if settings.python:
        kwargs["python"] = settings.python
    return resolve_target(settings.target, **kwargs), choice


def resolve_settings_target(
    settings: BuildConfig, *, host: Any | None = None, facts: Any | None = None
) -> BuildTarget:
    """The BuildTarget the settings name (`resolve_settings` without the CUDA choice)."""
    return resolve_settings(settings, host=host, facts=facts)[0]


def build_options(settings: BuildConfig) -> BuildOptions:
    """BuildOptions from settings, hashing a prebuilt wheel (the only file content a plan depends on)."""
    source_dir, tf_ref = None, None
    if settings.tf_source:
        if Path(settings.tf_source).is_dir():
            source_dir = Path(settings.tf_source)
        else:
            tf_ref = settings.tf_source
    extra: dict[str, Any] = {}
    if settings.toolchain_image:
        extra["toolchain_base_image"] = settings.toolchain_image
    if settings.repository:
        extra["repository"] = settings.repository
    return BuildOptions(
        **extra,
        tf_version=settings.tf_version,
        python=settings.python,
        base_image=settings.base_image,
        tf_ref=tf_ref,
        tf_source_dir=source_dir,
        remote_cache=settings.remote_cache,
        jobs=settings.jobs,
        wheel=settings.wheel,
        wheel_sha256=sha256_file(settings.wheel) if settings.wheel is not None else None,
        ca_bundle=settings.ca_bundle,
        labels=settings.labels,
    )


def plan_with_choice(
    settings: BuildConfig,
    *,
    only: str | None = None,
    host: Any | None = None,
    facts: Any | None = None,
    machine: BuildMachine | None = None,
) -> tuple[BuildPlan, CudaChoice]:
    """The BuildPlan for these settings (and `--only ID`), and the CUDA choice it follows.

    `host`: the build machine's facts (default: detect this machine); `facts`: what `host`/`auto` resolve
    against (default: the settings' facts file, else `host`); `machine`: the cores and memory bazel is sized
    for (default: `host`'s usable ones). The canonical contexts pass a fixed reference machine for both.
    """
    settings = effective_settings(settings, only)
    if host is None:
        from builder.hardware import detect_host

        host = detect_host()
    target, choice = resolve_settings(settings, host=host, facts=facts)
    return plan_build(target, build_options(settings), machine if machine is not None else host), choice


def plan_from_settings(
    settings: BuildConfig,
    *,
    only: str | None = None,
    host: Any | None = None,
    facts: Any | None = None,
    machine: BuildMachine | None = None,
) -> BuildPlan:
    """The BuildPlan for these settings (`plan_with_choice` without the CUDA choice)."""
    return plan_with_choice(settings, only=only, host=host, facts=facts, machine=machine)[0]


# The canonical set in dockerfiles/: (target name, CUDA capabilities or None).
CANONICAL_SET: tuple[tuple[str, str | None], ...] = (
    ("x86-64-v3", None),
    ("x86-64-v4", None),
    ("sapphirerapids", None),
    ("neoverse_v1", None),
    ("x86-64-v3", "8.0,9.0"),
)


def canonical_plans() -> list[tuple[str, BuildPlan]]:
    """(folder name, plan) for every canonical context: default settings (no user file, no environment)
    planned for the fixed reference build machine of the target's architecture, so the result never
    depends on the host or the user that runs it."""
    from archspec.cpu import TARGETS

    from builder.build.plan import REFERENCE_BUILD_MACHINE, reference_build_facts
    from builder.targets import archspec_name

    plans = []
    for name, cuda_cc in CANONICAL_SET:
        reference = reference_build_facts(TARGETS[archspec_name(name)].family.name)
        settings = BuildConfig(target=name, cuda_cc=cuda_cc)
        plan = plan_from_settings(settings, host=reference, machine=REFERENCE_BUILD_MACHINE)
        plans.append((plan.target.tag_token, plan))
    return plans
