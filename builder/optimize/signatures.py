"""Every signature of the original model, kept and judged: not only the one that is the contract.

A SavedModel (or .tflite) may have several signatures: `serving_default` beside `embed` and `score_pair`. A
client that calls `embed` on the original must get an answer from the optimized model too, so no signature may
be lost on the way: the SavedModel optimize writes keeps all of them, the .tflite files are converted from all
of them at once (each lands in a subgraph of its own and LiteRT serves each), and every artifact x runtime is
judged on every signature against the original, like the contract's. An artifact that lacks one, or answers
one of them differently from the original, is not accepted (it cannot replace the original), and the one that
is chosen carries them all; the report says which signatures the chosen artifact serves, and how each was
judged.

What each signature is judged on: DATA holds rows for the contract's inputs. Another signature's input takes
DATA's held-out rows of the input with its name when there is one with its dtype and row shape, else the rows
of a contract input with the same dtype and row shape (`embed(x)`, `score_pair(a, b)` on the held-out `x`; the
second input of the same kind takes the rows rolled by one, so a pair is two different rows), else generated
rows (floats in [0, 1), integers 0: the one id every lookup takes); text is never made up, so a signature with
a string input DATA has no rows for is kept but cannot be judged, which the report says.

Pure functions over frozen dataclasses, except `make_checks` (it calls the original model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from builder.report import OutputSpec, TensorSpec

Arrays = Mapping[str, np.ndarray]
#: Where a signature's rows came from, as the report says it.
FROM_DATA, FROM_SIMILAR, GENERATED = "DATA's held-out rows", "held-out rows of a contract input", "generated rows"


@dataclass(frozen=True)
class SignatureCheck:
    """One signature of the original besides the contract's: what it takes and returns (names, dtypes,
    shapes; a task per output), the rows it is judged on, the original's answers to them, and where the rows
    came from (`source`; empty `feed`: it cannot be judged, and `source` says why)."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[OutputSpec, ...]
    source: str
    feed: Mapping[str, np.ndarray] = field(default_factory=dict)
    reference: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def judged(self) -> bool:
        return bool(self.feed)

    def api(self) -> tuple[frozenset[TensorSpec], frozenset[TensorSpec]]:
        return frozenset(self.inputs), frozenset(o.tensor() for o in self.outputs)


def _fits(spec: TensorSpec, values: np.ndarray) -> bool:
    """Rows of `values` are valid rows of `spec`: its dtype, and its shape after the batch."""
    want = spec.shape[1:]
    got = values.shape[1:]
    same_kind = (values.dtype.kind in "SUO") if spec.dtype == "string" else values.dtype == np.dtype(spec.dtype)
    return same_kind and len(want) == len(got) and all(w is None or w == g for w, g in zip(want, got))


def rows_for(inputs: tuple[TensorSpec, ...], x: Arrays, rows: int | None = None) -> tuple[dict[str, np.ndarray], str]:
    """(feed, source): rows for a signature's inputs out of the contract's rows `x` (see the module docstring);
    ({}, why) when one input is text DATA has no rows for."""
    count = min((len(v) for v in x.values()), default=0) if rows is None else rows
    feed: dict[str, np.ndarray] = {}
    sources: set[str] = set()
    used: dict[str, int] = {}
    for spec in inputs:
        values = x.get(spec.name)
        if values is not None and _fits(spec, np.asarray(values)):
            feed[spec.name] = np.asarray(values)[:count]
            sources.add(FROM_DATA)
            continue
        similar = next((name for name, v in x.items() if _fits(spec, np.asarray(v))), None)
        if similar is not None:
            shift = used.get(similar, 0)
            used[similar] = shift + 1
            feed[spec.name] = np.roll(np.asarray(x[similar])[:count], shift, axis=0)
            sources.add(f"{FROM_SIMILAR} ({similar})")
            continue
        if spec.dtype == "string":
            return {}, f"not judged: DATA has no rows for its text input {spec.name!r}, and no text is made up"
        shape = [count] + [d if d is not None else 1 for d in spec.shape[1:]]
        dtype = np.dtype(spec.dtype)
        rng = np.random.default_rng(len(feed))
        feed[spec.name] = (rng.random(shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype=dtype))
        sources.add(GENERATED)
    return feed, "judged on " + ", ".join(sorted(sources))


