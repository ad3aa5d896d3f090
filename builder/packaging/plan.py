"""What one serving image is, as plain data: `PackageOptions` (what the user asked) -> `ServePlan` (pure).

Nothing here touches Docker, the network or the disk beyond reading the artifact's digest: the image kind
(`builder.packaging.kinds`) looks up what needs an engine (the base image, its Python) and hands the facts in,
so everything an image will hold (base, labels, entry point, command, wheels, platform) is testable without an
engine. Rendering, downloading and publishing live in `builder.packaging.context`. (`smoke_gpus` asks the engine one
question, whether it can pass GPUs in, and decides from the plan how the smoke test starts the image.)

Vocabulary (one meaning each): the image **kind** is how the image is made (`litert`: a slim Python base with
LiteRT, for a .tflite; `openvino`: a slim Python base with OpenVINO alone, for OpenVINO's IR; `tensorflow`: FROM
the TensorFlow image `tfsmith build` made for the target; `tfserving`: TensorFlow Serving's own layout on a TF
Serving base); the **runtime** is the inference engine the server runs inside it (`litert`, `openvino`,
`openvino-bf16`, `tensorflow`, ...: `builder.model.registry`); the artifact's **format** is which file optimize
wrote (`tflite_int8`, `openvino_ir_int8`, `saved_model`, ...: report.json's `format`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from builder.errors import InputError
from builder.build.plan import LABEL_PREFIX
from builder.engine.base import Engine
from builder.model.artifact import Artifact

#: Labels that mark a TensorFlow image made by `tfsmith build` (its spec, wheel and tag). An image built FROM
#: one inherits them, so a serving image blanks them: it must never be taken for its base (the build's cache
#: looks images up by spec digest, and packaging looks up a target's TensorFlow image by them).
TF_IMAGE_LABELS = tuple(f"{LABEL_PREFIX}.{name}" for name in ("spec-digest", "wheel-digest", "tag", "manifest"))
GRPC_PORT = 8500
REST_PORT = 8501
KINDS = ("litert", "openvino", "tensorflow", "tfserving")
#: The Python interpreter of the venv every tfsmith image runs (the slim base's and the TensorFlow image's).
VENV_PYTHON = "/opt/venv/bin/python"


@dataclass(frozen=True)
class PackageOptions:
    """What the user asked for (flags of `tfsmith package`)."""

    kind: str = "auto"  # auto | litert | openvino | tensorflow | tfserving; auto = what the chosen artifact runs on
    #: the inference runtime in the image: a name of builder.model.registry, or auto;
    #: None = what tfsmith optimize measured fastest for the chosen artifact (report.json), else by kind
    runtime: str | None = None
    target: str | None = None
    base_image: str | None = None
    tag: str | None = None
    version: int = 1
    port: int = REST_PORT
    #: None: the server sizes itself when the container starts (`--model-processes/--interpreters/--threads/
    #: --max-batch auto`), from the CPUs the container gets and the model's measured call time
    processes: int | None = None
    workers: int | None = None
    threads: int | None = None
    max_batch: int | None = None
    batch_timeout_us: int = 0
    #: the signature a request without `signature_name` gets; None = the report's chosen signature
    signature: str | None = None

    def check(self) -> None:
        """Refuse impossible values in one line, before anything is looked up or built."""
        if self.kind not in ("auto", *KINDS):
            raise InputError(f"unknown --kind {self.kind!r}; choose one of: auto, {', '.join(KINDS)}")
        if not 1 <= self.port <= 65535 or self.port == GRPC_PORT:
            raise InputError(f"--port {self.port}: not a TCP port the REST API can use (gRPC has {GRPC_PORT})")
        given = [v for v in (self.processes, self.workers, self.threads, self.max_batch) if v is not None]
        if (given and min(given) < 1) or self.batch_timeout_us < 0:
            raise InputError("--model-processes, --interpreters, --threads and --max-batch must be at least 1 (or auto), "
                             "--batch-timeout-us not negative")
        if self.version < 1:
            raise InputError(f"--model-version {self.version}: versions are positive integers")


@dataclass(frozen=True)
class BaseImage:
    """The image a serving image is built FROM, and the facts about it the plan needs (looked up by the kind)."""

    ref: str
    python: str = "3.11"  # its python3's major.minor: decides the wheels
    why: str = "requested"  # said in the output and a label: where this base came from
    #: what runs the server inside it: the venv's interpreter (the TensorFlow image has TensorFlow there)
    python_bin: str = VENV_PYTHON
    #: the base already carries the guard as /usr/local/bin/tfsmith-guard (the TensorFlow image does)
    has_guard: bool = False


@dataclass(frozen=True)
class ServePlan:
    """Everything one serving image is; rendered into a build context by its kind."""

    kind: str
    runtime: str
    runtime_reason: str
    model_name: str
    version: int
    model_sha256: str
    summary: str
    base: BaseImage
    tag: str
    target_name: str
    target_features: tuple[str, ...]
    target_copts: tuple[str, ...]
    port: int
    processes: int | None
    workers: int | None
    threads: int | None
    max_batch: int | None
    batch_timeout_us: int
    requirements: tuple[str, ...] = ()
    arch: str = "x86_64"
    model_file: str = "model.tflite"
    signature: str | None = None
    cuda: bool = False  # FROM a CUDA TensorFlow image: the smoke test runs it with the GPUs where it can
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def base_image(self) -> str:
        return self.base.ref

    @property
    def python_version(self) -> str:
        return self.base.python

    @property
    def platform(self) -> str:
        """The OCI platform the image is for (what the build asks BuildKit for)."""
        return "linux/arm64" if self.arch in ("aarch64", "arm64") else "linux/amd64"

    @property
    def grpc_port(self) -> int:
        """TensorFlow Serving's gRPC port, which its clients expect."""
        return GRPC_PORT

    @property
    def model_dir(self) -> str:
        return f"/models/{self.model_name}/{self.version}"

    @property
    def entrypoint(self) -> list[str]:
        """The preflight guard, then the server: the image refuses a CPU it was not made for in one line."""
        guard = (["/usr/local/bin/tfsmith-guard", "--"] if self.base.has_guard
                 else [self.base.python_bin, "/opt/tfsmith/guard.py", "--"])
        return [*guard, self.base.python_bin, "-m", "builder.server"]

    @property
    def command(self) -> list[str]:
        """The server's arguments (the image's CMD; the guard and the interpreter are the ENTRYPOINT)."""
        from builder.server.options import to_argv

        values: dict[str, Any] = {
            "host": "0.0.0.0", "port": self.port, "grpc_port": self.grpc_port, "model_name": self.model_name,
            "model_version": self.version, "runtime": self.runtime, "processes": self.processes, "workers": self.workers,
            "threads": self.threads, "max_batch": self.max_batch, "batch_timeout_us": self.batch_timeout_us,
        }
        if self.signature:
            values["signature_name"] = self.signature
        return [f"{self.model_dir}/{self.model_file}", *to_argv(values)]

    @property
    def labels(self) -> dict[str, str]:
        """Image labels: what the image serves, for whom, on what, and why this runtime."""
        labels = {
            "org.opencontainers.image.title": f"{self.model_name} ({self.kind} serving image, {self.runtime} runtime)",
            "org.opencontainers.image.base.name": self.base.ref,
            f"{LABEL_PREFIX}.kind": f"serve-{self.kind}",
            f"{LABEL_PREFIX}.model.name": self.model_name,
            f"{LABEL_PREFIX}.model.version": str(self.version),
            f"{LABEL_PREFIX}.model.sha256": self.model_sha256,
            f"{LABEL_PREFIX}.report.summary": self.summary,
            f"{LABEL_PREFIX}.target": self.target_name,
            f"{LABEL_PREFIX}.runtime": self.runtime,
            f"{LABEL_PREFIX}.runtime.reason": self.runtime_reason,
            f"{LABEL_PREFIX}.base.reason": self.base.why,
            f"{LABEL_PREFIX}.platform": self.platform,
        }
        if self.signature:
            labels[f"{LABEL_PREFIX}.signature"] = self.signature
        if self.kind == "tensorflow":
            labels.update({name: "" for name in TF_IMAGE_LABELS})
        labels.update(self.extra_labels)
        return labels


