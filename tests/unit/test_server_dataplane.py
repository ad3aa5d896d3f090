"""The data plane's bookkeeping and the JSON codec, without a server (real Metrics, real msgspec)."""

from __future__ import annotations

import asyncio
import json
import math
import threading

import pytest

from builder.server import jsoncodec
from builder.server.dataplane import DataPlane
from builder.server.metrics import Metrics, status_label
from builder.server.protocol import RequestError
from builder.server.served import ModelSet, ServedModel


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

    asyncio.run(scenario())
    assert plane.metrics.counts == {("m", "OK"): 1, ("unknown", "NOT_FOUND"): 1, ("m", status_label(500)): 1}
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
