"""Which quality metric each output gets, the numbers, and the gate: pure numpy, no TensorFlow.

Every artifact is judged against the ORIGINAL float model (before any pruning), per output:

- classification with labels: accuracy drop vs the original's accuracy on the same rows must stay within
  `max_accuracy_drop`; top-1 agreement with the original is reported beside it (accuracy can rise while the
  answers change, so a pruned model that "improved" is still visible);
- classification without labels: disagreement (1 - top-1 agreement with the original) within
  `max_accuracy_drop`. A row whose top score is shared by two or more classes (an int8 file often answers
  equal scores) has no top-1 answer: it counts as a disagreement (unless the original ties the same classes);
- classification the original cannot tell apart: when the original answers one class for nearly every row
  (`NEARLY_ALL`), or its outputs vary across rows less than the artifact's error, a passing agreement (or
  accuracy) vouches for nothing (a file that answers a constant would agree); the gate is then the regression
  one below and the metric's text says so. A failing agreement still fails: it has judged;
- regression (labels or not): relative error vs the SPREAD of the original's outputs, RMS(y - y_orig) /
  std(y_orig) over the rows (pooled over columns), within `max_relative_error`: an error is compared with how
  much the model's answers differ between inputs, not with their size (outputs near 1e4 that vary by 300 are
  not judged by 5% of 1e4); MAE/RMSE against labels when DATA has them, and max |y - y_orig|. Argmax
  agreement means nothing for one column (it is always 1.0), so it is never the gate there.

Labels, when given, cover the first rows; rows after them (the all-zero input the gate adds) are judged
against the original only.

- binary classification (one column, labels that are 0/1 or booleans): each row's answer is the score at or
  above 0.5 for a probability column, above 0 for a logit; judged like classification (accuracy drop with
  labels, agreement of those answers with the original's, the same "cannot judge" rule when the original
  answers one side for nearly every row).

- exact (an output whose values are not floats: strings such as a `StringLookup(invert=True)` label, booleans,
  integer ids or counts): every value must be the original's. Judged by agreement, never cast to float: the
  share of rows whose values all equal the original's (strings compared as UTF-8 bytes), with labels the
  accuracy drop against them; the gate is the disagreement (or the drop) within `max_accuracy_drop`.

Task per output: an output whose dtype is not a float is exact (a recipe may call an integer output
regression or classification instead; strings and booleans are only ever exact); one column whose labels are 0/1 or booleans is binary; several columns that are probabilities (non-negative, rows sum to 1), or whose labels are
class ids / one-hot, or (without labels) whose name says logits, are classification; one column, or anything
else, is regression (judged by fidelity, which any output can be judged by). A recipe `[tasks]` table overrides
it per output, and the report states the task and why for every output.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from builder.errors import InputError
from builder.report import OutputMetric, OutputSpec


def _rows(a: np.ndarray) -> np.ndarray:
    """One row of float64 columns per row of `a`; a complex value is two columns (its real and imaginary parts),
    so an error is measured on both."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return np.ascontiguousarray(a, dtype=np.complex128).reshape(len(a), -1).view(np.float64)
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(len(a), -1) if a.ndim > 1 else a.reshape(len(a), 1)


def _is_probabilities(outputs: np.ndarray) -> bool:
    rows = _rows(outputs)
    return bool(rows.size and np.all(rows >= -1e-6) and np.all(rows <= 1 + 1e-6)
                and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3))


def positions(outputs: np.ndarray) -> int:
    """How many answers a row holds: 1 for scores [N, classes], and H*W for a softmax per pixel [N, H, W, classes]
    (per token, per frame alike): every axis between the batch and the last one."""
    return shape_positions(np.asarray(outputs).shape)


def shape_positions(shape: tuple[int | None, ...]) -> int:
    """`positions` of an output of this shape (a dimension of any size counts as one)."""
    return int(np.prod([d or 1 for d in shape[1:-1]])) if len(shape) > 2 else 1


def per_position(outputs: np.ndarray) -> np.ndarray:
    """[N, ..., classes] as one row per answer, [N * positions, classes]; [N, classes] as it is."""
    values = np.asarray(outputs)
    return values.reshape(-1, values.shape[-1]) if values.ndim > 2 else values


