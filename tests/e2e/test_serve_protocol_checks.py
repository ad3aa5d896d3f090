"""The smoke test's protocol calls (`builder.packaging.protocol_checks`) against `tfsmith serve`: plain grpcio
and urllib, no TF Serving or Triton client, right answers for a two-input two-output model, one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.packaging.protocol_checks import ProtocolCheckError, check_grpc, check_v2
from builder.model.backend import LiteRTBackend
from builder.model.inputs import sample_inputs
from tests.e2e.test_serve import IN_FRONT, STOPPED, Server, models  # noqa: F401 - models is a fixture


def test_grpc_and_v2_checks_return_the_models_answers(models: Path) -> None:  # noqa: F811
    local = LiteRTBackend(models / "pair.tflite")
    signature = next(iter(local.signatures.values()))
    feed = sample_inputs(signature, batch=3, seed=61)
    want = local.predict(signature.name, feed)
    running = Server(*IN_FRONT, str(models / "pair.tflite"), "--model-name", "pair", grpc=True)
    try:
        for got in (check_grpc("127.0.0.1", running.grpc_port, "pair", 1, feed),
                    check_grpc("127.0.0.1", running.grpc_port, "pair", None, feed),
                    check_v2(running.url, "pair", feed)):
            assert set(got) == set(want)
            for name in want:
                assert got[name].dtype == want[name].dtype and np.allclose(got[name], want[name], rtol=1e-6)
        with pytest.raises(ProtocolCheckError, match="NOT_FOUND"):
            check_grpc("127.0.0.1", running.grpc_port, "pair", 2, feed)
        with pytest.raises(ProtocolCheckError, match="HTTP 400"):
            check_v2(running.url, "pair", {"a": feed["a"]})
    finally:
        assert running.stop() in STOPPED
    with pytest.raises(ProtocolCheckError, match="health/ready"):
        check_v2(running.url, "pair", feed, timeout_s=2)
