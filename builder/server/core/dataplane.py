"""The protocol-neutral data plane: what every request does, whichever protocol it arrived by.

Shaped as MLServer's `handlers/dataplane.py`: lookup, readiness, metadata and inference are written once
here, and TF Serving REST (`tfs_rest`), the Open Inference Protocol (`v2`) and gRPC (`tfs_grpc`) only
translate between their wire formats and what these return.

- Lookup (`lookup`): a model by name, version (a number, or a URL path segment: a malformed one is a 404 as
  in TF Serving) and label, in TF Serving's wording (`ModelSet.get`); `resolve` also refuses a version that
  is not ready (503). Status (`status`), readiness (`model_ready`) and metadata (`metadata`) all start here.
- Inference (`infer`): read the body, resolve, decode (off the event loop when large), run the batcher and
  encode; each protocol brings only its `Codec` (decode its request into a `Call`, encode the answer).
  A codec may decode provisionally (`Provisional`: a fast decode, the check that proves it, and the sure
  decode to fall back on); the check runs before the model does.
- Bookkeeping (`request`): every route of every protocol is counted (in-flight gauge, request counter and
  latency histogram by entrypoint and API, the gRPC access line); the status recorded is the one the
  exception leaving the block carries (`RequestError.status`, 499 for a client that went away, 500 for
  anything else), so an adapter cannot forget to count a failure nor count a hang-up as the server's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

from builder.model.failures import ModelInputError
from builder.server.core.metrics import Metrics, Timer
from builder.model.signature import SignatureSpec
from builder.server.core.call import Address, Call, RequestError, choose_signature, parse_version
from builder.server.core.repository import ModelSet, ServedModel

T = TypeVar("T")
B = TypeVar("B", contravariant=True)  # a protocol's request as read (REST: bytes; gRPC: a message)
D = TypeVar("D")  # what a protocol keeps of its request for the answer (v2: the document; gRPC: the filter)
R = TypeVar("R", covariant=True)  # a protocol's answer

#: Bodies at least this large are decoded off the event loop (a thread hop costs ~50 us; decoding 64 KiB
#: of JSON numbers costs about as much, so smaller bodies are decoded where they are).
OFFLOAD_BYTES = 64 * 1024
#: The status a request is counted with when its client went away before the answer (nginx's 499, which
#: the metrics label CANCELLED as gRPC does): not the server's failure, and no one receives an answer.
CLIENT_GONE = 499


class ClientGone(Exception):
    """The client disconnected before its answer: nobody is left to answer."""


@dataclass
class Outcome:
    """What one request ended as; `status` is set by `DataPlane.request` from the exception, if any, or by
    an adapter that answers a non-200 without raising (a readiness probe's 503)."""

    status: int = 200


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


@dataclass(frozen=True)
class Provisional(Generic[D]):
    """A decode that is right only if `confirm()` says so (a check that reads the whole body once more); when
    it says no, `fallback()` decodes the body the sure way (`settle`)."""

    decoded: tuple[Call, D]
    confirm: Callable[[], bool]
    fallback: Callable[[], tuple[Call, D]]


class Codec(Protocol[B, D, R]):
    """One protocol's side of an inference: how its request becomes a call and the outputs its answer."""

    def size(self, body: B) -> int:
        """How many bytes of text decoding `body` reads (large ones are decoded off the event loop)."""

    def decode(self, served: ServedModel, body: B) -> tuple[Call, D] | Provisional[D]:
        """The validated call, and what the answer needs of the request; RequestError for a bad one."""

    def encode(self, served: ServedModel, call: Call, request: D, outputs: Mapping[str, np.ndarray]) -> R:
        """The protocol's answer to `call`."""


class DataPlane:
    """The served models plus the bookkeeping around every call to them."""

    def __init__(self, models: ModelSet, metrics: Metrics,
                 offload_bytes: int = OFFLOAD_BYTES) -> None:
        self.models = models
        self.metrics = metrics
        self.offload_bytes = offload_bytes
        self.in_flight = 0  # requests of any route being answered now (`request`)
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

    # --- inference -----------------------------------------------------------------------------------

    async def infer(self, entrypoint: str, address: Address, read: Callable[[], Awaitable[T]],
                    codec: Codec[T, D, R]) -> R:
        """One inference, whichever protocol: the body read (first: an unread body resets the socket), the
        model resolved, the body decoded by the protocol's codec, the batcher run and the answer encoded;
        counted as `predict` under `entrypoint`."""
        async with self.request(entrypoint, "predict", address.name):
            body = await read()
            served = self.resolve(address.name, address.version, address.label)
            size = codec.size(body)
            call, request = await self.decode(size, lambda: settle(codec.decode(served, body)))
            outputs = await served.predict(call)
            return codec.encode(served, call, request, outputs)

    async def decode(self, size: int, parse: Callable[[], T]) -> T:
        """`parse()`, which decodes `size` bytes of JSON: on a worker thread when large and other requests
        are in flight (a 3 MB image body takes milliseconds, which they would otherwise wait through), else
        right here: alone in flight, the hop to the thread and back only adds to this request's time."""
        if size < self.offload_bytes or self.in_flight <= 1:
            return parse()
        return await asyncio.get_running_loop().run_in_executor(self._decoder, parse)

    # --- bookkeeping ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def request(self, entrypoint: str, api: str, name: str = "") -> AsyncIterator[Outcome]:
        """Count one call of any route (in flight while inside; then its status and latency under
        `entrypoint`/`api`, for model `name`: "" for server-wide routes such as health, "unknown" for a
        name not served). Access lines are the front's (`access_log.logged`)."""
        timer, outcome = Timer(), Outcome()
        self.metrics.in_flight.inc()
        self.in_flight += 1
        try:
            yield outcome
        except RequestError as error:
            outcome.status = error.status
            raise
        except ModelInputError:  # the model refused what the client sent: answered 400 (`answers.failure`)
            outcome.status = 400
            raise
        except (ClientGone, asyncio.CancelledError):
            outcome.status = CLIENT_GONE
            raise
        except BaseException:
            outcome.status = 500
            raise
        finally:
            elapsed = timer.elapsed()
            self.metrics.in_flight.dec()
            self.in_flight -= 1
            model = name if not name or name in self.models.models else "unknown"
            self.metrics.request(model, api, entrypoint, outcome.status, elapsed)

    def close(self) -> None:
        self._decoder.shutdown(wait=False)


def settle(decoded: tuple[Call, D] | Provisional[D]) -> tuple[Call, D]:
    """A decode made sure: a provisional one checked here, and replaced by its fallback when the check fails."""
    if not isinstance(decoded, Provisional):
        return decoded
    return decoded.decoded if decoded.confirm() else decoded.fallback()
