"""A race in groups measures each candidate's first calls at new input shapes once: the best so far, timed again
beside a later group only as that group's reference, is not asked again (for a BERT-base-sized model each such
measurement is 19 rows, about 2 s of a float file). Pure: fake runners that count the rows they are asked."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from builder.optimize import candidates as cands
from builder.report import ArtifactResult, Latency, ModelContract, TensorSpec

CONTRACT = ModelContract((TensorSpec("x", "float32", (None, 4)),), (TensorSpec("y", "float32", (None, 2)),),
                         "serving_default")
X = {"x": np.ones((8, 4), np.float32)}


def artifact(path: str) -> ArtifactResult:
    return ArtifactResult(path=path, format="tflite_fp32", runtime="litert", size_bytes=100, gzip_bytes=100,
                          threads=2, latency_us=Latency(0.0, 0.0, 0), throughput={}, inputs=(), outputs=(),
                          metrics=(), contract_kept=True, accepted=True, reason="")


class CountingRunner:
    """Answers every call; counts the batch sizes it was asked at."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def predict(self, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(x["x"])
        self.batches.append(rows)
        return {"y": np.zeros((rows, 2), np.float32)}

    def row_caller(self, x: dict[str, np.ndarray]) -> Any:
        return lambda: self.predict({k: v[:1] for k, v in x.items()})


def run(results: list[ArtifactResult], known: set[str]) -> dict[str, CountingRunner]:
    runners: dict[str, CountingRunner] = {}

    def make(runtime: str, path: Path, signature: str) -> CountingRunner:
        return runners.setdefault(cands.key(path.name, runtime, signature), CountingRunner())

    def timer(calls: dict[str, Any], share: float, entrants: Any) -> tuple[dict[str, Latency], dict[str, Any]]:
        for call in calls.values():
            call()
        return {k: Latency(1000.0, 1000.0, 1, 990.0, 1010.0) for k in calls}, {}

    found, _, _ = cands.measure(results, Path("/nowhere"), CONTRACT, X, cands.allowed_precisions(False), make, lambda r: (True, ""),
                                timer, 1.0, str, lambda text: contextlib.nullcontext(),
                                keep=lambda r, runtime, signature: runtime == "litert", known_shapes=known)
    assert {c.artifact for c in found} == {r.path for r in results}
    return runners


def test_a_candidate_whose_new_shapes_an_earlier_group_measured_is_not_asked_again() -> None:
    best, newcomer = artifact("best.tflite"), artifact("new.tflite")
    runners = run([best, newcomer], known={cands.key("best.tflite", "litert", "")})
    new_batches = set(cands.NEW_BATCHES)
    assert new_batches <= set(runners[cands.key("new.tflite", "litert", "")].batches)
    assert not new_batches & set(runners[cands.key("best.tflite", "litert", "")].batches)


def test_without_known_shapes_every_candidate_is_measured() -> None:
    runners = run([artifact("best.tflite"), artifact("new.tflite")], known=set())
    for runner in runners.values():
        assert set(cands.NEW_BATCHES) <= set(runner.batches)