def model_file_in_image(artifact: Artifact) -> str:
    """The served model's name under /models/<name>/<version>/: `saved_model` (a folder), `model.xml` (OpenVINO's
    IR, its `model.bin` beside it) or `model.tflite`."""
    if artifact.model_path.is_dir():
        return "saved_model"
    return "model.xml" if artifact.ir else "model.tflite"


def default_tag(artifact: Artifact, kind: str, arch: str = "x86_64") -> str:
    """`tfsmith/serve-<model>:<kind>-<digest>` (an arm64 image says so in its tag: both can live on one engine)."""
    suffix = "-arm64" if arch in ("aarch64", "arm64") else ""
    return f"tfsmith/serve-{artifact.name.lower()}:{kind}-{artifact.sha256[:12]}{suffix}"


def plan_package(
    artifact: Artifact,
    options: PackageOptions,
    *,
    kind: str,
    base: BaseImage,
    target: Any | None = None,
    runtime: str = "litert",
    runtime_reason: str = "requested",
    requirements: tuple[str, ...] = (),
    signature: str | None = None,
) -> ServePlan:
    """The plan for one image; pure (the model's digest is read from the artifact)."""
    options.check()
    if kind not in KINDS:
        raise InputError(f"unknown image kind {kind!r}; choose one of: {', '.join(KINDS)}")
    arch = getattr(target, "arch", None) or "x86_64"
    return ServePlan(
        kind=kind,
        runtime=runtime,
        runtime_reason=runtime_reason,
        model_name=artifact.name,
        version=options.version,
        model_sha256=artifact.sha256,
        summary=artifact.summary(),
        base=base,
        tag=options.tag or default_tag(artifact, kind, arch),
        target_name=getattr(target, "name", None) or "any",
        target_features=tuple(sorted(getattr(target, "features", ()) or ())),
        target_copts=tuple(getattr(target, "copts", ()) or ()),
        port=options.port if kind != "tfserving" else REST_PORT,
        processes=options.processes,
        workers=options.workers,
        threads=options.threads,
        max_batch=options.max_batch,
        batch_timeout_us=options.batch_timeout_us,
        requirements=requirements,
        arch=arch,
        model_file=model_file_in_image(artifact),
        signature=signature,
        # only the tensorflow kind is FROM a (CUDA) TensorFlow image: a LiteRT or TF Serving image has no CUDA
        cuda=kind == "tensorflow" and getattr(target, "cuda", None) is not None,
    )


