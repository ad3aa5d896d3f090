"""Settings -> BuildPlan: the one path from what the user asked to what gets built.

Every command that plans — `render`, `build`, `target`, `matrix`, `dockerfiles` — takes its settings from
`builder.build.settings.load_config` (flags > TFSMITH_* environment > tfsmith.toml > defaults) and turns them into
a target and a plan here, so `render --dry-run` and `build --dry-run` can never plan different images from
the same file. The file-system checks the pure planner must not do (hashing a prebuilt wheel, reading a
facts file) happen here too; host detection only where the settings need it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from builder.build.plan import BuildMachine, BuildOptions, BuildPlan, plan_build
from builder.build.settings import BuildConfig
from builder.digest import sha256_file
from builder.errors import InputError
from builder.target_types import BuildTarget

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
        settings = replace(settings, target=entry.target, cuda_cc=entry.cuda_cc or None)
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


def resolve_settings_target(
    settings: BuildConfig, *, host: Any | None = None, facts: Any | None = None
) -> BuildTarget:
    """The BuildTarget the settings name. `facts` (or the settings' facts file, or `host`) is what `host`
    and `--cuda-cc auto` mean; `host` is the build machine (its own safe flags for bazel's tools).
    None means: detect this machine, when needed."""
    from builder.targets import resolve_target

    if facts is None and settings.facts is not None:
        from builder.hardware import load_facts

        facts = load_facts(settings.facts)
    kwargs: dict[str, Any] = {"facts": facts if facts is not None else host, "build_machine": host}
    if settings.cuda_cc and settings.cuda_cc != "none":
        kwargs["cuda_cc"] = settings.cuda_cc
    if settings.tf_version:
        kwargs["tf_version"] = settings.tf_version
    if settings.python:
        kwargs["python"] = settings.python
    return resolve_target(settings.target, **kwargs)


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


def plan_from_settings(
    settings: BuildConfig,
    *,
    only: str | None = None,
    host: Any | None = None,
    facts: Any | None = None,
    machine: BuildMachine | None = None,
) -> BuildPlan:
    """The BuildPlan for these settings (and `--only ID`).

    `host`: the build machine's facts (default: detect this machine); `facts`: what `host`/`auto` resolve
    against (default: the settings' facts file, else `host`); `machine`: the cores and memory bazel is sized
    for (default: `host`'s usable ones). The canonical contexts pass a fixed reference machine for both.
    """
    settings = effective_settings(settings, only)
    if host is None:
        from builder.hardware import detect_host

        host = detect_host()
    target = resolve_settings_target(settings, host=host, facts=facts)
    return plan_build(target, build_options(settings), machine if machine is not None else host)


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