def _is_softmax_per_position(outputs: np.ndarray) -> bool:
    """A softmax over the last axis at every position of a row (a class per pixel, token or frame)."""
    values = np.asarray(outputs)
    return bool(values.ndim > 2 and values.shape[-1] > 1 and values.dtype.kind == "f"
                and _is_probabilities(per_position(values)))


def _are_class_ids(labels: np.ndarray, columns: int, answers: int = 1) -> bool:
    """Labels that name one of `columns` classes for each of a row's `answers` positions: ids ([N], [N, 1],
    [N, *positions], [N, *positions, 1]) or one-hot rows ([N, classes], [N, *positions, classes])."""
    labels = np.asarray(labels)
    if not len(labels) or labels.dtype.kind not in "iubf":
        return False
    if columns > 1 and labels.shape[-1] == columns and labels.size == len(labels) * answers * columns and labels.ndim >= 2:
        hot = labels.reshape(-1, columns)
        if np.all((hot == 0) | (hot == 1)) and np.all(hot.sum(axis=1) == 1):
            return True
    flat = labels.reshape(len(labels), -1)
    if flat.shape[1] != answers:
        return False
    return bool(np.all(np.mod(flat, 1) == 0) and flat.min() >= 0 and flat.max() < columns)


#: Integer dtypes a quantized model answers scores in (a full-integer .tflite's uint8 or int8 output).
QUANTIZED_SCORES = frozenset({"uint8", "int8"})


def dequantized(values: np.ndarray, quantization: tuple[float, int] | None) -> np.ndarray:
    """A quantized output's real values, (q - zero_point) * scale; float values as they are."""
    if quantization is None or not quantization[0]:
        return np.asarray(values)
    scale, zero_point = quantization
    return (np.asarray(values, dtype=np.float64) - zero_point) * scale


BINARY = "binary"


def _are_binary_labels(labels: np.ndarray) -> bool:
    values = np.asarray(labels)
    if values.dtype.kind == "b":
        return True
    flat = values.reshape(len(values), -1)
    return bool(flat.shape[1] == 1 and values.dtype.kind in "iuf" and flat.size
                and np.all((flat == 0) | (flat == 1)))


def binary_answers(scores: np.ndarray, original: np.ndarray) -> np.ndarray:
    """Each row's yes/no: a probability column (the original's values within [0, 1]) at or above 0.5, a logit
    column above 0. Decided from the original, so an artifact is read the same way as the model it replaces."""
    ref = _rows(original)
    probability = bool(ref.size and np.all(ref >= -1e-6) and np.all(ref <= 1 + 1e-6))
    rows = _rows(scores)[:, 0]
    return (rows >= 0.5) if probability else (rows > 0)


def binary_labels(labels: np.ndarray, where: str) -> np.ndarray:
    """0/1 or boolean labels as booleans (N,); InputError otherwise."""
    if not _are_binary_labels(labels):
        raise InputError(f"{where}: expected 0/1 or boolean labels for a binary output (got shape "
                         f"{np.asarray(labels).shape}, dtype {np.asarray(labels).dtype})")
    return np.asarray(labels).reshape(len(labels)).astype(bool)


EXACT = "exact"


def is_exact(values: np.ndarray) -> bool:
    """Values that are answers to compare exactly, not numbers to measure an error on: strings, booleans,
    integers (what a model returns as ids, labels, flags or counts)."""
    return np.asarray(values).dtype.kind in "SUObiu"


def exact_kind(values: np.ndarray) -> str:
    kind = np.asarray(values).dtype.kind
    return "strings" if kind in "SUO" else "booleans" if kind == "b" else "integers"


