"""The data plane's lookup and decoding thread, the one outcome type, and the JSON codec, without a server (real
Metrics, real msgspec)."""

from __future__ import annotations

import asyncio
import json
import math
import threading

import numpy as np
import pytest

from builder.model.failures import ModelInputError
from builder.server.core.call import Call, RequestError
from builder.server.core.dataplane import DataPlane
from builder.server.core.metrics import Metrics
from builder.server.core.outcome import ClientGone, Outcome, of_grpc, outcome, outcome_of
from builder.server.core.dataplane import ModelSet, ServedModel
from builder.server.protocols import jsoncodec


def _plane(ready: bool = True) -> DataPlane:
    models = ModelSet()
    served = ServedModel(name="m", version=1, signatures={}, batcher=None, runtime="litert")  # type: ignore[arg-type]
    served.ready = ready
    models.set("m", {1: served})
    return DataPlane(models, Metrics(), offload_bytes=1024)


def test_every_outcome_is_one_http_status_grpc_code_label_and_reason() -> None:
    assert outcome_of(RequestError("unknown", status=404)) == Outcome(404, 5, "NOT_FOUND", "unknown")
    assert outcome_of(ModelInputError("gather index out of bounds.")) == Outcome(400, 3, "INVALID_ARGUMENT",
                                                                                "gather index out of bounds.")
    assert outcome_of(ClientGone()) == Outcome(499, 1, "CANCELLED", "client disconnected")
    own = outcome_of(ZeroDivisionError("boom"))
    assert (own.http, own.grpc, own.label, own.reason) == (500, 13, "INTERNAL", "internal error: ZeroDivisionError: boom")
    assert json.loads(outcome(413, "too large").body) == {"error": "too large"}
    assert outcome(431).label == "RESOURCE_EXHAUSTED" and outcome(418).label == "INVALID_ARGUMENT"
    assert of_grpc(14).http == 503 and of_grpc(0) == outcome(200) and of_grpc(12).label == "UNIMPLEMENTED"


def test_requests_in_flight_are_read_when_scraped() -> None:
    metrics = Metrics()
    metrics.active += 2
    assert b"tfsmith_requests_in_flight 2.0" in metrics.exposition()
    metrics.active -= 2
    assert b"tfsmith_requests_in_flight 0.0" in metrics.exposition()


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
    here = lambda served: (served.name, threading.current_thread().name)  # noqa: E731

    async def scenario() -> tuple[str, str, str, str]:
        metrics = plane.metrics
        metrics.active += 1  # as the router counts a request it answers
        _, (_, alone) = await plane.read("m", None, None, 10_000, here)  # nobody to keep waiting: no hop
        metrics.active += 1
        _, (_, small) = await plane.read("m", None, None, 10, here)
        served, (name, large) = await plane.read("m", None, None, 10_000, here)  # decoded against the version
        assert served.name == name == "m"
        metrics.active -= 2
        return alone, small, large, threading.current_thread().name

    alone, small, large, loop = asyncio.run(scenario())
    plane.close()
    assert alone == small == loop and large.startswith("tfsmith-decode")
    assert plane.metrics.active == 0


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


def test_a_version_answers_only_the_outputs_its_call_asks_for_in_the_order_asked() -> None:
    class Batcher:
        async def predict(self, call: Call) -> dict[str, np.ndarray]:
            return {"a": np.zeros(1), "b": np.ones(1), "c": np.full(1, 2.0)}

    served = ServedModel(name="m", version=1, signatures={}, batcher=Batcher(),  # type: ignore[arg-type]
                         runtime="litert")
    every = asyncio.run(served.predict(Call("serving_default", {}, 1)))
    picked = asyncio.run(served.predict(Call("serving_default", {}, 1, outputs=("c", "a"))))
    assert list(every) == ["a", "b", "c"] and list(picked) == ["c", "a"] and picked["c"][0] == 2.0
