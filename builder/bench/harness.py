"""ONE bench run: every runtime loaded in the same process, timed in interleaved rounds on the same inputs.

Fairness rules, in the order they are applied:
1. Same thread count for every runtime (set in the adapters), same input arrays for every runtime.
2. Loading/conversion/quantization and warm-up (XLA compiles, XNNPACK packs weights) are excluded from
   latency; load time and the process's RSS growth while loading are reported on their own.
3. Rounds are interleaved: every round visits every runtime, in a rotated order, for the same short time
   slice (so a fast runtime gathers many samples and a slow one few, and any slow-down of the shared host
   hits all runtimes alike instead of whichever ran last).
4. Rounds continue until every batch-1 median is stable (narrow CI) or the budget is spent; what was not
   stable is flagged noisy in the report instead of being presented as precise.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.measure import stats
from builder.bench.models import BenchModel, one_line
from builder.bench.recommend import MIN_AGREEMENT, recommend, versus_fastest_line
from builder.measure.loop import interleave
from builder.bench.results import BenchRun, RuntimeResult
from builder.bench.runtimes import Adapter, Runner, artifact_sizes, build_adapters, role_of


#: Share of the timing budget for batch-1 latency; the rest measures throughput at the larger batch.
BATCH1_SHARE = 0.7
#: A larger-batch median counts as stable from this many samples (each call is long and costly).
BATCH_MIN_SAMPLES = 5


@dataclass(frozen=True)
class Settings:
    threads: int = 2
    batch: int = 32
    budget_s: float = 60.0
    min_rounds: int = 3
    slice_s: float = 0.02
    warmup: int = 3


@dataclass
class _Live:
    adapter: Adapter
    run1: Runner
    run_batch: Runner
    samples1: list[float]
    samples_batch: list[float]
    result: RuntimeResult


def _host_facts(threads: int) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    facts: dict[str, Any] = {"cpu": model or platform.processor(), "cores": os.cpu_count(), "threads": threads,
                             "python": platform.python_version(), "machine": platform.machine()}
    import importlib.metadata as md

    for dist in ("tensorflow", "tf-keras", "ai-edge-litert", "openvino", "nncf", "onnxruntime", "tf2onnx"):
        try:
            facts[dist] = md.version(dist)
        except md.PackageNotFoundError:
            facts[dist] = None
    return facts


def _batches(x: np.ndarray, size: int) -> np.ndarray:
    """x repeated/cut to exactly `size` rows (same inputs for every runtime)."""
    reps = -(-size // len(x))
    return np.ascontiguousarray(np.concatenate([x] * reps)[:size])


def _predict(adapter: Adapter, x: np.ndarray, batch: int) -> np.ndarray:
    """The answers for every row of x (float scores, or strings, booleans, ids as the model gives them),
    through batch-size chunks (the last chunk padded)."""
    outputs = []
    for start in range(0, len(x), batch):
        chunk = x[start : start + batch]
        padded = _batches(chunk, batch)
        y = adapter.answer(adapter.prepare(padded)())
        outputs.append(y.reshape(batch, -1)[: len(chunk)])
    return np.concatenate(outputs)


def _rss_mb() -> float | None:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:  # noqa: BLE001 - psutil is optional: no memory column then
        return None


def _load(adapter: Adapter, x1: np.ndarray, xb: np.ndarray, batch: int, settings: Settings
          ) -> tuple[_Live | None, RuntimeResult]:
    base = RuntimeResult(name=adapter.name, role=adapter.role, artifact=str(adapter.artifact), ok=False,
                         batch_size=batch)
    before = _rss_mb()
    start = time.perf_counter()
    try:
        adapter.load()
        run1 = adapter.prepare(x1)
        run_batch = adapter.prepare(xb)
        for _ in range(settings.warmup):
            run1()
        run_batch()
    except Exception as error:  # noqa: BLE001 - a runtime that cannot load is reported, never dropped
        return None, base.with_(reason=one_line(error))
    load_s = time.perf_counter() - start
    after = _rss_mb()
    raw, packed = artifact_sizes(adapter.size_artifact)
    result = base.with_(ok=True, artifact=str(adapter.size_artifact), size_bytes=raw, gzip_bytes=packed,
                        load_s=load_s, rss_delta_mb=(after - before) if before is not None and after is not None
                        else None)
    return _Live(adapter, run1, run_batch, [], [], result), result


def _quality(live: list[_Live], bench: BenchModel, batch: int
             ) -> dict[str, tuple[float | None, float | None, float | None]]:
    """(accuracy, agreement, relative error) per runtime against the float reference on the eval inputs.

    optimize's gate measures (`builder.optimize.quality`): several columns are class scores (accuracy against
    labels, top-1 agreement with the float model, a tied top score counting as a disagreement); one column is a
    value, judged by its error relative to the spread of the float model's outputs, since argmax over one
    column agrees always; class scores the float model cannot tell apart (one class for nearly every row) are
    judged like values too.
    """
    scores: dict[str, np.ndarray] = {}
    for item in live:
        try:
            scores[item.adapter.name] = _predict(item.adapter, bench.x_eval, batch)
        except Exception:  # noqa: BLE001 - quality unknown, latency still valid
            continue
    reference = next((scores[n] for n in ("savedmodel", "keras", "litert-fp32", "openvino-fp32") if n in scores),
                     None)
    from builder.optimize.quality import agreement_of, fidelity, top1, why_agreement_cannot_judge

    quality: dict[str, tuple[float | None, float | None, float | None]] = {}
    for name, y in scores.items():
        if not _floats(y) or (reference is not None and not _floats(reference)):
            quality[name] = _exact_quality(y, reference, bench.y_eval)
            continue
        classes = y.shape[-1] > 1
        accuracy = (float(np.mean(top1(y) == bench.y_eval))
                    if classes and bench.y_eval is not None else None)
        agreement = relative = None
        if reference is not None and reference.shape == y.shape:
            relative = fidelity(y, reference)[0]
            rms = float(np.sqrt(np.mean((np.asarray(y, np.float64) - reference) ** 2)))
            agrees = agreement_of(y, reference) if classes else None
            # a passing agreement on a float model that cannot tell rows apart vouches for nothing: spread judges
            if agrees is not None and (agrees < MIN_AGREEMENT or why_agreement_cannot_judge(reference, rms) is None):
                agreement, relative = agrees, None
        quality[name] = (accuracy, agreement, relative)
    return quality


def _floats(y: np.ndarray) -> bool:
    return np.issubdtype(y.dtype, np.floating)


def _exact_quality(y: np.ndarray, reference: np.ndarray | None, labels: np.ndarray | None
                   ) -> tuple[float | None, float | None, float | None]:
    """(accuracy, agreement, None) of answers that are not float scores (strings, booleans, integer ids), as
    optimize judges them: the share of rows equal to the reference's (or to the labels) exactly, never cast."""
    def rows_equal(a: np.ndarray, b: np.ndarray) -> float | None:
        if a.shape[0] != b.shape[0] or a.size // max(a.shape[0], 1) != b.size // max(b.shape[0], 1):
            return None
        return float(np.mean(np.all(a.reshape(len(a), -1) == b.reshape(len(b), -1), axis=1)))

    agreement = rows_equal(y, reference) if reference is not None else None
    accuracy = rows_equal(y, np.asarray(labels)) if labels is not None else None
    return accuracy, agreement, None