def infer_task(name: str, outputs: np.ndarray, labels: np.ndarray | None,
               override: str | None = None, quantization: tuple[float, int] | None = None) -> tuple[str, str]:
    """(task, why) for one output from the original model's outputs on the held-out rows and its labels.

    An output whose values are not floats is exact, except a quantized model's uint8/int8 scores
    (`quantization`: their scale and zero point), which are scores; a recipe may judge integers by another
    task (they are numbers too), never strings or booleans (InputError)."""
    if override and is_exact(outputs) and np.asarray(outputs).dtype.kind not in "iu" and override != EXACT:
        raise InputError(f"recipe: [tasks] {name} = \"{override}\": {name!r} answers {exact_kind(outputs)}, which "
                         f"can only be judged by exact agreement (\"{EXACT}\")")
    if override:
        return override, f"set in the recipe ([tasks] {name} = \"{override}\")"
    values = np.asarray(outputs)
    if values.dtype.name in QUANTIZED_SCORES and quantization is not None and quantization[0]:
        return _quantized_task(values, labels, quantization)
    if is_exact(outputs):
        return EXACT, (f"{exact_kind(outputs)}, not scores: every value must be the original's (judged by exact "
                       "agreement, never as numbers)")
    if _is_softmax_per_position(values):
        return "classification", (f"a softmax over the last axis ({values.shape[-1]} classes) at each of "
                                   f"{positions(values)} positions a row: judged per position")
    columns = _rows(outputs).shape[1]
    if columns == 1 and labels is not None and _are_binary_labels(labels):
        return BINARY, "one column and labels that are 0/1: a yes/no answer, judged at a 0.5 threshold"
    if columns == 1:
        return "regression", "one column per row: a value, not a choice between classes"
    if _is_probabilities(outputs):
        return "classification", f"{columns} columns that are probabilities (non-negative, rows sum to 1)"
    if labels is not None and _are_class_ids(labels, columns):
        return "classification", f"{columns} columns (logits) and labels that are class ids 0..{columns - 1}"
    if labels is None and "logit" in name.lower():
        return "classification", f"{columns} columns and the output is named {name!r}: scores of classes"
    if labels is None:
        return "regression", (f"{columns} columns that are not probabilities and no labels to show class ids: "
                              "judged as values (set [tasks] in a recipe if they are logits)")
    return "regression", f"{columns} columns and labels that are values, not class ids"


def _quantized_task(values: np.ndarray, labels: np.ndarray | None, quantization: tuple[float, int]
                    ) -> tuple[str, str]:
    """A quantized model's uint8/int8 output: scores whose real values are (q - zero_point) * scale."""
    real = dequantized(values, quantization)
    what = f"{values.dtype.name} scores of a quantized model (scale {quantization[0]:.4g}, zero point {quantization[1]})"
    columns = real.shape[-1] if real.ndim > 1 else 1
    answers = positions(real)
    step = quantization[0] * columns  # rounding moves each row's sum by up to a step per column
    rows = per_position(real) if real.ndim > 2 else real.reshape(len(real), -1)
    probabilities = bool(columns > 1 and rows.size and np.all(rows >= -1e-6)
                         and np.allclose(rows.sum(axis=1), 1.0, atol=max(1e-3, step)))
    if columns > 1 and (probabilities or (labels is not None and _are_class_ids(labels, columns, answers))):
        return "classification", f"{what}: {columns} classes" + (", probabilities once dequantized" if probabilities
                                                                  else " and labels that are class ids")
    if columns == 1 and labels is not None and _are_binary_labels(labels):
        return BINARY, f"{what}: one column and labels that are 0/1"
    return "regression", f"{what}: judged as values"


def class_ids(labels: np.ndarray, columns: int, where: str, answers: int = 1) -> np.ndarray:
    """Labels as class ids: [N] for one answer a row, [N, answers] for a softmax per position; from ids or
    one-hot rows at any rank (see `_are_class_ids`); InputError otherwise."""
    labels = np.asarray(labels)
    if not _are_class_ids(labels, columns, answers):
        shape = "" if answers == 1 else f" for each of {answers} positions a row"
        raise InputError(f"{where}: expected class ids 0..{columns - 1} or one-hot rows{shape} for a classification "
                         f"output (got shape {labels.shape}, dtype {labels.dtype})")
    if columns > 1 and labels.ndim >= 2 and labels.shape[-1] == columns and labels.size == len(labels) * answers * columns:
        ids = np.argmax(labels.reshape(len(labels), answers, columns), axis=-1)
    else:
        ids = labels.reshape(len(labels), answers)
    ids = ids.astype(np.int64)
    return ids.reshape(len(labels)) if answers == 1 else ids


#: Share of rows answered with one class above which top-1 agreement cannot judge an artifact.
NEARLY_ALL = 0.9


def spread(original: np.ndarray) -> float:
    """How much the original's outputs vary between rows: the std across rows, pooled over columns."""
    ref = _rows(original)
    return float(np.sqrt(np.mean(np.var(ref, axis=0)))) if ref.size else 0.0