def make_checks(others: Mapping[str, tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]],
                predict: Callable[[str, Arrays], dict[str, np.ndarray]], x_val: Arrays) -> tuple[SignatureCheck, ...]:
    """A check per signature besides the contract's: its rows, the ORIGINAL model's answers on them and a task
    per output (inferred from those answers, as for the contract; no labels)."""
    from builder.optimize.quality import infer_task

    checks = []
    for name, (inputs, outputs) in others.items():
        feed, source = rows_for(inputs, x_val)
        reference = predict(name, feed) if feed else {}
        specs = []
        for spec in outputs:
            task, why = (infer_task(spec.name, reference[spec.name], None) if spec.name in reference
                         else ("regression", "not judged"))
            specs.append(OutputSpec(spec.name, spec.dtype, spec.shape, task, why))
        checks.append(SignatureCheck(name, tuple(inputs), tuple(specs), source, feed, reference))
    return tuple(checks)


def calibration(checks: tuple[SignatureCheck, ...], x_calib: Arrays | None) -> dict[str, dict[str, np.ndarray]]:
    """Calibration rows for each other signature, taken from the contract's calibration rows the same way as
    its judged rows (int8 conversion of a multi-signature file calibrates every signature)."""
    if not x_calib:
        return {}
    found = {}
    for check in checks:
        feed, _ = rows_for(check.inputs, x_calib)
        if feed:
            found[check.name] = feed
    return found


@dataclass(frozen=True)
class Verdict:
    """How one artifact x runtime fared on the other signatures: `passed` (every one present, the original's
    names, dtypes and shapes, and within the gate), `why` (one line), and a line per signature for the report."""

    passed: bool
    why: str
    per_signature: Mapping[str, str]


def judge(has: Callable[[str], Any], call: Callable[[str, Arrays], Mapping[str, np.ndarray]],
          checks: tuple[SignatureCheck, ...], judge_outputs: Callable[[Any, Mapping[str, np.ndarray], Mapping[str, np.ndarray]], tuple[bool, str]],
          contract_signature: str) -> Verdict:
    """Judge one artifact x runtime on every other signature (and that it serves the contract's under its
    own key: a request names it, once there is more than one).

    `has(name)`: the artifact's own (inputs, outputs) for that signature, or None when it lacks it;
    `call(name, feed)`: its answers; `judge_outputs(check, answers, reference)`: the quality gate."""
    if not checks:
        return Verdict(True, "", {})
    lines: dict[str, str] = {}
    failed: list[str] = []
    missing = [name for name in ([contract_signature] if has(contract_signature) is None else [])]
    missing += [c.name for c in checks if has(c.name) is None]
    for check in checks:
        own = has(check.name)
        if own is None:
            lines[check.name] = "missing"
            continue
        if frozenset(own[0]) != check.api()[0] or frozenset(own[1]) != check.api()[1]:
            lines[check.name] = "its names, dtypes or shapes differ from the original's"
            failed.append(f"{check.name}: {lines[check.name]}")
            continue
        if not check.judged:
            lines[check.name] = check.source
            continue
        passed, why = judge_outputs(check, call(check.name, check.feed), check.reference)
        lines[check.name] = f"{'passed' if passed else 'FAILED'}: {why} ({check.source})"
        if not passed:
            failed.append(f"{check.name}: {why}")
    if missing:
        failed.insert(0, f"lacks the original's signature{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    if failed:
        return Verdict(False, "; ".join(failed), lines)
    return Verdict(True, "every signature of the original kept and judged: "
                   + ", ".join(f"{name} {'passed' if text.startswith('passed') else text}" for name, text in lines.items()),
                   lines)


def plan_note(contract_signature: str, checks: tuple[SignatureCheck, ...]) -> str | None:
    """The report's line on the signatures, None when the model has only the contract's."""
    if not checks:
        return None
    return (f"signatures: the original has {contract_signature} (the contract) and "
            + ", ".join(checks_text(checks)) + "; every artifact keeps them all (the .tflite files are converted from "
            "every one) and every artifact x runtime is judged on each against the original: one that lacks one or "
            "answers it differently is not accepted")


def checks_text(checks: tuple[SignatureCheck, ...]) -> list[str]:
    return [f"{c.name} ({c.source})" for c in checks]


def served_note(chosen: str, runtime: str, contract_signature: str, checks: tuple[SignatureCheck, ...],
                accepted: bool) -> str | None:
    """Which artifact serves which signature, once the choice is made."""
    if not checks:
        return None
    names = ", ".join([contract_signature] + [c.name for c in checks])
    if accepted:
        return f"served: {chosen} on {runtime} carries every signature of the original ({names})"
    return (f"served: {chosen} cannot serve every signature of the original ({names}); see its reason, or choose "
            "the saved_model, which keeps them all")
