"""Magnitude pruning of tf_keras models with tfmot, fine-tuned on DATA, and a check that the sparsity asked for was
reached. tfmot takes only Keras 2 objects: Keras 3 models are pruned by `prune_keras3` with the same schedule and
mask arithmetic, and models without training rows one-shot by `prune_oneshot`.

Masks move only on the steps `pruning_schedule` plans (the last one exactly on `end_step`), so a 0.80 target
ends at 0.80, not 0.786 (tfmot's default frequency=100 stopped a
0.80 target at 0.786). `strip_pruning` removes the wrappers so export and conversion see plain
layers whose kernels hold real zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

import numpy as np

from builder.errors import IncompatibleError, TfsmithError
from builder.optimize import tfenv
from builder.optimize.recipe import Pruning, Schedule, pruning_schedule

TOLERANCE = 0.01  # tfmot rounds the number of kept weights per tensor


@dataclass(frozen=True)
class SparsityResult:
    target: float
    achieved: float  # zeros / weights over the kernels tfmot pruned
    layers: dict[str, float]
    schedule: Schedule | None
    structured: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": round(self.target, 4),
            "achieved": round(self.achieved, 4),
            "layers": {k: round(v, 4) for k, v in self.layers.items()},
            "schedule": None if self.schedule is None else {
                "begin_step": self.schedule.begin_step, "end_step": self.schedule.end_step,
                "frequency": self.schedule.frequency},
            "structured": self.structured,
        }


def losses_for(tasks: Mapping[str, str], probabilities: Mapping[str, bool],
               soft: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A fine-tuning loss per output: sparse cross-entropy (on probabilities or logits) for classification, whose
    labels are class ids after DATA checks; binary cross-entropy for a yes/no column; mean squared error for
    regression.

    `soft`: the outputs fine-tuned to the original's own answers (no labels): categorical cross-entropy against
    the original's class probabilities (the soft targets of distillation), binary cross-entropy against its
    probability, mean squared error against its values.

    Decided from the task and from what the model outputs rather than from its compiled loss, which may expect
    one-hot labels or be missing (models saved without compile).
    """
    keras = tfenv.keras()

    def loss(name: str, task: str) -> Any:
        from_logits = not probabilities.get(name, False)
        if task == "classification":
            if name in soft:
                return keras.losses.CategoricalCrossentropy(from_logits=from_logits)
            return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
        if task == "binary":  # labels 0/1 (or the original's probability); a sigmoid output is a probability
            return keras.losses.BinaryCrossentropy(from_logits=from_logits)
        return keras.losses.MeanSquaredError()

    return {name: loss(name, task) for name, task in tasks.items()}


def _one_line(error: BaseException) -> str:
    """The line that says what went wrong (TensorFlow puts "in user code:" and a stack before it)."""
    from builder.optimize.causes import cause

    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    said = [line for line in lines if "Error:" in line]
    return said[-1] if said else cause(error)


def compile_for_finetune(model: Any, loss: Any, learning_rate: float = 5e-4) -> None:
    keras = tfenv.keras()
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss)


def kernel_sparsity(model: Any) -> dict[str, float]:
    """Fraction of exact zeros in each Dense/Conv kernel (the weights tfmot prunes)."""
    result: dict[str, float] = {}
    for layer in model.layers:
        kernel = getattr(layer, "kernel", None)
        if kernel is not None:
            values = np.asarray(kernel.numpy())
            result[layer.name] = float(np.mean(values == 0))
    return result