def fidelity(outputs: np.ndarray, original: np.ndarray) -> tuple[float, float]:
    """(relative error, max abs error) of `outputs` vs the original model's: RMS(y - y_orig) / spread(y_orig)."""
    y, ref = _rows(outputs), _rows(original)
    rms = float(np.sqrt(np.mean((y - ref) ** 2))) if y.size else 0.0
    scale = spread(original)
    relative = rms / scale if scale > 0 else (0.0 if rms == 0 else float("inf"))
    return relative, float(np.max(np.abs(y - ref))) if y.size else 0.0


def top1(scores: np.ndarray) -> np.ndarray:
    """Each row's top class, or -1 where two or more classes share the top score (no answer)."""
    rows = _rows(scores)
    tied = (rows == rows.max(axis=1, keepdims=True)).sum(axis=1) > 1
    return np.where(tied, -1, np.argmax(rows, axis=1))


def agreement_of(outputs: np.ndarray, original: np.ndarray) -> float:
    """Share of rows with the original's top-1 answer; a row the artifact ties counts as a disagreement unless
    the original ties exactly the same classes."""
    y, ref = _rows(outputs), _rows(original)
    top, top_orig = top1(y), top1(ref)
    same = (top == top_orig) & (top >= 0)
    both_tied = (top < 0) & (top_orig < 0)
    if both_tied.any():
        same[both_tied] = np.all((y[both_tied] == y[both_tied].max(axis=1, keepdims=True))
                                 == (ref[both_tied] == ref[both_tied].max(axis=1, keepdims=True)), axis=1)
    return float(np.mean(same)) if len(same) else 1.0


def why_agreement_cannot_judge(original: np.ndarray, error_rms: float) -> str | None:
    """Why top-1 agreement says nothing about an artifact on these rows, or None when it can judge."""
    top_orig = top1(original)
    if len(top_orig):
        classes, counts = np.unique(top_orig, return_counts=True)
        share = counts.max() / len(top_orig)
        if share >= NEARLY_ALL:
            which = int(classes[np.argmax(counts)])
            said = "no single class (tied scores)" if which < 0 else f"class {which}"
            return (f"the original answers {said} for {counts.max()} of {len(top_orig)} rows, so a file that "
                    "answers a constant would agree")
    scale = spread(original)
    if scale <= error_rms:
        return (f"the original's outputs vary across rows by {scale:.3g} (std), not more than this file's error "
                f"{error_rms:.3g} (RMS)")
    return None


def comparable(values: np.ndarray) -> np.ndarray:
    """Values as they are compared exactly: strings as UTF-8 bytes (TensorFlow answers bytes objects, data
    files hold str or fixed-width bytes), anything else as it is."""
    values = np.asarray(values)
    if values.dtype.kind == "U":
        return np.char.encode(values, "utf-8").astype(object)
    if values.dtype.kind in "SO":
        flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) if isinstance(v, (bytes, np.bytes_)) else v
                for v in values.reshape(-1).tolist()]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(values.shape)
    return values


def same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: every value of `a` equals `b`'s (shapes must match row for row)."""
    a, b = comparable(a), comparable(b)
    if a.shape[1:] != b.shape[1:] and a.reshape(len(a), -1).shape[1] == b.reshape(len(b), -1).shape[1]:
        b = b.reshape(a.shape)
    if a.shape != b.shape:
        return np.zeros(len(a), dtype=bool)
    return np.asarray(a == b).reshape(len(a), -1).all(axis=1)


def exact_metric(spec: OutputSpec, outputs: np.ndarray, original: np.ndarray, labels: np.ndarray | None, *,
                 max_accuracy_drop: float) -> OutputMetric:
    """An output judged by exact agreement with the original's values (strings, booleans, integers): the
    accuracy drop against labels where there are labels, else the share of rows that differ."""
    agree_rows = same_rows(outputs, original)
    agreement = float(np.mean(agree_rows)) if len(agree_rows) else 1.0
    what = f"{exact_kind(original)}, exact"
    if labels is not None:
        n = len(labels)
        accuracy = float(np.mean(same_rows(np.asarray(outputs)[:n], labels))) if n else 1.0
        original_accuracy = float(np.mean(same_rows(np.asarray(original)[:n], labels))) if n else 1.0
        drop = original_accuracy - accuracy
        passed = drop <= max_accuracy_drop + 1e-9
        return OutputMetric(spec.name, spec.task, "accuracy_drop", round(drop, 6), max_accuracy_drop, passed,
                            f"{what}, with labels: accuracy {accuracy:.4f} vs the original's {original_accuracy:.4f} "
                            f"(drop {drop:+.4f} {'<=' if passed else '>'} {max_accuracy_drop:.4f}); exact agreement "
                            f"with the original {agreement:.4f}", accuracy=accuracy,
                            original_accuracy=original_accuracy, agreement=agreement)
    disagreement = 1.0 - agreement
    passed = disagreement <= max_accuracy_drop + 1e-9
    return OutputMetric(spec.name, spec.task, "disagreement", round(disagreement, 6), max_accuracy_drop, passed,
                        f"{what}: rows whose every value equals the original's {agreement:.4f} (disagreement "
                        f"{disagreement:.4f} {'<=' if passed else '>'} {max_accuracy_drop:.4f})", agreement=agreement)


