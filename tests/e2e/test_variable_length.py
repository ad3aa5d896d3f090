"""Models over sequences of any length: optimize -> serve -> the original's answers at lengths DATA never had.

A Conv1D (kernel 5) over frames and a bidirectional LSTM over token ids, both with an open time axis. Their
.tflite stores a placeholder length of 1, at which the convolution cannot prepare: the runtime must be
allocated at the shapes it is really called with, and never refuse a model it can run. Where optimize adds an
XLA-compiled `serving_xla`, it must not become the default while every new (batch, length) would compile:
the report says what the first call at a new shape cost each candidate, and the chosen one must not stall.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest

from builder.optimize.candidates import stalls
from builder.report import Report
from tests import zoo
from tests.e2e.test_serve import STOPPED, TFSMITH, Server

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
#: lengths the DATA (24 frames, 16 tokens) does not have, shorter and longer
LENGTHS = (7, 41)


def _optimize(model: zoo.ZooModel, out: Path) -> Report:
    argv = [str(TFSMITH), "optimize", str(model.model_path), "--data", str(model.data_path), "--recipe", "auto",
            "--out", str(out), "--latency-runs", "30"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=ENV)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    return Report.load(out / "report.json")


def _rows_at(model: zoo.ZooModel, length: int, batch: int) -> dict[str, np.ndarray]:
    """Held-out rows cut or tiled to `length` steps along the time axis (axis 1)."""
    x = zoo.load_data(model)["x_val"]
    out = {}
    for name, values in x.items():
        rows = values[:batch]
        reps = -(-length // rows.shape[1])
        out[name] = np.concatenate([rows] * reps, axis=1)[:, :length]
    return out


@pytest.mark.parametrize("name", zoo.VARIABLE_NAMES)
def test_a_variable_length_model_is_optimized_served_and_answers_at_new_lengths(name: str, tmp_path: Path) -> None:
    model = zoo.build(name, tmp_path / "models")
    report = _optimize(model, tmp_path / "optimized")
    assert report.contract.inputs[0].shape[:2] == (None, None)  # the open time axis is the contract's
    if name == "conv1d_variable":
        assert report.contract.outputs[0].task == "binary"  # one sigmoid column, 0/1 labels
        assert any(m.accuracy is not None for a in report.artifacts for m in a.metrics)
    chosen = next(c for c in report.selection.candidates if c.artifact == report.chosen
                  and c.runtime == report.chosen_runtime and c.signature == report.chosen_signature)
    assert chosen.new_shape_us is not None, "the first call at a new shape was not measured"
    assert not stalls(chosen.new_shape_us, chosen.p50_us), chosen
    assert any(note.startswith("shapes: inputs take any batch size, length") for note in report.notes), report.notes
    compiled = [c for c in report.selection.candidates if c.signature == "serving_xla"]
    for candidate in compiled:  # a per-shape compile is never the default where shapes vary
        if stalls(candidate.new_shape_us, candidate.p50_us):
            assert candidate.error, candidate  # an error: not choosable
    server = Server(str(tmp_path / "optimized"), "--model-name", name)
    try:
        for length in LENGTHS:
            for batch in (1, 3):
                x = _rows_at(model, length, batch)
                want = zoo.predict(model, x)
                body = {"inputs": {k: v.tolist() for k, v in x.items()}}
                response = httpx.post(f"{server.url}/v1/models/{name}:predict", json=body, timeout=120)
                assert response.status_code == 200, (length, batch, response.text)
                outputs = response.json()["outputs"]
                got = {k: np.asarray(v, dtype=np.float32) for k, v in
                       (outputs.items() if isinstance(outputs, dict) else [(next(iter(model.outputs)), outputs)])}
                for output, expected in want.items():
                    np.testing.assert_allclose(got[output].reshape(expected.shape), expected, atol=0.02,
                                               err_msg=f"{name} {output} at length {length}, batch {batch}")
    finally:
        assert server.stop() in STOPPED
