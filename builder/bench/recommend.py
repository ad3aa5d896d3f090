"""Which artifact + runtime tfsmith recommends for a model on this host, and why.

`recommend` is pure: it reads measured results and picks the fastest row a tfsmith image serves (a runtime of
`builder.model.registry` on one of the model's artifacts) among those that keep the model's quality, then
states how it compares with the fastest peer a user would pick instead. Random-weight models are judged on
latency only: their quantized outputs mean nothing, so no quality filter is claimed for them.

`recommend_tflite_runtime` is the small measured A/B LiteRT vs OpenVINO on one .tflite on THIS host. Its
timing loop and decision come from `builder.measure`, as do `--runtime auto`'s and optimize's choice, and the
choice below: the fastest within noise (overlapping median confidence intervals), ties by `measure.decide`.
`versus_fastest` states how the runtime optimize chose compares with the fastest runtime measured in a run.
Heavy libraries are imported inside functions, never at module top.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from builder.bench.results import ROLE_BASELINE, ROLE_TFSMITH, Recommendation, RuntimeResult
from builder.bench.runtimes import serving_runtime
from builder.measure.decide import Timed, choose_fastest_runtime, pick, within_noise
from builder.measure.loop import time_interleaved
from builder.measure.stats import ratio, summarize

#: Largest accuracy drop (absolute, labels known) a recommended artifact may have vs the float model.
MAX_ACCURACY_DROP = 0.01
#: Smallest top-1 agreement with the float model for a trained model when no labels are known.
MIN_AGREEMENT = 0.97
#: Largest relative L2 error against the float model for one-column (regression) outputs.
MAX_RELATIVE_ERROR = 0.05


def how_served(name: str) -> str:
    """How the serving runtime behind bench row `name` serves the model, in the registry's own words ("" for
    rows no image serves)."""
    from builder.model import registry

    runtime = serving_runtime(name)
    return registry.runtime(runtime).summary if runtime else ""


def _timed(result: RuntimeResult) -> Timed:
    """A measured row as the shared decision sees it (batch-1 median, its CI, the file it serves, the serving
    runtime for the shared tie order: a peer row no image serves keeps its own name and ranks last)."""
    assert result.latency is not None
    return Timed.of(result.name, result.latency, size_bytes=result.size_bytes or 0,
                    runtime=serving_runtime(result.name) or result.name)


def _reference_accuracy(results: Sequence[RuntimeResult]) -> float | None:
    """Accuracy of the float model: the SavedModel baseline, else the eager Keras model."""
    for name in ("savedmodel", "keras"):
        for result in results:
            if result.name == name and result.ok and result.accuracy is not None:
                return result.accuracy
    return None


def _quality_ok(
    result: RuntimeResult, trained: bool, reference: float | None, max_drop: float, min_agreement: float
) -> tuple[bool, str]:
    if not trained:
        return True, "random weights: latency only"
    if reference is not None and result.accuracy is not None:
        drop = reference - result.accuracy
        return drop <= max_drop, f"accuracy {result.accuracy:.4f} ({-drop * 100:+.2f} pt vs float)"
    if result.agreement is not None:
        return result.agreement >= min_agreement, f"agreement with float {result.agreement:.1%}"
    if result.relative_error is not None:
        return (result.relative_error <= MAX_RELATIVE_ERROR,
                f"error vs the float model's spread {result.relative_error:.2%}")
    return False, "no quality measurement"


def quality_verdicts(
    results: Sequence[RuntimeResult],
    *,
    trained: bool,
    max_accuracy_drop: float = MAX_ACCURACY_DROP,
    min_agreement: float = MIN_AGREEMENT,
) -> dict[str, tuple[bool, str]]:
    """(keeps the model's quality, why) for every measured row, tfsmith's and peers' alike: the rule the
    recommendation applies, so a benchmark can ask which rows anything could deploy without changing answers."""
    reference = _reference_accuracy(results)
    return {r.name: _quality_ok(r, trained, reference, max_accuracy_drop, min_agreement)
            for r in results if r.ok and r.latency is not None}


def recommend(
    results: Sequence[RuntimeResult],
    *,
    trained: bool,
    max_accuracy_drop: float = MAX_ACCURACY_DROP,
    min_agreement: float = MIN_AGREEMENT,
) -> tuple[tuple[RuntimeResult, ...], Recommendation]:
    """Fill in the ratios, mark the recommended result, and say why."""
    measured = [r for r in results if r.ok and r.latency is not None]
    baseline = next((r for r in measured if r.role == ROLE_BASELINE), None)
    peers = [r for r in measured if r.role != ROLE_TFSMITH]
    fastest_peer = min(peers, key=lambda r: r.latency.p50) if peers else None  # type: ignore[union-attr]

    reference = _reference_accuracy(results)
    candidates: list[tuple[RuntimeResult, str]] = []
    rejected: list[str] = []
    for result in measured:
        if result.role != ROLE_TFSMITH:
            continue
        ok, why = _quality_ok(result, trained, reference, max_accuracy_drop, min_agreement)
        if ok:
            candidates.append((result, why))
        else:
            rejected.append(f"{result.name} ({why})")

    chosen, quality = None, ""
    if candidates:
        picked = pick([_timed(r) for r, _ in candidates])
        chosen, quality = next(c for c in candidates if c[0].name == picked.name)

    annotated = []
    for result in results:
        p50 = result.p50
        annotated.append(
            result.with_(
                ratio_vs_baseline=ratio(p50, baseline.p50 if baseline else None),
                ratio_vs_fastest_peer=ratio(p50, fastest_peer.p50 if fastest_peer else None),
                recommended=chosen is not None and result.name == chosen.name,
            )
        )

    if chosen is None:
        why = ("no runtime a tfsmith image serves ran" if not rejected
               else "every runtime a tfsmith image serves lost quality: " + ", ".join(rejected))
        return tuple(annotated), Recommendation(runtime=None, artifact=None, reason=why,
                                                fastest_peer=fastest_peer.name if fastest_peer else None)

    vs_peer = ratio(chosen.p50, fastest_peer.p50 if fastest_peer else None)
    speedup = ratio(baseline.p50, chosen.p50) if baseline else None
    close = bool(fastest_peer and within_noise(_timed(chosen), _timed(fastest_peer)))
    parts = [f"{chosen.name}: fastest runtime a tfsmith image serves that keeps quality at batch 1, within noise "
             f"(p50 {chosen.p50 * 1e3:.3f} ms; {quality}); {how_served(chosen.name)}"]  # type: ignore[operator]
    if speedup is not None:
        parts.append(f"{speedup:.1f}x faster than the SavedModel signature")
    if fastest_peer is not None and vs_peer is not None:
        verdict = "within noise of" if close else ("faster than" if vs_peer < 1 else "slower than")
        parts.append(f"{verdict} the fastest peer {fastest_peer.name} ({vs_peer:.2f}x its time)")
    if rejected:
        parts.append("rejected for quality: " + ", ".join(rejected))
    return tuple(annotated), Recommendation(
        runtime=chosen.name,
        artifact=chosen.artifact,
        reason="; ".join(parts),
        fastest_peer=fastest_peer.name if fastest_peer else None,
        ratio_vs_fastest_peer=vs_peer,
        speedup_vs_baseline=speedup,
        within_noise_of_peer=close,
    )


@dataclass(frozen=True)
class VersusFastest:
    """One runtime's batch-1 p50 against the fastest runtime measured in the same run."""

    runtime: str
    fastest: str
    ratio: float  # runtime p50 / fastest p50 (1.0 when it is the fastest)
    within_noise: bool  # the two medians' confidence intervals overlap
    p50: float
    fastest_p50: float


def versus_fastest(results: Sequence[RuntimeResult], runtime: str) -> VersusFastest | None:
    """How `runtime` compares with the fastest measured runtime of the run (None when it was not measured)."""
    measured = [r for r in results if r.ok and r.latency is not None]
    mine = next((r for r in measured if r.name == runtime), None)
    if mine is None:
        return None
    fastest = min(measured, key=lambda r: r.latency.p50)  # type: ignore[union-attr]
    return VersusFastest(runtime=runtime, fastest=fastest.name, ratio=mine.latency.p50 / fastest.latency.p50,  # type: ignore[union-attr]
                         within_noise=fastest.name == runtime or within_noise(_timed(mine), _timed(fastest)),
                         p50=mine.latency.p50, fastest_p50=fastest.latency.p50)  # type: ignore[union-attr]


def versus_fastest_line(results: Sequence[RuntimeResult], runtime: str) -> str:
    """One line for the report: how the runtime optimize chose compares with the fastest one measured here."""
    found = versus_fastest(results, runtime)
    if found is None:
        why = next((r.reason for r in results if r.name == runtime and r.reason), "not among the runtimes run")
        return f"optimize's choice ({runtime}) was not measured: {why}"
    if found.fastest == runtime:
        return f"optimize's choice ({runtime}, p50 {found.p50 * 1e3:.3f} ms) is the fastest runtime measured here"
    verdict = "within noise of" if found.within_noise else "slower than"
    return (f"optimize's choice ({runtime}, p50 {found.p50 * 1e3:.3f} ms) is {found.ratio:.2f}x the time of the "
            f"fastest runtime measured here ({found.fastest}, {found.fastest_p50 * 1e3:.3f} ms): {verdict} it")


def choose_tflite_runtime(litert_s: Sequence[float], openvino_s: Sequence[float] | None,
                          openvino_error: str = "") -> tuple[str, str]:
    """Pure decision for the LiteRT vs OpenVINO A/B (seconds, batch 1): the shared `choose_fastest_runtime`."""
    samples = {"litert": litert_s, **({"openvino": openvino_s} if openvino_s else {})}
    return choose_fastest_runtime(samples, {} if openvino_s else {"openvino": openvino_error})


def recommend_tflite_runtime(tflite_path: str | Path, threads: int, budget_s: float = 4.0
                             ) -> tuple[str, str, dict[str, Any]]:
    """Measure LiteRT vs OpenVINO on one .tflite here; return (runtime_name, reason, numbers).

    runtime_name is "litert" or "openvino". Interleaved repeats on the same random input of the model's
    shape (latency does not depend on the values for these kernels); warm-up excluded.
    """
    import tempfile

    from builder.bench.runtimes import ServedRow, ServingAdapter, random_input_for_tflite

    path = Path(tflite_path)
    x = random_input_for_tflite(path)
    workdir = Path(tempfile.gettempdir())  # neither runtime writes anything for a .tflite it reads as it is
    lite = ServingAdapter(ServedRow("litert", "litert", None), path, threads, workdir)
    lite.load()
    run_lite = lite.prepare(x)
    run_ov = None
    ov_error = ""
    try:
        ov = ServingAdapter(ServedRow("openvino", "openvino", None), path, threads, workdir)
        ov.load()
        run_ov = ov.prepare(x)
    except Exception as error:  # noqa: BLE001 - any failure means "serve with LiteRT", with the reason
        from builder.optimize.causes import cause

        ov_error = f"{type(error).__name__}: {cause(error)}"
    runners = {"litert": run_lite, **({"openvino": run_ov} if run_ov else {})}
    samples = time_interleaved(runners, budget_s)
    name, reason = choose_tflite_runtime(samples["litert"], samples.get("openvino"), ov_error)
    numbers = {k: summarize(v, min_samples=1).to_dict() for k, v in samples.items()}
    numbers["threads"] = threads
    if ov_error:
        numbers["openvino_error"] = ov_error
    return name, reason, numbers