def output_metric(spec: OutputSpec, outputs: np.ndarray, original: np.ndarray, labels: np.ndarray | None, *,
                  max_accuracy_drop: float, max_relative_error: float) -> OutputMetric:
    """One output's metrics and gate verdict vs the original model (see the module docstring)."""
    if spec.task == EXACT or (is_exact(original) and np.asarray(original).dtype.kind not in "iu"):
        return exact_metric(spec, outputs, original, labels, max_accuracy_drop=max_accuracy_drop)
    relative, max_abs = fidelity(outputs, original)
    if spec.task == BINARY:
        answers, answers_orig = binary_answers(outputs, original), binary_answers(original, original)
        agreement = float(np.mean(answers == answers_orig)) if len(answers) else 1.0
        share = float(max(np.mean(answers_orig), 1 - np.mean(answers_orig))) if len(answers_orig) else 1.0
        side = "yes" if len(answers_orig) and np.mean(answers_orig) >= 0.5 else "no"
        cannot = (f"the original answers {side} for {share:.0%} of the rows, so a file that answers a constant "
                  "would agree") if share >= NEARLY_ALL else None
        truth = binary_labels(labels, f"labels of {spec.name}") if labels is not None else None
        return _answers_metric(spec, "binary", "agreement with the original's answers", answers, answers_orig,
                               truth, agreement, cannot, relative, max_abs, max_accuracy_drop, max_relative_error)
    if spec.task == "classification":
        answers = positions(original)
        if answers > 1:  # a softmax per pixel, token or frame: each position is one answer
            outputs, original = per_position(outputs), per_position(original)
        rms = float(np.sqrt(np.mean((_rows(outputs) - _rows(original)) ** 2))) if _rows(original).size else 0.0
        truth = (class_ids(labels, _rows(original).shape[1], f"labels of {spec.name}", answers).reshape(-1)
                 if labels is not None else None)
        what = "classification" if answers == 1 else f"classification at {answers} positions a row"
        return _answers_metric(spec, what, "top-1 agreement with the original", top1(outputs),
                               top1(original), truth, agreement_of(outputs, original),
                               why_agreement_cannot_judge(original, rms), relative, max_abs, max_accuracy_drop,
                               max_relative_error)
    mae = rmse = original_mae = None
    if labels is not None:
        lab = _rows(labels)
        y, ref = _rows(outputs)[: len(lab)], _rows(original)[: len(lab)]
        if lab.shape != y.shape:
            raise InputError(f"labels of {spec.name}: shape {np.asarray(labels).shape} does not match the output's "
                             f"{tuple(np.asarray(original).shape)}")
        mae, rmse = float(np.mean(np.abs(y - lab))), float(np.sqrt(np.mean((y - lab) ** 2)))
        original_mae = float(np.mean(np.abs(ref - lab)))
    passed = relative <= max_relative_error + 1e-12
    against = (f"; MAE {mae:.4g} vs the original's {original_mae:.4g}, RMSE {rmse:.4g}" if mae is not None else "")
    return OutputMetric(spec.name, spec.task, "relative_error", round(relative, 6), max_relative_error, passed,
                        f"regression: error relative to the spread of the original's outputs (RMS diff / std) "
                        f"{relative:.4f} {'<=' if passed else '>'} {max_relative_error:.4f} "
                        f"(max |diff| {max_abs:.4g}){against}",
                        mae=mae, rmse=rmse, original_mae=original_mae, relative_error=relative, max_abs_error=max_abs)


