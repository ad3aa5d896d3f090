"""Real-size models, built offline with random weights and confident heads, for the real-size benchmark.

The models users deploy on CPUs are larger than any the suite generates: BERT-sized text classifiers, ViTs,
recommenders with big embedding tables. Nothing downloads here, so every backbone has random weights; a random
network's scores barely differ between inputs, on which no gate can judge a lossy artifact. So each model's last
layer (a Dense `logits`) is FITTED: DATA's rows are noisy copies of a few prototype inputs (one per class), and
the head is the least-squares fit that answers each prototype's copies with a margin of HEAD_MARGIN on its class
(as `tests.benchmarks.deploy_choice.fit_head` does for its CNNs). The answers are then confident and varied, as
a trained classifier's are, and "int8 agrees with float" means something.

Every model is Keras 3 (`import keras`, what `pip install tensorflow` brings) saved as `.keras`, beside a DATA
`.npz` in the named form (`x_val/<input>`, `x_calib/<input>`). `SPECS` names them; `build(name, folder)` writes
both files once (an existing pair is reused) and returns their paths.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Classes the fitted head tells inputs apart into, and the logit margin it answers them with.
HEAD_CLASSES, HEAD_MARGIN = 8, 8.0
#: DATA's rows: held-out rows the gate compares on, and calibration rows for full-integer quantization.
VAL_ROWS, CALIB_ROWS = 64, 32
#: Rows the head is fitted on (noisy copies of the prototypes, disjoint from DATA's).
FIT_ROWS = 128
SEQ_LEN, VOCAB = 128, 30522
IMAGE = (224, 224, 3)


@dataclass(frozen=True)
class Spec:
    """One model of the zoo: how it is built and what its inputs look like."""

    name: str
    about: str
    build: Callable[[Any], Any]  # keras -> an unfitted keras.Model whose last layer is Dense `logits`
    inputs: Callable[[np.random.Generator, int], dict[str, np.ndarray]]  # (rng, rows) -> named inputs


@dataclass(frozen=True)
class Built:
    name: str
    model_path: Path
    data_path: Path
    parameters: int
    weight_bytes: int  # the float32 weights' bytes: what the model costs in memory, at least once


# ------------------------------------------------------------------------------------------- encoders
def bert(layers: int, hidden: int, heads: int, ffn: int, vocab: int = VOCAB, seq: int = SEQ_LEN) -> Callable:
    """A BERT-shaped text classifier: `input_ids` and `attention_mask` int32 [?, seq] (as keras-hub and Hugging
    Face exports take them) -> token + position embeddings -> `layers` post-norm encoder blocks -> the first
    token's state -> tanh pooler -> Dense `logits` (HEAD_CLASSES)."""

    def make(keras: Any) -> Any:
        ids = keras.Input((seq,), dtype="int32", name="input_ids")
        mask = keras.Input((seq,), dtype="int32", name="attention_mask")
        x = keras.layers.Embedding(vocab, hidden, name="token_embedding")(ids)
        x = x + keras.layers.Embedding(seq, hidden, name="position_embedding")(keras.ops.arange(seq)[None, :])
        x = keras.layers.LayerNormalization(epsilon=1e-12, name="embeddings_norm")(x)
        attend = keras.layers.Reshape((1, seq), name="attention_mask_rows")(mask)
        for i in range(layers):
            attention = keras.layers.MultiHeadAttention(heads, hidden // heads, name=f"layer{i}_attention")(
                x, x, attention_mask=attend)
            x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_attention_norm")(x + attention)
            h = keras.layers.Dense(ffn, activation="gelu", name=f"layer{i}_ffn_in")(x)
            h = keras.layers.Dense(hidden, name=f"layer{i}_ffn_out")(h)
            x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_ffn_norm")(x + h)
        pooled = keras.layers.Dense(hidden, activation="tanh", name="pooler")(x[:, 0, :])
        logits = keras.layers.Dense(HEAD_CLASSES, name="logits")(pooled)
        return keras.Model({"input_ids": ids, "attention_mask": mask}, {"logits": logits}, name="bert")

    return make


