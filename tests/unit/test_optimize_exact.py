"""Outputs that are not floats (a StringLookup(invert=True) label, a flag, an argmax id) are judged by exact
agreement with the original, never cast to float: task inference, the gated number, labels, and the refusal of a
recipe that would measure strings as numbers."""

from __future__ import annotations

import numpy as np
import pytest

from builder.errors import InputError
from builder.optimize.quality import EXACT, infer_task, judge, output_metric
from builder.optimize.report import quality_text
from builder.report import ArtifactResult, Latency, OutputSpec

LABELS = np.array([b"cat", b"dog", b"fish", b"dog"] * 25, dtype=object)  # what TensorFlow answers: bytes objects


def metric(spec: OutputSpec, outputs: np.ndarray, original: np.ndarray, labels: np.ndarray | None = None):
    return output_metric(spec, outputs, original, labels, max_accuracy_drop=0.01, max_relative_error=0.05)


@pytest.mark.parametrize(("values", "kind"), [
    (LABELS, "strings"),
    (np.array(["cat", "dog"] * 50), "strings"),
    (np.array([[True], [False]] * 50), "booleans"),
    (np.arange(100, dtype=np.int64) % 3, "integers"),
])
def test_an_output_that_is_not_a_float_is_exact(values: np.ndarray, kind: str) -> None:
    task, why = infer_task("label", values, None)
    assert task == EXACT and why.startswith(kind)


def test_strings_are_judged_by_agreement_and_one_changed_row_in_100_is_the_limit() -> None:
    spec = OutputSpec("label", "string", (None,), EXACT, "strings")
    same = metric(spec, np.array([v.decode() for v in LABELS]), LABELS)  # str vs bytes: the same text
    assert same.passed and same.metric == "disagreement" and same.value == 0.0 and same.agreement == 1.0
    one_off, two_off = LABELS.copy(), LABELS.copy()
    one_off[0] = b"bird"
    two_off[:2] = b"bird"
    assert metric(spec, one_off, LABELS).passed
    failed = metric(spec, two_off, LABELS)
    assert not failed.passed and failed.value == pytest.approx(0.02)


def test_labels_of_an_exact_output_gate_the_accuracy_drop() -> None:
    spec = OutputSpec("label", "string", (None,), EXACT, "strings")
    truth = LABELS.copy()
    truth[:10] = b"bird"  # the original is right on 90 rows
    worse = LABELS.copy()
    worse[10:15] = b"bird"  # five more rows wrong
    m = metric(spec, worse, LABELS, truth)
    assert m.metric == "accuracy_drop" and m.original_accuracy == pytest.approx(0.9)
    assert m.accuracy == pytest.approx(0.85) and not m.passed


def test_booleans_and_ids_rows_agree_only_when_every_value_does() -> None:
    flags = OutputSpec("any", "bool", (None, 2), EXACT, "booleans")
    original = np.array([[True, False]] * 100)
    changed = original.copy()
    changed[:5, 1] = True
    m = metric(flags, changed, original)
    assert m.agreement == pytest.approx(0.95) and not m.passed
    ids = OutputSpec("classes", "int64", (None,), EXACT, "integers")
    original_ids = np.arange(100, dtype=np.int64) % 7
    assert metric(ids, original_ids + 1, original_ids).agreement == 0.0  # off by one is another class, not close


def test_the_gate_over_a_string_and_a_float_output_names_the_failing_one() -> None:
    specs = (OutputSpec("label", "string", (None,), EXACT, "strings"),
             OutputSpec("probs", "float32", (None, 3), "classification", "probabilities"))
    probs = np.eye(3, dtype=np.float32)[np.arange(100) % 3]
    changed = LABELS.copy()
    changed[:50] = b"bird"
    metrics, passed, why = judge({"label": changed, "probs": probs}, {"label": LABELS, "probs": probs}, {}, specs,
                                 max_accuracy_drop=0.01, max_relative_error=0.05)
    assert not passed and why.startswith("label: disagreement 0.5000 > 0.0100")
    row = ArtifactResult("saved_model", "saved_model", "tensorflow", 1, 1, 1, Latency(1.0, 1.0, 1), {}, (), (),
                         metrics, True, False, why)
    assert quality_text(row) == "label: agree 0.5000; probs: agree 1.0000"


def test_a_recipe_cannot_measure_strings_as_numbers_but_may_call_ids_values() -> None:
    with pytest.raises(InputError, match=r"\[tasks\] label = \"regression\": 'label' answers strings"):
        infer_task("label", LABELS, None, "regression")
    assert infer_task("count", np.arange(10, dtype=np.int64), None, "regression")[0] == "regression"
    assert infer_task("label", LABELS, None, EXACT)[0] == EXACT
