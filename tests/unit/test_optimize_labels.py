"""Labels are hints, not gates: a softmax per position (pixel, token, frame) is classification judged per
position with labels as ids or one-hot at any rank; a quantized model's uint8/int8 scores are scores; labels
that fit no task are set aside with a note and the output is judged by agreement with the original."""

from __future__ import annotations

import numpy as np
import pytest

from builder.optimize.contract import check_labels, make_contract, training_labels
from builder.optimize.quality import class_ids, infer_task, output_metric
from builder.report import OutputSpec, TensorSpec

RNG = np.random.default_rng(7)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def gate(spec: OutputSpec, outputs: np.ndarray, original: np.ndarray, labels: np.ndarray | None = None):
    return output_metric(spec, outputs, original, labels, max_accuracy_drop=0.01, max_relative_error=0.05)


SEGMENTS = softmax(RNG.normal(size=(12, 8, 8, 4)) * 3)  # a softmax per pixel: [N, H, W, classes]
MASK = OutputSpec("mask", "float32", (None, 8, 8, 4), "classification", "test")


def test_a_softmax_per_pixel_is_classification_at_every_position() -> None:
    task, why = infer_task("mask", SEGMENTS, None)
    assert task == "classification" and "64 positions" in why
    tokens = softmax(RNG.normal(size=(5, 7, 11)))  # per token
    assert infer_task("next", tokens, None)[0] == "classification"
    # the same shape that is not a softmax stays a value to measure
    assert infer_task("depth", RNG.normal(size=(12, 8, 8, 4)), None)[0] == "regression"


@pytest.mark.parametrize("form", ["ids", "ids with a trailing 1", "one-hot"])
def test_per_pixel_labels_are_read_as_ids_or_one_hot(form: str) -> None:
    ids = np.argmax(SEGMENTS, axis=-1)
    labels = {"ids": ids, "ids with a trailing 1": ids[..., None], "one-hot": np.eye(4)[ids]}[form]
    assert (class_ids(labels, 4, "y_val", answers=64) == ids.reshape(12, 64)).all()
    metric = gate(MASK, SEGMENTS, SEGMENTS, labels)
    assert metric.passed and metric.accuracy == 1.0 and metric.metric == "accuracy_drop"


def test_a_mask_that_changes_some_pixels_is_judged_per_pixel() -> None:
    changed = SEGMENTS.copy()
    changed[0, :4, :, :] = np.roll(changed[0, :4, :, :], 1, axis=-1)  # 32 of 768 pixels answer another class
    metric = gate(MASK, changed, SEGMENTS)
    assert not metric.passed and metric.metric == "disagreement"
    assert metric.value == pytest.approx(32 / (12 * 64), abs=1e-6)


def test_quantized_uint8_scores_are_scores_not_ids() -> None:
    probs = softmax(RNG.normal(size=(40, 3)) * 2)
    scores = np.clip(np.round(probs * 256), 0, 255).astype(np.uint8)
    task, why = infer_task("scores", scores, None, quantization=(1 / 256, 0))
    assert task == "classification" and "uint8 scores" in why
    ids = np.argmax(probs, axis=1)
    assert infer_task("scores", scores, ids, quantization=(1 / 256, 0))[0] == "classification"
    # integers without a scale are answers to compare exactly (an argmax id, a count)
    assert infer_task("scores", scores, None)[0] == "exact"
    spec = OutputSpec("scores", "uint8", (None, 3), "classification", "test")
    assert gate(spec, scores, scores, ids).passed


def contract_of(*outputs: OutputSpec) -> object:
    return make_contract((TensorSpec("x", "float32", (None, 4)),), tuple(TensorSpec(o.name, o.dtype, o.shape)
                                                                         for o in outputs),
                         {o.name: RNG.normal(size=(10, *[d or 1 for d in o.shape[1:]])) for o in outputs}, {}, {})


def test_labels_that_fit_no_task_are_set_aside_with_a_note() -> None:
    value = OutputSpec("value", "float32", (None, 3), "regression", "")
    contract = contract_of(value)
    dropped, notes = check_labels(contract, {"value": np.zeros((10, 5))}, None)
    assert dropped == {"value"} and len(notes) == 1
    assert notes[0].startswith("labels of 'value' set aside: y_val has shape (10, 5)")
    assert "judged by agreement with the original" in notes[0]
    fitting, none = check_labels(contract, {"value": np.zeros((10, 3))}, {"value": np.zeros((10, 3))})
    assert fitting == set() and none == []


def test_per_pixel_training_labels_keep_their_positions() -> None:
    from builder.report import ModelContract

    contract = ModelContract((TensorSpec("image", "float32", (None, 8, 8, 3)),), (MASK,))
    ids = np.argmax(SEGMENTS, axis=-1)
    assert training_labels(contract, {"mask": np.eye(4)[ids]})["mask"].shape == (12, 8, 8)


# --- fine-tuning with the labels there are: the others fitted to the original's own answers -------------------

