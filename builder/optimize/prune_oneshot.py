"""One-shot magnitude pruning for a Keras model DATA gives no training rows for: no fine-tuning, so the sparsity is
not the recipe's but the highest of a few levels at which the pruned model still agrees with the original on the
held-out rows (the gate's own judgement), found by a short search.

Why a search: without fine-tuning, how much a model tolerates depends on the model (a wide layer loses little at
50%, a small one changes its answers at 30%), and a fixed level would mostly either drop out or leave size on
the table. Agreement falls as sparsity rises, so a bisection over the levels takes three or four judgements.
The masks are tfmot's magnitude masks (`prune_keras3.magnitude_mask`), per tensor, on the same weights the
fine-tuned pruning prunes: Dense, convolution and embedding kernels, never biases or normalization.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.errors import TfsmithError

#: the sparsity levels searched, lowest first
LEVELS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class Tried:
    """One level judged: did the model pruned to it agree with the original, and the gate's words."""

    level: float
    passed: bool
    why: str


def highest_passing(levels: Sequence[float], judge: Callable[[float], Tried]) -> tuple[float | None, list[Tried]]:
    """The highest level `judge` passes, by bisection over `levels` (ascending; passing is taken to be monotone:
    a model that disagrees at 50% is not judged at 60%). Returns (that level or None, every level judged)."""
    tried: list[Tried] = []
    low, high = -1, len(levels)  # levels[low] passed (or none), levels[high] failed (or none judged)
    while high - low > 1:
        middle = (low + high) // 2
        result = judge(levels[middle])
        tried.append(result)
        low, high = (middle, high) if result.passed else (low, middle)
    return (levels[low] if low >= 0 else None), tried


def search_note(tried: Sequence[Tried]) -> str:
    """One line: each level judged, in the order judged, and whether the gate kept it."""
    return "pruning one-shot: " + ", ".join(
        f"{t.level:.0%} {'agrees' if t.passed else 'changed the answers (' + t.why + ')'}" for t in tried)


def targets(model: Any) -> list[tuple[str, Any]]:
    """(layer, variable) of each weight one-shot pruning masks: a Keras 3 model's as `prune_keras3` finds them;
    a tf_keras model's Dense, convolution and Embedding kernels."""
    from builder.optimize.model_io import is_keras3

    if is_keras3(model):
        from builder.optimize.prune_keras3 import prunable_weights

        return [(t.layer, t.variable) for t in prunable_weights(model)]
    from builder.optimize import tfenv

    keras = tfenv.keras()
    kinds = (keras.layers.Dense, keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
             keras.layers.DepthwiseConv2D, keras.layers.Embedding)
    found = []
    for layer in model.layers:
        if isinstance(layer, kinds):
            weight = layer.embeddings if isinstance(layer, keras.layers.Embedding) else \
                getattr(layer, "depthwise_kernel", None) if isinstance(layer, keras.layers.DepthwiseConv2D) else layer.kernel
            if weight is not None:
                found.append((layer.name, weight))
    return found


def copy_model(model: Any) -> Any:
    """An independent copy with the same weights (Keras 3: saved and loaded; tf_keras: cloned)."""
    from builder.optimize.model_io import is_keras3

    if is_keras3(model):
        from builder.optimize import prune_keras3

        return prune_keras3.copy_model(model)
    from builder.optimize import tfenv

    clone = tfenv.keras().models.clone_model(model)
    clone.set_weights(model.get_weights())
    return clone


def prune_one_shot(model: Any, agrees: Callable[[Any], tuple[bool, str]],
                   levels: Sequence[float] = LEVELS) -> tuple[Any, Any, list[Tried]]:
    """A copy of `model` pruned by magnitude to the highest level of `levels` at which `agrees(copy)` holds
    (the gate against the original). Returns (pruned copy, prune.SparsityResult, the levels judged); raises
    TfsmithError naming the lowest level judged and why when none agrees."""
    from builder.optimize.prune import SparsityResult
    from builder.optimize.prune_keras3 import magnitude_mask

    pruned = copy_model(model)
    weights = targets(pruned)
    if not weights:
        raise TfsmithError("no layer of this model can be pruned (no Dense, convolution or Embedding kernels)")
    originals = [np.asarray(variable.numpy()) for _, variable in weights]

    def prune_to(level: float) -> None:
        for (_, variable), values in zip(weights, originals):
            variable.assign(values * magnitude_mask(values, level))

    def judge(level: float) -> Tried:
        prune_to(level)
        passed, why = agrees(pruned)
        return Tried(level, passed, why)

    best, tried = highest_passing(levels, judge)
    if best is None:
        lowest = min(tried, key=lambda t: t.level)
        raise TfsmithError(f"one-shot pruning (without fine-tuning) changed the answers at every "
                           f"level tried, down to {lowest.level:.0%} ({lowest.why})")
    prune_to(best)
    layers: dict[str, tuple[int, int]] = {}
    for name, variable in weights:
        values = np.asarray(variable.numpy())
        zeros, size = layers.get(name, (0, 0))
        layers[name] = (zeros + int(np.sum(values == 0)), size + int(values.size))
    total = sum(size for _, size in layers.values())
    achieved = sum(zeros for zeros, _ in layers.values()) / total
    result = SparsityResult(best, achieved, {k: z / s for k, (z, s) in layers.items()}, None, None)
    return pruned, result, tried
