"""A model refusing what a request carried: the runtimes' texts cleaned to their own sentences (recorded from
TensorFlow 2.21 and ai-edge-litert on this stack), and the one error renderer answering them 400."""

from __future__ import annotations

import pickle

import pytest

from builder.model.failures import ModelInputError, clean_message, fresh_report
from builder.server.core.outcome import outcome_of
from builder.server.core.call import RequestError

#: A Keras 3 STFTSpectrogram model's SavedModel called with a waveform shorter than one frame.
TF_RESHAPE = ("Graph execution error:\n\nDetected at node functional_1/stft_1/Reshape_1 defined at (most recent call "
              "last):\n<stack traces unavailable>\nInput to reshape is a tensor with 100 values, but the requested "
              "shape requires a multiple of 12900\n\t [[{{node functional_1/stft_1/Reshape_1}}]] "
              "[Op:__inference_signature_wrapper___call___758]")
#: The same wrapping with a stack trace and two root errors.
TF_TWO_ROOTS = ("Graph execution error:\n\nDetected at node x defined at (most recent call last):\n  File \"a.py\", "
                "line 1, in <module>\n    f()\nNode: 'x'\n2 root error(s) found.\n  (0) INVALID_ARGUMENT: "
                "indices[0,4] = 500 is not in [0, 20)\n\t [[{{node x}}]]\n  (1) INVALID_ARGUMENT: indices[0,4] = 500 "
                "is not in [0, 20)\n0 successful operations.\n0 derived errors ignored. [Op:__inference_f_1]")
#: A serving_xla signature of a model using tf.image.combined_non_max_suppression.
TF_XLA = ("Graph execution error:\n\nDetected at node nms/CombinedNonMaxSuppression defined at (most recent call "
          "last):\n<stack traces unavailable>\nDetected unsupported operations when trying to compile graph "
          "__inference_<lambda>_218[] on XLA_CPU_JIT: CombinedNonMaxSuppression (No registered "
          "'CombinedNonMaxSuppression' OpKernel for XLA_CPU_JIT devices compatible with node {{node "
          "nms/CombinedNonMaxSuppression}}){{node nms/CombinedNonMaxSuppression}}\nThe op is created at: \n"
          "dummy_file_name:10:dummy_function_name\n\ttf2xla conversion failed while converting "
          "__inference_<lambda>_218[]. Run with TF_DUMP_GRAPH_PREFIX=/path/to/dump/dir and "
          "--vmodule=xla_compiler=2 to obtain a dump of the compiled functions.\n\t [[StatefulPartitionedCall]] "
          "[Op:__inference_signature_wrapper_231]")
#: LiteRT, a token id beyond the vocabulary: two messages of its reporter run together.
LITERT_GATHER = "gather index out of boundsNode number 3 (GATHER) failed to invoke."
#: LiteRT, a kernel check with its C++ source location.
LITERT_RESHAPE = ("tensorflow/lite/kernels/reshape.cc:92 num_input_elements != num_output_elements (100 != 129)\n"
                  "Node number 2 (RESHAPE) failed to prepare.\n")


@pytest.mark.parametrize(("raw", "clean"), [
    (TF_RESHAPE, "Input to reshape is a tensor with 100 values, but the requested shape requires a multiple of 12900."),
    (TF_TWO_ROOTS, "indices[0,4] = 500 is not in [0, 20)."),
    (LITERT_GATHER, "gather index out of bounds. Node number 3 (GATHER) failed to invoke."),
    (LITERT_RESHAPE, "num_input_elements != num_output_elements (100 != 129). Node number 2 (RESHAPE) failed to prepare."),
    (LITERT_GATHER * 2, "gather index out of bounds. Node number 3 (GATHER) failed to invoke."),
])
def test_a_runtime_message_keeps_every_sentence_of_its_own_and_drops_only_the_wrapping(raw: str, clean: str) -> None:
    assert clean_message(raw) == clean


def test_an_xla_refusal_keeps_the_op_and_drops_the_dump_advice() -> None:
    text = clean_message(TF_XLA)
    assert text.startswith("Detected unsupported operations when trying to compile graph")
    assert "CombinedNonMaxSuppression" in text and "tf2xla conversion failed" in text
    for noise in ("Graph execution error", "dummy_file_name", "TF_DUMP_GRAPH_PREFIX", "[[", "[Op:", "}){{"):
        assert noise not in text
    assert "\n" not in text


def test_litert_reporter_text_of_earlier_failures_is_not_this_failures() -> None:
    # LiteRT's reporter never empties: the second failure's text starts with the first one's.
    assert fresh_report(LITERT_GATHER, LITERT_GATHER * 2) == LITERT_GATHER
    assert fresh_report("", LITERT_GATHER) == LITERT_GATHER
    assert fresh_report("something else", LITERT_GATHER) == LITERT_GATHER


def test_a_model_refusing_the_request_is_answered_400_and_the_servers_own_faults_500() -> None:
    refused = outcome_of(ModelInputError("gather index out of bounds. Node number 3 (GATHER) failed to invoke."))
    assert (refused.http, refused.reason) == (400, "gather index out of bounds. Node number 3 (GATHER) failed to invoke.")
    assert outcome_of(RequestError("no such model", 404)).http == 404
    own = outcome_of(RuntimeError("gather index out of bounds"))  # the same words, not typed as the client's: ours
    assert own.http == 500 and own.reason.startswith("internal error: RuntimeError")


def test_the_refusal_crosses_a_process_boundary_whole() -> None:
    error = pickle.loads(pickle.dumps(ModelInputError("indices[0,4] = 500 is not in [0, 20).")))
    assert isinstance(error, ModelInputError) and str(error) == "indices[0,4] = 500 is not in [0, 20)."
