"""A big original's SavedModel loaded and answering in a process of its own (`builder.optimize.original_process`):
the same contract, answers and refusals as loaded in optimize's own process, and its memory given back when it
is released. Small models here: which models go there is the memory budget's decision, tested with it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf
if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("needs the optimize extra", allow_module_level=True)


@pytest.fixture(scope="module")
def table_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tf.Module with two signatures: `serving_default` (token ids into a 5-row table, and a float input)
    and `embed` (the rows of the table)."""
    from builder.optimize import tfenv

    tf = tfenv.tensorflow()
    folder = tmp_path_factory.mktemp("original") / "saved_model"

    class Table(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = tf.Variable(np.arange(15, dtype=np.float32).reshape(5, 3))

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int32, name="ids"),
                                      tf.TensorSpec([None, 3], tf.float32, name="scale")])
        def serve(self, ids: tf.Tensor, scale: tf.Tensor) -> dict[str, tf.Tensor]:
            rows = tf.reduce_sum(tf.gather(self.table, ids), axis=1)
            return {"scores": rows * scale, "total": tf.reduce_sum(rows, axis=1, keepdims=True)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="ids")])
        def embed(self, ids: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"vectors": tf.gather(self.table, ids)}

    module = Table()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve, "embed": module.embed})
    return folder


def test_the_original_answers_from_its_own_process_as_it_does_here(table_model: Path) -> None:
    from builder.optimize import model_io

    here = model_io.load_model(table_model)
    apart = model_io.load_model(table_model, apart=True)
    try:
        assert apart.loaded_saved_model is None  # nothing of the model is loaded in this process
        assert (apart.inputs, apart.outputs, apart.others, apart.params, apart.signature) == \
            (here.inputs, here.outputs, here.others, here.params, here.signature)
        x = {"ids": np.array([[0, 1], [4, 4], [2, 3]], np.int32),
             "scale": np.array([[1, 2, 3], [0.5, 0.5, 0.5], [-1, 0, 1]], np.float32)}
        ours, theirs = here.predict(x), apart.predict(x, batch=2)  # two calls across the pipe
        assert set(ours) == set(theirs) == {"scores", "total"}
        for name in ours:
            np.testing.assert_array_equal(ours[name], theirs[name])
        np.testing.assert_array_equal(apart.predict_signature("embed", {"ids": np.array([1, 3], np.int32)})["vectors"],
                                      [[3, 4, 5], [9, 10, 11]])
        # an id past the table is refused there as here: the same error, which optimize reads the range from
        with pytest.raises(Exception) as refused:
            apart.predict({"ids": np.array([[7, 0]], np.int32), "scale": np.ones((1, 3), np.float32)})
        assert type(refused.value).__name__ == "InvalidArgumentError"
        assert "7 is not in [0, 5)" in str(refused.value)
        assert apart.predict(x)["total"].shape == (3, 1)  # and it still answers after refusing
    finally:
        here.close()
    process = next(item for item in apart._keep if hasattr(item, "found"))
    pid = process._child.pid
    apart.release()
    assert process._child is None and not Path(f"/proc/{pid}").exists()  # ended: its memory is the machine's
    with pytest.raises(RuntimeError, match="released"):
        apart.predict(x)
    apart.close()  # harmless after release


def test_a_signature_the_savedmodel_lacks_is_refused_in_one_line_as_here(table_model: Path) -> None:
    from builder.errors import InputError
    from builder.optimize import model_io

    with pytest.raises(InputError, match=r"has no signature 'predict' \(it has: embed, serving_default\)"):
        model_io.load_model(table_model, signature="predict", apart=True)
