"""Magnitude pruning of Keras 3 models, fine-tuned on DATA: tfsmith's own, since tfmot takes only Keras 2
(tf_keras) objects and has no plan to take Keras 3 ones.

The arithmetic is tfmot's, so a recipe means the same on either Keras:
- the schedule (`sparsity_at`, `is_update_step`): polynomial decay from `initial_sparsity` to `sparsity` with
  power 3 between `begin_step` and `end_step` (constant: the target from the first update), masks recomputed
  only on steps `begin + k * frequency` up to `end_step`, the same `recipe.pruning_schedule` that lands the
  last update on the end step;
- the mask (`magnitude_mask`): per weight tensor, keep the `max(1, round(size * (1 - sparsity)))` largest
  magnitudes, ties at the threshold kept.

What differs is where masks live: no wrapper layers (they would rename the layers and change the model's
structure), but a training callback that recomputes masks before a scheduled step and multiplies every
pruned weight by its mask after each step, so the model that comes out is the user's own model, layer for
layer, with exact zeros in its kernels. Functional, Sequential and subclassed models alike: the weights are
found by walking the layers, not by rebuilding the model.

Pruned: the kernels of Dense, EinsumDense, every convolution (transposed, depthwise, separable) and the
embedding tables; never biases, normalization or preprocessing state.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import IncompatibleError, TfsmithError
from builder.optimize.recipe import Pruning, Schedule, pruning_schedule

#: tfmot's PolynomialDecay default power
POWER = 3


def sparsity_at(step: int, pruning: Pruning, schedule: Schedule) -> float:
    """The sparsity the schedule asks for at `step`: tfmot's PolynomialDecay (power 3) or ConstantSparsity.

    A schedule whose end is its begin (too few steps to ramp) prunes to the target at once, as tfsmith's
    tf_keras path does with ConstantSparsity there."""
    if pruning.schedule == "constant" or schedule.end_step == schedule.begin_step:
        return float(pruning.sparsity)
    progress = min(1.0, max(0.0, (step - schedule.begin_step) / (schedule.end_step - schedule.begin_step)))
    return float((pruning.initial_sparsity - pruning.sparsity) * (1.0 - progress) ** POWER + pruning.sparsity)


def is_update_step(step: int, schedule: Schedule) -> bool:
    """Whether masks are recomputed before training step `step` (tfmot's `_should_prune_in_step`)."""
    in_range = schedule.begin_step <= step and (schedule.end_step < 0 or step <= schedule.end_step)
    return in_range and (step - schedule.begin_step) % schedule.frequency == 0


def kept_count(size: int, sparsity: float) -> int:
    """How many weights of a tensor of `size` a mask keeps: tfmot's `max(1, round(size * (1 - sparsity)))`."""
    return int(max(1, round(size * (1.0 - sparsity))))


def magnitude_mask(weights: np.ndarray, sparsity: float) -> np.ndarray:
    """1 where a weight is among the `kept_count` largest magnitudes of its tensor, else 0 (weights' dtype).

    Weights equal to the threshold are kept, as tfmot keeps them; with float weights ties are rare, and weights
    already at zero fall below any positive threshold."""
    values = np.abs(np.asarray(weights)).reshape(-1)
    if values.size == 0:
        return np.ones_like(weights)
    k = min(kept_count(values.size, sparsity), values.size)
    threshold = np.partition(values, values.size - k)[values.size - k]
    return (np.abs(weights) >= threshold).astype(np.asarray(weights).dtype)


@dataclass(frozen=True)
class Target:
    """One weight tensor pruning works on: its layer (the variable's path without the weight's own name, unique
    where nested blocks reuse layer names), the variable's path, and the variable itself."""

    layer: str
    path: str
    variable: Any


def _prunable_attributes() -> list[tuple[type, tuple[str, ...]]]:
    """(layer class, its weight attributes that are pruned) for the Keras 3 layers pruned."""
    import keras  # type: ignore[import-not-found]
    from keras.src.layers.convolutional.base_conv import BaseConv  # type: ignore[import-not-found]
    from keras.src.layers.convolutional.base_conv_transpose import BaseConvTranspose  # type: ignore[import-not-found]
    from keras.src.layers.convolutional.base_depthwise_conv import BaseDepthwiseConv  # type: ignore[import-not-found]
    from keras.src.layers.convolutional.base_separable_conv import BaseSeparableConv  # type: ignore[import-not-found]

    return [(keras.layers.Dense, ("kernel",)), (keras.layers.EinsumDense, ("kernel",)),
            (BaseSeparableConv, ("depthwise_kernel", "pointwise_kernel")), (BaseDepthwiseConv, ("kernel",)),
            (BaseConvTranspose, ("kernel",)), (BaseConv, ("kernel",)), (keras.layers.Embedding, ("embeddings",))]


def _layers(model: Any) -> list[Any]:
    """Every layer inside the model, nested ones (a subclassed model's blocks, wrappers' inner layers) too."""
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is not None:
        return list(flatten(include_self=False, recursive=True))
    from builder.optimize.model_io import _all_layers

    return _all_layers(model)


def prunable_weights(model: Any) -> list[Target]:
    """The float kernels and embedding tables pruning masks, each once (a layer shared by two calls holds one
    kernel). Layers with LoRA or quantized kernels are left as they are: their kernel is not one variable."""
    kinds = _prunable_attributes()
    prefix = f"{model.name}/"  # a Sequential's and a subclassed model's variables start with its own name
    found: list[Target] = []
    seen: set[int] = set()
    for layer in _layers(model):
        names = next((names for cls, names in kinds if isinstance(layer, cls)), ())
        if not names or getattr(layer, "lora_enabled", False) or getattr(layer, "quantization_mode", None):
            continue
        for attribute in names:
            variable = getattr(layer, f"_{attribute}", None) if attribute == "kernel" else None
            variable = variable if variable is not None else getattr(layer, attribute, None)
            if variable is None or id(variable) in seen or not _is_float_variable(variable):
                continue
            seen.add(id(variable))
            path = str(getattr(variable, "path", "") or f"{layer.name}/{attribute}").removeprefix(prefix)
            found.append(Target(path.rsplit("/", 1)[0] if "/" in path else layer.name, path, variable))
    return found


def _is_float_variable(variable: Any) -> bool:
    dtype = str(getattr(variable, "dtype", ""))
    return dtype.startswith(("float", "bfloat")) and hasattr(variable, "assign")


class Masks:
    """The current mask of each pruned weight, recomputed on the schedule's steps and applied after every step."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self.targets = list(targets)
        self.masks: list[Any] = [None] * len(self.targets)

    def update(self, sparsity: float) -> None:
        from keras import ops  # type: ignore[import-not-found]

        for i, target in enumerate(self.targets):
            values = np.asarray(ops.convert_to_numpy(target.variable))
            self.masks[i] = ops.convert_to_tensor(magnitude_mask(values, sparsity), dtype=target.variable.dtype)

    def apply(self) -> None:
        from keras import ops  # type: ignore[import-not-found]

        for target, mask in zip(self.targets, self.masks):
            if mask is not None:
                target.variable.assign(ops.multiply(target.variable, mask))


def mask_callback(masks: Masks, pruning: Pruning, schedule: Schedule) -> Any:
    """A Keras 3 callback: before a scheduled step the masks are recomputed at the schedule's sparsity (and
    applied, so the step trains the pruned weights, as tfmot's wrappers do); after every step they are applied
    again, so the weights the optimizer moved stay zero."""
    import keras  # type: ignore[import-not-found]

    class ApplyMasks(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.step = 0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if is_update_step(self.step, schedule):
                masks.update(sparsity_at(self.step, pruning, schedule))
                masks.apply()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            masks.apply()
            self.step += 1

    return ApplyMasks()


def copy_model(model: Any) -> Any:
    """An independent copy of a Keras 3 model, weights and all: saved and loaded back (the one way that takes
    Functional, Sequential and subclassed models alike, custom registered layers included)."""
    import keras  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory(prefix="tfsmith-prune-") as folder:
        path = Path(folder) / "model.keras"
        model.save(path)
        return keras.saving.load_model(path, compile=False, safe_mode=False)


def keras3_loss(loss: Any) -> Any:
    """The Keras 3 loss of a tf_keras one (`prune.losses_for` makes tf_keras losses): same class, same
    from_logits; a Keras 3 model compiles only with its own."""
    import keras  # type: ignore[import-not-found]

    if isinstance(loss, keras.losses.Loss) or not hasattr(loss, "get_config"):
        return loss
    config = {k: v for k, v in loss.get_config().items() if k == "from_logits"}
    return getattr(keras.losses, type(loss).__name__)(**config)


def fit_structure(model: Any, x: Any, y: Any, loss: Any) -> tuple[Any, Any, Any]:
    """(x, y, loss) as a Keras 3 model's fit takes them: `contract.fit_arguments` gives lists in the model's
    input and output order (tf_keras's way); a Keras 3 model that returns a dict wants its labels and losses
    keyed by the dict's keys, and a subclassed one called with a dict wants its inputs keyed too."""
    from builder.optimize.model_io import _is_subclassed_keras3, keras_inputs, keras_outputs

    def listed(value: Any) -> list[Any]:
        return list(value) if isinstance(value, (list, tuple)) else [value]

    out_names = [name for name, _ in keras_outputs(model)]
    if _returns_dict(model) and not isinstance(y, dict):
        y, loss = dict(zip(out_names, listed(y))), dict(zip(out_names, listed(loss)))
    if isinstance(loss, dict):
        loss = {name: keras3_loss(value) for name, value in loss.items()}
    elif isinstance(loss, (list, tuple)):
        loss = [keras3_loss(value) for value in loss]
    else:
        loss = keras3_loss(loss)
    in_names = [name for name, _ in keras_inputs(model)]
    if (_is_subclassed_keras3(model) and not isinstance(x, dict)
            and any(not name.startswith("args_") for name in in_names)):
        x = dict(zip(in_names, listed(x)))
    return x, y, loss


def _returns_dict(model: Any) -> bool:
    """Whether the model answers with a dict (a Functional model built on a dict of outputs, or a subclassed
    model whose call returns one)."""
    from collections.abc import Mapping

    from builder.optimize.model_io import _is_subclassed_keras3, _subclassed_inputs

    if not _is_subclassed_keras3(model):
        return isinstance(getattr(model, "_outputs_struct", None), Mapping)
    inputs = _subclassed_inputs(model)
    keyed = any(not name.startswith("args_") for name, _ in inputs)
    args = [tensor for _, tensor in inputs]
    result = model.compute_output_spec(dict(inputs) if keyed else args[0] if len(args) == 1 else args)
    return isinstance(result, Mapping)


def prune_model(model: Any, pruning: Pruning, x_train: Any, y_train: Any, loss: Any,
                verbose: int = 0) -> tuple[Any, Any]:
    """Prune a copy of a Keras 3 model to `pruning`'s target with fine-tuning on (x_train, y_train); the
    original stays as it was. Returns (pruned model, prune.SparsityResult).

    (x_train, y_train, loss) as `contract.fit_arguments` gives them (`fit_structure` fits them to Keras 3)."""
    import keras  # type: ignore[import-not-found]

    from builder.optimize.prune import SparsityResult, _one_line

    if pruning.structured:
        m, n = pruning.structured
        raise IncompatibleError(f"structured {m}:{n} pruning is tfmot's, which takes only Keras 2 (tf_keras) models; "
                                "a Keras 3 model is pruned by magnitude: drop `structured` from [pruning]")
    steps_per_epoch = math.ceil(_rows(x_train) / pruning.batch_size)
    schedule = pruning_schedule(steps_per_epoch, pruning.epochs)
    try:
        pruned = copy_model(model)
        targets = prunable_weights(pruned)
        if not targets:
            raise TfsmithError("no layer of this model can be pruned (no Dense, convolution or Embedding kernels)")
        masks = Masks(targets)
        x_train, y_train, loss = fit_structure(pruned, x_train, y_train, loss)
        x_train = _text_as_tensors(x_train)
        pruned.compile(optimizer=keras.optimizers.Adam(5e-4), loss=loss)
        pruned.fit(x_train, y_train, batch_size=pruning.batch_size, epochs=pruning.epochs, shuffle=True,
                   callbacks=[mask_callback(masks, pruning, schedule)], verbose=verbose)
        masks.apply()
    except TfsmithError:
        raise
    except Exception as error:  # shapes or layers fine-tuning cannot take: the user's model, not a bug
        raise IncompatibleError(f"pruning failed: {_one_line(error)}; drop [pruning] from the recipe") from error
    layers = measured_sparsity(targets)
    total = sum(size for _, size in layers.values())
    achieved = sum(zeros for zeros, _ in layers.values()) / total if total else 0.0
    if achieved + 0.01 < pruning.sparsity:
        raise TfsmithError(f"pruning reached sparsity {achieved:.3f}, short of the target {pruning.sparsity:.3f}")
    by_layer = {name: zeros / size for name, (zeros, size) in layers.items()}
    return pruned, SparsityResult(pruning.sparsity, achieved, by_layer, schedule, None)


def _text_as_tensors(x: Any) -> Any:
    """`fit`'s x with each text array as a TensorFlow string tensor: Keras 3's fit refuses numpy text of any
    kind (bytes, str or object: "Invalid dtype: bytes8"), which a model on raw strings is trained on."""
    import tensorflow as tf

    def one(value: Any) -> Any:
        return tf.constant(value) if isinstance(value, np.ndarray) and value.dtype.kind in "SUO" else value

    if isinstance(x, dict):
        return {k: one(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [one(v) for v in x]
    return one(x)


def _rows(x: Any) -> int:
    """The number of training rows in `fit`'s x: one array, a list of them, or a dict of them."""
    first = next(iter(x.values())) if isinstance(x, dict) else x[0] if isinstance(x, (list, tuple)) else x
    return len(first)


def measured_sparsity(targets: Sequence[Target]) -> dict[str, tuple[int, int]]:
    """(exact zeros, weights) of each pruned layer, its pruned tensors together (a separable convolution's two)."""
    from keras import ops  # type: ignore[import-not-found]

    found: dict[str, tuple[int, int]] = {}
    for target in targets:
        values = np.asarray(ops.convert_to_numpy(target.variable))
        zeros, size = found.get(target.layer, (0, 0))
        found[target.layer] = (zeros + int(np.sum(values == 0)), size + int(values.size))
    return found
