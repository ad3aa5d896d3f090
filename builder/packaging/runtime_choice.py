"""Which runtime serves a .tflite in a LiteRT image: named by the user, or measured here for `auto`.

Host-side only: the measurement is `builder.measure`'s interleaved loop and its one decision (the fastest within
noise, ties to the smaller file and then the smaller runtime), the same `tfsmith bench` and `tfsmith optimize`
use. The in-image server is always told a named runtime.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from builder.errors import InputError
from builder.measure.decide import choose_fastest_runtime
from builder.measure import stats
from builder.measure.loop import time_interleaved
from builder.model import registry
from builder.model.artifact import is_ir
from builder.model.create import check_reads, create_backend
from builder.model.inputs import sample_inputs


@dataclass(frozen=True)
class RuntimeChoice:
    """Which runtime serves the model, and why (recorded in image labels and the server's status)."""

    runtime: str
    reason: str
    p50_us: Mapping[str, float]


#: Measures batch-1 latencies (seconds) of each candidate {runtime: .tflite it serves} with `threads`;
#: returns (samples per runtime measured, error per runtime that could not load).
Measure = Callable[[Mapping[str, Path], int], tuple[dict[str, list[float]], dict[str, str]]]


def measure_runtimes(candidates: Mapping[str, Path], threads: int, budget_s: float = 3.0
                     ) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Batch-1 latencies of the SERVING backends themselves (what will answer requests), timed by bench's
    interleaved loop; a runtime other than LiteRT that cannot load is reported, not fatal."""
    runners: dict[str, Callable[[], object]] = {}
    errors: dict[str, str] = {}
    for runtime, path in candidates.items():
        try:
            backend = create_backend(runtime, path, threads)
        except Exception as error:  # noqa: BLE001 - any failure means: not a candidate, and say why
            if runtime == baseline_for(path):
                raise
            errors[runtime] = _first_line(error)
            continue
        signature = next(iter(backend.signatures))
        inputs = sample_inputs(backend.signatures[signature])
        runners[runtime] = functools.partial(backend.answer, signature, inputs)  # as a server calls it
    return time_interleaved(runners, budget_s), errors


def _first_line(error: BaseException) -> str:
    """The error's reason, whole (OpenVINO's source-location lines skipped: `optimize.causes.cause`)."""
    from builder.optimize.causes import cause

    return f"{type(error).__name__}: {cause(error)}"


#: The runtime every other must beat beyond noise: for a .tflite LiteRT (it runs the file exactly as optimize
#: evaluated it), for OpenVINO's IR OpenVINO at f32 (its exact answer).
AUTO_BASELINE = registry.TFLITE_DEFAULT


def baseline_for(model_path: Path) -> str:
    return registry.IR_DEFAULT if is_ir(model_path) else AUTO_BASELINE


def auto_candidates(model_path: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """What `auto` measures: every registry runtime that reads the file (a .tflite's, or OpenVINO's IR's: a
    bf16 runtime only where the file is float), each on that very file. The same names and settings optimize
    times. (The second value is kept for runtimes refused up front; none is, today.)"""
    format = _format_of(model_path)
    ir = is_ir(model_path)
    candidates = {entry.name: model_path for entry in registry.RUNTIMES
                  if (entry.ir if ir else entry.tflite) and (format is None or entry.serves(format))}
    return candidates, {}


def _format_of(model_path: Path) -> str | None:
    """The artifact format the optimize report beside the file gives it (tflite_int8, ...), None without one."""
    from builder.model.artifact import resolve_artifact

    try:
        entry = resolve_artifact(model_path)._entry()
    except InputError:
        return None
    return entry.format if entry is not None else None


def choose_runtime(
    requested: str, model_path: Path, threads: int = 1, measure: Measure = measure_runtimes) -> RuntimeChoice:
    """A named runtime as asked (refused up front when it cannot read the file); `auto` measures them all.

    The decision is `builder.measure.decide`'s: another runtime is picked only when it is faster than the
    file's exact runtime (LiteRT for a .tflite, OpenVINO f32 for its IR) beyond noise (non-overlapping median
    confidence intervals); within noise the smaller file, then the smaller runtime in the registry's tie order
    wins.
    """
    registry.check(requested, allow_auto=True)
    if model_path.is_dir():  # a SavedModel: only TensorFlow runs it, whatever was asked
        if requested == registry.AUTO:
            return RuntimeChoice(registry.TENSORFLOW_DEFAULT, "a SavedModel runs on TensorFlow", {})
        if not registry.runtime(requested).serves(registry.SAVED_MODEL_FORMAT):
            raise InputError(f"{model_path} is a SavedModel: it runs on --runtime "
                             f"{' or '.join(r.name for r in registry.serving(registry.SAVED_MODEL_FORMAT))}, "
                             f"not {requested}")
        return RuntimeChoice(requested, "requested", {})
    if requested != registry.AUTO:
        check_reads(requested, model_path)  # refused up front when it cannot read this file
        return RuntimeChoice(requested, "requested", {})
    candidates, refused = auto_candidates(model_path)
    samples, errors = measure(candidates, threads)
    sizes = {name: path.stat().st_size if path.is_file() else 0 for name, path in candidates.items()}
    runtime, why = choose_fastest_runtime(samples, {**refused, **errors}, sizes)
    p50_us = {name: stats.median(s) * 1e6 for name, s in samples.items() if s}
    reason = f"auto ({threads} thread{'s' if threads != 1 else ''}): {why}"
    return RuntimeChoice(runtime, reason, p50_us)
