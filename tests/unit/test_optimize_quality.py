"""The quality metric per output and the gate (pure numpy): task inference, which number is gated and why, and
that every metric can fail — a regression int8 file that is off is rejected, argmax of one column is never used."""

from __future__ import annotations

import numpy as np
import pytest

from builder.errors import InputError
from builder.optimize.quality import agreement_summary, fidelity, infer_task, judge, output_metric
from builder.report import OutputSpec

RNG = np.random.default_rng(0)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def spec(name: str, task: str, columns: int) -> OutputSpec:
    return OutputSpec(name, "float32", (None, columns), task, "test")


def gate(spec_: OutputSpec, outputs: np.ndarray, original: np.ndarray, labels: np.ndarray | None = None):
    return output_metric(spec_, outputs, original, labels, max_accuracy_drop=0.01, max_relative_error=0.05)


@pytest.mark.parametrize(
    ("outputs", "labels", "task", "why"),
    [
        (softmax(RNG.normal(size=(50, 4))), None, "classification", "probabilities"),
        (RNG.normal(size=(50, 4)), RNG.integers(0, 4, 50), "classification", "logits"),
        (RNG.normal(size=(50, 4)), None, "regression", "set [tasks] in a recipe if they are logits"),
        (RNG.normal(size=(50, 4)), None, "classification", "named 'class_logits'"),
        (RNG.normal(size=(50, 3)), RNG.normal(size=(50, 3)), "regression", "labels that are values"),
        (RNG.random((50, 1)), RNG.normal(size=50), "regression", "one column"),
        (RNG.random((50, 1)), None, "regression", "one column"),
        (RNG.random((50, 1)), RNG.integers(0, 2, 50), "binary", "labels that are 0/1"),
        (RNG.normal(size=(50, 1)), RNG.random(50) > 0.5, "binary", "labels that are 0/1"),
    ],
)
def test_task_is_inferred_per_output_and_says_why(outputs, labels, task: str, why: str) -> None:
    got, reason = infer_task("class_logits" if "class_logits" in why else "out", outputs, labels)
    assert got == task and why in reason


def test_recipe_override_wins_and_is_stated() -> None:
    task, why = infer_task("score", RNG.normal(size=(10, 4)), None, override="classification")
    assert task == "classification" and "[tasks] score" in why


def test_regression_int8_that_is_off_is_rejected_even_without_labels() -> None:
    """The case that used to pass as "agreement 1.000": one column, off by up to ~49 on a 25..346 target."""
    original = RNG.uniform(25, 346, size=(200, 1))
    off = original + RNG.uniform(-49, 49, size=original.shape)
    metric = gate(spec("target", "regression", 1), off, original)
    assert not metric.passed and metric.metric == "relative_error" and metric.value > 0.05
    assert metric.agreement is None  # argmax of one column means nothing and is not reported
    close = original * (1 + RNG.uniform(-0.005, 0.005, size=original.shape))
    assert gate(spec("target", "regression", 1), close, original).passed


def test_regression_with_labels_reports_mae_rmse_and_the_original_mae() -> None:
    labels = RNG.uniform(0, 10, size=(100, 1))
    original = labels + 0.5
    metric = gate(spec("y", "regression", 1), original + 0.01, original, labels)
    assert metric.passed and metric.mae == pytest.approx(0.51) and metric.original_mae == pytest.approx(0.5)
    assert metric.rmse == pytest.approx(0.51) and "MAE" in metric.why


def test_classification_with_labels_gates_on_accuracy_drop_and_reports_agreement() -> None:
    original = softmax(RNG.normal(size=(100, 5)) * 3)
    labels = np.argmax(original, axis=1)
    worse = original.copy()
    worse[:5] = np.roll(worse[:5], 1, axis=1)  # 5 rows now answer differently: accuracy -0.05
    metric = gate(spec("p", "classification", 5), worse, original, labels)
    assert not metric.passed and metric.metric == "accuracy_drop" and metric.value == pytest.approx(0.05)
    assert metric.agreement == pytest.approx(0.95) and metric.original_accuracy == 1.0