def run_bench(bench: BenchModel, runtimes: list[str], settings: Settings, workdir: Path,
              say: Callable[[str], None] = lambda _: None, profile_dir: Path | None = None) -> BenchRun:
    """Load every runtime, time them interleaved, and return the annotated run with its recommendation."""
    started = time.perf_counter()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    adapters, missing = build_adapters(runtimes, bench, settings.threads, workdir)
    x1 = np.ascontiguousarray(bench.x_eval[:1])
    xb = _batches(bench.x_eval, settings.batch)
    results: dict[str, RuntimeResult] = {
        name: RuntimeResult(name=name, role=role_of(name), artifact=artifact, ok=False, reason=reason)
        for name, (artifact, reason) in missing.items()
    }
    live: list[_Live] = []
    for adapter in adapters:
        say(f"loading {adapter.name}")
        item, result = _load(adapter, x1, xb, settings.batch, settings)
        results[adapter.name] = result
        if item is not None:
            live.append(item)

    say("measuring quality against the float model on the eval inputs")
    # Random-weight models make no quality claim: one batch is enough to check every runtime computes the
    # same function, and saves minutes for slow runtimes (XLA on MobileNetV2 takes seconds per batch here).
    evaluated = bench if bench.trained else replace(bench, x_eval=bench.x_eval[: settings.batch])
    quality = _quality(live, evaluated, settings.batch)

    say(f"timing {len(live)} runtimes at batch 1 in interleaved rounds")
    # Warm-up already ran in _load; the loop is the one optimize and `--runtime auto` use (recommend.interleave).
    _, rounds = interleave({i.adapter.name: i.run1 for i in live}, settings.budget_s * BATCH1_SHARE, warmup=0,
                           slice_s=settings.slice_s, min_rounds=settings.min_rounds, min_samples=stats.MIN_SAMPLES,
                           samples={i.adapter.name: i.samples1 for i in live})
    say(f"timing {len(live)} runtimes at batch {settings.batch} in interleaved rounds")
    interleave({i.adapter.name: i.run_batch for i in live}, settings.budget_s * (1 - BATCH1_SHARE), warmup=0,
               slice_s=0.0, min_rounds=1, min_samples=BATCH_MIN_SAMPLES,
               samples={i.adapter.name: i.samples_batch for i in live})

    for item in live:
        accuracy, agreement, relative = quality.get(item.adapter.name, (None, None, None))
        results[item.adapter.name] = item.result.with_(
            latency=stats.summarize(item.samples1),
            batch_latency=stats.summarize(item.samples_batch, min_samples=BATCH_MIN_SAMPLES),
            accuracy=accuracy, agreement=agreement, relative_error=relative)

    notes = list(bench.notes)
    if profile_dir is not None:
        from builder.bench.profile import profile_savedmodel

        saved = next((i for i in live if i.adapter.name == "savedmodel"), None)
        notes.append(profile_savedmodel(saved.run1 if saved else None, saved.run_batch if saved else None,
                                        profile_dir))
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cores = os.cpu_count() or 1
    if load_before is not None and load_after is not None:
        busy = max(load_before, load_after)
        notes.append(f"host load average {load_before:.2f} before / {load_after:.2f} after on {cores} cores"
                     + (" (other work shared the CPU: expect noise)" if busy > cores * 0.75 else ""))
    noisy = [r.name for r in results.values() if r.latency is not None and r.latency.noisy]
    if noisy:
        notes.append("noisy (median CI wide or spread large): " + ", ".join(noisy))

    ordered = [results[name] for name in runtimes if name in results]
    annotated, recommendation = recommend(ordered, trained=bench.trained)
    if bench.shipped is not None:
        notes.insert(0, versus_fastest_line(annotated, bench.shipped))
    return BenchRun(model=bench.name, trained=bench.trained, threads=settings.threads,
                    batch_sizes=(1, settings.batch), results=annotated, recommendation=recommendation,
                    host=_host_facts(settings.threads), notes=tuple(notes),
                    elapsed_s=time.perf_counter() - started, rounds=rounds, shipped=bench.shipped)
