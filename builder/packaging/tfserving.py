"""`tfsmith package --runtime tfserving`: TensorFlow Serving's own layout, batching file and warmup records.

The image follows the stock tensorflow/serving conventions so it drops into existing deployments:
`/models/<name>/<version>/` holding the SavedModel (or `model.tflite` with `--prefer_tflite_model` when the
artifact has no SavedModel), `assets.extra/tf_serving_warmup_requests` made from held-out samples,
`/models/batching_parameters.txt`, `MODEL_NAME`/`MODEL_BASE_PATH`. The base image is configurable (the stock
image cannot be pulled here; tests use a local stand-in). Because the stock server is compiled for AVX only,
the context also carries a rendered (not built) from-source build of the server with the target's flags.
"""

from __future__ import annotations

import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.engine.base import Engine
from builder.packaging.context import environment
from builder.packaging.plan import PackageOptions, ServePlan
from builder.model.artifact import Artifact
from builder.model.signature import DEFAULT_SIGNATURE
from builder.wire.tensors import TF_DTYPES
from builder.packaging.warmup import Tensor, encode_prediction_log, write_warmup
from builder.say import Say

BATCHING_FILE = "/models/batching_parameters.txt"
WARMUP_PATH = "assets.extra/tf_serving_warmup_requests"
DEFAULT_DEVEL_IMAGE = "tensorflow/serving:2.19.0-devel"
DEFAULT_TFSERVING_BASE = "tensorflow/serving:2.19.0"


@dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's `--batching_parameters_file` fields (session_bundle_config.proto BatchingParameters)."""

    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    num_batch_threads: int = 2
    max_enqueued_batches: int = 100

    def text(self) -> str:
        """The text-format protobuf TF Serving reads."""
        return "".join(
            f"{name} {{ value: {getattr(self, name)} }}\n"
            for name in ("max_batch_size", "batch_timeout_micros", "num_batch_threads", "max_enqueued_batches")
        )


def batching_for(options: PackageOptions) -> BatchingParameters:
    """Batching parameters from the package options (TF Serving needs batch >= 1; 1 means: no merging)."""
    return BatchingParameters(
        max_batch_size=options.max_batch if options.max_batch and options.max_batch > 1 else 32,
        batch_timeout_micros=options.batch_timeout_us or 1000,
        num_batch_threads=max(options.workers or 2, 1),
    )


def build_options(copts: Sequence[str]) -> str:
    """TF_SERVING_BUILD_OPTIONS for the target: the release config plus the target's compiler flags."""
    return " ".join(["--config=release", *(f"--copt={copt}" for copt in copts)])


def server_flags(saved_model: bool) -> list[str]:
    """Arguments after the stock `--model_name/--model_base_path` pair (the image's CMD)."""
    flags = ["--enable_batching=true", f"--batching_parameters_file={BATCHING_FILE}", "--enable_model_warmup=true"]
    if not saved_model:
        flags.append("--prefer_tflite_model=true")
    return flags


def warmup_inputs(artifact: Artifact, count: int = 10) -> dict[str, np.ndarray]:
    """Warm-up inputs by input name: the model's own held-out rows (its samples file), else generated ones.

    The SavedModel and every .tflite keep the original model's signature, so the names and dtypes read from
    the served .tflite are the ones TF Serving's SavedModel signature takes too.
    """
    from builder.packaging.smoke import reference_backend
    from builder.model.inputs import example_inputs

    backend = reference_backend(artifact, "tensorflow" if artifact.model_path.is_dir() else "litert")
    signature = next(iter(backend.signatures.values()))
    return example_inputs(signature, artifact.samples_path, batch=count)


def warmup_records(model_name: str, inputs: Mapping[str, np.ndarray], version: int,
                   signature: str = DEFAULT_SIGNATURE) -> list[bytes]:
    """One PredictionLog per example (batch 1, as live traffic mostly comes), every input in each."""
    rows = min(len(v) for v in inputs.values())
    records = []
    for i in range(rows):
        tensors = {}
        for name, values in inputs.items():
            example = np.ascontiguousarray(values[i : i + 1]).astype(values.dtype.newbyteorder("<"), copy=False)
            tensors[name] = Tensor(TF_DTYPES[values.dtype.name][1], tuple(example.shape), example.tobytes())
        records.append(encode_prediction_log(model_name, signature, tensors, version))
    return records


