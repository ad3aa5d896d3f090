"""tfsmith's own pruning of Keras 3 models (`builder.optimize.prune_keras3`) on real, tiny Keras 3 models of the
three kinds users build: which weights it prunes, and a subclassed model answering a dict pruned to its target
with its original left as it was."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras")):
    pytest.skip("needs the optimize extra (tensorflow, keras)", allow_module_level=True)


@pytest.fixture(scope="module")
def keras():  # Keras 3 beside tf_keras, TensorFlow imported the way optimize imports it
    from builder.optimize import tfenv

    tfenv.tensorflow()
    import keras as keras3

    assert keras3.__version__.startswith("3.")
    keras3.utils.set_random_seed(0)
    return keras3


def _pruned_paths(model) -> list[str]:
    from builder.optimize.prune_keras3 import prunable_weights

    return sorted(target.path for target in prunable_weights(model))


def test_functional_and_sequential_models_prune_kernels_and_embeddings_never_biases_or_norms(keras) -> None:
    tokens = keras.Input((6,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(50, 8, name="embed")(tokens)
    h = keras.layers.LayerNormalization(name="norm")(h)
    h = keras.layers.Conv1D(4, 3, name="conv")(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    functional = keras.Model(tokens, keras.layers.Dense(2, name="head")(h))
    assert _pruned_paths(functional) == ["conv/kernel", "embed/embeddings", "head/kernel"]

    sequential = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.SeparableConv2D(4, 3, name="sep"),
                                   keras.layers.BatchNormalization(name="bn"),
                                   keras.layers.DepthwiseConv2D(3, name="dw"), keras.layers.Flatten(),
                                   keras.layers.Dense(3, name="out")])
    assert _pruned_paths(sequential) == ["dw/kernel", "out/kernel", "sep/depthwise_kernel", "sep/pointwise_kernel"]


def test_a_subclassed_model_answering_a_dict_is_pruned_to_its_target_and_its_original_is_untouched(keras) -> None:
    from builder.optimize.prune_keras3 import prune_model
    from builder.optimize.recipe import Pruning

    class Block(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.inner = keras.layers.Dense(32, activation="relu")

        def call(self, x):
            return self.inner(x)

    @keras.saving.register_keras_serializable(package="tfsmith_test")
    class TwoHeads(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.block = Block()
            self.kind = keras.layers.Dense(3, activation="softmax")
            self.size = keras.layers.Dense(1)

        def call(self, x):
            h = self.block(x)
            return {"kind": self.kind(h), "size": self.size(h)}

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 12)).astype("float32")
    y_kind, y_size = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 1), x[:, 2:3] * 2
    model = TwoHeads()
    model(x[:2])
    before = [w.copy() for w in model.get_weights()]
    assert len(_pruned_paths(model)) == 3  # the nested block's kernel and both heads'
    # as `contract.fit_arguments` gives them: lists in the model's output order, tf_keras losses
    from builder.optimize import tfenv

    tk = tfenv.keras()
    pruned, sparsity = prune_model(model, Pruning(sparsity=0.7, epochs=2), x, [y_kind, y_size],
                                   [tk.losses.SparseCategoricalCrossentropy(), tk.losses.MeanSquaredError()])
    assert sparsity.achieved == pytest.approx(0.7, abs=0.01) and sparsity.target == 0.7
    assert len(sparsity.layers) == 3 and all(v == pytest.approx(0.7, abs=0.02) for v in sparsity.layers.values())
    assert sparsity.schedule is not None and sparsity.schedule.end_step < 2 * 8  # the last update inside the run
    kernels = [w for w in pruned.get_weights() if w.ndim == 2]
    assert all(np.mean(k == 0) == pytest.approx(0.7, abs=0.02) for k in kernels)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))  # the original as it was
    answers = pruned(x[:4])
    assert set(answers) == {"kind", "size"} and tuple(answers["kind"].shape) == (4, 3)


def test_one_shot_pruning_keeps_the_highest_level_its_judge_passes_and_leaves_the_original(keras) -> None:
    """No training rows: magnitude masks only, at the highest level where the answers still agree (here: top-1
    on 200 rows within 10%), on a copy; a judge that passes nothing drops it with the lowest level's reason."""
    from builder.errors import TfsmithError
    from builder.optimize.prune_oneshot import LEVELS, prune_one_shot

    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 16)).astype("float32")
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu", name="hidden"),
                              keras.layers.Dense(4, activation="softmax", name="out")])
    before = [w.copy() for w in model.get_weights()]
    top = model.predict(x, verbose=0).argmax(1)
    judged: list[float] = []

    def agrees(pruned) -> tuple[bool, str]:
        disagreement = float(np.mean(pruned.predict(x, verbose=0).argmax(1) != top))
        judged.append(float(np.mean(pruned.get_layer("hidden").get_weights()[0] == 0)))
        return disagreement <= 0.10, f"disagreement {disagreement:.3f}"

    pruned, sparsity, tried = prune_one_shot(model, agrees)
    assert sparsity.target in LEVELS and sparsity.achieved == pytest.approx(sparsity.target, abs=0.01)
    assert [round(v, 2) for v in judged] == [t.level for t in tried]  # each judgement saw its own level
    assert max(t.level for t in tried if t.passed) == sparsity.target
    assert all(t.level > sparsity.target for t in tried if not t.passed)
    assert float(np.mean(pruned.predict(x, verbose=0).argmax(1) != top)) <= 0.10
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    with pytest.raises(TfsmithError, match="changed the answers at every level tried, down to 20%"):
        prune_one_shot(model, lambda m: (False, "never"))


def test_a_model_on_raw_strings_is_fine_tuned_on_its_text(keras) -> None:
    """Keras 3's fit refuses numpy text ("Invalid dtype: bytes8"); DATA keeps strings as bytes."""
    from builder.optimize.prune_keras3 import prune_model
    from builder.optimize.recipe import Pruning

    words = keras.Input((1,), dtype="string", name="word")
    hot = keras.layers.StringLookup(vocabulary=["red", "green", "blue"], output_mode="one_hot")(words)
    hidden = keras.layers.Dense(64, activation="relu")(keras.layers.Flatten()(hot))
    model = keras.Model(words, keras.layers.Dense(2, activation="softmax")(hidden))
    rng = np.random.default_rng(0)
    text = rng.choice(np.array([b"red", b"green", b"blue", b"other"], dtype="S8"), size=(128, 1))
    labels = (text[:, 0] == b"red").astype("int64")
    pruned, result = prune_model(model, Pruning(sparsity=0.5, epochs=2, batch_size=16), [text], [labels],
                                 ["sparse_categorical_crossentropy"])
    assert result.achieved >= 0.49
    import tensorflow as tf

    assert tuple(pruned(tf.constant(text[:4])).shape) == (4, 2)
