"""The floor: a step beyond the original's own SavedModel that fails becomes a one-line note naming its log,
and the run goes on (`builder.optimize.ledger.Ledger.attempt`)."""

from __future__ import annotations

from pathlib import Path

from builder.optimize.ledger import DONE, DROPPED, SKIPPED, Ledger


def test_a_failing_step_is_a_note_with_its_cause_whole_and_its_log() -> None:
    ledger = Ledger("OUT")

    def prune() -> object:
        raise TypeError("Error when deserializing class 'QuantizeLayer' using config={...}.\n\nException encountered: "
                        "('Keyword argument not understood:', 'quantizer')")

    assert ledger.attempt("pruning", prune, log="prune") is None
    assert ledger.lines() == ("pruning dropped: ('Keyword argument not understood:', 'quantizer') "
                              "(full text: OUT/logs/prune.log)",)
    assert "QuantizeLayer" in ledger.logs["prune"] and "Traceback" in ledger.logs["prune"]
    (attempt,) = ledger.attempts()
    assert (attempt.step, attempt.outcome, attempt.log) == ("pruning", DROPPED, "OUT/logs/prune.log")
    assert attempt.cause == "('Keyword argument not understood:', 'quantizer')"


def test_a_step_that_works_gives_its_result_is_recorded_done_and_says_nothing() -> None:
    ledger = Ledger("OUT")
    assert ledger.attempt("pruning", lambda: 42, log="prune") == 42
    assert ledger.lines() == () and ledger.logs == {}
    assert [(a.step, a.outcome) for a in ledger.attempts()] == [("pruning", DONE)]
    assert ledger.unaccounted(["pruning", "model_int8.tflite"]) == ["model_int8.tflite"]


def test_a_library_error_that_carries_its_own_cause_and_full_text_is_kept_as_it_says() -> None:
    """The converter's error carries its cleaned first line and everything it printed: both are used as they are."""
    class ConverterSays(Exception):
        cause = "'tf.Conv2D' op is neither a custom op nor a flex op"
        full_text = "loc(...): error: 'tf.Conv2D' op is neither a custom op nor a flex op\n<the whole MLIR dump>"

    ledger = Ledger("OUT")
    assert ledger.attempt("model_int8.tflite", lambda: (_ for _ in ()).throw(ConverterSays("x")),
                          log="convert-int8", failed="model_int8.tflite not written: TFLite int8 conversion failed") is None
    assert ledger.lines() == ("model_int8.tflite not written: TFLite int8 conversion failed: 'tf.Conv2D' op is "
                              "neither a custom op nor a flex op (full text: OUT/logs/convert-int8.log)",)
    assert ledger.logs["convert-int8"] == ConverterSays.full_text


def test_a_step_judged_after_it_ran_keeps_one_entry_with_its_time_and_memory() -> None:
    ledger = Ledger("OUT")
    ledger.attempt("pruning", lambda: "pruned", log="prune")
    ledger.dropped("pruning", "the pruned float model changed the answers")
    (attempt,) = ledger.attempts()
    assert attempt.outcome == DROPPED and attempt.line == "pruning dropped: the pruned float model changed the answers"
    assert attempt.seconds >= 0.0
    if Path("/proc/self/status").exists():  # Linux: the resident set before, after and at its peak
        assert attempt.rss_before_mib and attempt.rss_after_mib and attempt.peak_rss_mib
        assert attempt.peak_rss_mib >= min(attempt.rss_before_mib, attempt.rss_after_mib)


def test_notes_and_skips_keep_their_order_and_a_silent_skip_is_accounted_without_a_line() -> None:
    ledger = Ledger("OUT")
    ledger.note("the model is a Keras 3.15.1 model")
    ledger.skipped("openvino_fp32.xml", "OpenVINO is not installed here", said="openvino_fp32.xml, openvino_int8.xml "
                   "not written: OpenVINO is not installed here")
    ledger.skipped("openvino_int8.xml", "OpenVINO is not installed here", said="")
    ledger.notes.append("")  # nothing to say is no line
    ledger.skipped("pruning", "DATA has no x_train")
    assert ledger.lines() == ("the model is a Keras 3.15.1 model",
                              "openvino_fp32.xml, openvino_int8.xml not written: OpenVINO is not installed here",
                              "pruning skipped: DATA has no x_train")
    assert ledger.unaccounted(["openvino_int8.xml", "pruning"]) == []
    assert ledger.outcome("openvino_int8.xml") == SKIPPED


def test_the_plan_accounts_for_every_step_the_recipe_asked_for() -> None:
    """Skipped before any work (a model nothing fine-tunes, a Keras 3 model's QAT): each step the recipe asked
    for has an entry."""
    from builder.optimize.planning import adapt_recipe, planned_steps
    from builder.optimize.recipe import recipe_from_mapping

    recipe = recipe_from_mapping({"pruning": {"sparsity": 0.8}, "quantization": {"modes": ["int8"], "qat": True}})
    adapted, skips = adapt_recipe(recipe, "a SavedModel without a Keras model inside", has_train=True)
    ledger = Ledger("OUT")
    ledger.add(skips)
    gone = [s for s in planned_steps(recipe) if s not in planned_steps(adapted)]
    assert gone == ["pruning", "quantization-aware training"] and ledger.unaccounted(gone) == []
    assert ledger.lines()[0] == "pruning and QAT skipped: the model is a SavedModel without a Keras model inside"
    # a Keras 3 model: pruned by tfsmith, so only QAT (tfmot's) goes, with its own line
    adapted, skips = adapt_recipe(recipe, None, has_train=True, why_not_qat="a Keras 3.15.1 model: tfmot's QAT "
                                                                            "takes only tf_keras")
    ledger = Ledger("OUT")
    ledger.add(skips)
    gone = [s for s in planned_steps(recipe) if s not in planned_steps(adapted)]
    assert gone == ["quantization-aware training"] and ledger.unaccounted(gone) == []
    assert ledger.lines()[0] == "QAT skipped: the model is a Keras 3.15.1 model: tfmot's QAT takes only tf_keras"


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