def test_classification_without_labels_gates_on_agreement_with_the_original() -> None:
    original = softmax(RNG.normal(size=(100, 5)) * 3)
    same = original + 1e-4
    assert gate(spec("p", "classification", 5), same, original).passed
    changed = original.copy()
    changed[:3] = np.roll(changed[:3], 2, axis=1)
    metric = gate(spec("p", "classification", 5), changed, original)
    assert not metric.passed and metric.metric == "disagreement" and metric.value == pytest.approx(0.03)


def test_one_hot_labels_are_class_ids_and_bad_labels_are_one_line() -> None:
    original = softmax(RNG.normal(size=(20, 3)))
    ids = np.argmax(original, axis=1)
    assert gate(spec("p", "classification", 3), original, original, np.eye(3)[ids]).accuracy == 1.0
    with pytest.raises(InputError, match="class ids 0..2"):
        gate(spec("p", "classification", 3), original, original, np.full(20, 7))


def test_judge_names_every_failing_output() -> None:
    orig = {"label": softmax(RNG.normal(size=(50, 4)) * 3), "score": RNG.uniform(1, 2, size=(50, 1))}
    art = {"label": orig["label"], "score": orig["score"] * 1.5}
    specs = (spec("label", "classification", 4), spec("score", "regression", 1))
    metrics, passed, why = judge(art, orig, {}, specs, max_accuracy_drop=0.01, max_relative_error=0.05)
    assert not passed and why.startswith("score: relative_error") and "label" not in why
    assert [m.passed for m in metrics] == [True, False]
    assert metrics[1].relative_error > 1  # off by half its size: more than the score varies between rows
    assert agreement_summary(metrics) == 0.0


def test_fidelity_of_identical_outputs_is_zero_and_of_a_zero_original_is_defined() -> None:
    x = RNG.normal(size=(10, 3))
    assert fidelity(x, x) == (0.0, 0.0)
    assert fidelity(np.zeros((4, 1)), np.zeros((4, 1)))[0] == 0.0
    assert fidelity(np.ones((4, 1)), np.zeros((4, 1)))[0] == float("inf")


def test_a_model_that_answers_one_class_for_nearly_every_row_is_not_judged_by_agreement() -> None:
    """124 of 128 rows answer class 0: an int8 file off by more than the rows differ must not pass as 1.000."""
    logits = np.zeros((128, 4))
    logits[:, 0] = 3.0
    logits[:4, 2] = 4.0  # four rows answer class 2
    logits += RNG.normal(scale=0.05, size=logits.shape)
    original = softmax(logits)
    off = original + RNG.normal(scale=0.05, size=original.shape)  # keeps the top class, moves every score
    metric = gate(spec("probs", "classification", 4), off, original)
    assert metric.agreement == 1.0
    assert metric.metric == "relative_error" and not metric.passed
    assert "agreement cannot judge" in metric.why and "124 of 128 rows" in metric.why


def test_outputs_that_barely_vary_are_judged_by_error_relative_to_their_spread() -> None:
    """Every row the same class, scores varying by ~2.5e-6 between rows; the int8 file's error is 2e-3."""
    base = softmax(np.array([[2.0, 1.0, 0.5, 0.1]]))
    original = base + RNG.normal(scale=2.5e-6, size=(64, 4))
    int8 = original + RNG.normal(scale=2e-3, size=original.shape)
    metric = gate(spec("probs", "classification", 4), int8, original)
    assert metric.agreement == 1.0 and not metric.passed
    assert "cannot judge" in metric.why and metric.value > 100
    assert gate(spec("probs", "classification", 4), original, original).passed  # no error: nothing to fail


