"""`tfsmith bench MODEL --images A,B`: the user's SavedModel served from two TensorFlow images, timed as clients see it.

"Was the source build worth it on this host?" is answered where it matters: the same SavedModel is packaged
FROM each image (`tfsmith package --kind tensorflow --base-image A`, then B: the same server, the same wheels,
only the TensorFlow underneath differs), both containers run side by side on loopback, and batch-1 gRPC
`Predict` calls (`tensor_content`, one persistent channel each) are timed in interleaved slices by the shared
timing loop, so a change in the host's load hits both alike. A difference counts only when the medians'
confidence intervals do not overlap. The serving images made for the comparison are removed afterwards.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder.engine.base import Engine, EngineError
from builder.errors import InputError, TfsmithError
from builder.say import Say



@dataclass(frozen=True)
class ServedTiming:
    """One image's served latencies (batch 1, gRPC), or why it could not be measured."""

    image: str
    p50_ms: float | None = None
    ci_ms: tuple[float, float] | None = None
    samples: int = 0
    tensorflow: str = ""
    error: str = ""


@dataclass(frozen=True)
class ServedComparison:
    first: ServedTiming
    second: ServedTiming
    threads: int
    signature: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ratio(self) -> float | None:
        """p50 through B / p50 through A (< 1: B answers faster)."""
        a, b = self.first.p50_ms, self.second.p50_ms
        return b / a if a and b else None

    @property
    def beyond_noise(self) -> bool:
        """Whether the two medians' confidence intervals are apart (the one rule for "faster")."""
        a, b = self.first.ci_ms, self.second.ci_ms
        return bool(a and b and (a[1] < b[0] or b[1] < a[0]))

    def summary(self) -> str:
        lines = []
        for item in (self.first, self.second):
            if item.error:
                lines.append(f"{item.image}: could not serve the model ({item.error})")
            else:
                low, high = item.ci_ms or (0.0, 0.0)
                lines.append(f"{item.image}: served p50 {item.p50_ms:.3f} ms (95% CI {low:.3f}-{high:.3f}) over gRPC "
                             f"at batch 1, signature {self.signature}, TensorFlow {item.tensorflow or '?'}, "
                             f"{item.samples} requests, {self.threads} thread{'s' if self.threads != 1 else ''}")
        if self.ratio is not None:
            faster = self.second.image if self.ratio < 1 else self.first.image
            gap = max(self.ratio, 1 / self.ratio)
            verdict = ("beyond noise (the confidence intervals are apart)" if self.beyond_noise
                       else "within noise (the confidence intervals overlap): no real difference here")
            lines.append(f"ratio B/A = {self.ratio:.3f}: {faster} answers {gap:.2f}x faster; {verdict}")
        return "\n".join([*lines, *self.notes])

    def to_json(self) -> str:
        return json.dumps({"path": "served (gRPC Predict, tensor_content, batch 1)", "first": asdict(self.first),
                           "second": asdict(self.second), "threads": self.threads, "signature": self.signature,
                           "ratio_b_over_a": self.ratio, "beyond_noise": self.beyond_noise,
                           "notes": list(self.notes)}, indent=2) + "\n"


def grpc_caller(host: str, port: int, model_name: str, signature: str,
                inputs: Mapping[str, np.ndarray]) -> tuple[Callable[[], Any], Callable[[], None]]:
    """A zero-argument Predict call on one persistent channel (the request built once), and its closer."""
    import grpc

    import builder.wire.tfs_proto as pb
    from builder.wire.tensors import fill_proto

    channel = grpc.insecure_channel(f"{host}:{port}")
    call = channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/Predict",
                               request_serializer=pb.PredictRequest.SerializeToString,
                               response_deserializer=pb.PredictResponse.FromString)
    request = pb.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    for name, value in inputs.items():
        fill_proto(request.inputs[name], np.asarray(value), content=True)
    return (lambda: call(request, timeout=60.0)), channel.close


def compare_served_images(model: Path, first: str, second: str, *, threads: int = 2, budget_s: float = 20.0,
                          engine: Engine | None = None, say: Say = print) -> ServedComparison:
    """Package the SavedModel FROM each image, serve both, time them interleaved; an image that cannot serve
    the model is reported with its reason (no ratio is invented)."""
    from builder.measure import stats
    from builder.measure.loop import time_interleaved
    from builder.bench.images import find_saved_model
    from builder.packaging.plan import GRPC_PORT, PackageOptions
    from builder.packaging.smoke import reference_backend, served_signature, smoke_inputs, wait_healthy
    from builder.packaging.workflow import package_model
    from builder.model.artifact import resolve_artifact

    if engine is None:
        from builder.engine import default_engine

        engine = default_engine()
    artifact = resolve_artifact(find_saved_model(model))
    try:
        signature = served_signature(reference_backend(artifact, "tensorflow"), None)
    except TfsmithError:
        raise
    except Exception as error:  # noqa: BLE001 - TensorFlow's own refusal, kept whole in its first line
        text = str(error).strip()
        raise InputError(f"{artifact.model_path}: TensorFlow cannot load this SavedModel here: "
                         f"{type(error).__name__}: {text.splitlines()[0] if text else ''}") from None
    inputs, _ = smoke_inputs(artifact, signature, count=1)
    run = uuid.uuid4().hex[:8]
    timings: dict[str, ServedTiming] = {}
    tags: dict[str, str] = {}
    for index, image in enumerate((first, second)):
        tag = f"tfsmith-bench/served-{artifact.name.lower()}:{run}-{index}"
        try:
            package_model(artifact, PackageOptions(kind="tensorflow", base_image=image, tag=tag,
                                                   workers=1, threads=threads),
                          model_name=artifact.name, smoke=False, engine=engine, say=say)
            tags[image] = tag
        except (TfsmithError, EngineError) as error:
            timings[image] = ServedTiming(image, error=str(error))
    runners: dict[str, Callable[[], Any]] = {}
    versions: dict[str, str] = {}
    try:
        with ExitStack() as stack:
            for image, tag in tags.items():
                running = stack.enter_context(engine.start(tag, ports=(8501, GRPC_PORT)))
                try:
                    wait_healthy(running.url(8501), running.exited, timeout_s=240.0)
                except TfsmithError as error:
                    timings[image] = ServedTiming(image, error=str(error))
                    continue
                code, version = running.exec(["/opt/venv/bin/python", "-c",
                                              "import tensorflow as tf; print(tf.__version__)"])
                versions[image] = version.strip().splitlines()[-1] if code == 0 and version.strip() else ""
                call, close = grpc_caller(running.host, running.host_port(GRPC_PORT), artifact.name,
                                          signature.name, inputs)
                stack.callback(close)
                runners[image] = call
            say(f"timing {', '.join(runners)} through gRPC for {budget_s:g} s, interleaved")
            samples = time_interleaved(runners, budget_s) if runners else {}
    finally:
        for tag in tags.values():
            engine.remove_image(tag)
    for image, latencies in samples.items():
        summary = stats.summarize(latencies, min_samples=1)
        timings[image] = ServedTiming(image, summary.p50 * 1e3, (summary.ci_low * 1e3, summary.ci_high * 1e3),
                                      len(latencies), versions.get(image, ""))
    notes = ("both images serve the same SavedModel with the same server and wheels: only TensorFlow differs",)
    return ServedComparison(timings[first], timings[second], threads, signature.name, notes)
