"""A small but complete `report.json` for tests of the readers (server, packaging), built from the typed
report itself so it is valid by construction and follows the schema when it changes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from builder.report import (
    ArtifactResult,
    DataInfo,
    Gate,
    Latency,
    ModelContract,
    ModelInfo,
    OutputMetric,
    OutputSpec,
    Report,
    Selection,
    TensorSpec,
)


def make_report(
    *,
    chosen: str,
    artifacts: Sequence[tuple[str, str]],  # (file name, format)
    inputs: Sequence[tuple[str, str, tuple[int | None, ...]]] = (("pixels", "float32", (None, 8, 8, 1)),),
    outputs: Sequence[tuple[str, str, tuple[int | None, ...], str]] = (("probs", "float32", (None, 10),
                                                                          "classification"),),
    source: str = "digits.keras",
    chosen_runtime: str = "litert",
    folder: Path | None = None,
) -> Report:
    contract = ModelContract(
        inputs=tuple(TensorSpec(n, d, s) for n, d, s in inputs),
        outputs=tuple(OutputSpec(n, d, s, task) for n, d, s, task in outputs),
    )
    results = []
    for path, format in artifacts:
        size = (folder / path).stat().st_size if folder is not None and (folder / path).is_file() else 1000
        metrics = tuple(OutputMetric(o.name, o.task, "disagreement", 0.0, 0.01, True, "test") for o in contract.outputs)
        results.append(ArtifactResult(
            path=path, format=format, runtime="litert", size_bytes=size, gzip_bytes=size, threads=1,
            latency_us=Latency(9.5, 12.0, 100), throughput={}, inputs=contract.inputs,
            outputs=tuple(o.tensor() for o in contract.outputs), metrics=metrics, contract_kept=True, accepted=True,
            reason="test"))
    return Report(
        tfsmith="test", created="2026-01-01T00:00:00+00:00",
        model=ModelInfo(source, "keras2", "2.21.0", 1000, contract),
        data=DataInfo("data.npz", 100, 10, "x_calib", 20, tuple(o.name for o in contract.outputs)),
        recipe={}, reasons=(), notes=(), target={}, host={}, baseline=None, sparsity=None,
        artifacts=tuple(results), chosen=chosen, chosen_runtime=chosen_runtime, samples="samples.npz",
        gate=Gate(0.01, 0.05, "original", True, "test"), selection=Selection(True, "measured in a test"),
    )


def write_report(folder: Path, **kwargs: object) -> Report:
    report = make_report(folder=folder, **kwargs)  # type: ignore[arg-type]
    report.write(folder)
    return report