def test_a_tie_in_the_artifacts_top_scores_is_a_disagreement() -> None:
    original = np.tile([[0.1, 0.5, 0.2, 0.2]], (10, 1)) + np.linspace(0, 0.05, 10)[:, None] * [1, 0, 0, -1]
    original = softmax(np.log(np.clip(original, 1e-6, None)) * 4)
    int8 = original.copy()
    int8[0] = [0.2109375, 0.2109375, 0.2109375, 0.1]  # three equal maxima; the first is not the original's class
    tied = gate(spec("probs", "classification", 4), int8, original)
    assert tied.agreement == pytest.approx(0.9) and not tied.passed
    int8[0] = [0.0, 0.2109375, 0.2109375, 0.1]  # the original's class is one of the tied: still no answer
    assert gate(spec("probs", "classification", 4), int8, original).agreement == pytest.approx(0.9)
    both = np.full((3, 4), 0.25)
    assert gate(spec("probs", "classification", 4), both, both).agreement == 1.0  # the same tie as the original


def test_regression_error_is_relative_to_the_spread_not_the_size_of_the_outputs() -> None:
    """Outputs near 1e4 varying by ~400: an RMS error of ~530 is larger than the rows differ, and must fail."""
    original = 1e4 + RNG.normal(scale=400, size=(200, 1))
    off = original + RNG.normal(scale=530, size=original.shape)
    metric = gate(spec("price", "regression", 1), off, original)
    assert not metric.passed and metric.value > 1.0 and "spread" in metric.why
    fine = original + RNG.normal(scale=4, size=original.shape)  # 1% of the spread
    assert gate(spec("price", "regression", 1), fine, original).passed


def test_labels_cover_the_first_rows_and_later_rows_are_judged_against_the_original() -> None:
    logits = RNG.normal(size=(21, 3)) * 3
    labels = np.argmax(logits[:20], axis=1)
    metric = gate(spec("probs", "classification", 3), softmax(logits), softmax(logits), labels)
    assert metric.passed and metric.accuracy == 1.0 and metric.agreement == 1.0


def test_a_failing_agreement_has_judged_and_still_names_the_disagreement() -> None:
    """A broken file whose error is as large as the original's spread: agreement fails, and says so."""
    original = softmax(RNG.normal(size=(100, 5)) * 3)
    broken = np.roll(original, 1, axis=1)
    metric = gate(spec("probs", "classification", 5), broken, original)
    assert metric.metric == "disagreement" and not metric.passed and "cannot judge" not in metric.why


def test_a_binary_output_is_judged_by_its_answers_at_the_threshold_and_can_fail() -> None:
    original = RNG.random((200, 1))  # sigmoid scores, both answers common
    labels = (original[:, 0] + RNG.normal(scale=0.1, size=200)) > 0.5
    binary = spec("p", "binary", 1)
    same = gate(binary, original + 1e-4, original, labels)
    assert same.passed and same.metric == "accuracy_drop" and same.accuracy is not None and "binary" in same.why
    flipped = gate(binary, 1.0 - original, original, labels)  # every answer changes side
    assert not flipped.passed and flipped.agreement is not None and flipped.agreement < 0.2
    unlabelled = gate(binary, 1.0 - original, original)
    assert not unlabelled.passed and unlabelled.metric == "disagreement"


def test_a_binary_original_that_answers_one_side_cannot_vouch_by_agreement() -> None:
    original = 0.9 + 0.05 * RNG.random((100, 1))  # always "yes"
    constant = np.full_like(original, 0.99)
    metric = gate(spec("p", "binary", 1), constant, original)
    assert metric.metric == "relative_error" and "cannot judge" in metric.why and not metric.passed


def test_logit_binary_answers_split_at_zero() -> None:
    from builder.optimize.quality import binary_answers

    logits = np.array([[-2.0], [0.5], [3.0]])
    assert binary_answers(logits, logits).tolist() == [False, True, True]
    probabilities = np.array([[0.2], [0.5], [0.7]])
    assert binary_answers(probabilities, probabilities).tolist() == [False, True, True]


