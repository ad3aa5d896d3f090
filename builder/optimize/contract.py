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
                  signature: str = "serving_default",
                  quantized: Mapping[str, tuple[float, int]] | None = None) -> ModelContract:
    """The original's signature plus a task per output (inferred, or the recipe's override), with why.

    `quantized`: (scale, zero point) of the outputs a full-integer model answers in uint8/int8 (scores)."""
    from builder.optimize.quality import answered_rows, infer_task

    kept = answered_rows(reference)  # a row the original answers NaN shows nothing of what the output is
    specs = []
    for t in outputs:
        answers = np.asarray(reference[t.name])
        if answers.ndim and len(answers) == len(kept) and not kept.all():
            answers = answers[kept]
        task, why = infer_task(t.name, answers, labels.get(t.name), overrides.get(t.name),
                               (quantized or {}).get(t.name))
        if not t.shape and task == "regression" and not overrides.get(t.name):
            why = ("one value a call, not one a row (a scalar beside the batch): each held-out row asked alone, "
                   "its answer judged as a value")
        specs.append(OutputSpec(t.name, t.dtype, t.shape, task, why))
    return ModelContract(tuple(inputs), tuple(specs), signature)


def original_answers(loaded: Any, x: Mapping[str, np.ndarray], path: object) -> dict[str, np.ndarray]:
    """The original model's outputs on DATA's rows, or one line saying it cannot be called with them (the one
    failure that stops optimize after loading: nothing can be judged without the original's answers)."""
    from builder.errors import InputError
    from builder.optimize.causes import logged

    try:
        return loaded.predict(x)
    except Exception as error:  # noqa: BLE001 - whatever the runtime raises, the user gets one line
        raise InputError(f"model {path}: it cannot be called with DATA's x_val rows: "
                         f"{logged('call-original', error, 'calling the original model on x_val')}; check that "
                         "DATA's arrays have the model's input names, dtypes and shapes") from error


def answered_gate(loaded: Any, x: Mapping[str, np.ndarray], held_out: int, path: object
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str | None]:
    """(the gate's rows, the original's answers on them, a note or None): the rows the gate adds after the
    held-out ones (an all-zero input) kept only where the original answers them with finite values.

    Why: a row the gate makes up is a question, not the user's data; where the original itself fails on it (a
    lookup refusing the id 0, an int8-unfriendly division by a zero temperature) or answers NaN (masked pooling
    over nothing), there is no answer to keep, and asking the files would only fail them for the original's
    own gap. The held-out rows are the user's: the original must take them (one line when it cannot), and a
    held-out row it answers NaN is set aside by the gate (`quality.judge`)."""
    from builder.optimize.quality import answered_rows

    rows = len(next(iter(x.values()))) if x else 0
    added = range(held_out, rows)
    try:
        answers = original_answers(loaded, x, path)
    except Exception:  # noqa: BLE001 - maybe only a made-up row fails: the held-out rows decide
        if not added:
            raise
        answers = None
    if answers is None:
        answers = original_answers(loaded, {k: v[:held_out] for k, v in x.items()}, path)
        keep = list(range(held_out))
        for i in added:
            try:
                one = loaded.predict({k: v[i : i + 1] for k, v in x.items()})
            except Exception:  # noqa: BLE001 - the original refuses this made-up row: it is not asked
                continue
            answers = {k: np.concatenate([answers[k], np.asarray(one[k])]) for k in answers}
            keep.append(i)
    else:
        keep = list(range(rows))
    finite = answered_rows(answers)
    keep_at = [j for j, i in enumerate(keep) if i < held_out or finite[j]]
    dropped = rows - len(keep_at)
    if not dropped:
        return dict(x), answers, None
    index = np.asarray([keep[j] for j in keep_at], dtype=np.int64)
    note = (f"the gate's own {'row' if dropped == 1 else f'{dropped} rows'} after the held-out ones (an all-zero "
            f"input) set aside: the original itself fails or answers NaN there, so there is no answer to keep")
    return ({k: np.asarray(v)[index] for k, v in x.items()},
            {k: np.asarray(v)[np.asarray(keep_at, dtype=np.int64)] for k, v in answers.items()}, note)


#: Rows called twice to see that the original answers the same rows the same way.
REPEAT_ROWS = 8