def prune_model(model: Any, pruning: Pruning, x_train: Any, y_train: Any, loss: Any,
                verbose: int = 0) -> tuple[Any, SparsityResult]:
    """Prune a Sequential/Functional tf_keras model to `pruning`'s target and fine-tune; returns the stripped model."""
    keras = tfenv.keras()
    tfmot = tfenv.tfmot()

    sparsity = tfmot.sparsity.keras
    rows = len(x_train[0]) if isinstance(x_train, (list, tuple)) else len(x_train)
    steps_per_epoch = math.ceil(rows / pruning.batch_size)
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    try:
        wrapped = _wrap(sparsity, clone, pruning, steps_per_epoch)
        compile_for_finetune(wrapped, loss)
        wrapped.fit(x_train, y_train, batch_size=pruning.batch_size, epochs=pruning.epochs, shuffle=True,
                    callbacks=[sparsity.UpdatePruningStep()], verbose=verbose)
        stripped = sparsity.strip_pruning(wrapped)
    except Exception as error:  # unsupported layers, shapes tfmot cannot handle: the user's model, not a bug
        raise IncompatibleError(f"pruning failed: {_one_line(error)}; drop [pruning] from the recipe") from error
    schedule = None if pruning.structured else pruning_schedule(steps_per_epoch, pruning.epochs)
    return _verify(stripped, wrapped, pruning, schedule, loss)


def _wrap(sparsity: Any, clone: Any, pruning: Pruning, steps_per_epoch: int) -> Any:
    """The model with every prunable layer (Dense, Conv, ...) wrapped, others (Rescaling, Normalization, ...)
    left as they are, and a schedule whose last mask update lands on its end step.

    Wrapping layer by layer (tfmot's clone_function pattern) instead of the whole model: tfmot refuses a whole
    model as soon as one layer has no pruning rule, and ordinary user models have preprocessing layers.
    """
    if pruning.structured:
        kwargs: dict[str, Any] = {"sparsity_m_by_n": pruning.structured}
    else:
        schedule = pruning_schedule(steps_per_epoch, pruning.epochs)
        if pruning.schedule == "constant" or schedule.end_step == schedule.begin_step:
            tf_schedule = sparsity.ConstantSparsity(pruning.sparsity, begin_step=0, end_step=schedule.end_step,
                                                    frequency=schedule.frequency)
        else:
            tf_schedule = sparsity.PolynomialDecay(
                initial_sparsity=pruning.initial_sparsity, final_sparsity=pruning.sparsity,
                begin_step=schedule.begin_step, end_step=schedule.end_step, frequency=schedule.frequency)
        kwargs = {"pruning_schedule": tf_schedule}
    keras = tfenv.keras()
    from tensorflow_model_optimization.python.core.sparsity.keras.prune_registry import PruneRegistry

    def wrap(layer: Any) -> Any:
        if PruneRegistry.supports(layer) and getattr(layer, "kernel", None) is not None:
            return sparsity.prune_low_magnitude(layer, **kwargs)
        return layer

    wrapped = keras.models.clone_model(clone, clone_function=wrap)
    if not any(hasattr(layer, "pruning_vars") for layer in wrapped.layers):
        raise TfsmithError("no layer of this model can be pruned (no Dense/Conv kernels tfmot supports)")
    return wrapped


def _verify(stripped: Any, wrapped: Any, pruning: Pruning, schedule: Schedule | None,
            loss: Any) -> tuple[Any, SparsityResult]:
    """Measure the zeros tfmot left in the kernels it pruned; refuse a result short of the target."""
    compile_for_finetune(stripped, loss)
    wrapped_names = {layer.layer.name for layer in wrapped.layers if hasattr(layer, "pruning_vars")}
    layers = {name: value for name, value in kernel_sparsity(stripped).items() if name in wrapped_names}
    target = pruning.target_sparsity
    if pruning.structured:
        # tfmot leaves layers whose shape does not fit M:N dense; the ones it pruned must be exactly M/N.
        layers = {name: value for name, value in layers.items() if value > 0}
        if not layers:
            raise TfsmithError(f"structured {pruning.structured[0]}:{pruning.structured[1]} pruning left every "
                               "layer dense (no layer's shape fits)")
    sizes = {layer.name: int(np.prod(layer.kernel.shape)) for layer in stripped.layers if layer.name in layers}
    total = sum(sizes.values())
    achieved = sum(layers[name] * sizes[name] for name in layers) / total if total else 0.0
    if achieved + TOLERANCE < target:
        raise TfsmithError(f"pruning reached sparsity {achieved:.3f}, short of the target {target:.3f}")
    structured = f"{pruning.structured[0]}:{pruning.structured[1]}" if pruning.structured else None
    return stripped, SparsityResult(target, achieved, layers, schedule, structured)
