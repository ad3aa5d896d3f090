"""The protocol-neutral data plane: what every request does, whichever protocol it arrived by.

TF Serving REST (`tfs_rest`), the Open Inference Protocol (`v2`) and gRPC (`grpc_service`) only translate
between their wire format and numpy; everything else is here, once: resolving the model, version and label
(`ModelSet.get`, TF Serving's wording), refusing a version that is not ready, running the batcher, and the
bookkeeping every request gets (in-flight gauge, request counter and latency histogram, the gRPC access
log line). Adapters enter `DataPlane.request` around a call; the status it records is the one the
exception leaving the block carries (`RequestError.status`, 500 for anything else), so an adapter cannot
forget to count a failure. (REST's access log is the ASGI middleware, `access_log.AccessLog`: it also
sees the requests no route matched.)

Large JSON bodies are decoded on a worker thread (`DataPlane.decode`): a 3 MB image body takes milliseconds
to decode, and on the event loop every small request arriving meanwhile would wait for it. Where a decoding
helper measured faster at start-up (`decode_helper`), the plane offers it as `halves` to a request alone
in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from builder.server import tensor_json
from builder.server.access_log import log_request
from builder.server.decode_helper import DecodeHelper
from builder.server.metrics import Metrics, Timer
from builder.server.protocol import PredictCall, RequestError, parse_version
from builder.server.served import ModelSet, ServedModel

T = TypeVar("T")

#: Bodies at least this large are decoded off the event loop (a thread hop costs ~50 us; decoding 64 KiB
#: of JSON numbers costs about as much, so smaller bodies are decoded where they are).
OFFLOAD_BYTES = 64 * 1024


@dataclass
class Outcome:
    """What one request ended as; `status` is set by `DataPlane.request` from the exception, if any."""

    status: int = 200


class DataPlane:
    """The served models plus the bookkeeping around every call to them."""

    def __init__(self, models: ModelSet, metrics: Metrics, access_log: bool = False,
                 offload_bytes: int = OFFLOAD_BYTES, halves: DecodeHelper | None = None) -> None:
        self.models = models
        self.metrics = metrics
        self.access_log = access_log
        self.offload_bytes = offload_bytes
        self._halves = halves  # reads part of a large JSON tensor on another core (`tensor_json.HalfReader`)
        self.in_flight = 0
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfsmith-decode")

    def resolve(self, name: str, version: int | None = None, label: str | None = None) -> ServedModel:
        """The version a request addresses (latest without version or label); 404 unknown, 503 not ready."""
        served = self.models.get(name, version, label)
        if not served.ready:
            raise RequestError(f"model {name} version {served.version} is not ready (loading or retired)",
                               status=503)
        return served

    def resolve_path(self, name: str, version: str | None = None, label: str | None = None) -> ServedModel:
        """`resolve` with the version as a URL path segment (TF Serving: a malformed one is a 404)."""
        return self.resolve(name, None if version is None else parse_version(version), label)

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

    @asynccontextmanager
    async def request(self, entrypoint: str, api: str, name: str, peer: str | None = None
                      ) -> AsyncIterator[Outcome]:
        """Count one call (in flight while inside; then its status and latency under `entrypoint`/`api`),
        and write its access line when `peer` is given and access logging is on (gRPC)."""
        timer, outcome = Timer(), Outcome()
        self.metrics.in_flight.inc()
        self.in_flight += 1
        try:
            yield outcome
        except RequestError as error:
            outcome.status = error.status
            raise
        except BaseException:
            outcome.status = 500
            raise
        finally:
            elapsed = timer.elapsed()
            self.metrics.in_flight.dec()
            self.in_flight -= 1
            self.metrics.request(name if name in self.models.models else "unknown", api, entrypoint,
                                 outcome.status, elapsed)
            if self.access_log and peer is not None:
                log_request(protocol=entrypoint.lower(), method=api, path=f"/{name}", status=outcome.status,
                            duration_ms=round(elapsed * 1e3, 3), remote=peer)

    @property
    def halves(self) -> DecodeHelper | None:
        """The decoding helper for a request that is alone in flight; None under concurrency, when every core
        already has a request to serve: then the helper's extra work (copies, hand-overs) would only take
        CPU from them (MobileNetV2 at 16 clients: 50 req/s with it on every request, 53 without)."""
        return self._halves if self.in_flight <= 1 else None

    @property
    def decode_cores(self) -> int:
        """How many cores read a large JSON body alone in flight (2 with a working helper)."""
        return 2 if self._halves is not None and not self._halves.broken else 1

    def read_ahead(self, name: str, version: str | None, label: str | None, content_length: str | None,
                   content_encoding: str | None) -> tensor_json.ReadAhead | None:
        """A read-ahead for a large TF Serving body still arriving (`tensor_json.ReadAhead`), when the helper is
        here and free and the path names a model; None otherwise (the body is then read as it always is)."""
        if self.halves is None:
            return None
        try:
            served = self.resolve_path(name, version, label)
        except RequestError:  # answered once the body is read, as without a read-ahead
            return None
        return tensor_json.ReadAhead.begin(self.halves, content_length, content_encoding, served.signatures,
                                           served.default_signature)

    def dismiss(self, ahead: tensor_json.ReadAhead) -> None:
        """Free the helper of a read-ahead whose body was never decoded (refused, client gone): on the decode
        thread, after whatever it is doing, since it may wait for the helper's answer."""
        if ahead.pending:
            self._decoder.submit(ahead.close)

    async def decode(self, size: int, parse: Callable[[], T]) -> T:
        """`parse()`, which decodes `size` bytes of JSON: on a worker thread when large, else right here."""
        if size < self.offload_bytes:
            return parse()
        return await asyncio.get_running_loop().run_in_executor(self._decoder, parse)

    async def predict(self, served: ServedModel, call: PredictCall) -> dict[str, np.ndarray]:
        """The model's outputs for a validated call, through the version's batcher."""
        return await served.predict(call)

    def close(self) -> None:
        self._decoder.shutdown(wait=False)
        if self._halves is not None:
            self._halves.close()
