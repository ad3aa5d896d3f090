"""The served models as every protocol sees them: one version (`ServedModel`) and all of them (`ModelSet`).

REST (TF Serving's and the Open Inference Protocol's) and gRPC all answer from one `ServedModel`, so a
request means the same thing whichever door it comes through: the same name/version rules, the same
validation (`call`), the same batcher and interpreter pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from builder.server.core.batching import DynamicBatcher
from builder.model.signature import SignatureSpec
from builder.server.core.call import Call, RequestError, choose_signature
from builder.server.core.ranges import Ranges, check_ranges


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
    pool: Any = None  # the interpreter pool (`backends.BackendPool`) the batcher runs on, for /healthz
    ready: bool = False
    #: the values of integer inputs the original model accepts, by signature (`ranges`): others are refused
    ranges: Ranges = field(default_factory=dict)
    active: int = 0  # predict calls in progress (a retired version is closed when this reaches 0)

    def signature(self, name: str) -> SignatureSpec:
        """The named signature, or the default one for an empty name (RequestError 400 otherwise)."""
        return choose_signature(name, self.signatures, self.default_signature)

    async def predict(self, call: Call) -> dict[str, np.ndarray]:
        """The call's outputs; RequestError 400 for a value the original model refuses (`ranges`)."""
        if self.ranges:
            check_ranges(call, self.ranges)
        self.active += 1
        try:
            return await self.batcher.predict(call)
        finally:
            self.active -= 1

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
