"""The protocol-neutral data plane: what every request does, whichever protocol it arrived by, in its own terms
(`call`: the call, the address, request errors), and the served models it answers from.

Shaped as MLServer's `handlers/dataplane.py`: lookup, readiness, metadata and the decoding thread are written
once here, and TF Serving REST (`tfs_rest`), the Open Inference Protocol (`v2`) and gRPC (`tfs_grpc`) decode
their wire forms into a `Call` and encode the outputs themselves; nothing here knows a wire format.

- Lookup (`lookup`): a model by name, version (a number, or a URL path segment: a malformed one is a 404 as
  in TF Serving) and label, in TF Serving's wording (`ModelSet.get`); `resolve` also refuses a version that
  is not ready (503). Status (`status`), readiness (`model_ready`) and metadata (`metadata`) all start here.
- Inference: a protocol reads its request (`read`: the model resolved and the body decoded against its
  signatures, a large body off the event loop) and runs the call (`ServedModel.predict`: the batcher, which
  answers the outputs the call asks for).
- The served models: one version (`ServedModel`) and all of them (`ModelSet`). REST (TF Serving's and the
  Open Inference Protocol's) and gRPC all answer from one `ServedModel`, so a request means the same thing
  whichever door it comes through: the same name/version rules, the same validation (`call`), the same
  batcher and interpreter pool.
- Counting is the route table's router's (`routes.Router`, `core.outcome`): every request of every route,
  with the outcome it ended as.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from builder.model.signature import SignatureSpec
from builder.server.core.runner import DynamicBatcher
from builder.server.core.call import Call, RequestError, choose_signature, parse_version
from builder.server.core.metrics import Metrics
from builder.server.core.ranges import Ranges, check_ranges

T = TypeVar("T")

@dataclass
class ServedModel:
    """One model version behind the server; `ready` turns true once it is loaded and warmed, false on drain."""

    name: str
    version: int
    signatures: Mapping[str, SignatureSpec]
    batcher: DynamicBatcher
    runtime: str
    max_request_batch: int = 4096
    default_signature: str | None = None  # what a request naming no signature gets (protocol.default_signature)
    platform: str = ""  # the model's format as v2 metadata names it (e.g. litert_tflite, tensorflow_savedmodel)
    model_p50_us: float | None = None  # the start-up self-test's median call time (None: not measured)
    pool: Any = None  # the interpreter pool (`runner.BackendPool`) the batcher runs on, for /healthz
    ready: bool = False
    #: the values of integer inputs the original model accepts, by signature (`ranges`): others are refused
    ranges: Ranges = field(default_factory=dict)
    active: int = 0  # predict calls in progress (a retired version is closed when this reaches 0)

    def signature(self, name: str) -> SignatureSpec:
        """The named signature, or the default one for an empty name (RequestError 400 otherwise)."""
        return choose_signature(name, self.signatures, self.default_signature)

    async def predict(self, call: Call) -> dict[str, np.ndarray]:
        """The outputs the call asks for (`Call.outputs`, in its order; every one when it names none);
        RequestError 400 for a value the original model refuses (`ranges`)."""
        if self.ranges:
            check_ranges(call, self.ranges)
        self.active += 1
        try:
            outputs = await self.batcher.predict(call)
        finally:
            self.active -= 1
        return {name: outputs[name] for name in call.outputs} if call.outputs else outputs

    def close(self) -> None:
        """Let go of the interpreters (called once no request uses this version any more)."""
        self.ready = False
        executor = getattr(self.batcher, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)
        self.batcher = None  # type: ignore[assignment]
        self.pool = None


class ModelSet:
    """Every served model version by name, plus version labels; what each request resolves against.

    A reload builds the new versions aside and swaps a name's whole entry in one assignment, so a request
    sees either the old set or the new one, never half of each; a request that resolved an old version keeps
    its `ServedModel` (and so its interpreters) until it is answered.
    """

    def __init__(self) -> None:
        self.models: dict[str, dict[int, ServedModel]] = {}
        self.labels: dict[str, dict[str, int]] = {}
        self.draining = False

    def set(self, name: str, versions: dict[int, ServedModel], labels: Mapping[str, int] | None = None) -> None:
        self.models[name] = dict(versions)
        self.labels[name] = {k: v for k, v in (labels or {}).items() if v in versions}

    def get(self, name: str, version: int | None = None, label: str | None = None) -> ServedModel:
        """The version a request addresses (latest when none); RequestError 404 in TF Serving's wording."""
        versions = self.models.get(name)
        if not versions:
            raise RequestError(f"Servable not found for request: Latest({name})", status=404)
        if label:
            if label not in self.labels.get(name, {}):
                raise RequestError(f"Unrecognized servable version label: {label}", status=404)
            version = self.labels[name][label]
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            raise RequestError(f"Servable not found for request: Specific({name}, {version})", status=404)
        return versions[version]

    def versions(self, name: str) -> list[int]:
        self.get(name)
        return sorted(self.models[name])

    def all(self) -> list[ServedModel]:
        return [served for versions in self.models.values() for served in versions.values()]

    @property
    def ready(self) -> bool:
        """Every configured model has a loaded, warmed version, and the server is not draining."""
        return not self.draining and bool(self.models) and all(
            any(s.ready for s in versions.values()) for versions in self.models.values())


