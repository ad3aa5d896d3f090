"""The data plane's bookkeeping, its provisional decodes and the JSON codec, without a server (real Metrics, real
msgspec, the real batcher over a stand-in interpreter)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import uvloop

from builder.server.protocols import jsoncodec
from builder.model.failures import ModelInputError
from builder.server.core.batching import BatchingConfig, DynamicBatcher
from builder.server.core.call import Address, Call, RequestError
from builder.server.core.dataplane import DataPlane, Provisional
from builder.server.core.metrics import Metrics, status_label
from builder.server.core.repository import ModelSet, ServedModel


def _plane(ready: bool = True) -> DataPlane:
    models = ModelSet()
    served = ServedModel(name="m", version=1, signatures={}, batcher=None, runtime="litert")  # type: ignore[arg-type]
    served.ready = ready
    models.set("m", {1: served})
    return DataPlane(models, Metrics(), offload_bytes=1024)


async def _fail(plane: DataPlane, name: str, error: Exception) -> None:
    async with plane.request("REST", "predict", name):
        raise error


def test_every_request_is_counted_with_the_status_its_exception_carries() -> None:
    plane = _plane()

    async def scenario() -> None:
        async with plane.request("REST", "predict", "m") as outcome:
            assert plane.metrics.in_flight._value.get() == 1  # counted while inside
        assert outcome.status == 200
        with pytest.raises(RequestError):
            await _fail(plane, "nope", RequestError("unknown", status=404))
        with pytest.raises(ZeroDivisionError):
            await _fail(plane, "m", ZeroDivisionError("boom"))
        with pytest.raises(ModelInputError):  # the model refused what the client sent: answered 400
            await _fail(plane, "m", ModelInputError("gather index out of bounds."))

    asyncio.run(scenario())
    assert plane.metrics.counts == {("m", "OK"): 1, ("unknown", "NOT_FOUND"): 1, ("m", status_label(500)): 1,
                                    ("m", "INVALID_ARGUMENT"): 1}
    assert plane.metrics.in_flight._value.get() == 0


def test_a_version_that_is_not_ready_is_refused_with_503_and_unknown_ones_with_404() -> None:
    plane = _plane(ready=False)
    with pytest.raises(RequestError, match="not ready") as refused:
        plane.resolve("m")
    assert refused.value.status == 503
    with pytest.raises(RequestError, match="Servable not found") as missing:
        plane.resolve("m", "7")
    assert missing.value.status == 404
    with pytest.raises(RequestError, match="malformed version") as malformed:
        plane.lookup("m", "x1")  # a URL segment that is no version: TF Serving's 404
    assert malformed.value.status == 404
    assert plane.lookup("m", "1") is plane.lookup("m", 1) is plane.lookup("m")


def test_large_bodies_are_decoded_off_the_event_loop_only_while_others_are_in_flight() -> None:
    plane = _plane()
    here = lambda: threading.current_thread().name  # noqa: E731

    async def scenario() -> tuple[str, str, str, str]:
        async with plane.request("REST", "predict", "m"):
            alone = await plane.decode(10_000, here)  # nobody to keep waiting: no hop to a thread and back
            async with plane.request("V2", "predict", "m"):
                small = await plane.decode(10, here)
                large = await plane.decode(10_000, here)
        return alone, small, large, threading.current_thread().name

    alone, small, large, loop = asyncio.run(scenario())
    plane.close()
    assert alone == small == loop and large.startswith("tfsmith-decode")
    assert plane.in_flight == 0


@pytest.mark.parametrize("body", [
    b'{"instances": [[1.5, -2, 3e-05]], "signature_name": "x"}',
    b'{"instances": [NaN, Infinity]}',  # the standard library reads these; msgspec does not
    b'{"instances": [123456789012345678901234567890]}',  # beyond 64 bits
    b'{"s": "\\ud800"}',  # a lone surrogate escape
])
def test_decoding_means_what_the_standard_library_means(body: bytes) -> None:
    got, want = jsoncodec.loads(body), json.loads(body)
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("body", [b'{"a": 1,}', b"\xff", b'{"a": [1, 2}', b"01"])
def test_malformed_bodies_fail_as_the_standard_library_fails(body: bytes) -> None:
    with pytest.raises((ValueError, UnicodeDecodeError)) as ours:
        jsoncodec.loads(body)
    with pytest.raises((ValueError, UnicodeDecodeError)) as theirs:
        json.loads(body)
    assert str(ours.value) == str(theirs.value)


def test_answers_round_trip_and_non_finite_floats_stay_nan_as_before() -> None:
    content = {"predictions": [[0.1, 1e-07, -3.0, 12345678.9]], "name": "é"}
    assert json.loads(jsoncodec.dumps(content)) == content
    written = jsoncodec.dumps({"outputs": [math.nan, math.inf]})
    assert written == b'{"outputs":[NaN,Infinity]}'
    assert json.loads(jsoncodec.dumps({"error": "bad \ud800 key"})) == {"error": "bad \ud800 key"}


# --- a provisional decode: checked before the model runs ---------------------------------------------------

class _Model:
    """A pool of one interpreter that answers y = sum(x) per example and says when it ran."""

    size = 1

    def __init__(self) -> None:
        self.calls: list[float] = []

    def predict(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(float(inputs["x"].sum()))
        return {"y": inputs["x"].sum(axis=1, keepdims=True)}


class _Provisionally:
    """A codec whose decode is provisional: x = [[1, 1]], unless its check says no; then x = [[2, 2]]."""

    def __init__(self, model: _Model, holds: bool) -> None:
        self.model, self.holds = model, holds
        self.model_had_run: list[bool] = []

    def size(self, body: bytes) -> int:
        return 4096

    def _call(self, value: float) -> tuple[Call, None]:
        x = np.full((1, 2), value, dtype=np.float32)
        return Call(signature="serving_default", inputs={"x": x}, batch=1), None

    def confirm(self) -> bool:
        self.model_had_run.append(bool(self.model.calls))
        return self.holds

    def decode(self, served: ServedModel, body: bytes) -> Provisional[None]:
        return Provisional(self._call(1.0), self.confirm, lambda: self._call(2.0))

    def encode(self, served: ServedModel, call: Call, request: None, outputs: dict[str, np.ndarray]) -> float:
        return float(outputs["y"][0, 0])


def _infer(model: _Model, codec: _Provisionally, batching: BatchingConfig) -> float:
    executor = ThreadPoolExecutor(max_workers=1)
    batcher = DynamicBatcher(model, batching, executor, batchable=True)  # type: ignore[arg-type]
    models = ModelSet()
    models.set("m", {1: ServedModel(name="m", version=1, signatures={}, batcher=batcher, runtime="litert",
                                    ready=True)})
    plane = DataPlane(models, Metrics(), offload_bytes=1024)

    async def body() -> bytes:
        return b"{}"

    try:
        return uvloop.run(plane.infer("REST", Address("m"), body, codec))
    finally:
        plane.close()
        executor.shutdown(wait=False)


@pytest.mark.parametrize("batching", [BatchingConfig(), BatchingConfig(max_batch_size=8)], ids=["alone", "batched"])
def test_a_provisional_decode_is_checked_before_the_model_runs_on_it(batching: BatchingConfig) -> None:
    model = _Model()
    codec = _Provisionally(model, holds=True)
    assert _infer(model, codec, batching) == 2.0  # sum of the provisional x = [1, 1]
    assert codec.model_had_run == [False] and model.calls == [2.0]


def test_a_provisional_decode_whose_check_fails_is_answered_from_its_fallback_alone() -> None:
    model = _Model()
    codec = _Provisionally(model, holds=False)
    assert _infer(model, codec, BatchingConfig()) == 4.0  # the fallback's x = [2, 2]
    assert codec.model_had_run == [False] and model.calls == [4.0]  # the model ran once, on the sure decode
