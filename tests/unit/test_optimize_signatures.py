"""Every signature of the original kept and judged (pure): the rows another signature is judged on, the verdict
on an artifact that lacks one or answers one differently, and candidates that cannot run reported, not timed."""

from __future__ import annotations

import numpy as np
import pytest
from builder.optimize.candidates import CANNOT_RUN, cannot_run_lines, first_row, guarded
from builder.optimize.signatures import FROM_DATA, GENERATED, SignatureCheck, judge, rows_for
from builder.report import Candidate, OutputSpec, TensorSpec

X = {"x": np.arange(20, dtype=np.float32).reshape(5, 4), "ids": np.arange(15, dtype=np.int32).reshape(5, 3)}
EMBED_IN = (TensorSpec("x", "float32", (None, 4)),)
PAIR_IN = (TensorSpec("a", "float32", (None, 4)), TensorSpec("b", "float32", (None, 4)))


def test_rows_come_from_the_input_of_the_same_name_then_of_the_same_dtype_and_shape() -> None:
    feed, source = rows_for(EMBED_IN, X)
    assert np.array_equal(feed["x"], X["x"]) and source == f"judged on {FROM_DATA}"
    feed, source = rows_for(PAIR_IN, X)
    assert np.array_equal(feed["a"], X["x"])
    assert np.array_equal(feed["b"], np.roll(X["x"], 1, axis=0))  # a pair of two different rows
    assert "(x)" in source


def test_rows_nothing_fits_are_generated_and_text_is_never_made_up() -> None:
    feed, source = rows_for((TensorSpec("mask", "bool", (None, 2)), TensorSpec("h", "float16", (None, 3))), X)
    assert feed["mask"].shape == (5, 2) and not feed["mask"].any() and feed["h"].dtype == np.float16
    assert GENERATED in source
    feed, source = rows_for((TensorSpec("query", "string", (None,)),), X)
    assert feed == {} and source.startswith("not judged") and "'query'" in source


def _check(name: str, inputs: tuple[TensorSpec, ...], output: str) -> SignatureCheck:
    feed, source = rows_for(inputs, X)
    reference = {output: feed[inputs[0].name].sum(axis=1, keepdims=True)}
    return SignatureCheck(name, inputs, (OutputSpec(output, "float32", (None, 1), "regression", "test"),), source,
                          feed, reference)


CHECKS = (_check("embed", EMBED_IN, "embedding"), _check("score_pair", PAIR_IN, "similarity"))
OWN = {"serving_default": ((), ()), "embed": (EMBED_IN, (TensorSpec("embedding", "float32", (None, 1)),)),
       "score_pair": (PAIR_IN, (TensorSpec("similarity", "float32", (None, 1)),))}


def _judge(signatures: dict, answer=lambda name, feed: {"embedding": feed.get("x", 0), "similarity": feed.get("a", 0)}):
    def judge_outputs(check: SignatureCheck, got: dict, want: dict) -> tuple[bool, str]:
        name = check.outputs[0].name
        ok = np.allclose(got[name].sum(axis=1, keepdims=True), want[name])
        return ok, f"{name} {'same' if ok else 'differs'}"

    return judge(signatures.get, answer, CHECKS, judge_outputs, "serving_default")


def test_an_artifact_with_every_signature_answering_like_the_original_passes() -> None:
    verdict = _judge(OWN)
    assert verdict.passed and verdict.why.startswith("every signature of the original kept and judged")
    assert set(verdict.per_signature) == {"embed", "score_pair"}


def test_an_artifact_that_lacks_a_signature_or_answers_one_differently_is_not_accepted() -> None:
    lacking = _judge({k: v for k, v in OWN.items() if k != "score_pair"})
    assert not lacking.passed and lacking.why.startswith("lacks the original's signature score_pair")
    no_default = _judge({k: v for k, v in OWN.items() if k != "serving_default"})
    assert not no_default.passed and "serving_default" in no_default.why
    wrong = _judge(OWN, lambda name, feed: {"embedding": feed.get("x", 0) * 2, "similarity": feed.get("a", 0)})
    assert not wrong.passed and wrong.why == "embed: embedding differs"
    renamed = dict(OWN, embed=(EMBED_IN, (TensorSpec("output_0", "float32", (None, 1)),)))
    assert "embed: its names, dtypes or shapes differ" in _judge(renamed).why


def test_a_candidate_failing_while_timed_loses_only_its_own_timing() -> None:
    failed: dict[str, BaseException] = {}
    count = {"good": 0}

    def good() -> int:
        count["good"] += 1
        return 1

    def bad() -> None:
        raise RuntimeError("gather index out of bounds")

    from builder.measure.loop import Withdraw

    calls = guarded({"good": good, "bad": bad}, failed)
    with pytest.raises(Withdraw, match="failed: RuntimeError"):  # the loop stops timing it, and only it
        calls["bad"]()
    for _ in range(3):
        calls["good"]()
        assert calls["bad"]() is None  # called again, it returns at once
    assert count["good"] == 3 and list(failed) == ["bad"] and str(failed["bad"]) == "gather index out of bounds"


def test_a_candidate_that_cannot_run_gets_a_note_with_the_runtimes_reason() -> None:
    broken = Candidate("saved_model", "tensorflow", None, 0, 10,
                       f"{CANNOT_RUN} (one call at the data's shapes): Detected unsupported operations", "serving_xla")
    slower = Candidate("saved_model", "tensorflow", 5.0, 9, 10, "slower than serving_default", "serving_xla")
    assert cannot_run_lines([broken, slower]) == [
        f"saved_model#serving_xla on tensorflow is not a candidate: {broken.error}"]
    row = first_row(X)
    assert row["x"].shape == (1, 4) and row["ids"].shape == (1, 3) and row["x"].flags.c_contiguous


def test_integer_rows_keep_their_dtype_and_a_second_input_of_the_kind_is_rolled() -> None:
    inputs = (TensorSpec("query_ids", "int32", (None, 3)), TensorSpec("doc_ids", "int32", (None, 3)))
    feed, _ = rows_for(inputs, {"tokens": X["ids"]})
    assert feed["query_ids"].dtype == np.int32 and np.array_equal(feed["query_ids"], X["ids"])
    assert np.array_equal(feed["doc_ids"], np.roll(X["ids"], 1, axis=0))
    assert "x" not in feed  # a float input of the same shape is not an id input
