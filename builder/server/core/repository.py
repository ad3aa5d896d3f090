"""The served models as every protocol sees them: one version (`ServedModel`) and all of them (`ModelSet`).

REST (TF Serving's and the Open Inference Protocol's) and gRPC all answer from one `ServedModel`, so a
request means the same thing whichever door it comes through: the same name/version rules, the same
validation (`protocols.tfs_json`), the same batcher and interpreter pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.server.core.batching import DynamicBatcher
from builder.server.protocols.tfs_json import (
    PredictCall,
    RequestError,
    SignatureSpec,
    TensorSpec,
    check_shape,
    choose_signature,
)


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
    active: int = 0  # predict calls in progress (a retired version is closed when this reaches 0)

    def signature(self, name: str) -> SignatureSpec:
        """The named signature, or the default one for an empty name (RequestError 400 otherwise)."""
        return choose_signature({"signature_name": name or None}, self.signatures, self.default_signature)

    def call(self, signature: SignatureSpec, arrays: Mapping[str, np.ndarray], row_format: bool = False) -> PredictCall:
        """A predict call from named, already-typed arrays (gRPC and v2): names, dtypes and shapes checked."""
        names = [spec.name for spec in signature.inputs]
        missing, extra = sorted(set(names) - set(arrays)), sorted(set(arrays) - set(names))
        if missing or extra:
            parts = ([f"missing input(s) {', '.join(missing)}"] if missing else []) + (
                [f"unknown input(s) {', '.join(extra)}"] if extra else [])
            raise RequestError(f"inputs: {'; '.join(parts)} (this signature takes {', '.join(names)})")
        inputs: dict[str, np.ndarray] = {}
        for spec in signature.inputs:
            array = arrays[spec.name]
            _check_dtype(array, spec)
            check_shape(array, spec, f"inputs.{spec.name}", batched=True)
            if array.shape[0] > self.max_request_batch:
                raise RequestError(f"inputs.{spec.name}: batch {array.shape[0]} > {self.max_request_batch}")
            inputs[spec.name] = array
        if len({a.shape[0] for a in inputs.values()}) > 1:
            raise RequestError("inputs have different batch sizes")
        batch = next(iter(inputs.values())).shape[0]
        return PredictCall(signature=signature.name, inputs=inputs, row_format=row_format, batch=batch)

    async def predict(self, call: PredictCall) -> dict[str, np.ndarray]:
        """The call's outputs."""
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


_DTYPES: dict[str, np.dtype] = {}


def _check_dtype(array: np.ndarray, spec: TensorSpec) -> None:
    expected = _DTYPES.get(spec.dtype)
    if expected is None:
        expected = _DTYPES[spec.dtype] = np.dtype(spec.dtype)
    if array.dtype != expected:
        raise RequestError(f"inputs.{spec.name}: expects {spec.dtype}, got {array.dtype.name}")


def pick_outputs(outputs: Mapping[str, np.ndarray], signature: SignatureSpec,
                 wanted: Sequence[str]) -> dict[str, np.ndarray]:
    """The requested outputs (all when none are named); RequestError 400 for a name the signature lacks."""
    if not wanted:
        return {spec.name: outputs[spec.name] for spec in signature.outputs}
    return {name: outputs[name] for name in check_output_names(signature, wanted)}


def check_output_names(signature: SignatureSpec, wanted: Sequence[str]) -> list[str]:
    """`wanted` when every name is an output of the signature; RequestError 400 naming the others."""
    known = {spec.name for spec in signature.outputs}
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise RequestError(f"unknown output(s) {', '.join(unknown)}; this signature has {', '.join(sorted(known))}")
    return list(wanted)
