"""The floor: a step beyond the original's own SavedModel that fails becomes a one-line note naming its log,
and the run goes on (`builder.optimize.steps.optional`)."""

from __future__ import annotations

from pathlib import Path

from builder.optimize.steps import optional


class Notes:
    """What `optional` uses of the plan: its notes and where a full text is kept."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.logs: dict[str, str] = {}

    def log(self, name: str, text: str) -> Path:
        self.logs[name] = text
        return Path("OUT") / "logs" / f"{name}.log"


def test_a_failing_step_is_a_note_with_its_cause_whole_and_its_log() -> None:
    plan = Notes()

    def prune() -> object:
        raise TypeError("Error when deserializing class 'QuantizeLayer' using config={...}.\n\nException encountered: "
                        "('Keyword argument not understood:', 'quantizer')")

    assert optional(plan, "pruning", "prune", prune) is None  # type: ignore[arg-type]
    assert plan.notes == ["pruning dropped: ('Keyword argument not understood:', 'quantizer') "
                          "(full text: OUT/logs/prune.log)"]
    assert "QuantizeLayer" in plan.logs["prune"] and "Traceback" in plan.logs["prune"]


def test_a_step_that_works_gives_its_result_and_no_note() -> None:
    plan = Notes()
    assert optional(plan, "pruning", "prune", lambda: 42) == 42  # type: ignore[arg-type]
    assert plan.notes == [] and plan.logs == {}


def test_a_model_that_cannot_be_called_with_the_data_is_one_line_naming_its_log() -> None:
    import numpy as np
    import pytest

    from builder.errors import InputError
    from builder.optimize.contract import original_answers

    class Refusing:
        def predict(self, x: object) -> object:
            raise ValueError("Graph execution error:\n\nPartialTensorShape: Incompatible shapes during merge: "
                             "[1,8] vs. [65,8]\n\t [[{{node lstm/while}}]]")

    with pytest.raises(InputError) as refused:
        original_answers(Refusing(), {"x": np.zeros((65, 3))}, "model.keras")
    line = str(refused.value)
    assert "\n" not in line and line.startswith("model model.keras: it cannot be called with DATA's x_val rows: ")
    assert "(full text: " in line and line.endswith("input names, dtypes and shapes")


def test_answers_that_move_between_calls_on_the_same_rows_are_named() -> None:
    import numpy as np

    from builder.optimize.contract import answers_moved

    first = {"probs": np.array([[0.2, 0.8], [0.6, 0.4], [0.5, 0.5]]), "label": np.array([b"a", b"b", b"c"])}
    assert answers_moved(first, {"probs": first["probs"][:2] + 1e-6, "label": first["label"][:2]}) is None
    carried = answers_moved(first, {"probs": first["probs"][:2] + 0.05, "label": first["label"][:2]})
    assert carried == "output 'probs' by up to 0.05"
    assert answers_moved(first, {"probs": first["probs"][:2], "label": np.array([b"a", b"x"])}) == \
        "output 'label' values differ"