def check_repeatable(loaded: Any, x: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
                     path: object) -> None:
    """One line, before any work, for a model whose answers change from call to call on the same rows (random
    layers left active in a SavedModel: Keras 3's `model.export` keeps RandomFlip and its kin training-time
    random): nothing can be judged against answers that move, so there is no contract to keep."""
    from builder.errors import InputError

    rows = min(REPEAT_ROWS, len(next(iter(x.values()))))
    moved = answers_moved(reference, loaded.predict({k: v[:rows] for k, v in x.items()}))
    if moved:
        raise InputError(f"model {path}: its answers change from call to call on the same rows ({moved}): random "
                         "layers (RandomFlip, RandomRotation, Dropout, ...) are active in it; export it with those "
                         "layers in inference mode (from Keras: call the model with training=False, or give tfsmith "
                         "the .keras file), so that each answer depends on its input alone")


def answers_moved(first: Mapping[str, np.ndarray], again: Mapping[str, np.ndarray]) -> str | None:
    """What differs when the same rows are asked again (`again` answers the first rows of `first`), or None:
    exact values must be equal, floats within 1e-3 of their scale."""
    from builder.optimize.quality import is_exact, spread

    for name, answers in first.items():
        after = np.asarray(again[name])
        before = np.asarray(answers)[: len(after)]
        if is_exact(before):
            if not np.array_equal(before, after):
                return f"output {name!r} values differ"
            continue
        scale = max(spread(np.asarray(answers)), float(np.max(np.abs(before))) if before.size else 0.0, 1e-12)
        wide = np.complex128 if before.dtype.kind == "c" else np.float64  # a complex value differs in either part
        diff = float(np.max(np.abs(before.astype(wide) - after))) if before.size else 0.0
        if diff > 1e-3 * scale:
            return f"output {name!r} by up to {diff:.3g}"
    return None


def settle_contract(plan: Any, reference: Mapping[str, np.ndarray], rows: int | None = None) -> ModelContract:
    """The contract of the plan's model, with DATA's labels checked against it: labels that fit no task are set
    aside (`check_labels`: a note each; `plan.data` keeps only the others). Fine-tuning (pruning, QAT) goes on:
    an output without training labels, or whose training labels are set aside, is fine-tuned to the original's
    own answers on the training rows (`teacher_answers`), with a note each (`distillation_notes`).

    `rows`: judge the task on the first rows only (`--explain` reads a few)."""
    from dataclasses import replace

    loaded, data = plan.loaded, plan.data
    y_val = {k: v[:rows] for k, v in data.y_val.items()} if rows else data.y_val

    def contract_with(labels: Mapping[str, np.ndarray]) -> ModelContract:
        return make_contract(loaded.inputs, loaded.outputs, reference, labels, dict(plan.recipe.tasks),
                             loaded.signature, loaded.quantized_outputs)

    contract = contract_with(y_val)
    dropped, notes = check_labels(contract, data.y_val, data.y_train)
    if dropped:
        plan.notes.extend(notes)
        keep = lambda labels: {k: v for k, v in (labels or {}).items() if k not in dropped}  # noqa: E731
        set_aside = {k for k in (data.y_train or {}) if k in dropped}
        plan.data = replace(data, y_val=keep(data.y_val),
                            y_train=(keep(data.y_train) or None) if data.y_train is not None else None)
        contract = contract_with(keep(y_val))
    else:
        set_aside = set()
    faithful = fidelity_judged(contract, plan.data.y_train)
    if faithful:  # fine-tuned to the original's answers, which their gate measures them against
        data = plan.data
        plan.data = replace(data, y_train={k: v for k, v in data.y_train.items() if k not in faithful} or None)
    plan.notes.extend(distillation_notes(plan, set_aside, faithful))
    return contract


def fidelity_judged(contract: ModelContract, y_train: Mapping[str, np.ndarray] | None) -> set[str]:
    """The outputs with training labels whose gate is fidelity to the original, not the labels: regression
    outputs (relative error against the original's answers, labels or not). Fine-tuning them on their labels
    would pull the pruned model towards the labels and away from what it is judged against (a model whose
    answers are 0.45 of their spread from the labels fails a 5% fidelity gate by moving to them), so they are
    fine-tuned to the original's own answers on the training rows, as an output without labels is."""
    return {s.name for s in contract.outputs if s.task == "regression" and s.name in (y_train or {})}


def fine_tunes(plan: Any) -> str | None:
    """What fine-tunes the model in this plan ("pruning", "QAT", "pruning and QAT"), or None: one-shot pruning
    trains nothing."""
    recipe = plan.recipe
    steps = [step for step, asked in (("pruning", recipe.pruning is not None and not plan.one_shot),
                                      ("QAT", recipe.quantization.qat)) if asked]
    return " and ".join(steps) or None