def _answers_metric(spec: OutputSpec, what: str, agreeing: str, answers: np.ndarray, answers_orig: np.ndarray,
                    truth: np.ndarray | None, agreement: float, cannot: str | None, relative: float, max_abs: float,
                    max_accuracy_drop: float, max_relative_error: float) -> OutputMetric:
    """An output whose rows are answers (a class, yes/no): the accuracy drop against labels where there are
    labels, else disagreement with the original's answers; judged by the output error relative to the
    original's spread instead where agreement cannot vouch (`cannot`) and would pass."""
    accuracy = original_accuracy = None
    if truth is not None:
        n = len(truth)
        accuracy = float(np.mean(answers[:n] == truth))
        original_accuracy = float(np.mean(answers_orig[:n] == truth))
    drop = None if accuracy is None or original_accuracy is None else original_accuracy - accuracy
    would_pass = (drop <= max_accuracy_drop + 1e-9) if drop is not None else (1.0 - agreement <= max_accuracy_drop + 1e-9)
    common = {"accuracy": accuracy, "original_accuracy": original_accuracy, "agreement": agreement,
              "relative_error": relative, "max_abs_error": max_abs}
    if cannot is not None and would_pass:
        passed = relative <= max_relative_error + 1e-12
        beside = f"; accuracy {accuracy:.4f} vs the original's {original_accuracy:.4f}" if accuracy is not None else ""
        return OutputMetric(spec.name, spec.task, "relative_error", round(relative, 6), max_relative_error, passed,
                            f"{what}, but agreement cannot judge: {cannot}; judged by the output error relative to "
                            f"the original's spread {relative:.4f} {'<=' if passed else '>'} {max_relative_error:.4f} "
                            f"({agreeing} {agreement:.4f}, not gated{beside})", **common)
    if drop is not None:
        passed = drop <= max_accuracy_drop + 1e-9
        return OutputMetric(spec.name, spec.task, "accuracy_drop", round(drop, 6), max_accuracy_drop, passed,
                            f"{what} with labels: accuracy {accuracy:.4f} vs the original's {original_accuracy:.4f} "
                            f"(drop {drop:+.4f} {'<=' if passed else '>'} {max_accuracy_drop:.4f}); {agreeing} "
                            f"{agreement:.4f}", **common)
    disagreement = 1.0 - agreement
    passed = disagreement <= max_accuracy_drop + 1e-9
    return OutputMetric(spec.name, spec.task, "disagreement", round(disagreement, 6), max_accuracy_drop, passed,
                        f"{what} without labels: {agreeing} {agreement:.4f} (disagreement {disagreement:.4f} "
                        f"{'<=' if passed else '>'} {max_accuracy_drop:.4f})", **common)