def token_rows(rng: np.random.Generator, rows: int, seq: int = SEQ_LEN, vocab: int = VOCAB) -> tuple[dict, np.ndarray]:
    """Noisy copies of HEAD_CLASSES prototype sequences: a tenth of each copy's tokens replaced, its padding
    (attention_mask 0) of a random length. Returns the inputs and each row's class."""
    prototypes = np.random.default_rng(1234).integers(1000, vocab, size=(HEAD_CLASSES, seq))
    classes = np.arange(rows) % HEAD_CLASSES
    ids = prototypes[classes].copy()
    noise = rng.random(ids.shape) < 0.1
    ids[noise] = rng.integers(1000, vocab, size=int(noise.sum()))
    lengths = rng.integers(seq // 2, seq + 1, size=rows)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, 0)
    return {"input_ids": ids.astype(np.int32), "attention_mask": mask}, classes


def vit(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, patch: int = 16) -> Callable:
    """A ViT-B/16-shaped image classifier: `pixels` float32 [?, 224, 224, 3] -> 16x16 patches (a strided
    Conv2D) + position embeddings -> `layers` pre-norm encoder blocks -> the tokens' mean (ViT's "gap"
    head; a class token needs a batch-sized broadcast a functional Keras model cannot trace) -> Dense `logits`."""

    def make(keras: Any) -> Any:
        pixels = keras.Input(IMAGE, name="pixels")
        x = keras.layers.Conv2D(hidden, patch, strides=patch, name="patches")(pixels)
        tokens = (IMAGE[0] // patch) * (IMAGE[1] // patch)
        x = keras.layers.Reshape((tokens, hidden))(x)
        x = x + keras.layers.Embedding(tokens, hidden, name="position_embedding")(keras.ops.arange(tokens)[None, :])
        for i in range(layers):
            h = keras.layers.LayerNormalization(epsilon=1e-6, name=f"layer{i}_attention_norm")(x)
            x = x + keras.layers.MultiHeadAttention(heads, hidden // heads, name=f"layer{i}_attention")(h, h)
            h = keras.layers.LayerNormalization(epsilon=1e-6, name=f"layer{i}_ffn_norm")(x)
            h = keras.layers.Dense(ffn, activation="gelu", name=f"layer{i}_ffn_in")(h)
            x = x + keras.layers.Dense(hidden, name=f"layer{i}_ffn_out")(h)
        x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
        logits = keras.layers.Dense(HEAD_CLASSES, name="logits")(keras.layers.GlobalAveragePooling1D()(x))
        return keras.Model({"pixels": pixels}, {"logits": logits}, name="vit_b16")

    return make


def application(which: str) -> Callable:
    """A `keras.applications` network (weights=None) with its top replaced by Dense `logits`."""

    def make(keras: Any) -> Any:
        base = getattr(keras.applications, which)(weights=None, include_top=False, input_shape=IMAGE,
                                                  pooling="avg")
        pixels = keras.Input(IMAGE, name="pixels")
        logits = keras.layers.Dense(HEAD_CLASSES, name="logits")(base(pixels))
        return keras.Model({"pixels": pixels}, {"logits": logits}, name=which.lower())

    return make


def image_rows(rng: np.random.Generator, rows: int) -> tuple[dict, np.ndarray]:
    """Noisy copies of HEAD_CLASSES prototype images in [-1, 1] (Gaussian noise, sigma 0.2)."""
    prototypes = np.random.default_rng(1234).uniform(-1, 1, size=(HEAD_CLASSES, *IMAGE))
    classes = np.arange(rows) % HEAD_CLASSES
    pixels = prototypes[classes] + rng.normal(0, 0.2, size=(rows, *IMAGE))
    return {"pixels": np.clip(pixels, -1, 1).astype(np.float32)}, classes


# ------------------------------------------------------------------------------------------- recommenders
WIDE_FEATURES = 32


def wide_and_deep(rows_in_table: int, width: int = 64) -> Callable:
    """A wide-and-deep recommender: `item_id` int32 [?, 1] -> an embedding table of `rows_in_table` rows
    (the deep part's bulk) and `features` float32 [?, 32] -> a deep MLP on both plus a wide linear part on
    the features -> Dense `logits`."""

    def make(keras: Any) -> Any:
        item = keras.Input((1,), dtype="int32", name="item_id")
        features = keras.Input((WIDE_FEATURES,), name="features")
        embedded = keras.layers.Flatten()(keras.layers.Embedding(rows_in_table, width, name="item_table")(item))
        deep = keras.layers.Concatenate()([embedded, features])
        for units in (512, 256, 128):
            deep = keras.layers.Dense(units, activation="relu")(deep)
        wide = keras.layers.Dense(64, name="wide")(features)
        joined = keras.layers.Concatenate()([deep, wide])
        logits = keras.layers.Dense(HEAD_CLASSES, name="logits")(joined)
        return keras.Model({"item_id": item, "features": features}, {"logits": logits}, name="wide_and_deep")

    return make


def recommender_rows(rows_in_table: int) -> Callable:
    def rows_of(rng: np.random.Generator, rows: int) -> tuple[dict, np.ndarray]:
        """Each class a prototype feature vector and a band of item ids; rows are noisy copies."""
        prototypes = np.random.default_rng(1234).normal(0, 1, size=(HEAD_CLASSES, WIDE_FEATURES))
        classes = np.arange(rows) % HEAD_CLASSES
        band = rows_in_table // HEAD_CLASSES
        items = classes * band + rng.integers(0, min(band, 50), size=rows)
        features = prototypes[classes] + rng.normal(0, 0.2, size=(rows, WIDE_FEATURES))
        return {"item_id": items[:, None].astype(np.int32), "features": features.astype(np.float32)}, classes

    return rows_of


SPECS: dict[str, Spec] = {s.name: s for s in (
    Spec("bert_base", "BERT-base-sized text classifier: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522, "
         "seq 128", bert(12, 768, 12, 3072), token_rows),
    Spec("bert_large", "BERT-large-sized text classifier: 24 layers, hidden 1024, 16 heads, FFN 4096, vocab 30522, "
         "seq 128", bert(24, 1024, 16, 4096), token_rows),
    Spec("bert_small", "a 4-layer BERT (hidden 768, 12 heads, FFN 3072, vocab 30522, seq 128)",
         bert(4, 768, 12, 3072), token_rows),
    Spec("vit_b16", "ViT-B/16-sized image classifier: 224x224, 12 layers, hidden 768", vit(), image_rows),
    Spec("efficientnet_b0", "EfficientNet-B0 (keras.applications, random weights)", application("EfficientNetB0"),
         image_rows),
    Spec("resnet50", "ResNet50 (keras.applications, random weights)", application("ResNet50"), image_rows),
    Spec("wide_deep_1m", "wide-and-deep recommender with a 1M-row x 64 embedding table", wide_and_deep(1_000_000),
         recommender_rows(1_000_000)),
    Spec("wide_deep_10m", "wide-and-deep recommender with a 10M-row x 64 embedding table (above 2 GB: beyond "
         "TFLite's flatbuffer limit)", wide_and_deep(10_000_000), recommender_rows(10_000_000)),
)}
#: The zoo `make bench` runs: every real-size model (bert_small is for quick looks at where memory goes).
ZOO = ("bert_base", "bert_large", "vit_b16", "efficientnet_b0", "resnet50", "wide_deep_1m", "wide_deep_10m")


def fit_head(model: Any, keras: Any, inputs: dict[str, np.ndarray], classes: np.ndarray) -> None:
    """Set Dense `logits` so each row answers HEAD_MARGIN on its class and 0 elsewhere: the minimum-norm
    least-squares fit on the network's own features of the rows."""
    head = model.get_layer("logits")
    features = keras.Model(model.inputs, head.input).predict(inputs, batch_size=8, verbose=0)
    targets = np.zeros((len(classes), HEAD_CLASSES), np.float32)
    targets[np.arange(len(classes)), classes] = HEAD_MARGIN
    design = np.hstack([features, np.ones((len(features), 1), np.float32)])
    solution = np.linalg.lstsq(design, targets, rcond=None)[0]
    head.set_weights([solution[:-1].astype(np.float32), solution[-1].astype(np.float32)])


def build(name: str, folder: Path, seed: int = 0) -> Built:
    """`<name>.keras` and `<name>.npz` in `folder` (an existing pair is reused: building BERT-large takes
    minutes and gigabytes)."""
    from builder.optimize import tfenv

    spec = SPECS[name]
    folder.mkdir(parents=True, exist_ok=True)
    model_path, data_path = folder / f"{name}.keras", folder / f"{name}.npz"
    facts_path = folder / f"{name}.json"  # the parameter count, so a reused model need not be loaded
    tfenv.tensorflow()
    import keras

    if not (model_path.exists() and facts_path.exists()):
        keras.utils.set_random_seed(seed)
        model = spec.build(keras)
        fit_inputs, fit_classes = spec.inputs(np.random.default_rng(seed + 1), FIT_ROWS)
        fit_head(model, keras, fit_inputs, fit_classes)
        partial = model_path.with_suffix(".partial.keras")
        model.save(partial)
        partial.rename(model_path)
        facts_path.write_text(json.dumps({"parameters": int(model.count_params())}))
        del model
    parameters = int(json.loads(facts_path.read_text())["parameters"])
    if not data_path.exists():
        rows, _ = spec.inputs(np.random.default_rng(seed + 2), VAL_ROWS + CALIB_ROWS)
        arrays = {f"x_val/{k}": v[:VAL_ROWS] for k, v in rows.items()}
        arrays.update({f"x_calib/{k}": v[VAL_ROWS:] for k, v in rows.items()})
        np.savez(data_path, **arrays)
    return Built(name, model_path, data_path, parameters, parameters * 4)