def distillation_notes(plan: Any, set_aside: set[str] = frozenset(), faithful: set[str] = frozenset()) -> list[str]:
    """A note for each output fine-tuning has no training labels for (none given, set aside, or `faithful`:
    judged by fidelity to the original): it is fine-tuned to the original's own answers on the training rows, so
    the report never suggests labels that are not there or were not used."""
    from builder.optimize.data import distilled_outputs

    step, data = fine_tunes(plan), plan.data
    if step is None or not data.x_train:
        return []
    rows = data.train_rows

    def has(name: str) -> str:
        if name in faithful:
            return "its training labels, but is judged by fidelity to the original (regression)"
        return "its training labels set aside" if name in set_aside else "no training labels"

    return [f"{step}: output {name!r} has {has(name)}: fine-tuned to the original's own answers on the {rows} "
            f"training row{'s' if rows != 1 else ''}" for name in distilled_outputs(plan.loaded.outputs, data.y_train)]


#: The most the original's answers on the training rows may take to be fine-tuned to (float32): a per-token
#: vocabulary head on many rows would otherwise hold gigabytes for the whole run.
TEACHER_BYTES = 1 << 30


def teacher_answers(plan: Any) -> dict[str, np.ndarray]:
    """The original model's answers on the training rows for the outputs without training labels (what they are
    fine-tuned to), computed once with the loaded original, before any weight changes: pruning and QAT both
    distil from the original, never from a pruned model. Refused in one line (the step drops out with it)
    where they would take more than TEACHER_BYTES, judged from the answer to the first row."""
    from builder.errors import TfsmithError
    from builder.measure.memory import text as memory_text
    from builder.optimize.data import distilled_outputs

    names = distilled_outputs(plan.loaded.outputs, plan.data.y_train)
    if not names:
        return {}
    if plan.train_answers is None:
        from builder.model.rows import fixed_batch

        x, rows = plan.data.x_train, plan.data.train_rows
        head = min(rows, fixed_batch(plan.loaded.inputs) or 1)  # a fixed-batch model answers whole batches
        first = plan.loaded.predict({k: v[:head] for k, v in x.items()})
        size = rows * sum(np.asarray(first[name]).size * 4 for name in names) // max(head, 1)
        if size > TEACHER_BYTES:
            raise TfsmithError(f"the original's answers for {', '.join(names)} (no training labels) on the {rows} "
                               f"training rows would take {memory_text(size)}, more than the "
                               f"{memory_text(TEACHER_BYTES)} fine-tuning holds them in: give labels for "
                               f"{'them' if len(names) > 1 else 'it'}, or fewer x_train rows")
        answers = plan.loaded.predict(x)
        plan.train_answers = {name: np.asarray(answers[name], dtype=np.float32) for name in names}
    return plan.train_answers


def check_labels(contract: ModelContract, y_val: Mapping[str, np.ndarray], y_train: Mapping[str, np.ndarray] | None
                 ) -> tuple[set[str], list[str]]:
    """Labels are hints: those that cannot be judged with their output's task are set aside, each with a note,
    and that output is judged by agreement with the original model as it is without labels.

    Returns (the outputs whose labels are set aside, the notes)."""
    from builder.errors import InputError
    from builder.optimize.quality import EXACT, binary_labels, class_ids, shape_positions

    dropped: set[str] = set()
    notes: list[str] = []
    for spec in contract.outputs:
        for split, labels in (("y_val", y_val), ("y_train", y_train or {})):
            if spec.name not in labels or spec.name in dropped:
                continue
            key = f"{split}/{spec.name}" if len(contract.outputs) > 1 else split
            y = np.asarray(labels[spec.name])
            columns = int(np.prod([d or 1 for d in spec.shape[1:]]))
            try:
                if spec.task == EXACT:
                    if len(y) and y.reshape(len(y), -1).shape[1] != columns and spec.shape[1:] and None not in spec.shape[1:]:
                        raise InputError(f"{key} has shape {y.shape}; output {spec.name!r} is "
                                         f"{_shape_text(spec.shape)} ({spec.task_why})")
                elif spec.task == "classification":
                    class_ids(y, int(spec.shape[-1] or 1), key, shape_positions(spec.shape))
                elif spec.task == "binary":
                    binary_labels(y, key)
                elif y.reshape(len(y), -1).shape[1] != columns:
                    raise InputError(f"{key} has shape {y.shape}; regression output {spec.name!r} is "
                                     f"{_shape_text(spec.shape)}")
            except InputError as error:
                dropped.add(spec.name)
                notes.append(f"labels of {spec.name!r} set aside: {error}; it is judged by agreement with the "
                             "original model, as without labels")
    return dropped, notes