def render_tfserving_context(plan: ServePlan, artifact: Artifact, dest: Path, batching: BatchingParameters,
                             devel_image: str = DEFAULT_DEVEL_IMAGE) -> Path:
    """Write the build context: Dockerfile, models/ tree, entrypoint + guard, and the from-source build."""
    env = environment()
    saved_model = artifact.model_path if artifact.model_path.is_dir() else artifact.model_path.parent / "saved_model"
    has_saved_model = saved_model.is_dir()
    version_dir = dest / "models" / plan.model_name / str(plan.version)
    version_dir.parent.mkdir(parents=True, exist_ok=True)
    if has_saved_model:
        shutil.copytree(saved_model, version_dir)
    else:
        version_dir.mkdir()
        shutil.copy2(artifact.model_path, version_dir / "model.tflite")
    warmup = version_dir / WARMUP_PATH
    warmup.parent.mkdir(parents=True, exist_ok=True)
    warmup.write_bytes(write_warmup(warmup_records(plan.model_name, warmup_inputs(artifact), plan.version)))
    (dest / "models" / "batching_parameters.txt").write_text(batching.text())
    tools = dest / "tfsmith"
    tools.mkdir()
    shutil.copy2(Path(__file__).resolve().parents[1] / "guard.py", tools / "guard.py")
    shutil.copy2(Path(__file__).with_name("warmup.py"), tools / "warmup.py")
    entrypoint = tools / "entrypoint.sh"
    entrypoint.write_text(env.get_template("tfserving-entrypoint.sh.j2").render(plan=plan))
    entrypoint.chmod(entrypoint.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    build = tools / "tfserving-build"
    build.mkdir()
    major_minor = ".".join(str(getattr(plan, "tf_version", "2.19.0")).split(".")[:2])
    (build / "Dockerfile").write_text(
        env.get_template("tfserving-build.Dockerfile.j2").render(
            plan=plan,
            build_options=build_options(plan.target_copts),
            devel_image=devel_image,
            runtime_image=plan.base_image,
            serving_branch=f"r{major_minor}",
        )
    )
    (dest / "Dockerfile").write_text(
        env.get_template("tfserving.Dockerfile.j2").render(plan=plan, server_flags=server_flags(has_saved_model))
    )
    return dest


def has_model_server(engine: Engine, image: str) -> bool:
    code, _ = engine.run(image, ["-c", "command -v tensorflow_model_server"], entrypoint=["/bin/sh"], timeout=60)
    return code == 0


def smoke_tfserving(engine: Engine, plan: ServePlan, artifact: Artifact, say: Say) -> str:
    """Start the image, wait for AVAILABLE, send the warmup samples columnar; every answer must have a row each."""
    import json

    from builder.packaging.smoke import SmokeFailed, _http, wait_healthy

    inputs = warmup_inputs(artifact)
    rows = min(len(v) for v in inputs.values())
    with engine.start(plan.tag, ports=(8501,)) as running:
        url = running.url(8501)
        startup = wait_healthy(url, running.exited, path=f"/v1/models/{plan.model_name}")
        payload = json.dumps({"inputs": {name: v.tolist() for name, v in inputs.items()}}).encode()
        status, body = _http(f"{url}/v1/models/{plan.model_name}:predict", payload)
        if status != 200:
            raise SmokeFailed(f"TF Serving answered HTTP {status}: {body}")
        outputs = body.get("outputs")
        first = next(iter(outputs.values())) if isinstance(outputs, Mapping) else outputs
        if not isinstance(first, list) or len(first) != rows:
            raise SmokeFailed(f"TF Serving answered {len(first) if isinstance(first, list) else '?'} rows for {rows}")
    return f"smoke: TF Serving answered {rows} examples; ready in {startup:.1f} s"
