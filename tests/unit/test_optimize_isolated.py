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


class _Plan:
    class data:  # noqa: N801 - the attribute path steps read
        x_calib = {"x": None}


class _Run:
    plan = _Plan()
    ledger = type("L", (), {"budget": None})()


def test_a_big_models_int8_falls_back_to_the_savedmodel_route_except_when_memory_ran_out(monkeypatch, tmp_path
                                                                                         ) -> None:
    from builder.optimize import quantize, steps

    calls: list[str] = []

    def quantized_fails(work, *args, limit=None):  # noqa: ANN001, ANN202 - stands in for isolated.call
        calls.append(work.__name__)
        if work is quantize.int8_from_float_file:
            raise quantize.ConversionFailed("TFLite int8 conversion failed: no calibrator", "no calibrator", "")
        return ["int8: from the SavedModel"]

    monkeypatch.setattr(isolated, "call", quantized_fails)
    notes = steps.int8_from_float(_Run(), tmp_path / "f.tflite", tmp_path / "sm", tmp_path / "i.tflite", "serving_default")
    assert calls == ["int8_from_float_file", "convert_to_file"]
    assert notes[0].startswith("int8: quantized from the SavedModel: quantizing the float .tflite failed (")
    assert "no calibrator" in notes[0] and notes[1:] == ["int8: from the SavedModel"]

    def out_of_memory(work, *args, limit=None):  # noqa: ANN001, ANN202
        calls.append(work.__name__)
        raise isolated.OverBudget("not enough memory: its process took 3.0 GiB")

    calls.clear()
    monkeypatch.setattr(isolated, "call", out_of_memory)
    try:
        steps.int8_from_float(_Run(), tmp_path / "f.tflite", tmp_path / "sm", tmp_path / "i.tflite", "serving_default")
    except isolated.OverBudget:
        pass
    else:
        raise AssertionError("a step that ran out of memory must not be tried again by a heavier route")
    assert calls == ["int8_from_float_file"]