@dataclass(frozen=True)
class SmokeGpus:
    """How the smoke test starts an image: with the GPUs passed in or not, the environment that goes with it,
    and the line that says so ("" for a CPU image, where there is nothing to say)."""

    passed: bool
    env: Mapping[str, str] = field(default_factory=dict)
    line: str = ""


def smoke_gpus(engine: Engine, plan: ServePlan) -> SmokeGpus:
    """A CUDA image is smoke-tested on the GPUs where the engine has the NVIDIA runtime, and then TensorFlow
    must see one (TFSMITH_IMAGE_REQUIRE_GPU=1: the guard and the server refuse to start otherwise, so a CUDA
    image that silently fell back to the CPU fails); elsewhere one line says the GPU path was not exercised and
    the answers are checked on the CPU (TensorFlow's CUDA build runs there too)."""
    if not plan.cuda:
        return SmokeGpus(False)
    from builder.guard import ENV

    why_not = engine.gpu_support()
    if why_not is None:
        # TF32 off: on Ampere and newer TensorFlow multiplies float32 in TF32 by default (10-bit mantissa), and
        # the answers are checked against float32 computed here; the GPU path is what is under test, not TF32.
        return SmokeGpus(True, {ENV["require_gpu"]: "1", "NVIDIA_TF32_OVERRIDE": "0"},
                         "smoke: a CUDA image: started with the GPUs (--gpus all), and TensorFlow must see one")
    return SmokeGpus(False, {}, f"smoke: the GPU path was not exercised ({why_not}): smoke-testing on the CPU")
