"""A step in a process of its own (`builder.optimize.isolated`): its result or its error comes back whole, and a
child that grows past the memory budget is stopped with both figures instead of the machine running out."""

from __future__ import annotations

import os
import pickle
import signal
import time
from pathlib import Path

import pytest

from builder.measure import memory
from builder.optimize import isolated
from builder.optimize.quantize import ConversionFailed

MIB = 1024 * 1024


def add(a: int, b: int) -> tuple[int, int]:
    return a + b, os.getpid()


def refuse(what: str) -> None:
    raise ValueError(f"cannot take {what}")


def refuse_like_the_converter() -> None:
    raise ConversionFailed("TFLite int8 conversion failed: no kernel; drop int8", "no kernel", "the whole text")


def grow(step_mib: int, most_mib: int) -> int:
    """Take memory a step at a time (touched, so it is resident), then wait to be stopped."""
    held = []
    for _ in range(most_mib // step_mib):
        held.append(bytearray(os.urandom(1024)) * (step_mib * 1024))
        time.sleep(0.05)
    time.sleep(120)
    return len(held)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_result_comes_back_from_another_process() -> None:
    total, pid = isolated.call(add, 2, 3, limit=None)
    assert total == 5 and pid != os.getpid()


def test_an_error_comes_back_with_its_first_line_and_the_childs_traceback() -> None:
    with pytest.raises(ValueError, match="cannot take the model") as raised:
        isolated.call(refuse, "the model", limit=None)
    assert "Traceback" in raised.value.full_text and "in refuse" in raised.value.full_text  # type: ignore[attr-defined]


def test_a_converter_refusal_keeps_its_cause_and_log_text() -> None:
    again = pickle.loads(pickle.dumps(ConversionFailed("line", "cause", "full")))
    assert (str(again), again.cause, again.full_text) == ("line", "cause", "full")
    with pytest.raises(ConversionFailed) as raised:
        isolated.call(refuse_like_the_converter, limit=None)
    assert raised.value.cause == "no kernel" and raised.value.full_text == "the whole text"


@pytest.mark.skipif(memory.rss_bytes() is None, reason="needs /proc to read a process's memory")
def test_a_child_growing_past_the_budget_is_stopped_with_both_figures() -> None:
    limit = (memory.rss_bytes() or 0) + 300 * MIB
    with pytest.raises(isolated.OverBudget) as raised:
        isolated.call(grow, 20, 2000, limit=limit)
    line = str(raised.value)
    assert line.startswith("not enough memory: its process took ") and "in use, and" in line
    assert memory.text(limit) in line and raised.value.cause == line


def test_a_child_that_dies_without_a_word_is_said_so() -> None:
    with pytest.raises(isolated.ChildFailed, match="signal SIGKILL and no result") as raised:
        isolated.call(die, limit=None)
    assert "OOM killer" in str(raised.value)


@pytest.mark.tf
def test_a_savedmodel_is_saved_again_with_serving_xla_by_a_process_of_its_own(tmp_path: Path) -> None:
    """What optimize does for a big plain SavedModel: the re-save that adds `serving_xla` (a copy of every
    weight while it runs) happens in a child, and the folder it leaves answers on both signatures."""
    import subprocess
    import sys

    from builder.optimize.model_io import XLA_SIGNATURE, add_xla_signature

    folder = tmp_path / "saved_model"
    make = (
        "import sys, tensorflow as tf\n"
        "class M(tf.Module):\n"
        "    def __init__(self):\n"
        "        self.w = tf.Variable(tf.ones([4, 2]))\n"
        "    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name='x')])\n"
        "    def serve(self, x):\n"
        "        return {'y': tf.matmul(x, self.w)}\n"
        "m = M()\n"
        "tf.saved_model.save(m, sys.argv[1], signatures={'serving_default': m.serve})\n"
    )
    subprocess.run([sys.executable, "-c", make, str(folder)], check=True, timeout=300, capture_output=True)
    isolated.call(add_xla_signature, folder, "serving_default", limit=None)
    check = (
        "import sys, numpy as np, tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "x = tf.constant(np.arange(8, dtype=np.float32).reshape(2, 4))\n"
        "print(sorted(m.signatures), m.signatures[sys.argv[2]](x=x)['y'].numpy().tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", check, str(folder), XLA_SIGNATURE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"['serving_default', '{XLA_SIGNATURE}'] [[6.0, 6.0], [22.0, 22.0]]"


def test_a_keras3_model_loaded_apart_is_served_from_its_savedmodel_and_loaded_here_only_for_pruning(
        tmp_path: Path) -> None:
    """What optimize does for a big Keras 3 model: the `.keras` file is loaded and exported by a child; this
    process holds only the SavedModel, which answers as the Keras model does, and the Keras model itself is
    loaded when pruning asks for it, with the file's weights."""
    import subprocess
    import sys

    import numpy as np

    from builder.optimize.model_io import load_model

    path = tmp_path / "mlp.keras"
    make = (
        "import sys, numpy as np, keras\n"
        "keras.utils.set_random_seed(0)\n"
        "m = keras.Sequential([keras.Input((6,), name='features'), keras.layers.Dense(5, activation='relu'),\n"
        "                      keras.layers.Dense(3, activation='softmax')])\n"
        "m.save(sys.argv[1])\n"
        "x = np.linspace(-1, 1, 12, dtype='float32').reshape(2, 6)\n"
        "print(repr(m.predict(x, verbose=0).tolist()))\n"
    )
    done = subprocess.run([sys.executable, "-c", make, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = np.array(eval(done.stdout.strip().splitlines()[-1]), dtype=np.float32)  # noqa: S307 - our own repr

    loaded = load_model(path, apart=True, limit=None)
    try:
        assert loaded.keras3_model is None and loaded.has_keras3
        x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
        (answers,) = loaded.predict({loaded.inputs[0].name: x}).values()
        np.testing.assert_allclose(answers, expected, rtol=1e-5, atol=1e-6)
        model = loaded.keras3()
        assert model is not None and loaded.keras3_model is model
        np.testing.assert_allclose(np.asarray(model(x)), expected, rtol=1e-5, atol=1e-6)
        loaded.release()
        assert not loaded.has_keras3 and loaded.keras3() is None
        with pytest.raises(RuntimeError, match="released"):
            loaded.predict({loaded.inputs[0].name: x})
    finally:
        loaded.close()
