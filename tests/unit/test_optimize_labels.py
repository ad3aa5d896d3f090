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
