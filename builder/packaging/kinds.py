"""Image kinds behind one interface: how a serving image is made, and how it is proven.

Every kind answers the same four questions, so `tfsmith package` is one workflow whatever the kind:
- `runtimes`: which inference runtimes its images can run;
- `base(...)`: the image it is built FROM (looked up on the engine: tfsmith never pulls) and that image's Python;
- `write_context(...)`: the build context (through `builder.packaging.context`);
- `smoke(...)`: start the image and prove it answers as the original model does.

Kinds: `litert` (a slim Python base, tfsmith's server, LiteRT, or OpenVINO reading the same .tflite),
`openvino` (the same slim base and server with OpenVINO alone, serving its own IR: no TensorFlow, no LiteRT),
`tensorflow` (FROM the TensorFlow image `tfsmith build` made for the target: SavedModels, every signature and
dtype, Select-TF-ops .tflite files; the image's own preflight guard stays the entry point) and `tfserving`
(TensorFlow Serving's own layout on a TF Serving base image).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from builder.engine.base import Engine, Image, ImageNotFound
from builder.errors import InputError
from builder.packaging.plan import LABEL_PREFIX, BaseImage, PackageOptions, ServePlan
from builder.model import registry
from builder.model.artifact import Artifact
from builder.say import Say, quiet



class ImageKind(ABC):
    """One way of making a serving image."""

    name: str
    runtimes: tuple[str, ...]
    default_runtime: str

    @abstractmethod
    def base(self, options: PackageOptions, target: Any | None, engine: Engine, say: Say = quiet) -> BaseImage:
        """The base image and its facts; InputError in one line when it is not on the engine."""

    def requirements(self, runtime: str, format: str | None = None) -> tuple[str, ...]:
        """The server's pinned distributions this kind installs for `runtime` reading `format` (none for TF
        Serving)."""
        from builder.packaging.context import server_requirements

        return server_requirements(runtime, format)

    def write_context(self, plan: ServePlan, artifact: Artifact, dest: Path, wheels: Path | None,
                      options: PackageOptions) -> Path:
        from builder.packaging.context import render_server_context

        return render_server_context(plan, artifact, dest, wheels)

    def smoke(self, engine: Engine, plan: ServePlan, artifact: Artifact, say: Say) -> str:
        from builder.packaging.smoke import smoke_test

        return smoke_test(engine, plan, artifact, say).line()

    def check_smoke(self, engine: Engine, base: BaseImage) -> None:
        """Refuse before building when an image of this base could not be smoke-tested."""

    def check_runtime(self, runtime: str) -> None:
        if runtime not in self.runtimes:
            raise InputError(f"a {self.name} image runs {', '.join(self.runtimes)}, not {runtime}; "
                             f"{'use --kind tensorflow' if runtime in registry.engine_runtimes('tensorflow') else 'choose another --runtime'}")


def image_python(engine: Engine, ref: str, python_bin: str = "python3") -> str:
    """A base image's Python version (`3.11`), which decides the wheels; one clear line without one."""
    try:
        engine.inspect(ref)
    except ImageNotFound:
        raise InputError(f"base image {ref} is not on this engine (tfsmith never pulls; build or load it)") from None
    code, output = engine.run(ref, ["-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              entrypoint=[python_bin], timeout=120)
    version = output.strip().splitlines()[-1] if output.strip() else ""
    if code != 0 or not version[:1].isdigit():
        first = output.strip().splitlines()[0] if output.strip() else "no output"
        raise InputError(f"base image {ref} has no working {python_bin} (exit {code}): {first}")
    return version


def slim_base(options: PackageOptions, target: Any | None, engine: Engine, say: Say = quiet) -> BaseImage:
    """The slim Python base every slim kind is built FROM: `--base-image`, else tfsmith's own (made here, as
    `make engine` makes it, when the engine lacks it; another architecture's under emulation)."""
    if options.base_image:
        return BaseImage(options.base_image, image_python(engine, options.base_image), "requested (--base-image)")
    from builder.engine.local import base_image_ref, ensure_base_image

    arch = getattr(target, "arch", None) or None
    ref = base_image_ref(arch)
    try:
        engine.inspect(ref)
    except ImageNotFound:
        ensure_base_image(ref, say=say, arch=arch)
    return BaseImage(ref, image_python(engine, ref), f"the slim Python base image ({ref})")


class LiteRTKind(ImageKind):
    """A slim Python base with tfsmith's server and LiteRT (or OpenVINO reading the same .tflite)."""

    name = "litert"
    runtimes = registry.TFLITE_RUNTIMES
    default_runtime = registry.TFLITE_DEFAULT

    def base(self, options: PackageOptions, target: Any | None, engine: Engine, say: Say = quiet) -> BaseImage:
        return slim_base(options, target, engine, say)


class OpenVINOKind(ImageKind):
    """The same slim Python base and server with OpenVINO alone, serving OpenVINO's IR (float, or the NNCF int8
    optimize made and judged): no TensorFlow and no LiteRT in the image, and nothing quantized at start."""

    name = "openvino"
    runtimes = registry.IR_RUNTIMES
    default_runtime = registry.IR_DEFAULT

    def base(self, options: PackageOptions, target: Any | None, engine: Engine, say: Say = quiet) -> BaseImage:
        return slim_base(options, target, engine, say)


def tensorflow_image_for(images: list[Image], target: Any) -> Image | None:
    """The newest TensorFlow image `tfsmith build` made for `target` (CPU or CUDA, as the target is), if any.

    Pure over the engine's image list: a TensorFlow image carries `io.tfsmith.spec-digest` and its
    `io.tfsmith.tag` ends with the target's tag token (`x86-64-v3-cpu`, `x86-64-v3-cu12.5-cc80-cc90-ptx90`),
    which tells the CUDA image of a target from its CPU one."""
    token = target.tag_token
    found = [image for image in images
             if image.labels.get(f"{LABEL_PREFIX}.spec-digest") and f"{LABEL_PREFIX}.kind" not in image.labels
             and image.labels.get(f"{LABEL_PREFIX}.target") == target.name
             and image.labels.get(f"{LABEL_PREFIX}.tag", "").endswith(f"-{token}")]
    if not found:
        return None
    return max(found, key=lambda image: (image.labels.get("org.opencontainers.image.created", ""), image.id))


def describe_tf_image(image: Image) -> str:
    """How the TensorFlow image was made, as its own labels say (compiled here, or a labelled stock wheel)."""
    description = image.labels.get("org.opencontainers.image.description", "")
    name = image.tags[0] if image.tags else image.id[:19]
    return f"{name}: {description}" if description else name


class TensorFlowKind(ImageKind):
    """FROM the TensorFlow image `tfsmith build` made for the target: what LiteRT cannot serve.

    SavedModels (any signature key, strings, int64, bool, float16, variable-length sequences), their
    XLA-compiled `serving_xla` signature, and .tflite files that need Select TF ops (TensorFlow's own
    interpreter). The base keeps its entry point guard (`/usr/local/bin/tfsmith-guard`) in front of the server;
    CUDA targets get the `and-cuda` image, and the server says at start whether TensorFlow sees the GPU.
    """

    name = "tensorflow"
    runtimes = (*registry.engine_runtimes("tensorflow"), registry.TFLITE_DEFAULT)
    default_runtime = registry.TENSORFLOW_DEFAULT

    def base(self, options: PackageOptions, target: Any | None, engine: Engine, say: Say = quiet) -> BaseImage:
        if options.base_image:
            ref, why = options.base_image, "requested (--base-image)"
            has_guard = _has_guard(engine, ref)
        else:
            if target is None:
                raise InputError("a tensorflow image is built FROM the TensorFlow image made for a target: "
                                 "pass --target (as `tfsmith build` was given) or --base-image")
            image = tensorflow_image_for(engine.list_images(), target)
            if image is None:
                cuda = f" --cuda-cc {','.join(target.cuda.capabilities)}" if target.cuda else ""
                raise InputError(
                    f"no TensorFlow image for {target.tag_token} on this engine: build it first "
                    f"(tfsmith build --target {target.name}{cuda}, or make build), or pass --base-image")
            ref = image.tags[0] if image.tags else image.id
            why, has_guard = f"the TensorFlow image for {target.name} ({describe_tf_image(image)})", True
        return BaseImage(ref, image_python(engine, ref, "/opt/venv/bin/python"), why, has_guard=has_guard)


def _has_guard(engine: Engine, ref: str) -> bool:
    """Whether a base image already carries tfsmith's guard (a TensorFlow image from `tfsmith build` does)."""
    try:
        image = engine.inspect(ref)
    except ImageNotFound:
        raise InputError(f"base image {ref} is not on this engine (tfsmith never pulls; build or load it)") from None
    return "/usr/local/bin/tfsmith-guard" in image.config.entrypoint


class TFServingKind(ImageKind):
    """TensorFlow Serving's own layout (`/models/<name>/<version>/`, warm-up records, batching file) on a TF
    Serving base image, with a rendered from-source build of the server for the target beside it."""

    name = "tfserving"
    runtimes = ("tfserving",)
    default_runtime = "tfserving"

    def base(self, options: PackageOptions, target: Any | None, engine: Engine, say: Say = quiet) -> BaseImage:
        from builder.packaging.tfserving import DEFAULT_TFSERVING_BASE

        ref = options.base_image or DEFAULT_TFSERVING_BASE
        try:
            engine.inspect(ref)
        except ImageNotFound:
            raise InputError(f"base image {ref} is not on this engine (tfsmith never pulls); load a TF Serving "
                             "image or pass --base-image") from None
        why = "requested (--base-image)" if options.base_image else "TensorFlow Serving's image"
        return BaseImage(ref, "", why, python_bin="")

    def check_smoke(self, engine: Engine, base: BaseImage) -> None:
        from builder.packaging.tfserving import has_model_server

        if not has_model_server(engine, base.ref):
            raise InputError(f"base image {base.ref} has no tensorflow_model_server, so the image cannot be "
                             "smoke-tested; use a TF Serving base image, or --no-smoke to build the layout only")

    def requirements(self, runtime: str, format: str | None = None) -> tuple[str, ...]:
        return ()

    def write_context(self, plan: ServePlan, artifact: Artifact, dest: Path, wheels: Path | None,
                      options: PackageOptions) -> Path:
        from builder.packaging.tfserving import batching_for, render_tfserving_context

        return render_tfserving_context(plan, artifact, dest, batching_for(options))

    def smoke(self, engine: Engine, plan: ServePlan, artifact: Artifact, say: Say) -> str:
        from builder.packaging.tfserving import smoke_tfserving

        return smoke_tfserving(engine, plan, artifact, say)


KIND_CLASSES: dict[str, type[ImageKind]] = {"litert": LiteRTKind, "openvino": OpenVINOKind,
                                            "tensorflow": TensorFlowKind, "tfserving": TFServingKind}


def kind_named(name: str) -> ImageKind:
    try:
        return KIND_CLASSES[name]()
    except KeyError:
        raise InputError(f"unknown image kind {name!r}; choose one of: {', '.join(KIND_CLASSES)}") from None


def needs_tensorflow(artifact: Artifact, runtime: str | None) -> bool:
    """Whether serving this artifact takes TensorFlow: a SavedModel, a runtime asked or measured as
    tensorflow (a Select-TF-ops .tflite optimize measured on TensorFlow)."""
    if runtime is not None and runtime != registry.AUTO:
        return registry.on_tensorflow(runtime)
    return artifact.runtime is not None and registry.on_tensorflow(artifact.runtime)


def choose_kind(requested: str, artifact: Artifact, runtime: str | None) -> tuple[str, str]:
    """The image kind and why: as asked, else TensorFlow for what only TensorFlow runs, OpenVINO for its IR,
    else LiteRT."""
    if requested != "auto":
        return requested, "requested (--kind)"
    if needs_tensorflow(artifact, runtime):
        what = "a SavedModel" if artifact.model_path.is_dir() else f"{artifact.model_path.name} on TensorFlow"
        return "tensorflow", f"the chosen artifact is {what}: it runs on TensorFlow"
    if artifact.ir:
        return "openvino", f"the chosen artifact is OpenVINO's IR ({artifact.model_path.name}): OpenVINO alone runs it"
    return "litert", "the chosen artifact is a .tflite LiteRT runs"


def check_artifact(kind: ImageKind, artifact: Artifact) -> None:
    """Refuse, in one line, an image kind that cannot hold this artifact: OpenVINO's IR only in an openvino
    image, which holds nothing else (a .tflite on OpenVINO is a litert image: it takes LiteRT to read)."""
    if artifact.ir and kind.name != "openvino":
        raise InputError(f"{artifact.model_path} is OpenVINO's IR: a {kind.name} image cannot serve it; use "
                         "--kind openvino (or --kind auto), or name a runtime that reads another file of the folder "
                         "(--runtime litert: the fastest accepted .tflite; --runtime tensorflow: the SavedModel)")
    if kind.name == "openvino" and not artifact.ir:
        what = "a SavedModel" if artifact.model_path.is_dir() else f"{artifact.model_path.name}"
        raise InputError(f"an openvino image serves OpenVINO's IR (what tfsmith optimize writes as "
                         f"openvino_fp32.xml / openvino_int8.xml); {what} is not one: use --kind auto"
                         + (", or --kind litert --runtime openvino for OpenVINO on the .tflite"
                            if artifact.model_path.suffix == ".tflite" else ""))
