"""Seeded composition of model specs from the catalog: the same (seed, count) gives the same models, always.

Property-style, not exhaustive: the families come round-robin in a seeded order (so any `len(FAMILIES)`
consecutive models cover every family, and a small `make test` count still spreads over families), and every
other choice (Keras flavour, format, I/O forms, dtypes, precision, labels) is drawn from what the family allows.
Pure: no TensorFlow, so unit tests can check reproducibility and coverage in milliseconds.
"""

from __future__ import annotations

import random

from tests.modelgen.catalog import (AUX_INPUTS, AUX_OUTPUTS, DICT, FAMILIES, FAMILY, H5, KERAS3, KERAS_FILE, LABELS_FOR,
                                    LIST, NO_KERAS, SAVED_MODEL,
                                    NO_TFLITE, SEGMENTATION, SINGLE, TFLITE_FORMATS, Family, ModelSpec)

#: share of models drawn in mixed precision where the family allows it (most users train in float32)
MIXED_SHARE = 0.25
#: share of Keras SavedModels saved with a second signature of the user's own
SECOND_SIGNATURE_SHARE = 0.4
#: share of models drawn in another float dtype than float32 where the family allows one (float64)
OTHER_DTYPE_SHARE = 0.5


def family_order(seed: int) -> list[Family]:
    """Every family once, in an order that depends only on the seed."""
    order = list(FAMILIES)
    random.Random(f"families-{seed}").shuffle(order)
    return order


def compose_one(seed: int, index: int) -> ModelSpec:
    """The index-th model of a seed. Depends on (seed, index) alone, so `-k` on an id rebuilds the same model."""
    order = family_order(seed)
    family = order[index % len(order)]
    rng = random.Random(f"model-{seed}-{index}")
    variant = rng.choice(family.variants)
    keras = rng.choice(family.kerases)
    formats = list(family.formats)
    if variant == "stateful" or family.name == "preprocessing":
        # A stateful RNN's states and the lookups' string tables have no TFLite builtins: a user with one of
        # these keeps a Keras file or a SavedModel (a .tflite of theirs is the converter's refusal, not ours).
        formats = [f for f in formats if f not in TFLITE_FORMATS]
    if family.name in NO_TFLITE:
        formats = [f for f in formats if f not in TFLITE_FORMATS]
    if keras == KERAS3 and variant == "stateful":
        # Keras 3's model.export traces a stateful RNN at a free batch and fails ("enters the loop with shape (1, 8),
        # but has shape (None, 8) after one iteration"): its users keep the .keras file
        formats = [f for f in formats if f in (KERAS_FILE, H5)]
    if keras == KERAS3 and family.name == "augmentation":
        # Keras 3's model.export keeps RandomFlip/RandomRotation/RandomContrast ACTIVE in the SavedModel (its answers
        # differ call to call), and the converter refuses their random ops: such a user's file has no fixed answers
        # to compare with, so a Keras 3 augmentation model comes as .keras or .h5
        formats = [f for f in formats if f in (KERAS_FILE, H5)]
    fmt = rng.choice(formats)
    inputs = rng.choice(family.input_forms)
    outputs = rng.choice(family.output_forms)
    if fmt in TFLITE_FORMATS:
        precision = "float32"  # a user's .tflite is converted from a float model
    else:
        mixed = [p for p in family.precisions if p != "float32"]
        precision = rng.choice(mixed) if mixed and rng.random() < MIXED_SHARE else "float32"
    task = rng.choice(family.tasks)
    if task == SEGMENTATION and outputs == SINGLE and rng.random() < 0.5:
        outputs = rng.choice([o for o in family.output_forms if o != SINGLE] or [SINGLE])
    labels = rng.choice(LABELS_FOR[task])
    aux_input = rng.choice(AUX_INPUTS) if inputs in (LIST, DICT) and family.name != "preprocessing" else "none"
    # a bool answer is a thresholded op with no layer name of its own: only a dict key names it
    aux_output = rng.choice(AUX_OUTPUTS if outputs == DICT else ("score",)) if outputs in (LIST, DICT) else "none"
    if family.name == "tf_module":
        aux_output = "none"  # its outputs are its signatures' own dicts
    if family.name == "subclassed" and aux_output != "none":
        aux_output = "score"  # its hand-written call returns the head and a score
    one_to_one = inputs == SINGLE and outputs == SINGLE
    data_form = rng.choice(["single", "named"]) if one_to_one else "named"
    if keras == KERAS3 and fmt == H5 and keras3_h5_cannot_reload(variant, aux_input, aux_output):
        fmt = KERAS_FILE
    signatures = 1
    if fmt == SAVED_MODEL and keras != NO_KERAS and family.name not in ("subclassed", "qat"):
        # drawn apart, so adding this choice left every earlier draw of a seed as it was
        signatures = 2 if random.Random(f"signatures-{seed}-{index}").random() < SECOND_SIGNATURE_SHARE else 1
    dtype = "float32"
    others = [d for d in family.dtypes if d != "float32"]
    if others and variant != "text":  # drawn apart too: every earlier draw of a seed stays as it was
        draw = random.Random(f"dtype-{seed}-{index}")
        dtype = draw.choice(others) if draw.random() < OTHER_DTYPE_SHARE else "float32"
    return ModelSpec(seed=seed, index=index, family=family.name, variant=variant, keras=keras, fmt=fmt,
                     inputs=inputs, outputs=outputs, task=task, labels=labels, precision=precision,
                     aux_input=aux_input, aux_output=aux_output, data_form=data_form, signatures=signatures,
                     dtype=dtype)


def keras3_h5_cannot_reload(variant: str, aux_input: str, aux_output: str) -> bool:
    """Keras 3 writes a legacy .h5 it cannot load back when the model holds an op that is not a layer (a cast, a
    comparison, the mask a Masking/mask_zero layer computes): "Unknown layer: 'Cast'" / "'NotEqual'". No user
    has such a file that runs, so the generator saves those models as .keras instead."""
    return (variant in ("masking", "mask_zero", "uint8") or aux_input in ("bool", "int64", "uint8", "scalar")
            or aux_output in ("flag", "class_id", "rank1"))


def compose(seed: int, count: int, start: int = 0) -> list[ModelSpec]:
    """`count` models of a seed, from index `start`."""
    return [compose_one(seed, i) for i in range(start, start + count)]


def by_id(model_id: str) -> ModelSpec:
    """The spec an id names (ids start `s<seed>-<index>-`): how a failure printed by the test is rebuilt."""
    seed_part, index_part = model_id.split("-")[:2]
    spec = compose_one(int(seed_part[1:]), int(index_part))
    if spec.id != model_id:
        raise ValueError(f"{model_id!r} is not what seed {seed_part[1:]} index {index_part} composes ({spec.id})")
    return spec


def check_family(spec: ModelSpec) -> None:
    """A spec only the catalog allows (the unit tests run this over many seeds)."""
    family = FAMILY[spec.family]
    assert spec.variant in family.variants and spec.keras in family.kerases and spec.fmt in family.formats
    assert spec.inputs in family.input_forms and spec.outputs in family.output_forms
    assert spec.task in family.tasks and spec.labels in LABELS_FOR[spec.task]
    assert spec.precision in family.precisions and spec.dtype in family.dtypes
    assert spec.data_form == "named" or (spec.inputs == SINGLE and spec.outputs == SINGLE)