def answered_rows(original: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per row: True where the original answers every float output with finite values.

    Why: a row where the original itself answers NaN or infinity (an all-padding row into masked pooling divides
    by zero) has no answer to keep; no file can be judged against it, the original's own SavedModel included."""
    rows: np.ndarray | None = None
    for values in original.values():
        values = np.asarray(values)
        if values.ndim == 0:
            continue
        if rows is None:
            rows = np.ones(len(values), dtype=bool)
        if values.dtype.kind == "f" and len(values) == len(rows):
            rows &= np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    return rows if rows is not None else np.ones(0, dtype=bool)


def set_aside_note(kept: np.ndarray) -> str:
    """The note for rows the original answers with NaN or infinity ('' when there are none)."""
    dropped = int(len(kept) - np.count_nonzero(kept))
    if not dropped:
        return ""
    return (f"{dropped} of {len(kept)} row{'s' if len(kept) != 1 else ''} set aside: the original answers NaN or "
            "infinity there, so there is no answer to keep")


def _answered(arrays: Mapping[str, np.ndarray], kept: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of each array that `kept` keeps (labels cover the first rows only)."""
    out = {}
    for name, values in arrays.items():
        values = np.asarray(values)
        out[name] = values if values.ndim == 0 else values[kept[: len(values)]]
    return out


def judge(outputs: Mapping[str, np.ndarray], original: Mapping[str, np.ndarray],
          labels: Mapping[str, np.ndarray], specs: tuple[OutputSpec, ...], *, max_accuracy_drop: float,
          max_relative_error: float) -> tuple[tuple[OutputMetric, ...], bool, str]:
    """Every output's metric; (metrics, all passed, one-line reason naming the failing outputs).

    Judged only on the rows where the original answers (`answered_rows`); the others are set aside, and each
    metric's reason says how many."""
    kept = answered_rows(original)
    note = set_aside_note(kept)
    if note:
        outputs, original, labels = _answered(outputs, kept), _answered(original, kept), _answered(labels, kept)
    metrics = tuple(output_metric(spec, outputs[spec.name], original[spec.name], labels.get(spec.name),
                                  max_accuracy_drop=max_accuracy_drop, max_relative_error=max_relative_error)
                    for spec in specs)
    if note:
        from dataclasses import replace

        metrics = tuple(replace(m, why=f"{m.why}; {note}") for m in metrics)
    failed = [m for m in metrics if not m.passed]
    if failed:
        return metrics, False, "; ".join(f"{m.output}: {m.metric} {m.value:.4f} > {m.limit:.4f}" for m in failed)
    return metrics, True, "; ".join(f"{m.output}: {m.metric} {m.value:.4f} <= {m.limit:.4f}" for m in metrics)


def answers_lost(spec: OutputSpec, outputs: np.ndarray, original: np.ndarray, labels: np.ndarray | None
                 ) -> tuple[int, int] | None:
    """(rows the original answers right that `outputs` answers wrong, rows the original answers right) for a
    classification or binary output with labels; None for any other output (nothing to lose against)."""
    if labels is None or spec.task not in (BINARY, "classification"):
        return None
    if spec.task == BINARY:
        answers, answers_orig = binary_answers(outputs, original), binary_answers(original, original)
        truth = binary_labels(labels, f"labels of {spec.name}")
    else:
        answers_per_row = positions(original)
        if answers_per_row > 1:
            outputs, original = per_position(outputs), per_position(original)
        answers, answers_orig = top1(outputs), top1(original)
        truth = class_ids(labels, _rows(original).shape[1], f"labels of {spec.name}", answers_per_row).reshape(-1)
    n = len(truth)
    right = answers_orig[:n] == truth
    return int(np.count_nonzero(answers[:n][right] != truth[right])), int(np.count_nonzero(right))


def judge_retrained(outputs: Mapping[str, np.ndarray], original: Mapping[str, np.ndarray],
                    labels: Mapping[str, np.ndarray], specs: tuple[OutputSpec, ...], *, max_accuracy_drop: float,
                    max_relative_error: float) -> tuple[tuple[OutputMetric, ...], bool, str]:
    """`judge`, and for a model whose weights were trained again (pruned and fine-tuned): of the rows the
    original answers right, at most `max_accuracy_drop` answered wrong, per output with labels.

    Why the second rule: fine-tuning can trade answers, losing some the original got right while gaining as many
    elsewhere, so the accuracy drop alone would keep a model that answers a fifth of the rows differently (a
    generated binary classifier pruned to 50%: accuracy up 0.031, agreement 0.785). Quantization cannot learn, so
    the files keep `judge` alone. Rows the original answers wrong may change: there is no right answer to lose."""
    metrics, passed, why = judge(outputs, original, labels, specs, max_accuracy_drop=max_accuracy_drop,
                                 max_relative_error=max_relative_error)
    kept = answered_rows(original)
    if not kept.all():
        outputs, original, labels = _answered(outputs, kept), _answered(original, kept), _answered(labels, kept)
    lost_lines = []
    for spec in specs:
        counted = answers_lost(spec, outputs[spec.name], original[spec.name], labels.get(spec.name))
        if counted is None or not counted[1]:
            continue
        lost, right = counted
        if lost / right > max_accuracy_drop + 1e-9:
            lost_lines.append(f"{spec.name}: answers lost {lost / right:.4f} > {max_accuracy_drop:.4f} ({lost} of the "
                              f"{right} rows the original answers right)")
    if not lost_lines:
        return metrics, passed, why
    failed = [f"{m.output}: {m.metric} {m.value:.4f} > {m.limit:.4f}" for m in metrics if not m.passed]
    return metrics, False, "; ".join(failed + lost_lines)


def agreement_summary(metrics: tuple[OutputMetric, ...]) -> float:
    """One number for "agrees with the original": the worst top-1 agreement, or 1 - worst relative error."""
    values = [m.agreement if m.agreement is not None else max(0.0, 1.0 - (m.relative_error or 0.0))
              for m in metrics]
    return min(values) if values else 1.0
