"""The model generator's composer and catalog (tests/modelgen), pure: seeds reproduce, every spec is one the
catalog allows, the catalog's whole range is reached, ids rebuild their model, and the comparison the e2e test
relies on can fail."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import numpy as np
import pytest

from tests.benchmarks.model_sweep import failure_class
from tests.modelgen import catalog
from tests.modelgen.composer import by_id, check_family, compose, compose_one, family_order, keras3_h5_cannot_reload
from tests.modelgen.data import as_given, labels_for, main_input, npz_arrays
from tests.modelgen.runner import agree, compare, contract_as, one_line

GATE = {"max_accuracy_drop": 0.01, "max_relative_error": 0.05}


def test_a_seed_composes_the_same_models_every_time() -> None:
    assert compose(7, 30) == compose(7, 30)
    assert [s.id for s in compose(7, 30)] == [s.id for s in compose(7, 30)]
    assert compose(7, 10, start=20) == compose(7, 30)[20:]  # an index alone decides its model


def test_another_seed_composes_other_models() -> None:
    assert [s.id for s in compose(1, 20)] != [s.id for s in compose(2, 20)]


def test_ids_are_unique_and_rebuild_their_spec() -> None:
    specs = compose(3, 60)
    assert len({s.id for s in specs}) == len(specs)
    for spec in specs:
        assert by_id(spec.id) == spec
    with pytest.raises(ValueError):
        by_id(specs[0].id.replace(specs[0].family, "nonesuch"))


def test_catalog_entries_are_frozen() -> None:
    with pytest.raises(FrozenInstanceError):
        catalog.FAMILIES[0].name = "other"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        compose_one(0, 0).family = "other"  # type: ignore[misc]


@pytest.mark.parametrize("seed", [0, 1, 2026])
def test_every_spec_is_one_the_catalog_allows(seed: int) -> None:
    for spec in compose(seed, 120):
        check_family(spec)
        if spec.fmt in (catalog.TFLITE, catalog.TFLITE_UINT8):
            assert spec.family not in catalog.NO_TFLITE and spec.variant != "stateful"
            assert spec.precision == catalog.FLOAT32
        assert (spec.aux_input == "none") == (spec.inputs == catalog.SINGLE or spec.family == "preprocessing")
        assert (spec.aux_output == "none") == (spec.outputs == catalog.SINGLE or spec.family == "tf_module")
        if spec.aux_output not in ("none", "score"):
            assert spec.outputs == catalog.DICT  # an op's answer has no layer name: only a dict key names it
        if spec.signatures > 1:
            assert spec.fmt == catalog.SAVED_MODEL and spec.keras != catalog.NO_KERAS and spec.id.endswith("-sigs2")
        if spec.keras == catalog.KERAS3 and spec.fmt == catalog.H5:
            assert not keras3_h5_cannot_reload(spec.variant, spec.aux_input, spec.aux_output)
        if spec.keras == catalog.KERAS3 and spec.variant == "stateful":
            assert spec.fmt in (catalog.KERAS_FILE, catalog.H5)  # its model.export fails at a free batch
        if spec.family == "augmentation" and spec.keras == catalog.KERAS3:
            assert spec.fmt in (catalog.KERAS_FILE, catalog.H5)  # its model.export keeps the random layers active


def test_any_run_of_consecutive_models_covers_every_family() -> None:
    n = len(catalog.FAMILIES)
    assert {f.name for f in family_order(5)} == set(catalog.FAMILY)
    for start in (0, 3, n):
        assert {s.family for s in compose(11, n, start=start)} == set(catalog.FAMILY)


def test_the_catalog_is_reached_whole() -> None:
    specs = compose(0, 400)
    seen = {field: {getattr(s, field) for s in specs} for field in
            ("keras", "fmt", "inputs", "outputs", "task", "labels", "precision", "aux_input", "aux_output", "data_form",
             "signatures")}
    assert seen["signatures"] == {1, 2}
    assert seen["keras"] == {catalog.KERAS3, catalog.TF_KERAS, catalog.NO_KERAS}
    assert seen["fmt"] == set(catalog.FORMATS)
    assert seen["inputs"] == seen["outputs"] == set(catalog.IO_FORMS)
    assert seen["task"] == set(catalog.TASKS)
    assert seen["labels"] == {label for labels in catalog.LABELS_FOR.values() for label in labels}
    assert seen["precision"] == {catalog.FLOAT32, catalog.MIXED, catalog.MIXED_HALF_OUT}
    assert seen["aux_input"] == {"none", *catalog.AUX_INPUTS}
    assert seen["aux_output"] == {"none", *catalog.AUX_OUTPUTS}
    assert seen["data_form"] == {"single", "named"}
    for family in catalog.FAMILIES:
        mine = [s for s in specs if s.family == family.name]
        assert {s.variant for s in mine} == set(family.variants), family.name
        assert {s.keras for s in mine} == set(family.kerases), family.name
    layers = {layer for f in catalog.FAMILIES for layer in f.layers}
    for wanted in ("Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose", "DepthwiseConv2D", "SeparableConv2D",
                   "SimpleRNN", "GRU", "LSTM", "Bidirectional", "Masking", "MultiHeadAttention", "Embedding",
                   "StringLookup", "IntegerLookup", "Normalization", "CategoryEncoding", "RandomFlip",
                   "TimeDistributed", "tfmot.quantize_model", "Model subclass", "tf.Module"):
        assert wanted in layers, wanted
    assert {v for f in catalog.FAMILIES for v in f.variants} >= {"stateful", "masking", "bidirectional", "uint8",
                                                                 "int64", "signatures", "text", "any_size"}


def test_data_is_seeded_typed_and_in_the_form_tfsmith_reads() -> None:
    rng = lambda: np.random.default_rng(4)  # noqa: E731
    a, b = main_input("features", "wide_deep", rng()), main_input("features", "wide_deep", rng())
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["city"].dtype.kind == "S" and a["code"].dtype == np.int64 and a["amount"].dtype == np.float32
    assert main_input("image", "uint8", rng())["image"].dtype == np.uint8
    assert main_input("tokens", "int64", rng())["tokens"].dtype == np.int64
    padded = main_input("tokens", "mask_zero", rng())["tokens"]
    assert padded.dtype == np.int32 and (padded == 0).any() and (padded[:, 0] != 0).all()
    image = main_input("image", "float", rng())["image"]
    pixels = labels_for("segmentation", image, 0)
    assert pixels.shape == image.shape[:3] and set(np.unique(pixels)) == {0, 1, 2, 3}
    assert as_given("segmentation", "pixel_onehot", pixels).shape == (*image.shape[:3], 4)
    ids = labels_for("classification", image, 0)
    assert ids.dtype == np.int64 and len(np.unique(ids)) > 1
    assert as_given("classification", "onehot", ids).sum(axis=1).tolist() == [1.0] * len(ids)
    assert as_given("binary", "ids", labels_for("binary", image, 0)).ndim == 1
    named = npz_arrays({"image": image}, {"probs": ids}, 0, single=False)
    assert set(named) == {"x_train/image", "x_val/image", "x_calib/image", "y_train/probs", "y_val/probs"}
    plain = npz_arrays({"image": image}, {"probs": ids}, 0, single=True)
    assert set(plain) == {"x_train", "x_val", "x_calib", "y_train", "y_val"}
    rows = [set(map(bytes, map(np.ndarray.tobytes, plain[k]))) for k in ("x_train", "x_val", "x_calib")]
    assert not (rows[0] & rows[1]) and not (rows[1] & rows[2]) and not (rows[0] & rows[2])


def test_the_comparison_can_fail() -> None:
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]], np.float32)
    assert agree(probs + 1e-7, probs, "classification", GATE) is None
    assert agree(probs[:, ::-1], probs, "classification", GATE) is not None
    values = np.linspace(0, 1, 8, dtype=np.float32)[:, None]
    assert agree(values * 1.001, values, "regression", GATE) is None
    assert agree(values + 0.3 * values[::-1], values, "regression", GATE) is not None
    assert agree(np.array([b"cat", b"dog"], object), np.array([b"cat", b"dog"]), "exact", GATE) is None
    assert agree(np.array([b"cat", b"cat"], object), np.array([b"cat", b"dog"]), "exact", GATE) is not None
    assert agree(np.array([True, False]), np.array([True, True]), "exact", GATE) is not None
    assert agree(np.array([3, 200], np.uint8), np.array([3, 201], np.uint8), "exact", GATE) is not None
    assert agree(values[:4], values, "regression", GATE) is not None  # a row short
    assert compare("x", {"a": values}, {"a": values, "b": values}, {}, GATE) != []


def test_contract_spellings_are_the_protocols_own() -> None:
    contract = {"serving_default": {"inputs": [{"name": "t", "dtype": "string", "shape": [None, 1]}],
                                    "outputs": [{"name": "f", "dtype": "bool", "shape": [None, 1]}]}}
    assert contract_as(contract, {"string": "DT_STRING", "bool": "DT_BOOL"})["serving_default"]["inputs"][0]["dtype"] \
        == "DT_STRING"


def test_a_failure_is_one_line_and_its_class_folds_what_varies() -> None:
    text = "noise\nTraceback (most recent call last):\n  File x\nValueError: bad shape (3, 4)\n"
    assert one_line(text) == "ValueError: bad shape (3, 4)"
    assert one_line("x\ntfsmith: error: data d.npz: y_val has shape (64,)\nmore") == \
        "tfsmith: error: data d.npz: y_val has shape (64,)"
    a = failure_class("optimize exit 2: tfsmith: error: data /tmp/a/s1-004-dense-x.npz: y_val has shape (64,)")
    b = failure_class("optimize exit 2: tfsmith: error: data /tmp/b/s2-017-conv-y.npz: y_val has shape (32,)")
    assert a == b