def training_labels(contract: ModelContract, y: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Labels as the fine-tuning losses want them: class ids for classification, float values otherwise."""
    from builder.optimize.quality import class_ids, shape_positions

    out = {}
    for spec in contract.outputs:
        if spec.name not in y:  # no labels: fine-tuned to the original's answers (`soft_targets`)
            continue
        if spec.task == "classification":
            answers = shape_positions(spec.shape)
            out[spec.name] = class_ids(y[spec.name], int(spec.shape[-1] or 1), f"y_train/{spec.name}", answers)
            if answers > 1:  # [N, *positions]: sparse cross-entropy against the [N, *positions, classes] output
                out[spec.name] = out[spec.name].reshape(len(out[spec.name]), *[d or 1 for d in spec.shape[1:-1]])
        else:
            out[spec.name] = np.asarray(y[spec.name], dtype=np.float32)
    return out


def soft_targets(contract: ModelContract, answers: Mapping[str, np.ndarray], probabilities: Mapping[str, bool]
                 ) -> dict[str, np.ndarray]:
    """The original's answers as the targets of the outputs without labels (distillation): a classification
    output's class probabilities (softmax of its logits where it answers logits), a binary one's probability
    (sigmoid of its logit), any other output's values as they are."""
    out = {}
    for spec in contract.outputs:
        if spec.name not in answers:
            continue
        value = np.asarray(answers[spec.name], dtype=np.float64)
        if spec.task == "classification" and not probabilities.get(spec.name, False):
            shifted = np.exp(value - value.max(axis=-1, keepdims=True))
            value = shifted / shifted.sum(axis=-1, keepdims=True)
        elif spec.task == "binary" and not probabilities.get(spec.name, False):
            value = 1.0 / (1.0 + np.exp(-value))
        out[spec.name] = value.astype(np.float32)
    return out


def fit_arguments(model: Any, contract: ModelContract, x: Mapping[str, np.ndarray], y: Mapping[str, np.ndarray] | None,
                  reference: Mapping[str, np.ndarray], teacher: Mapping[str, np.ndarray] | None = None
                  ) -> tuple[Any, Any, Any]:
    """(x, y, losses) for `model.fit`, as lists in the model's own input/output order.

    `y`: the labels of the outputs that have them; `teacher`: the original's answers on the same rows for the
    others (`teacher_answers`), which are fine-tuned to those answers: cross-entropy against the original's
    probabilities for classification and binary outputs, mean squared error against its values otherwise.
    Rows where the original answers NaN or infinity for such an output teach nothing and are left out.

    Lists, not dicts: tfmot's wrappers rename output layers (`prune_low_magnitude_<name>`), so names would not
    match any more; the order does.
    """
    from builder.optimize import prune, quality
    from builder.optimize.model_io import input_structure, keras_specs

    in_specs, out_specs = keras_specs(model)
    y, teacher = dict(y or {}), dict(teacher or {})
    missing = [s.name for s in contract.outputs if s.name not in y and s.name not in teacher]
    if missing:
        raise ValueError(f"no labels and no original answers to fine-tune output(s) {', '.join(missing)} on")
    if teacher:
        finite = quality.answered_rows(teacher)
        if not finite.all():
            x = {k: np.asarray(v)[finite] for k, v in x.items()}
            y = {k: np.asarray(v)[finite] for k, v in y.items()}
            teacher = {k: np.asarray(v)[finite] for k, v in teacher.items()}
    tasks = {s.name: s.task for s in contract.outputs}
    probabilities = {s.name: (bool(np.all((reference[s.name] >= 0) & (reference[s.name] <= 1)))
                              if s.task == "binary" else quality._is_probabilities(reference[s.name]))
                     for s in contract.outputs}
    labels = {**training_labels(contract, y), **soft_targets(contract, teacher, probabilities)}
    losses = prune.losses_for(tasks, probabilities, soft=frozenset(teacher))

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
    differ = sorted((want_in ^ got_in) | (want_out ^ got_out), key=lambda t: (t.name, t.dtype, str(t.shape)))
    return False, "signature differs from the original's: " + ", ".join(
        f"{t.name} {t.dtype}{_shape_text(t.shape)}" for t in differ[:4])
