"""The candidates optimize times: every accepted artifact x every runtime (and precision) that can serve it x
signature, in ONE interleaved loop (`builder.measure.loop`) on the model's own held-out rows, plus what a
server pays the first time it sees a new input shape.

Which runtimes are candidates comes from the registry (`builder.model.registry`): a runtime that reads the
artifact's format, whose modules import here, computing in a precision the recipe allows (a recipe without int8
quantization never gets an int8 runtime). A runtime other than the one the artifact was evaluated on (OpenVINO
at bf16, TensorFlow with oneDNN bf16, ...) is judged by the same quality gate against the original once the
race has timed it, where it could still be chosen (`judge_contenders`); one that cannot load or run the file is
a candidate with its error, never a crash.

Shapes: a server sees the batch sizes its batcher forms and, for inputs with open dimensions, whatever lengths
clients send. A runtime that compiles per shape (XLA's `serving_xla`) can win at the one shape it was timed at
and then stall every request of a new shape (a BiLSTM: 738 ms on the first call at each new length against
3.7 ms without XLA). So every timed candidate is also called at shapes it has not seen (other batch sizes,
lengths cut from the data), and the first call's extra cost is recorded; where shapes vary, a candidate whose
first call at a new shape costs more than `STALL_FACTOR` x its p50 (and over `STALL_FLOOR_US`) is not a
default.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from builder.measure.race import Entrant
from builder.model import registry
from builder.report import ArtifactResult, Candidate, Latency, ModelContract

XLA_SIGNATURE = "serving_xla"
#: A first call at a new shape costing more than this many p50s (and more than STALL_FLOOR_US) is a compile.
STALL_FACTOR = 10.0
STALL_FLOOR_US = 50_000.0
#: Batch sizes a dynamic batcher forms that the timing loop (batch 1) has not used: the smallest two, since any
#: new size shows a runtime that compiles per shape, and each is asked twice per candidate (a BERT-base-sized
#: float file: 13 rows a candidate, about 1.5 s, against 19 at sizes 3 and 5).
NEW_BATCHES = (2, 3)


def importable(entry: registry.Runtime, format: str | None = None) -> bool:
    """Every module the runtime needs to read `format` imports here (OpenVINO is an optional extra)."""
    return all(importlib.util.find_spec(module) is not None for module in registry.needs(entry.name, format)[0])


def allowed_precisions(int8_allowed: bool) -> tuple[str, ...]:
    """Float precisions always (bf16 is still float answers, judged by the gate); int8 only where the recipe
    quantizes to int8 itself."""
    return (*registry.FLOAT_PRECISIONS, "int8") if int8_allowed else registry.FLOAT_PRECISIONS


def runtimes_for(format: str, precisions: tuple[str, ...]) -> tuple[str, ...]:
    """The runtimes that could serve an artifact format here, in tie order."""
    return tuple(r.name for r in registry.serving(format) if r.precision in precisions and importable(r, format))


def candidate_pairs(result: ArtifactResult, contract: ModelContract, precisions: tuple[str, ...]
                    ) -> list[tuple[str, str]]:
    """(runtime, signature) pairs an artifact is timed on: a .tflite on each runtime that reads it (signature
    "": its own); a SavedModel's contract signature on each TensorFlow runtime, and its serving_xla on f32
    TensorFlow (XLA compiles its own kernels: oneDNN's bf16 rewrite does not reach them)."""
    pairs = []
    for runtime in runtimes_for(result.format, precisions):
        if result.format != registry.SAVED_MODEL_FORMAT:
            pairs.append((runtime, ""))
            continue
        pairs.append((runtime, contract.signature))
        if (runtime == registry.TENSORFLOW_DEFAULT and XLA_SIGNATURE in result.extra.get("signatures", ())
                and XLA_SIGNATURE != contract.signature):
            pairs.append((runtime, XLA_SIGNATURE))
    return pairs


def key(path: str, runtime: str, signature: str) -> str:
    return f"{path}@{runtime}" + (f"#{signature}" if signature else "")


# --- shapes ---------------------------------------------------------------------------------------------


def shapes_vary(contract: ModelContract) -> bool:
    """Some input dimension, the batch included, takes any size: a server sees more than one shape."""
    return any(d is None for spec in contract.inputs for d in spec.shape)


def new_shape_feeds(contract: ModelContract, x: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Inputs at shapes the timing loop has not used: other batch sizes where the batch is open, and where
    another dimension is open (a sequence length), the data's rows cut shorter along it (a prefix of real
    token ids or frames is still a valid input). Empty when every dimension is fixed."""
    rows = len(next(iter(x.values())))
    open_axes = {spec.name: [i for i, d in enumerate(spec.shape) if d is None and i > 0] for spec in contract.inputs}
    batch_open = all(spec.shape and spec.shape[0] is None for spec in contract.inputs)
    feeds = []
    for n, batch in enumerate(NEW_BATCHES if batch_open else (1, 1)):
        take = min(batch, rows)
        feed = {}
        for spec in contract.inputs:
            value = np.asarray(x[spec.name])[:take] if batch_open else np.asarray(x[spec.name])[:1]
            for axis in open_axes.get(spec.name, []):
                full = value.shape[axis]
                length = max(1, full - (n + 1) * max(1, full // 4))  # 3/4 and 1/2 of the data's length
                value = np.take(value, np.arange(length), axis=axis)
            feed[spec.name] = np.ascontiguousarray(value)
        if batch_open and take < batch:  # fewer rows than the batch: repeat them
            feed = {k: np.concatenate([v] * (batch // take + 1))[:batch] for k, v in feed.items()}
        feeds.append(feed)
    if not batch_open and not any(open_axes.values()):
        return []
    return feeds


def first_call_cost_us(runner: Any, feeds: list[dict[str, np.ndarray]]) -> float | None:
    """The median extra cost, in microseconds, of the first call at each new shape over the next call at the
    same shape (what one request of a new shape waits for beyond its own work). None without feeds."""
    costs = []
    for feed in feeds:
        start = time.perf_counter()
        runner.predict(feed)
        first = time.perf_counter() - start
        start = time.perf_counter()
        runner.predict(feed)
        again = time.perf_counter() - start
        costs.append(max(0.0, first - again) * 1e6)
    return float(np.median(costs)) if costs else None


def call_us(call: Callable[[], Any], calls: int = 3) -> float:
    """The median of a few calls, in microseconds: a candidate's pace before it is timed, against which a first
    call at a new shape is judged a compile or not (`stalls`); the race's p50 judges it again afterwards."""
    took = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        took.append(time.perf_counter() - start)
    return float(np.median(took)) * 1e6


def stalls(new_shape_us: float | None, p50_us: float | None) -> bool:
    """Whether a first call at a new shape is a compile, not noise: over STALL_FLOOR_US and STALL_FACTOR p50s."""
    if new_shape_us is None or p50_us is None:
        return False
    return new_shape_us > max(STALL_FLOOR_US, STALL_FACTOR * p50_us)


def shape_line(contract: ModelContract, candidates: list[Candidate]) -> str | None:
    """The shape cost in one line for the report, None where every dimension is fixed."""
    measured = [c for c in candidates if c.new_shape_us is not None]
    if not shapes_vary(contract) or not measured:
        return None
    worst = max(measured, key=lambda c: c.new_shape_us or 0.0)
    stalled = [c for c in measured if stalls(c.new_shape_us, c.p50_us)]
    text = (f"shapes: inputs take any {', '.join(_open_dimensions(contract))}; the first call at a new shape costs "
            f"at most +{worst.new_shape_us / 1e3:.1f} ms ({worst.artifact} on {worst.runtime}"
            f"{'#' + worst.signature if worst.signature == XLA_SIGNATURE else ''}; {len(measured)} candidates "
            "measured)")
    if stalled:
        text += (f"; {len(stalled)} candidate(s) compile per shape and are not chosen as the default: "
                 + ", ".join(f"{c.artifact}{'#' + c.signature if c.signature == XLA_SIGNATURE else ''} on "
                             f"{c.runtime} +{c.new_shape_us / 1e3:.0f} ms" for c in stalled))  # type: ignore[operator]
    else:
        text += "; none of them compiles per shape"
    return text


def _open_dimensions(contract: ModelContract) -> list[str]:
    found = []
    if any(spec.shape and spec.shape[0] is None for spec in contract.inputs):
        found.append("batch size")
    if any(d is None for spec in contract.inputs for d in spec.shape[1:]):
        found.append("length")
    return found


# --- timing ---------------------------------------------------------------------------------------------


Judge = Callable[[Any], tuple[bool, str]]
Make = Callable[[str, Path, str], Any]
#: The race: (calls, budget, entrants) -> (latency by key, `builder.measure.loop.Stop` by key).
Timer = Callable[[Mapping[str, Callable[[], Any]], float, Mapping[str, Entrant]],
                 tuple[dict[str, Latency], dict[str, Any]]]
#: How a candidate that could not make one call at the data's shapes is reported (never timed, never chosen).
CANNOT_RUN = "cannot run here"


def first_row(x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One held-out row, at the shapes the timing loop calls with (batch 1, the data's own lengths)."""
    return {k: np.ascontiguousarray(np.asarray(v)[:1]) for k, v in x.items()}


def guarded(calls: Mapping[str, Callable[[], Any]], failed: dict[str, BaseException]) -> dict[str, Callable[[], Any]]:
    """The calls for the timing loop, each of which, should it raise, records its error in `failed` and
    withdraws from the loop (`builder.measure.loop.Withdraw`; called again, it returns at once): one candidate
    failing in the middle of the loop loses its own timing (the caller drops it), never the others', and a
    failed call that returned at once is never mistaken for a fast one."""
    from builder.measure.loop import Withdraw

    def one(name: str, call: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            if name in failed:
                return None
            try:
                return call()
            except Exception as error:  # noqa: BLE001 - recorded, and the candidate is rejected with it
                failed[name] = error
                raise Withdraw(f"failed: {type(error).__name__}") from error

        return run

    return {name: one(name, call) for name, call in calls.items()}


def why_not_run(error: BaseException, cause: Callable[[BaseException], str]) -> str:
    """The runtime's own reason, one line: a refusal of the inputs is already the runtime's cleaned words."""
    from builder.model.failures import ModelInputError

    return str(error) if isinstance(error, ModelInputError) else f"{type(error).__name__}: {cause(error)}"


def cannot_run_lines(candidates: list[Candidate]) -> list[str]:
    """A note per candidate that could not run on this host: which, and the runtime's reason."""
    return [f"{c.artifact}{'#' + c.signature if c.signature == XLA_SIGNATURE else ''} on {c.runtime} is not a "
            f"candidate: {c.error}" for c in candidates if c.error.startswith(CANNOT_RUN)]


def entrant(result: ArtifactResult, runtime: str, signature: str, contract: ModelContract, rejected: bool,
            only: str | None = None) -> Entrant:
    """A candidate as the race sees it: the tie order select uses (the file's size, the runtime, the contract's
    own signature before serving_xla) and whether it can be chosen at all (an accepted artifact, not rejected
    before timing, the one the recipe names where it names one). Those that cannot are timed for the report."""
    return Entrant(key(result.path, runtime, signature), result.size_bytes, runtime,
                   int((signature or contract.signature) != contract.signature),
                   eligible=result.accepted and not rejected and (only is None or result.path == only))


def measure(results: list[ArtifactResult], folder: Path, contract: ModelContract, x_val: Mapping[str, np.ndarray],
            precisions: tuple[str, ...], make: Make, judge: Judge,
            timer: Timer, budget: float, cause: Callable[[BaseException], str],
            stage: Callable[[str], Any], only: str | None = None,
            keep: Callable[[ArtifactResult, str, str], bool] | None = None,
            known_shapes: Collection[str] = (),
            ) -> tuple[list[Candidate], dict[str, Latency], dict[str, Any]]:
    """Time every candidate; returns (candidates, latency by key, runner by key).

    `make(runtime, path, signature)` opens a runner (`evaluate.Runner`), `judge(runner)` is the quality gate
    against the original (on the gate's rows, and every other signature), `timer` the race in the interleaved
    loop (`builder.measure.race`): each candidate is timed until it is slower than the best beyond noise, the
    choice is settled or `budget` is spent, and says so (`Candidate.timed_s`, `stopped`). `only`: the artifact
    the recipe names, the only one that can be chosen. `keep(result, runtime, signature)`: which of the pairs to
    time (default all: a race in groups times the best so far beside each group only on its own runtime).
    `known_shapes`: keys whose first calls at new shapes an earlier group measured (the best so far, timed again
    beside a later group only as its reference), not measured again.

    Every candidate is proved to run before it is timed: one call at the data's shapes. One that cannot (an
    XLA `serving_xla` of a model whose ops have no XLA kernel, a runtime that cannot prepare the file) is a
    candidate with its reason (`CANNOT_RUN`), never timed and never chosen; one that fails while it is timed
    loses its timing the same way, and the others keep theirs.
    """
    calls: dict[str, Callable[[], Any]] = {}
    made: dict[str, Any] = {}
    errors: dict[tuple[str, str, str], str] = {}
    unjudged: list[tuple[str, str, str]] = []  # on a runtime other than the one its file was evaluated on
    pairs = [(r, runtime, signature) for r in results for runtime, signature in candidate_pairs(r, contract, precisions)
             if keep is None or keep(r, runtime, signature)]
    with stage(f"opening {len(pairs)} artifact x runtime pairs (each proved by one call at the data's shapes)"):
        for result, runtime, signature in pairs:
            trio = (result.path, runtime, signature)
            if result.extra.get("runnable_here") is False:
                errors[trio] = result.reason
                continue
            try:
                runner = make(runtime, folder / result.path, signature)
            except Exception as error:  # noqa: BLE001 - a runtime that cannot serve the file is reported, not fatal
                errors[trio] = f"{type(error).__name__}: {cause(error)}"
                continue
            try:
                runner.predict(first_row(x_val))  # proof that it runs, before anything is timed
            except Exception as error:  # noqa: BLE001 - one that cannot run is rejected with its reason
                errors[trio] = f"{CANNOT_RUN} (one call at the data's shapes): {why_not_run(error, cause)}"
                continue
            try:
                calls[key(*trio)] = runner.row_caller(x_val)
                made[key(*trio)] = runner
            except Exception as error:  # noqa: BLE001 - a runtime that cannot serve the file is reported, not fatal
                errors[trio] = f"{type(error).__name__}: {cause(error)}"
                continue
            evaluated = runtime == result.runtime and signature in ("", contract.signature)
            if not evaluated and signature != XLA_SIGNATURE:  # judged after the race, only where it could be chosen
                unjudged.append(trio)
    feeds = new_shape_feeds(contract, x_val) if shapes_vary(contract) else []
    new_shape: dict[str, float | None] = {}
    stalled: set[str] = set()
    plain_keys = [k for k in made if not k.endswith("#" + XLA_SIGNATURE) and k not in known_shapes]
    if feeds and plain_keys:
        # Before the race, so that one which compiles per shape is never its best: a best excluded only after
        # it (OpenVINO reshaping MobileNetV2 at each new batch size, +50-370 ms) leaves the choice to candidates
        # it cut short. serving_xla, whose compiles cost seconds, is measured after, only if the race keeps it.
        with stage(f"first calls at {len(feeds)} new input shapes ({len(plain_keys)} candidates)"):
            for k in plain_keys:
                try:
                    new_shape[k] = first_call_cost_us(made[k], feeds)
                    if stalls(new_shape[k], call_us(calls[k])):
                        stalled.add(k)
                except Exception as error:  # noqa: BLE001 - a candidate that fails at another shape cannot serve it
                    errors[_trio_of(k, pairs)] = f"fails at another input shape: {type(error).__name__}: {cause(error)}"
    failed: dict[str, BaseException] = {}
    entrants = {key(r.path, rt, sig): entrant(r, rt, sig, contract,
                                              (r.path, rt, sig) in errors or key(r.path, rt, sig) in stalled, only)
                for r, rt, sig in pairs if key(r.path, rt, sig) in calls}
    latencies, stops = timer(guarded(calls, failed), budget, entrants) if calls else ({}, {})
    for k, error in failed.items():
        latencies.pop(k, None)
        made.pop(k, None)
        errors[_trio_of(k, pairs)] = f"{CANNOT_RUN} (it failed while timed): {why_not_run(error, cause)}"
    judge_contenders(unjudged, latencies, entrants, errors, made, judge, cause, stage)
    for result, runtime, signature in pairs:
        trio = (result.path, runtime, signature)
        xla, plain = latencies.get(key(*trio)), latencies.get(key(result.path, runtime, contract.signature))
        if signature != XLA_SIGNATURE or xla is None or trio in errors:
            continue
        if plain is not None and not _faster(xla, plain):
            verdict = "slower than" if xla.p50 >= plain.p50 else "not faster beyond noise than"
            errors[trio] = f"{verdict} {contract.signature} ({xla.p50:.1f} vs {plain.p50:.1f} us), so not judged"
            continue
        if dropped(stops.get(key(*trio))):  # it cannot win: the gate's rows at XLA cost seconds of compiling
            errors[trio] = f"{stops[key(*trio)].why}, so not judged"
            continue
        with stage(f"judging {result.path} {signature} on the held-out rows"):
            try:
                passed, why = judge(make(runtime, folder / result.path, signature))
            except Exception as error:  # noqa: BLE001 - a shape of the gate's rows it cannot run
                passed, why = False, why_not_run(error, cause)
        if not passed:
            errors[trio] = f"fails the gate on this runtime ({why})"
    if feeds:
        # serving_xla only where the race kept it: one slower than the best beyond noise is not chosen, whatever
        # a new shape costs it (XLA compiling MobileNetV2 at each new shape took most of this step's 18-37 s)
        timed_keys = [k for k in made if k in latencies and k not in new_shape and k not in known_shapes
                      and not dropped(stops.get(k))
                      and _trio_of(k, pairs) not in errors]
        with stage(f"first calls at {len(feeds)} new input shapes ({len(timed_keys)} serving_xla the race kept)") \
                if timed_keys else contextlib.nullcontext():
            for k in timed_keys:
                try:
                    new_shape[k] = first_call_cost_us(made[k], feeds)
                except Exception as error:  # noqa: BLE001 - a candidate that fails at another shape cannot serve it
                    errors[_trio_of(k, pairs)] = f"fails at another input shape: {type(error).__name__}: {cause(error)}"
    candidates = []
    for result, runtime, signature in pairs:
        trio = (result.path, runtime, signature)
        got = latencies.get(key(*trio))
        cost = new_shape.get(key(*trio))
        error = errors.get(trio, "")
        if not error and stalls(cost, got.p50 if got else None):
            error = (f"compiles per input shape: the first call at a new shape took +{cost / 1e3:.0f} ms "  # type: ignore[operator]
                     f"against p50 {got.p50 / 1e3:.2f} ms, and this model's inputs vary")  # type: ignore[union-attr]
        entry = registry.runtime(runtime)
        stop = stops.get(key(*trio))
        candidates.append(Candidate(result.path, runtime, None if got is None else got.p50,
                                    0 if got is None else got.runs, result.size_bytes, error,
                                    signature or contract.signature, None if got is None else got.ci_low,
                                    None if got is None else got.ci_high, precision=_precision(entry, result.format),
                                    new_shape_us=None if cost is None else round(cost, 1),
                                    timed_s=None if stop is None else round(stop.seconds, 3),
                                    stopped="" if stop is None else stop.why))
    return candidates, latencies, made


def judge_contenders(unjudged: list[tuple[str, str, str]], latencies: Mapping[str, Latency],
                     entrants: Mapping[str, Entrant], errors: dict[tuple[str, str, str], str],
                     made: Mapping[str, Any], judge: Judge, cause: Callable[[BaseException], str],
                     stage: Callable[[str], Any]) -> None:
    """The gate for candidates on a runtime other than the one their file was evaluated on (a .tflite on
    OpenVINO, a SavedModel on TensorFlow with oneDNN bf16), after the race and only where it can change the
    choice: fastest first, each one the fastest candidate known to pass is not faster than beyond noise, until
    every one left is; those are reported "slower than X beyond noise, so not judged" (the choice takes only
    candidates within noise of the fastest, so judging them could not change it). Judged before the race,
    every such candidate cost the gate's rows and a second runner: 14 of MobileNetV2's 83 CPU seconds.

    Writes a failure or the reason it was not judged into `errors` (by trio)."""
    from builder.measure import decide

    def timed(k: str) -> decide.Timed:
        got, who = latencies[k], entrants[k]
        return decide.Timed(k, got.p50, got.ci_low, got.ci_high, who.size_bytes, who.runtime, who.preference)

    waiting = {key(*trio): trio for trio in unjudged if key(*trio) in latencies and trio not in errors
               and key(*trio) in entrants and entrants[key(*trio)].eligible}
    cross = {key(*trio) for trio in unjudged}
    rejected = {key(*trio) for trio in errors}
    passing = [k for k in latencies if k in entrants and entrants[k].eligible and k not in cross | rejected
               and not k.endswith("#" + XLA_SIGNATURE)]
    with stage(f"judging the race's fastest on runtimes other than their file's own ({len(waiting)} at most)") \
            if waiting else contextlib.nullcontext():
        while waiting:
            best = decide.fastest([timed(k) for k in passing]) if passing else None
            contenders = sorted((k for k in waiting if best is None or not decide.faster_beyond_noise(best, timed(k))),
                                key=lambda k: latencies[k].p50)
            if not contenders:
                break
            k = contenders[0]
            trio = waiting.pop(k)
            try:
                passed, why = judge(made[k])
            except Exception as error:  # noqa: BLE001 - a shape of the gate's rows it cannot run
                passed, why = False, why_not_run(error, cause)
            if passed:
                passing.append(k)
            else:
                errors[trio] = f"fails the gate on this runtime ({why})"
    for k, trio in waiting.items():
        best = decide.fastest([timed(p) for p in passing])
        errors[trio] = f"slower than {best.name} beyond noise, so not judged"


def race_line(stops: Mapping[str, Any], budget: float) -> str:
    """The race in one line for the report: how long the candidates were timed against the budget, and why
    they stopped (each candidate's own reason is in its row)."""
    from builder.measure.race import BUDGET, SETTLED

    whys = [s.why for s in stops.values()]
    slower = sum(dropped(s) for s in stops.values())
    longest = max(s.seconds for s in stops.values())
    parts = [f"{slower} stopped once slower than the best beyond noise"] if slower else []
    parts += [f"{n} {label}" for label, n in ((SETTLED, whys.count(SETTLED)), ("at the budget", whys.count(BUDGET)))
              if n]
    other = len(whys) - slower - whys.count(SETTLED) - whys.count(BUDGET)
    if other:
        parts.append(f"{other} failed while timed")
    total = sum(s.seconds for s in stops.values())
    return (f"timing: {len(stops)} candidates raced in one interleaved loop for {total:.1f} s of calls (at most "
            f"{budget:.0f} s; the longest timed {longest:.1f} s): {', '.join(parts)} (95% confidence intervals of "
            "the median of each round's calls)")


def dropped(stop: Any) -> bool:
    """Whether the race stopped this candidate as slower than the best beyond noise."""
    from builder.measure.race import SLOWER

    return stop is not None and stop.why.startswith(SLOWER)


def _trio_of(k: str, pairs: list[tuple[ArtifactResult, str, str]]) -> tuple[str, str, str]:
    return next((r.path, rt, s) for r, rt, s in pairs if key(r.path, rt, s) == k)


def _faster(a: Latency, b: Latency) -> bool:
    from builder.measure.decide import Timed, faster_beyond_noise

    return faster_beyond_noise(Timed("", a.p50, a.ci_low, a.ci_high), Timed("", b.p50, b.ci_low, b.ci_high))


#: What a .tflite format stores, for a runtime that computes in the file's own precision.
STORED = {"tflite_fp32": "f32", "tflite_original": "as stored", "tflite_float16": "f16 weights, f32 compute",
          "tflite_dynamic": "int8 weights, f32 activations", "tflite_int8": "int8", "tflite_qat_int8": "int8",
          "tflite_select_tf": "f32", "saved_model": "f32", "openvino_ir_fp32": "f32", "openvino_ir_int8": "int8"}


def _precision(entry: registry.Runtime, format: str) -> str:
    """What a candidate computes in: the runtime's precision, or the file's own where the runtime keeps it."""
    if entry.precision != registry.AS_STORED and not (entry.precision == "f32" and format in STORED and "int8" in STORED[format]):
        return entry.precision
    return STORED.get(format, registry.AS_STORED)


def primary_rows(results: list[ArtifactResult], latencies: Mapping[str, Latency], contract: ModelContract,
                 ) -> list[ArtifactResult]:
    """Each artifact's table row with the latency of the runtime it was evaluated on, at the contract's
    signature (a serving_xla candidate has its own row in the candidates, with its own figures)."""
    updated = []
    for result in results:
        primary = key(result.path, result.runtime,
                      contract.signature if result.format == registry.SAVED_MODEL_FORMAT else "")
        updated.append(replace(result, latency_us=latencies.get(primary) or result.latency_us))
    return updated
