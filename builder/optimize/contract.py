"""Step 2, the contract: the original model's signature and each output's task, the labels checked against it,
and what fine-tuning feeds the model in its own order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from builder.optimize.planning import _shape_text
from builder.report import ModelContract, OutputSpec, TensorSpec

# --- step 2: the contract --------------------------------------------------------------------------------


def make_contract(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], reference: Mapping[str, np.ndarray],
                  labels: Mapping[str, np.ndarray], overrides: Mapping[str, str],
                  signature: str = "serving_default") -> ModelContract:
    """The original's signature plus a task per output (inferred, or the recipe's override), with why."""
    from builder.optimize.quality import infer_task

    specs = []
    for t in outputs:
        task, why = infer_task(t.name, reference[t.name], labels.get(t.name), overrides.get(t.name))
        specs.append(OutputSpec(t.name, t.dtype, t.shape, task, why))
    return ModelContract(tuple(inputs), tuple(specs), signature)


def check_labels(contract: ModelContract, y_val: Mapping[str, np.ndarray], y_train: Mapping[str, np.ndarray] | None) -> None:
    """Labels that cannot be judged with their output's task are one line now, before any work."""
    from builder.errors import InputError
    from builder.optimize.quality import EXACT, binary_labels, class_ids

    for split, labels in (("y_val", y_val), ("y_train", y_train or {})):
        for spec in contract.outputs:
            if spec.name not in labels:
                continue
            key = f"{split}/{spec.name}" if len(contract.outputs) > 1 else split
            y = np.asarray(labels[spec.name])
            if spec.task == EXACT:
                columns = int(np.prod([d or 1 for d in spec.shape[1:]]))
                if len(y) and y.reshape(len(y), -1).shape[1] != columns and spec.shape[1:] and None not in spec.shape[1:]:
                    raise InputError(f"data: {key} has shape {y.shape}; output {spec.name!r} is "
                                     f"{_shape_text(spec.shape)} ({spec.task_why})")
            elif spec.task == "classification":
                class_ids(y, int(spec.shape[-1] or 1), f"data: {key} ({spec.name} is {spec.task_why})")
            elif spec.task == "binary":
                binary_labels(y, f"data: {key} ({spec.name} is {spec.task_why})")
            elif y.reshape(len(y), -1).shape[1] != int(np.prod([d or 1 for d in spec.shape[1:]])):
                raise InputError(f"data: {key} has shape {y.shape}; regression output {spec.name!r} is "
                                 f"{_shape_text(spec.shape)}")


def training_labels(contract: ModelContract, y: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Labels as the fine-tuning losses want them: class ids for classification, float values otherwise."""
    from builder.optimize.quality import class_ids

    out = {}
    for spec in contract.outputs:
        if spec.task == "classification":
            out[spec.name] = class_ids(y[spec.name], int(spec.shape[-1] or 1), f"y_train/{spec.name}")
        else:
            out[spec.name] = np.asarray(y[spec.name], dtype=np.float32)
    return out


def fit_arguments(model: Any, contract: ModelContract, x: Mapping[str, np.ndarray], y: Mapping[str, np.ndarray],
                  reference: Mapping[str, np.ndarray]) -> tuple[Any, Any, Any]:
    """(x, y, losses) for `model.fit`, as lists in the model's own input/output order.

    Lists, not dicts: tfmot's wrappers rename output layers (`prune_low_magnitude_<name>`), so names would not
    match any more; the order does.
    """
    from builder.optimize import prune, quality
    from builder.optimize.model_io import keras_specs

    in_specs, out_specs = keras_specs(model)
    labels = training_labels(contract, y)
    tasks = {s.name: s.task for s in contract.outputs}
    probabilities = {s.name: (bool(np.all((reference[s.name] >= 0) & (reference[s.name] <= 1)))
                              if s.task == "binary" else quality._is_probabilities(reference[s.name]))
                     for s in contract.outputs}
    losses = prune.losses_for(tasks, probabilities)
    from builder.optimize.model_io import input_structure

    if input_structure(model) is not None:  # a model built on a dict of inputs is fed that dict
        xs = [{s.name: x[s.name] for s in in_specs}]
    else:
        xs = [x[s.name] for s in in_specs]
    if isinstance(getattr(model, "_nested_outputs", None), Mapping):  # a model that returns a dict: its keys
        return (xs[0] if len(xs) == 1 else xs), {n: labels[n] for n in labels}, {n: losses[n] for n in losses}
    ys = [labels[s.name] for s in out_specs]
    ls = [losses[s.name] for s in out_specs]
    return (xs[0] if len(xs) == 1 else xs), (ys[0] if len(ys) == 1 else ys), (ls[0] if len(ls) == 1 else ls)


def contract_kept(contract: ModelContract, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> tuple[bool, str]:
    """Does a file's signature equal the contract (names, dtypes, shapes)? (kept, what differs)."""
    want_in, want_out = contract.api()
    got_in, got_out = frozenset(inputs), frozenset(outputs)
    if want_in == got_in and want_out == got_out:
        return True, ""
    differ = sorted((want_in ^ got_in) | (want_out ^ got_out), key=lambda t: t.name)
    return False, "signature differs from the original's: " + ", ".join(
        f"{t.name} {t.dtype}{_shape_text(t.shape)}" for t in differ[:4])
