"""Names a client relies on: Keras outputs named as the model returns them (one layer returning several answers
names each apart), and a model Keras's safe mode refuses told how to proceed in one line."""

from __future__ import annotations

from pathlib import Path

from builder.optimize.model_io import UNSAFE_MODULE, safe_mode_line, unique_names

#: Keras 3.15's refusal of a Lambda holding a Python lambda (its first line, as `str(error)` gives it).
KERAS_SAFE_MODE = ("Requested the deserialization of a `Lambda` layer whose `function` is a Python lambda. This carries "
                   "a potential risk of arbitrary code execution and thus it is disallowed by default. If you trust "
                   "the source of the artifact, you can override this error by passing `safe_mode=False` to the "
                   "loading function, or calling `keras.config.enable_unsafe_deserialization().")


def test_names_of_one_layers_several_outputs_are_made_unique_as_keras_2_does() -> None:
    assert unique_names(["nms", "nms", "nms"]) == ["nms", "nms_1", "nms_2"]
    assert unique_names(["dense", "probs", "dense"]) == ["dense", "probs", "dense_1"]
    assert unique_names(["a", "a_1", "a"]) == ["a", "a_1", "a_2"]  # a made-up name never takes a real one
    assert unique_names(["logits", "score"]) == ["logits", "score"]


def test_a_safe_mode_refusal_keeps_kerass_reason_and_says_how_to_proceed() -> None:
    line = safe_mode_line(Path("lam.keras"), "Keras 3", KERAS_SAFE_MODE,
                          f"{KERAS_SAFE_MODE} (full text: /tmp/x/load-model.log)")
    assert "\n" not in line
    assert line.startswith("model lam.keras: Keras 3's safe mode refuses it: Requested the deserialization of a "
                           "`Lambda` layer whose `function` is a Python lambda")
    assert f"--import {UNSAFE_MODULE}" in line and "keras.config.enable_unsafe_deserialization()" in line
    assert "(full text: /tmp/x/load-model.log)" in line
    assert "safe_mode=False" not in line  # Keras's advice names a loader argument the user cannot pass here
