"""The protocol-neutral data plane: what every request does, whichever protocol it arrived by, in its own terms
(`call`: the call, the address, request errors).

Shaped as MLServer's `handlers/dataplane.py`: lookup, readiness, metadata and the decoding thread are written
once here, and TF Serving REST (`tfs_rest`), the Open Inference Protocol (`v2`) and gRPC (`tfs_grpc`) decode
their wire forms into a `Call` and encode the outputs themselves; nothing here knows a wire format.

- Lookup (`lookup`): a model by name, version (a number, or a URL path segment: a malformed one is a 404 as
  in TF Serving) and label, in TF Serving's wording (`ModelSet.get`); `resolve` also refuses a version that
  is not ready (503). Status (`status`), readiness (`model_ready`) and metadata (`metadata`) all start here.
- Inference: a protocol resolves the model, decodes its body against the model's signatures (`decode` moves
  a large body's decoding off the event loop) and runs the call (`ServedModel.predict`: the batcher).
- Counting is the route table's router's (`routes.Router`, `core.outcome`): every request of every route,
  with the outcome it ended as.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from builder.model.signature import SignatureSpec
from builder.server.core.call import RequestError, choose_signature, parse_version
from builder.server.core.metrics import Metrics
from builder.server.core.repository import ModelSet, ServedModel

T = TypeVar("T")

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

    async def decode(self, size: int, parse: Callable[[], T]) -> T:
        """`parse()`, which decodes `size` bytes of a request: on a worker thread when large and other requests
        are in flight (a 3 MB image body takes milliseconds, which they would otherwise wait through), else
        right here: alone in flight, the hop to the thread and back only adds to this request's time."""
        if size < self.offload_bytes or self.metrics.active <= 1:
            return parse()
        return await asyncio.get_running_loop().run_in_executor(self._decoder, parse)

    def close(self) -> None:
        self._decoder.shutdown(wait=False)
