"""The zoo itself: every model builds, loads the way its kind loads, and answers with its declared signature.

Other tests push these models through optimize → serve → package and judge artifacts against the original's
answers, so the zoo has to be right first: names, dtypes and shapes as declared, DATA in the declared form with
ids kept as ints, and trained well above chance (a random model would let a broken artifact pass).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.tf, pytest.mark.slow]
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "tf_keras", "keras", "ai_edge_litert",
                                                     "sklearn")):
    pytest.skip("needs the optimize extra (tensorflow, tf_keras, keras, ai-edge-litert, scikit-learn)",
                allow_module_level=True)

from tests import zoo, zoo_runs  # noqa: E402  (imports TensorFlow helpers only after the skip check)

# What each trained model must at least reach on its validation rows: far above chance (10% digits, 33% iris
# and wine, 50% tokens) and, for regression, clearly better than always answering the training mean
# (diabetes: MAE ~65; iris petal length: ~1.5 cm).
FLOORS: dict[str, dict[str, float]] = {
    "cnn_classifier": {"probs": 0.85},
    "two_inputs": {"label": 0.85},
    "two_heads": {"species": 0.8, "size": 0.6},
    "regression": {"target": 55.0},
    "token_ids": {"sentiment": 0.9},
    "keras3": {"digit": 0.85},
    "tf_module": {"probabilities": 0.85},
    "ready_tflite": {"probs": 0.85},
    "gru_sequence": {"trend": 0.85},
    "text_classifier": {"sentiment": 0.85},
    "custom_layer": {"digit": 0.85},
    "predict_module": {"malignant": 0.85},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zoo.ZooModel]:
    """Every zoo model, built once per test run for the files that read them (tests/zoo_runs)."""
    return {name: zoo_runs.model(name, tmp_path_factory) for name in zoo.ALL_NAMES}


def test_every_model_is_built(built: dict[str, zoo.ZooModel]) -> None:
    assert set(built) == set(zoo.ALL_NAMES) == set(FLOORS) and not set(zoo.NAMES) & set(zoo.TF_NAMES)
    kinds = {m.kind for m in built.values()}
    assert kinds == {"tf_keras", "keras3", "saved_model", "tflite"}


@pytest.mark.parametrize("name", zoo.ALL_NAMES)
def test_model_answers_with_its_declared_signature(built: dict[str, zoo.ZooModel], name: str) -> None:
    model = built[name]
    assert model.model_path.exists() and model.data_path.exists()
    data = zoo.load_data(model)
    assert set(data["x_val"]) == set(model.inputs) == set(data["x_calib"]) == set(data["x_train"])
    assert set(data["y_val"]) == set(model.labels) <= set(model.outputs)
    for input_name, (dtype, shape) in model.inputs.items():
        for split in ("x_train", "x_val", "x_calib"):
            values = data[split][input_name]
            if dtype == "string":  # text as fixed-width UTF-8 bytes: what np.load(allow_pickle=False) reads
                assert values.dtype.kind == "S", (split, input_name, values.dtype)
            else:
                assert values.dtype == np.dtype(dtype), (split, input_name, values.dtype)
            assert len(values.shape) == len(shape)
            assert all(d is None or d == v for d, v in zip(shape[1:], values.shape[1:]))  # None: any length
    outputs = zoo.predict(model, {k: v[:7] for k, v in data["x_val"].items()})
    assert set(outputs) == set(model.outputs)
    for output_name, (dtype, shape, task) in model.outputs.items():
        assert outputs[output_name].dtype == np.dtype(dtype)
        assert outputs[output_name].shape == (7, *shape[1:])
        assert task in ("classification", "regression")
        assert np.all(np.isfinite(outputs[output_name]))


@pytest.mark.parametrize("name", zoo.ALL_NAMES)
def test_model_is_trained_not_random(built: dict[str, zoo.ZooModel], name: str) -> None:
    model = built[name]
    data = zoo.load_data(model)
    outputs = zoo.predict(model, data["x_val"])
    for output_name, floor in FLOORS[name].items():
        labels = data["y_val"][output_name]
        if model.outputs[output_name][2] == "classification":
            assert labels.dtype == np.int64
            score = float(np.mean(np.argmax(outputs[output_name], axis=-1) == labels))
            assert score >= floor, (output_name, score)
        else:
            assert labels.dtype == np.float32
            mae = float(np.mean(np.abs(outputs[output_name].reshape(-1) - labels.reshape(-1))))
            assert mae <= floor, (output_name, mae)
        assert model.val_metric[output_name] == pytest.approx(score if model.outputs[output_name][2]
                                                              == "classification" else mae, rel=1e-3, abs=1e-3)


def test_both_data_forms_are_covered(built: dict[str, zoo.ZooModel]) -> None:
    with np.load(built["cnn_classifier"].data_path) as single:
        assert set(single.files) == {"x_train", "y_train", "x_val", "y_val", "x_calib"}
    with np.load(built["two_heads"].data_path) as named:
        assert {"x_train/features", "y_train/species", "y_train/size", "y_val/size", "x_calib/features"} <= set(
            named.files)
    with np.load(built["token_ids"].data_path) as tokens:
        assert tokens["x_calib/tokens"].dtype == np.int32  # ids stay ints, calibration included


def test_what_only_tensorflow_serves_is_what_it_says(built: dict[str, zoo.ZooModel]) -> None:
    """The GRU takes any sequence length; the text model takes text (bytes in DATA, `S`); the custom layer's
    model does not load until its module is imported; the tf.Module has `predict` and nothing else."""
    import keras

    from builder.optimize import tfenv

    tf = tfenv.tensorflow()
    gru = built["gru_sequence"]
    short = zoo.load_data(gru)["x_val"]["steps"][:3, :5]
    assert zoo.predict(gru, {"steps": short})["trend"].shape == (3, 2)
    assert zoo.load_data(built["text_classifier"])["x_val"]["text"].dtype.kind == "S"
    custom = built["custom_layer"]
    zoo.forget_module(zoo.CUSTOM_MODULE)
    with pytest.raises(Exception, match="Could not locate class 'Gate'"):
        keras.saving.load_model(custom.model_path)
    assert list(tf.saved_model.load(str(built["predict_module"].model_path)).signatures) == ["predict"]


def test_ready_tflite_keeps_names(built: dict[str, zoo.ZooModel]) -> None:
    from ai_edge_litert.interpreter import Interpreter

    signatures = Interpreter(model_path=str(built["ready_tflite"].model_path)).get_signature_list()
    assert signatures == {"serving_default": {"inputs": ["image"], "outputs": ["probs"]}}


def test_a_rebuild_is_deterministic(built: dict[str, zoo.ZooModel], tmp_path: Path) -> None:
    again = zoo.token_ids(tmp_path / "again")
    first = built["token_ids"]
    a, b = zoo.load_data(first), zoo.load_data(again)
    np.testing.assert_array_equal(a["x_val"]["tokens"], b["x_val"]["tokens"])
    x = {"tokens": a["x_val"]["tokens"][:32]}
    np.testing.assert_allclose(zoo.predict(first, x)["sentiment"], zoo.predict(again, x)["sentiment"], atol=1e-5)
