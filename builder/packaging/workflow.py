"""The `tfsmith package` workflow: artifact -> plan -> context -> image -> smoke test, said step by step.

I/O lives here (engine, wheel downloads, temp folders); the decisions live in `package.plan_package` and
`tfserving.plan_layout`. The context is rendered into a temp folder and only copied to `--context` once
complete, so nothing half-written is left behind.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builder.engine.base import Engine, Image
from builder.errors import InputError
from builder.packaging.runtime_choice import RuntimeChoice, choose_runtime
from builder.server.artifacts import Artifact, resolve_artifact
from builder.packaging.plan import (
    PACKAGE_RUNTIMES,
    PackageOptions,
    ServePlan,
    base_python_version,
    build_image,
    default_engine,
    fetch_wheels,
    pinned_requirements,
    plan_package,
    publish_folder,
    render_context,
)

__all__ = ["PackageOptions", "package_model", "resolve_target"]

Say = Callable[[str], None]


def resolve_target(name: str | None) -> Any | None:
    """The named BuildTarget (issue 2's resolver), or None when no target was asked for."""
    if name is None:
        return None
    try:
        from builder.targets import resolve_target as resolve
    except ImportError:
        raise InputError("--target needs builder.targets, which this tfsmith lacks") from None
    return resolve(name)


def server_runtime(requested: str | None, artifact: Artifact, threads: int) -> RuntimeChoice:
    """The runtime the image's server runs: as asked, else the one `tfsmith optimize` measured fastest for
    this very file on this host (its report's `chosen_runtime`), else LiteRT."""
    if requested is None:
        measured = artifact.chosen_runtime
        if measured is not None:
            how = artifact.report.selection.how if artifact.report else ""
            return RuntimeChoice(measured, f"chosen by tfsmith optimize{': ' + how if how else ''}", {})
        requested = "litert"
    return choose_runtime(requested, artifact.model_path, threads)


def package_model(
    artifact_path: Path,
    options: PackageOptions,
    *,
    model_name: str | None = None,
    smoke: bool = True,
    keep_context: Path | None = None,
    say: Say = print,
    engine: Engine | None = None,
) -> tuple[ServePlan, Image | None]:
    """Build (and smoke-test) one serving image; returns the plan and the engine's Image."""
    from builder.server.backends import RUNTIMES, model_for_runtime

    if options.runtime not in PACKAGE_RUNTIMES:
        raise InputError(f"unknown --runtime {options.runtime!r}; choose one of: {', '.join(PACKAGE_RUNTIMES)}")
    if options.server_runtime is not None and options.server_runtime not in (*RUNTIMES, "auto"):
        raise InputError(f"unknown --server-runtime {options.server_runtime!r}; choose one of: {', '.join(RUNTIMES)}, auto")
    if min(options.workers, options.threads, options.max_batch) < 1 or options.batch_timeout_us < 0:
        raise InputError("--workers, --threads and --max-batch must be at least 1, --batch-timeout-us not negative")
    artifact = resolve_artifact(artifact_path, model_name)
    target = resolve_target(options.target)
    engine = engine or default_engine()
    if options.runtime == "tfserving":
        from builder.packaging.tfserving import package_tfserving

        return package_tfserving(artifact, options, target, engine, smoke=smoke, keep_context=keep_context, say=say)
    choice = server_runtime(options.server_runtime, artifact, options.threads)
    say(f"server runtime: {choice.runtime} ({choice.reason})")
    # openvino-nncf serves (and labels, and smoke-tests against) the fp32 .tflite it quantizes at start
    artifact = dataclasses.replace(artifact, model_path=model_for_runtime(choice.runtime, artifact.model_path))
    base = options.base_image or "tfsmith/python:bookworm"
    python = base_python_version(engine, base)
    requirements = pinned_requirements(choice.runtime)
    plan = plan_package(
        artifact,
        options,
        target=target,
        server_runtime=choice.runtime,
        runtime_reason=choice.reason,
        requirements=requirements,
        python_version=python,
    )
    wheels = fetch_wheels(requirements, python, plan.arch, say)
    with tempfile.TemporaryDirectory(prefix="tfsmith-serve-") as tmp:
        context = render_context(plan, artifact, Path(tmp) / "context", wheels)
        if keep_context is not None:
            publish_folder(context, keep_context)
            say(f"build context written to {keep_context}")
        say(f"building {plan.tag} from {plan.base_image} (Python {python}, target {plan.target_name})")
        image = build_image(engine, plan, context, log=lambda _line: None)
    say(f"built {plan.tag} ({image.id[:19]})")
    if smoke:
        from builder.packaging.smoke import smoke_test

        result = smoke_test(engine, plan.tag, artifact, plan.model_name, plan.version, plan.port, say)
        say(result.line())
    return plan, image