KIND = OutputSpec("kind", "float32", (None, 3), "classification", "test")
LEVEL = OutputSpec("level", "float32", (None, 2), "regression", "test")
FLAG = OutputSpec("flag", "float32", (None, 1), "binary", "test")


def test_soft_targets_are_the_originals_probabilities_or_values() -> None:
    from builder.optimize.contract import soft_targets
    from builder.report import ModelContract

    contract = ModelContract((TensorSpec("x", "float32", (None, 4)),), (KIND, LEVEL, FLAG))
    logits, level, flag_logit = RNG.normal(size=(6, 3)), RNG.normal(size=(6, 2)), RNG.normal(size=(6, 1))
    targets = soft_targets(contract, {"kind": logits, "level": level, "flag": flag_logit},
                           {"kind": False, "level": False, "flag": False})
    assert np.allclose(targets["kind"], softmax(logits), atol=1e-6)  # logits: their softmax
    assert np.allclose(targets["flag"], 1 / (1 + np.exp(-flag_logit)), atol=1e-6)  # a logit: its sigmoid
    assert np.allclose(targets["level"], level, atol=1e-6) and targets["level"].dtype == np.float32
    probs = softmax(logits)  # probabilities are the soft targets as they are
    assert np.allclose(soft_targets(contract, {"kind": probs}, {"kind": True})["kind"], probs, atol=1e-6)
    assert set(soft_targets(contract, {"level": level}, {})) == {"level"}  # only the outputs asked for


def test_fit_arguments_take_labels_where_given_and_the_originals_answers_elsewhere(monkeypatch) -> None:
    from builder.optimize import contract as contract_mod, model_io, prune
    from builder.report import ModelContract

    contract = ModelContract((TensorSpec("x", "float32", (None, 4)),), (KIND, LEVEL))
    asked: dict = {}

    def losses_for(tasks, probabilities, soft=frozenset()):
        asked.update(tasks=dict(tasks), probabilities=dict(probabilities), soft=set(soft))
        return {name: f"{'soft ' if name in soft else ''}{task}" for name, task in tasks.items()}

    monkeypatch.setattr(prune, "losses_for", losses_for)
    monkeypatch.setattr(model_io, "keras_specs", lambda model: (contract.inputs, (LEVEL, KIND)))  # its own order
    monkeypatch.setattr(model_io, "input_structure", lambda model: None)
    x = {"x": RNG.normal(size=(5, 4)).astype(np.float32)}
    ids = np.array([0, 2, 1, 1, 0])
    teacher = RNG.normal(size=(5, 2)).astype(np.float32)
    teacher[3, 1] = np.nan  # the original answers NaN on one training row: nothing to learn there
    reference = {"kind": softmax(RNG.normal(size=(7, 3))), "level": RNG.normal(size=(7, 2))}
    xs, ys, losses = contract_mod.fit_arguments(object(), contract, x, {"kind": ids}, reference, {"level": teacher})
    kept = [0, 1, 2, 4]
    assert np.array_equal(xs, x["x"][kept])
    assert np.allclose(ys[0], teacher[kept]) and np.array_equal(ys[1], ids[kept])  # in the model's output order
    assert losses == ["soft regression", "classification"] and asked["soft"] == {"level"}
    assert asked["probabilities"]["kind"] is True
    with pytest.raises(ValueError, match="level"):  # neither labels nor the original's answers: a bug, said
        contract_mod.fit_arguments(object(), contract, x, {"kind": ids}, reference, None)


def fake_plan(y_train: dict | None, pruning: bool = True, qat: bool = False, one_shot: bool = False) -> object:
    from types import SimpleNamespace

    from builder.optimize.data import Data

    rows = 10
    x = {"x": RNG.normal(size=(rows, 4)).astype(np.float32)}
    data = Data(x_train=x, y_train=y_train, x_val=x, y_val={}, x_calib=None, calibration_from="none", source="d.npz")
    specs = (TensorSpec("kind", "float32", (None, 3)), TensorSpec("level", "float32", (None, 2)))
    loaded = SimpleNamespace(inputs=(TensorSpec("x", "float32", (None, 4)),), outputs=specs,
                             signature="serving_default", quantized_outputs={},
                             predict=lambda rows_: {"kind": softmax(rows_["x"][:, :3]), "level": rows_["x"][:, :2]})
    recipe = SimpleNamespace(tasks=(), pruning=object() if pruning else None,
                             quantization=SimpleNamespace(qat=qat))
    return SimpleNamespace(loaded=loaded, data=data, recipe=recipe, one_shot=one_shot, notes=[], train_answers=None)


def reference_of(plan) -> dict:
    return plan.loaded.predict(plan.data.x_val)


