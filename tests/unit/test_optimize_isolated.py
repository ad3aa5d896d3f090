"""Which steps run in a process of their own (`builder.optimize.isolated.worth_a_process`): a pure rule over the
step's expected need and the budget; the processes themselves are tested in tests/e2e/test_optimize_isolated.py."""

from __future__ import annotations

from builder.optimize import isolated

MIB = 1024 * 1024


def test_only_steps_needing_a_real_share_of_the_budget_run_apart() -> None:
    gib = 1024**3
    assert isolated.worth_a_process(300 * MIB, None)  # big whatever the budget
    assert isolated.worth_a_process(200 * MIB, gib)  # an eighth of the budget or more
    assert not isolated.worth_a_process(200 * MIB, 8 * gib)
    assert not isolated.worth_a_process(30 * MIB, None)  # a small model's conversion: here, sharing one load
