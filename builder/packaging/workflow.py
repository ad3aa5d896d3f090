"""The `tfsmith package` workflow: artifact -> kind and runtime -> plan -> context -> image -> smoke test.

One workflow for every image kind (`builder.packaging.kinds`): the decisions are pure (`choose_kind`,
`plan_package`), the kind looks up its base image on the engine, `builder.packaging.context` renders, downloads
and publishes. The context is rendered into a temporary folder and only copied to `--context` once complete, so
nothing half-written is left behind. Each step says what it does, long ones as they start.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from builder.engine.base import Engine, Image
from builder.errors import InputError
from builder.packaging.kinds import ImageKind, choose_kind, kind_named
from builder.packaging.plan import PackageOptions, ServePlan, plan_package
from builder.packaging.runtime_choice import RuntimeChoice, choose_runtime
from builder.model import registry
from builder.model.artifact import TENSORFLOW_RUNTIMES, Artifact, resolve_artifact
from builder.say import Say

__all__ = ["PackageOptions", "package_model", "package_target", "resolve_target"]



def package_target(name: str | None, cuda_cc: str | None = None, *, facts: Any | None = None
                   ) -> tuple[Any | None, Any | None]:
    """(BuildTarget, CudaChoice) of the image asked for, or (None, None) when no target was asked for.

    The GPUs follow the one decision `tfsmith build` makes (`builder.targets.choose_cuda`): `host` with
    nothing asked is this host's GPUs where its driver runs TensorFlow's CUDA, so `package` looks for the very
    TensorFlow image `make build` made. `facts`: the host (default: detected, where `host`/`auto` need it)."""
    if name is None:
        if cuda_cc and cuda_cc.strip().lower() != "none":
            raise InputError("--cuda-cc needs --target (the CPU target the image is for)")
        return None, None
    from builder.build.plan import DEFAULT_TF_VERSION
    from builder.targets import choose_cuda, resolve_target as resolve

    if facts is None and (name.strip().lower() == "host" or (cuda_cc or "").strip().lower() == "auto"):
        from builder.hardware import detect_host

        facts = detect_host()
    choice = choose_cuda(name, cuda_cc, facts, DEFAULT_TF_VERSION)
    return resolve(name, cuda_cc=choice.cuda_cc, facts=facts), choice


def resolve_target(name: str | None, cuda_cc: str | None = None) -> Any | None:
    """The BuildTarget of the image asked for (`package_target` without the CUDA choice)."""
    return package_target(name, cuda_cc)[0]


def recorded_target(artifact: Artifact) -> str | None:
    """The target `tfsmith optimize` recorded in the report beside the model (`host` when it optimized for the
    host it ran on), None without a report."""
    target = artifact.report.target if artifact.report is not None else {}
    if not target or not target.get("name"):
        return None
    return "host" if target.get("is_host") else str(target["name"])


def recorded_cuda_cc(artifact: Artifact) -> str | None:
    """The GPU capabilities `tfsmith optimize` chose for ("9.0"; "none" for a CPU-only TensorFlow image), so
    the serving image is built FROM the image the artifact was chosen for; None when no report says."""
    target = artifact.report.target if artifact.report is not None else {}
    if not target or "gpu_capabilities" not in target:
        return None
    capabilities = [str(cc) for cc in target.get("gpu_capabilities") or ()]
    return ",".join(capabilities) if capabilities else "none"


def serving_runtime(requested: str | None, artifact: Artifact, kind: ImageKind, threads: int) -> RuntimeChoice:
    """The runtime the image's server runs: as asked, else the one `tfsmith optimize` measured fastest for
    this very artifact on this host (its report's `chosen_runtime`), else the kind's own."""
    if requested is None:
        measured = artifact.chosen_runtime
        if measured is not None and measured in kind.runtimes:
            how = artifact.report.selection.how if artifact.report else ""
            return RuntimeChoice(measured, f"chosen by tfsmith optimize{': ' + how if how else ''}", {})
        requested = kind.default_runtime
        if measured in registry.RETIRED:  # a report of an earlier tfsmith: say what serves instead, and why
            return RuntimeChoice(requested, f"the report chose {measured}, which tfsmith no longer has: "
                                            f"{registry.RETIRED[measured]}; serving {requested} meanwhile", {})
    if kind.name == "tfserving" or requested in kind.runtimes and requested in TENSORFLOW_RUNTIMES:
        kind.check_runtime(requested)
        return RuntimeChoice(requested, "requested" if requested != kind.default_runtime else
                             f"what a {kind.name} image runs", {})
    return choose_runtime(requested, artifact.model_path, threads)


def default_signature(requested: str | None, artifact: Artifact) -> str | None:
    """The signature a request without `signature_name` gets: as asked, else the one optimize chose when it is
    not TF Serving's default (an XLA `serving_xla`, or a `predict`-only module)."""
    if requested:
        return requested
    chosen = artifact.signature
    return chosen if chosen and chosen != "serving_default" else None


def package_model(
    model: Path | Artifact,
    options: PackageOptions,
    *,
    model_name: str | None = None,
    smoke: bool = True,
    keep_context: Path | None = None,
    say: Say = print,
    engine: Engine | None = None,
    cuda_cc: str | None = None,
) -> tuple[ServePlan, Image]:
    """Build (and smoke-test) one serving image; returns the plan and the engine's Image. `model` is a path
    the user named, or an artifact the caller has already resolved (it is not worked out again)."""
    from builder.packaging.kinds import check_artifact

    options.check()
    if options.runtime in ("tfserving", "tensorflow-serving"):
        raise InputError("tfserving is an image kind, not a runtime: use --kind tfserving")
    if options.runtime is not None:
        registry.check(options.runtime, allow_auto=True, what="--runtime")
    artifact = model if isinstance(model, Artifact) else resolve_artifact(model, model_name, options.runtime)
    kind_name, kind_reason = choose_kind(options.kind, artifact, options.runtime)
    kind = kind_named(kind_name)
    if kind.name != "tfserving":
        check_artifact(kind, artifact)
    target_name = options.target
    recorded = recorded_target(artifact)
    if target_name is None and kind.name == "tensorflow":  # its base is the TensorFlow image built for a target
        target_name = recorded
        if target_name is not None:
            say(f"target: {target_name} (recorded by tfsmith optimize in the report)")
    if cuda_cc is None and kind.name != "tensorflow" and target_name is not None:
        cuda_cc = "none"  # a LiteRT or TF Serving image carries no CUDA TensorFlow: no GPUs to choose
    elif cuda_cc is None and target_name is not None and target_name == recorded:
        cuda_cc = recorded_cuda_cc(artifact)  # the GPUs of the image optimize chose the artifact for
        if cuda_cc is not None:
            say(f"CUDA: {'none (a CPU-only TensorFlow image)' if cuda_cc == 'none' else cuda_cc} "
                "(what tfsmith optimize chose the artifact for, recorded in the report)")
    target, choice = package_target(target_name, cuda_cc)
    if choice is not None and choice.rule == "host-gpus":
        say(f"CUDA: {choice.cuda_cc} ({choice.why}; --cuda-cc none for the CPU-only image)")
    if artifact.runtime is not None and registry.on_tensorflow(artifact.runtime) and kind.name == "litert":
        what = "a SavedModel" if artifact.model_path.is_dir() else "a .tflite optimize measured on TensorFlow"
        raise InputError(f"{artifact.model_path} is {what}: only TensorFlow runs it, and a litert image has none; "
                         "use --kind tensorflow (or --kind auto)")
    if engine is None:
        from builder.engine import default_engine

        engine = default_engine()
    choice = serving_runtime(options.runtime, artifact, kind, options.threads or 1)
    kind.check_runtime(choice.runtime)
    say(f"image kind: {kind.name} ({kind_reason}); runtime: {choice.runtime} ({choice.reason})")
    base = kind.base(options, target, engine, say)
    say(f"base image: {base.ref} ({base.why})")
    if smoke:
        kind.check_smoke(engine, base)
    requirements = kind.requirements(choice.runtime, artifact.format)
    plan = plan_package(artifact, options, kind=kind.name, base=base, target=target, runtime=choice.runtime,
                        runtime_reason=choice.reason, requirements=requirements,
                        signature=default_signature(options.signature, artifact))
    wheels = None
    if requirements:
        from builder.packaging.context import fetch_wheels

        wheels = fetch_wheels(requirements, base.python, plan.arch, say)
    from builder.packaging.context import build_image, publish_folder

    with tempfile.TemporaryDirectory(prefix="tfsmith-serve-") as tmp:
        context = kind.write_context(plan, artifact, Path(tmp) / "context", wheels, options)
        if keep_context is not None:
            publish_folder(context, keep_context)
            say(f"build context written to {keep_context}")
        say(f"building {plan.tag} ({plan.platform}) FROM {plan.base_image}, target {plan.target_name}")
        image = build_image(engine, plan, context, log=lambda _line: None)
    say(f"built {plan.tag} ({image.id[:19]})")
    if smoke:
        say(kind.smoke(engine, plan, artifact, say))
    return plan, image