def test_an_output_without_training_labels_keeps_fine_tuning_with_a_note() -> None:
    from builder.optimize.contract import settle_contract, teacher_answers

    plan = fake_plan({"kind": RNG.integers(0, 3, 10)})
    settle_contract(plan, reference_of(plan))
    assert plan.recipe.pruning is not None  # not skipped
    assert plan.notes == ["pruning: output 'level' has no training labels: fine-tuned to the original's own "
                          "answers on the 10 training rows"]
    answers = teacher_answers(plan)
    assert set(answers) == {"level"} and np.allclose(answers["level"], plan.data.x_train["x"][:, :2])
    plan.loaded.predict = None  # computed once: QAT after pruning reads the same answers of the original
    assert teacher_answers(plan) is answers
    both = fake_plan(None, qat=True)  # no labels at all, and a recipe that asks for fine-tuning: all distilled
    settle_contract(both, reference_of(both))
    assert [n.split(":")[0] for n in both.notes] == ["pruning and QAT", "pruning and QAT"]
    assert set(teacher_answers(both)) == {"kind", "level"}


def test_answers_too_large_to_hold_are_refused_in_one_line(monkeypatch) -> None:
    from builder.errors import TfsmithError
    from builder.optimize import contract as contract_mod

    plan = fake_plan({"kind": RNG.integers(0, 3, 10)})
    monkeypatch.setattr(contract_mod, "TEACHER_BYTES", 10 * 2 * 4 - 1)  # one float32 short of 10 rows x 2 values
    with pytest.raises(TfsmithError) as error:
        contract_mod.teacher_answers(plan)
    assert "answers for level (no training labels) on the 10 training rows would take" in str(error.value)
    assert "\n" not in str(error.value) and plan.train_answers is None
    monkeypatch.setattr(contract_mod, "TEACHER_BYTES", 10 * 2 * 4)
    assert contract_mod.teacher_answers(plan)["level"].shape == (10, 2)


def test_training_labels_set_aside_are_distilled_not_a_reason_to_skip_pruning() -> None:
    from builder.optimize.contract import settle_contract

    plan = fake_plan({"kind": RNG.integers(0, 3, 10), "level": np.zeros((10, 5), np.float32)})
    settle_contract(plan, reference_of(plan))
    assert plan.recipe.pruning is not None and set(plan.data.y_train) == {"kind"}
    assert plan.notes[0].startswith("labels of 'level' set aside: y_train/level has shape (10, 5)")
    assert plan.notes[1:] == ["pruning: output 'level' has its training labels set aside: fine-tuned to the "
                              "original's own answers on the 10 training rows"]
    assert not any("skipped" in n for n in plan.notes)


def test_no_distillation_note_where_nothing_is_fine_tuned() -> None:
    from builder.optimize.contract import distillation_notes

    assert distillation_notes(fake_plan({"kind": RNG.integers(0, 3, 10)}, one_shot=True)) == []  # one-shot
    assert distillation_notes(fake_plan({"kind": RNG.integers(0, 3, 10)}, pruning=False)) == []
    assert distillation_notes(fake_plan({"kind": RNG.integers(0, 3, 10), "level": np.zeros((10, 2))})) == []


def test_a_regression_output_is_fine_tuned_to_the_originals_answers_not_its_labels() -> None:
    """A regression output's gate is fidelity to the original (relative error against its answers), so its
    training labels would pull fine-tuning away from what it is judged against: it is distilled, with a note,
    while a classification output keeps its labels (its gate is the accuracy drop against them)."""
    from builder.optimize.contract import settle_contract, teacher_answers

    plan = fake_plan({"kind": RNG.integers(0, 3, 10), "level": RNG.normal(size=(10, 2)).astype(np.float32)})
    contract = settle_contract(plan, reference_of(plan))
    assert {s.name: s.task for s in contract.outputs} == {"kind": "classification", "level": "regression"}
    assert set(plan.data.y_train) == {"kind"}
    assert plan.notes == ["pruning: output 'level' has its training labels, but is judged by fidelity to the "
                          "original (regression): fine-tuned to the original's own answers on the 10 training rows"]
    np.testing.assert_allclose(teacher_answers(plan)["level"], plan.loaded.predict(plan.data.x_train)["level"])

    only = fake_plan({"level": RNG.normal(size=(10, 2)).astype(np.float32)})
    settle_contract(only, reference_of(only))
    assert only.data.y_train is None and set(teacher_answers(only)) == {"kind", "level"}


def test_a_signature_that_differs_is_named_in_one_order() -> None:
    """The specs that differ are listed by name, then dtype and shape: a message (and a test of it) never
    depends on how a set happens to iterate."""
    from builder.optimize.contract import contract_kept
    from builder.report import ModelContract, OutputSpec

    contract = ModelContract(inputs=(TensorSpec("x", "float32", (None, 4)),),
                             outputs=(OutputSpec("probs", "float16", (None, 4), "classification", "test"),))
    kept, differs = contract_kept(contract, (TensorSpec("x", "float32", (None, 4)),),
                                  (TensorSpec("probs", "float32", (None, 4)),))
    assert not kept
    assert differs == "signature differs from the original's: probs float16[?,4], probs float32[?,4]"
    assert contract_kept(contract, contract.inputs, tuple(o.tensor() for o in contract.outputs)) == (True, "")
