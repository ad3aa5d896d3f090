"""Keras 3 pruning's arithmetic (`builder.optimize.prune_keras3`): tfmot's polynomial-decay schedule, its update
steps and its magnitude masks, checked in numpy against tfmot's own formulas written out here."""

from __future__ import annotations

import numpy as np
import pytest

from builder.optimize.prune_keras3 import is_update_step, kept_count, magnitude_mask, sparsity_at
from builder.optimize.recipe import Pruning, Schedule, pruning_schedule


def test_polynomial_decay_is_tfmots_cubic_ramp_clamped_at_both_ends() -> None:
    pruning = Pruning(sparsity=0.8, initial_sparsity=0.2)
    schedule = Schedule(begin_step=10, end_step=110, frequency=10)
    assert sparsity_at(0, pruning, schedule) == pytest.approx(0.2)  # before begin: the initial sparsity
    assert sparsity_at(10, pruning, schedule) == pytest.approx(0.2)
    # halfway: (initial - final) * (1 - 0.5)^3 + final
    assert sparsity_at(60, pruning, schedule) == pytest.approx((0.2 - 0.8) * 0.5 ** 3 + 0.8)
    assert sparsity_at(110, pruning, schedule) == pytest.approx(0.8)
    assert sparsity_at(500, pruning, schedule) == pytest.approx(0.8)  # after the end: the final sparsity
    ramp = [sparsity_at(step, pruning, schedule) for step in range(10, 111, 10)]
    assert ramp == sorted(ramp) and len(set(ramp)) == len(ramp)  # rises on every update


def test_constant_schedule_and_a_ramp_without_steps_prune_to_the_target_at_once() -> None:
    assert sparsity_at(0, Pruning(sparsity=0.6, schedule="constant"), Schedule(0, 50, 5)) == pytest.approx(0.6)
    assert sparsity_at(0, Pruning(sparsity=0.6), Schedule(0, 0, 1)) == pytest.approx(0.6)


def test_masks_move_only_on_the_schedules_steps_and_the_last_one_is_its_end() -> None:
    schedule = pruning_schedule(steps_per_epoch=45, epochs=4)
    updates = [step for step in range(45 * 4) if is_update_step(step, schedule)]
    assert updates == list(schedule.updates)
    assert updates[-1] == schedule.end_step < 45 * 4  # inside the run: the final sparsity is reached
    assert sparsity_at(updates[-1], Pruning(sparsity=0.8), schedule) == pytest.approx(0.8)
    assert not is_update_step(schedule.end_step + schedule.frequency, schedule)


@pytest.mark.parametrize("size, sparsity, kept", [(10, 0.8, 2), (10, 0.75, 2), (10, 0.85, 2), (3, 0.99, 1),
                                                  (1000, 0.5, 500), (7, 0.0, 7)])
def test_kept_count_rounds_as_tfmot_and_keeps_at_least_one(size: int, sparsity: float, kept: int) -> None:
    assert kept_count(size, sparsity) == kept


def test_the_mask_keeps_the_largest_magnitudes_of_each_tensor() -> None:
    weights = np.array([[0.1, -0.9, 0.3], [-0.05, 0.5, -0.7]], dtype=np.float32)
    mask = magnitude_mask(weights, 0.5)
    assert mask.dtype == np.float32 and mask.shape == weights.shape
    assert mask.tolist() == [[0, 1, 0], [0, 1, 1]]  # |-0.9|, |-0.7|, |0.5| kept; signs do not matter


def test_the_mask_reaches_the_sparsity_on_random_kernels_and_zeros_stay_pruned() -> None:
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(3, 3, 32, 64)).astype(np.float32)
    for sparsity in (0.3, 0.5, 0.8, 0.9):
        mask = magnitude_mask(kernel, sparsity)
        assert np.mean(mask == 0) == pytest.approx(sparsity, abs=1 / kernel.size)
        kept = np.abs(kernel[mask == 1])
        assert kept.min() >= np.abs(kernel[mask == 0]).max()  # nothing pruned is larger than what is kept
    pruned = kernel * magnitude_mask(kernel, 0.5)
    again = magnitude_mask(pruned, 0.8)
    assert np.all(again[pruned == 0] == 0)  # a rising schedule never brings a pruned weight back


def test_ties_at_the_threshold_are_kept_as_tfmot_keeps_them() -> None:
    weights = np.array([1.0, 1.0, 1.0, 0.5], dtype=np.float32)
    assert magnitude_mask(weights, 0.5).tolist() == [1, 1, 1, 0]


# --- one-shot pruning's search (`builder.optimize.prune_oneshot`) --------------------------------------------


@pytest.mark.parametrize("tolerated, found", [(0.55, 0.5), (0.9, 0.9), (0.95, 0.9), (0.2, 0.2), (0.1, None)])
def test_the_search_finds_the_highest_level_that_agrees_in_few_judgements(tolerated: float, found: float | None) -> None:
    from builder.optimize.prune_oneshot import LEVELS, Tried, highest_passing

    judged: list[float] = []

    def judge(level: float) -> Tried:
        judged.append(level)
        return Tried(level, level <= tolerated, "")

    best, tried = highest_passing(LEVELS, judge)
    assert best == found and [t.level for t in tried] == judged
    assert len(judged) <= 4 and len(set(judged)) == len(judged)  # bisection over 8 levels, no level twice
    assert all(t.passed == (t.level <= tolerated) for t in tried)


def test_the_search_note_names_each_level_judged_and_why_one_changed_the_answers() -> None:
    from builder.optimize.prune_oneshot import Tried, search_note

    note = search_note([Tried(0.6, False, "probs: disagreement 0.03 > 0.01"), Tried(0.3, True, "")])
    assert note == "pruning one-shot: 60% changed the answers (probs: disagreement 0.03 > 0.01), 30% agrees"