def _onehot_scores(classes: np.ndarray, columns: int = 3) -> np.ndarray:
    """Confident probabilities answering `classes`."""
    scores = np.full((len(classes), columns), 0.1 / (columns - 1), np.float32)
    scores[np.arange(len(classes)), classes] = 0.9
    return scores


def test_a_retrained_model_that_trades_answers_is_refused_though_its_accuracy_rose() -> None:
    from builder.optimize.quality import judge_retrained

    truth = np.arange(100) % 3
    original = truth.copy()
    original[:30] = (truth[:30] + 1) % 3  # wrong on rows 0-29, right on 30-99 (accuracy 0.70)
    pruned = original.copy()
    pruned[:20] = truth[:20]  # 20 wrong answers made right
    pruned[30:40] = (truth[30:40] + 1) % 3  # 10 right answers lost: accuracy 0.80, agreement 0.70
    outputs, reference, labels = {"p": _onehot_scores(pruned)}, {"p": _onehot_scores(original)}, {"p": truth}
    specs = (spec("p", "classification", 3),)
    _, passed, _ = judge(outputs, reference, labels, specs, max_accuracy_drop=0.01, max_relative_error=0.05)
    assert passed  # the accuracy drop alone keeps it
    _, passed, why = judge_retrained(outputs, reference, labels, specs, max_accuracy_drop=0.01,
                                     max_relative_error=0.05)
    assert not passed
    assert why == "p: answers lost 0.1429 > 0.0100 (10 of the 70 rows the original answers right)"


def test_a_retrained_model_may_change_rows_the_original_answers_wrong() -> None:
    from builder.optimize.quality import judge_retrained

    truth = np.arange(300) % 3
    original = truth.copy()
    original[:6] = (truth[:6] + 1) % 3  # six rows the original answers wrong
    pruned = original.copy()
    pruned[:3] = truth[:3]  # three of them changed to right
    pruned[3] = (truth[3] + 2) % 3  # one wrong answer changed to another wrong one
    pruned[10] = (truth[10] + 1) % 3  # and one right answer lost: 1 of 294, within 1%
    outputs, reference, labels = {"p": _onehot_scores(pruned)}, {"p": _onehot_scores(original)}, {"p": truth}
    specs = (spec("p", "classification", 3),)
    metrics, passed, why = judge_retrained(outputs, reference, labels, specs, max_accuracy_drop=0.01,
                                           max_relative_error=0.05)
    assert passed and metrics[0].metric == "accuracy_drop" and metrics[0].agreement == pytest.approx(295 / 300)
    _, passed, _ = judge(outputs, reference, {}, specs, max_accuracy_drop=0.01, max_relative_error=0.05)
    assert not passed  # agreement alone (0.983) would refuse it


def test_a_retrained_binary_output_without_labels_is_judged_as_the_files_are() -> None:
    from builder.optimize.quality import judge_retrained

    rng = np.random.default_rng(0)
    original = rng.random((200, 1)).astype(np.float32)
    pruned = original.copy()
    pruned[:10] = 1.0 - pruned[:10]  # 10 of 200 answers flipped: disagreement 0.05
    specs = (spec("yes", "binary", 1),)
    for labels in ({}, {"yes": (original[:, 0] >= 0.5)}):
        want = judge({"yes": pruned}, {"yes": original}, labels, specs, max_accuracy_drop=0.01,
                     max_relative_error=0.05)
        got = judge_retrained({"yes": pruned}, {"yes": original}, labels, specs, max_accuracy_drop=0.01,
                              max_relative_error=0.05)
        assert not got[1] and not want[1]
        if labels:  # the original answers every row right: the 10 flipped are lost
            assert "yes: answers lost 0.0500 > 0.0100 (10 of the 200 rows the original answers right)" in got[2]
        else:
            assert got == want