#: Bodies at least this large are decoded off the event loop (a thread hop costs ~50 us; decoding 64 KiB
#: of JSON numbers costs about as much, so smaller bodies are decoded where they are).
OFFLOAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class ModelMetadata:
    """What every protocol's metadata answer is made of; each writes it in its own format."""

    name: str
    version: int
    versions: tuple[int, ...]
    signatures: Mapping[str, SignatureSpec]
    default_signature: str | None
    platform: str

    def signature(self, name: str = "") -> SignatureSpec:
        """The named signature, or the default one for an empty name (RequestError 400 otherwise)."""
        return choose_signature(name, self.signatures, self.default_signature)


class DataPlane:
    """The served models plus the bookkeeping around every call to them."""

    def __init__(self, models: ModelSet, metrics: Metrics,
                 offload_bytes: int = OFFLOAD_BYTES) -> None:
        self.models = models
        self.metrics = metrics
        self.offload_bytes = offload_bytes
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfsmith-decode")

    # --- lookup, readiness, status, metadata ---------------------------------------------------------

    def lookup(self, name: str, version: int | str | None = None, label: str | None = None) -> ServedModel:
        """The version a request addresses (latest without version or label); 404 for one not served,
        including a version path segment that is no version number."""
        number = parse_version(version) if isinstance(version, str) else version
        return self.models.get(name, number, label)

    def resolve(self, name: str, version: int | str | None = None, label: str | None = None) -> ServedModel:
        """`lookup` of a version that must be ready to predict: 503 while it loads or after it is retired."""
        served = self.lookup(name, version, label)
        if not served.ready:
            raise RequestError(f"model {name} version {served.version} is not ready (loading or retired)",
                               status=503)
        return served

    def model_ready(self, name: str, version: int | str | None = None) -> bool:
        """Whether the addressed version would predict now (404 for one not served)."""
        return self.lookup(name, version).ready and not self.models.draining

    def status(self, name: str, version: int | str | None = None, label: str | None = None) -> list[int]:
        """The versions a status request covers: every served one, or the one it names."""
        if version is None and not label:
            return self.models.versions(name)
        return [self.lookup(name, version, label).version]

    def metadata(self, name: str, version: int | str | None = None, label: str | None = None) -> ModelMetadata:
        served = self.lookup(name, version, label)
        return ModelMetadata(name=served.name, version=served.version, versions=tuple(self.models.versions(name)),
                             signatures=served.signatures, default_signature=served.default_signature,
                             platform=served.platform or f"{served.runtime}_tflite")

    def versions(self, name: str) -> list[int]:
        return self.models.versions(name)

    @property
    def ready(self) -> bool:
        return self.models.ready

    def set_ready(self, ready: bool) -> None:
        """Readiness for every protocol (and the metric): true once warmed, false while draining."""
        self.models.draining = not ready
        for name in self.models.models:
            self.metrics.ready.labels(name).set(1 if ready else 0)

    # --- inference ---------------------------------------------------------------------------------------

    async def read(self, name: str, version: int | str | None, label: str | None, size: int,
                   decode: Callable[[ServedModel], T]) -> tuple[ServedModel, T]:
        """The addressed version, ready to predict (`resolve`), and what `decode(served)` makes of a request of
        `size` bytes against its signatures (a protocol's decoding of its body into a call). One call for
        both, so a protocol enters the data plane once to read a request and once to run it (`predict`).

        Decoded on a worker thread when large and other requests are in flight (a 3 MB image body takes
        milliseconds, which they would otherwise wait through), else right here: alone in flight, the hop to
        the thread and back only adds to this request's time."""
        served = self.resolve(name, version, label)
        if size < self.offload_bytes or self.metrics.active <= 1:
            return served, decode(served)
        return served, await asyncio.get_running_loop().run_in_executor(self._decoder, decode, served)

    def close(self) -> None:
        self._decoder.shutdown(wait=False)
