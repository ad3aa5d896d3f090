"""Build generated models: `python -m tests.modelgen.build OUT SPECS.json` (a subprocess: TensorFlow, Keras 3 and
tf_keras live here, never in the test process, and a global mixed-precision policy dies with it).

For each spec it trains the model briefly, saves it as the user would (`.keras`, `.h5`, a SavedModel folder or a
`.tflite`), writes DATA (`<id>.npz`), and then — from the SAVED FILE, reloaded the way its format loads — the
original's answers on probe rows per signature (`<id>.reference.npz`: `x/<signature>/<input>`,
`y/<signature>/<output>`) and its contract (`<id>.contract.json`: per signature, inputs and outputs with name,
dtype, shape). Those two files are what the served model is compared with; nothing of tfsmith's is used to make
them. One spec that fails to build is recorded in `<id>.build-error.txt` and the rest go on.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf_keras (tfmot needs it); `keras` stays Keras 3
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from tests.modelgen import data as gen  # noqa: E402
from tests.modelgen.catalog import (DICT, FAMILY, H5, KERAS3, KERAS_FILE, LIST, MIXED, NO_KERAS, SAVED_MODEL,  # noqa: E402
                                    MIXED_HALF_OUT, TAGGING, TFLITE_FORMATS, TFLITE_INT8,
                                    TFLITE_UINT8, ModelSpec)

PROBE_ROWS = 8
HEAD_NAMES = {"classification": "probs", "binary": "yes", "regression": "value", "segmentation": "mask", "tagging": "tags"}
EPOCHS = 2


def tf_module() -> Any:
    import tensorflow as tf

    return tf


def keras_of(spec: ModelSpec) -> Any:
    if spec.keras == KERAS3:
        import keras

        return keras
    import tf_keras

    return tf_keras


class Ops:
    """cast / greater on symbolic tensors in either Keras (Keras 3's ops, TensorFlow ops as tf_keras layers)."""

    def __init__(self, spec: ModelSpec) -> None:
        self.keras3 = spec.keras == KERAS3

    def cast(self, t: Any, dtype: str) -> Any:
        if self.keras3:
            import keras

            return keras.ops.cast(t, dtype)
        return tf_module().cast(t, dtype)

    def concatenate(self, tensors: list[Any]) -> Any:
        if self.keras3:
            import keras

            return keras.ops.concatenate(tensors, axis=-1)
        return tf_module().concat(tensors, axis=-1)

    def argmax(self, t: Any) -> Any:
        if self.keras3:
            import keras

            return keras.ops.argmax(t, axis=-1)
        return tf_module().math.argmax(t, axis=-1)

    def greater(self, t: Any, value: float) -> Any:
        if self.keras3:
            import keras

            return keras.ops.greater(t, value)
        return tf_module().math.greater(t, value)


# ------------------------------------------------------------------------------------------------ bodies


def body(spec: ModelSpec, k: Any, ops: Ops, main: dict[str, Any]) -> tuple[Any, Any | None]:
    """(pooled features (N, F), per-pixel (N, H, W, F) or per-step (N, T, F) features or None) of the family's
    body over `main`; per-step features only for a tagging head."""
    layers = k.layers
    family, variant = spec.family, spec.variant
    if family in ("dense", "subclassed"):
        h = layers.Dense(16, activation="relu")(main["features"])
        return layers.Dropout(0.1)(layers.Dense(12, activation="relu")(h)), None
    if family == "conv1d":
        steps = layers.Conv1D(8, 3, padding="same", activation="relu")(main["sequence"])
        return layers.GlobalMaxPooling1D()(steps), (steps if spec.task == TAGGING else None)
    if family in ("conv2d", "augmentation", "depthwise_conv2d", "separable_conv2d", "conv2d_transpose"):
        x = main["image"]
        if variant == "uint8":
            x = layers.Rescaling(1.0 / 255)(ops.cast(x, "float32"))
        if family == "augmentation":
            x = layers.RandomFlip("horizontal")(x)
            x = layers.RandomRotation(0.1)(x)
            x = layers.RandomContrast(0.2)(x)
        if family in ("conv2d", "augmentation"):
            h = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
            return layers.Flatten()(layers.MaxPooling2D()(h)), None
        if family == "depthwise_conv2d":
            h = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=4, activation="relu")(x)
            return layers.GlobalAveragePooling2D()(layers.Conv2D(8, 1, activation="relu")(h)), None
        if family == "separable_conv2d":
            h = layers.SeparableConv2D(8, 3, padding="same", activation="relu")(x)
            return layers.GlobalAveragePooling2D()(h), None
        down = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
        up = layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(down)
        pixels = layers.Concatenate()([up, x])
        return layers.GlobalAveragePooling2D()(up), pixels
    if family == "conv3d":
        h = layers.Conv3D(4, 3, padding="same", activation="relu")(main["volume"])
        return layers.GlobalAveragePooling3D()(h), None
    if family in ("simple_rnn", "gru", "lstm"):
        cell = {"simple_rnn": layers.SimpleRNN, "gru": layers.GRU, "lstm": layers.LSTM}[family]
        x = main["sequence"]
        if variant == "masking":
            x = layers.Masking(0.0)(x)
        tagging = spec.task == TAGGING
        rnn = cell(8, stateful=variant == "stateful", return_sequences=tagging)
        h = layers.Bidirectional(rnn)(x) if variant == "bidirectional" else rnn(x)
        return (layers.GlobalAveragePooling1D()(h), h) if tagging else (h, None)
    if family == "attention":
        x = layers.Dense(8)(main["sequence"])
        attended = layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
        steps = layers.LayerNormalization()(layers.Add()([x, attended]))
        return layers.GlobalAveragePooling1D()(steps), (steps if spec.task == TAGGING else None)
    if family == "embedding":
        h = layers.Embedding(gen.VOCAB, 8, mask_zero=variant == "mask_zero")(main["tokens"])
        return layers.GlobalAveragePooling1D()(h), (layers.Dense(8, activation="relu")(h) if spec.task == TAGGING
                                                     else None)
    if family == "time_distributed":
        x = main["frames"]
        if variant == "conv":
            h = layers.TimeDistributed(layers.Conv2D(4, 3, activation="relu"))(x)
            h = layers.TimeDistributed(layers.GlobalAveragePooling2D())(h)
        else:
            h = layers.TimeDistributed(layers.Flatten())(x)
            h = layers.TimeDistributed(layers.Dense(8, activation="relu"))(h)
        return layers.GlobalAveragePooling1D()(h), None
    if family == "preprocessing":
        city = layers.StringLookup(vocabulary=list(gen.CITIES[:-1]))(main["city"])
        parts = [layers.CategoryEncoding(num_tokens=len(gen.CITIES), output_mode="one_hot")(city)]
        norm = layers.Normalization()
        norm.adapt(np.random.default_rng(spec.seed).normal(3.0, 2.0, size=(64, 3)).astype(np.float32))
        parts.append(norm(main["amount"]))
        if "code" in main:
            code = layers.IntegerLookup(vocabulary=list(gen.CODES[:-1]))(main["code"])
            parts.append(layers.CategoryEncoding(num_tokens=len(gen.CODES), output_mode="one_hot")(code))
        return layers.Dense(12, activation="relu")(layers.Concatenate()(parts)), None
    if family in ("qat", "user_tflite"):
        h = layers.Conv2D(8, 3, padding="same", activation="relu")(main["image"])
        return layers.Dense(16, activation="relu")(layers.Flatten()(layers.MaxPooling2D()(h))), None
    raise ValueError(f"no body for family {family!r}")


def heads(spec: ModelSpec, k: Any, ops: Ops, pooled: Any, pixels: Any | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(every output by name, the trainable float outputs by name); the last layers are float32 in mixed
    precision, as Keras's guide has users do."""
    layers = k.layers
    name = HEAD_NAMES[spec.task]
    # float32 last layers, as Keras's mixed-precision guide says; left in the policy's float16 where users forget
    last = None if spec.precision == MIXED_HALF_OUT else "float32"
    if spec.task == "segmentation":
        main = layers.Conv2D(gen.CLASSES, 1, activation="softmax", dtype=last, name=name)(pixels)
    elif spec.task == TAGGING:
        main = layers.Dense(gen.CLASSES, activation="softmax", dtype=last, name=name)(pixels)
    elif spec.task == "classification":
        main = layers.Dense(gen.CLASSES, activation="softmax", dtype=last, name=name)(pooled)
    elif spec.task == "binary":
        main = layers.Dense(1, activation="sigmoid", dtype=last, name=name)(pooled)
    else:
        main = layers.Dense(2, dtype=last, name=name)(pooled)
    outputs, trainable = {name: main}, {name: main}
    if spec.aux_output == "score":
        outputs["score"] = trainable["score"] = layers.Dense(1, dtype=last, name="score")(pooled)
    elif spec.aux_output == "flag":
        hidden = layers.Dense(1, activation="sigmoid", dtype="float32", name="flag_score")(pooled)
        trainable["flag_score"] = hidden
        outputs["flag"] = ops.greater(hidden, 0.5)
    elif spec.aux_output == "class_id":
        hidden = layers.Dense(3, activation="softmax", dtype="float32", name="kind_probs")(pooled)
        trainable["kind_probs"] = hidden
        outputs["class_id"] = ops.argmax(hidden)
    elif spec.aux_output == "rank1":
        outputs["raw"] = trainable["raw"] = layers.Reshape((), name="raw")(layers.Dense(1, dtype=last)(pooled))
    return outputs, trainable


def declared_shape(spec: ModelSpec, name: str, values: np.ndarray) -> list[int | None]:
    """A tensor's shape as the model declares it: the batch free (or the stateful model's fixed batch), every other
    axis as DATA has it, except a fully convolutional model's image and mask, which take any height and width."""
    if spec.variant == "any_size" and name in ("image", "mask"):
        return [spec.fixed_batch, None, None, *map(int, values.shape[3:])]
    if spec.variant == "any_length" and name in ("sequence", "tokens", "tags"):
        return [spec.fixed_batch, None, *map(int, values.shape[2:])]
    return [spec.fixed_batch, *map(int, values.shape[1:])]


def keras_inputs(spec: ModelSpec, k: Any, x: dict[str, np.ndarray]) -> dict[str, Any]:
    """One `Input` per DATA input, named as DATA names it, of its dtype and (batch-free) shape."""
    return {name: k.Input(shape=declared_shape(spec, name, values)[1:], dtype="string" if values.dtype.kind == "S" else str(values.dtype),
                          name=name, batch_size=spec.fixed_batch)
            for name, values in x.items()}


def merge_aux(spec: ModelSpec, k: Any, ops: Ops, pooled: Any, inputs: dict[str, Any], aux: str | None) -> Any:
    """The second input joined to the pooled features (cast to float: bool, ids and bytes are numbers here)."""
    if aux is None:
        return pooled
    value = inputs[aux]
    value = value if spec.aux_input in ("float32", "scalar") else ops.cast(value, "float32")
    if spec.aux_input == "scalar":
        value = k.layers.Reshape((1,))(value)
    if spec.aux_input == "uint8":
        value = k.layers.Rescaling(1.0 / 255)(value)
    return k.layers.Concatenate()([pooled, k.layers.Dense(4, activation="relu")(value)])


def structured(form: str, names: list[str], tensors: dict[str, Any]) -> Any:
    if form == DICT:
        return {n: tensors[n] for n in names}
    if form == LIST:
        return [tensors[n] for n in names]
    (only,) = names
    return tensors[only]


# ------------------------------------------------------------------------------------------------ Keras models


def subclassed_model(spec: ModelSpec, k: Any, input_names: list[str], output_names: list[str]) -> Any:
    """A `keras.Model` subclass with its own `call`, the body and heads written by hand."""
    aux_name = input_names[1] if len(input_names) > 1 else None
    task = spec.task
    classes = {"classification": gen.CLASSES, "binary": 1, "regression": 2}[task]
    activation = {"classification": "softmax", "binary": "sigmoid", "regression": None}[task]

    class Net(k.Model):
        def __init__(self) -> None:
            super().__init__(name="net")
            self.hidden = k.layers.Dense(16, activation="relu")
            self.aux = k.layers.Dense(4, activation="relu")
            self.head = k.layers.Dense(classes, activation=activation, dtype="float32")
            self.score = k.layers.Dense(1, dtype="float32")

        def call(self, inputs: Any, training: bool = False) -> Any:
            if isinstance(inputs, dict):
                main, aux = inputs["features"], inputs.get(aux_name)
            elif isinstance(inputs, (list, tuple)):
                main, aux = inputs[0], inputs[1]
            else:
                main, aux = inputs, None
            h = self.hidden(main)
            if aux is not None:
                h = Ops(spec).concatenate([h, self.aux(Ops(spec).cast(aux, "float32"))])
            answers = {output_names[0]: self.head(h)}
            if len(output_names) > 1:
                answers["score"] = self.score(h)
            return structured(spec.outputs, output_names, answers)

    return Net()


def build_keras(spec: ModelSpec, x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> tuple[Any, Any, list[str], list[str]]:
    """(the model to save, the model to train, input names, output names)."""
    k = keras_of(spec)
    ops = Ops(spec)
    input_names = list(x)
    aux = input_names[-1] if spec.aux_input != "none" else None
    inputs = keras_inputs(spec, k, x)
    if spec.family == "subclassed":
        output_names = [HEAD_NAMES[spec.task]] + (["score"] if spec.aux_output != "none" else [])
        model = subclassed_model(spec, k, input_names, output_names)
        return model, model, input_names, output_names
    main = {n: t for n, t in inputs.items() if n != aux}
    pooled, pixels = body(spec, k, ops, main)
    pooled = merge_aux(spec, k, ops, pooled, inputs, aux)
    outputs, trainable = heads(spec, k, ops, pooled, pixels)
    output_names = list(outputs)
    model_inputs = structured(spec.inputs if spec.family != "preprocessing" else DICT, input_names, inputs)
    model = k.Model(model_inputs, structured(spec.outputs, output_names, outputs), name=spec.family)
    if spec.family == "qat":
        import tensorflow_model_optimization as tfmot

        model = trainer = tfmot.quantization.keras.quantize_model(model)
        # quantize_model wraps every layer: the output is now named `quant_<head>` (what the user's model says)
        return model, trainer, input_names, list(model.output_names)
    # trained through a twin with the float heads as a dict (one loss per name in either Keras); the layers are
    # shared, so the saved model carries the trained weights
    trainer = k.Model(model_inputs, {n: trainable[n] for n in trainable})
    return model, trainer, input_names, output_names


def fit(spec: ModelSpec, trainer: Any, k: Any, x: dict[str, np.ndarray], y: dict[str, np.ndarray],
        input_names: list[str]) -> None:
    """A brief fit so the answers mean something (the loss each head takes)."""
    tf = tf_module()
    losses = {"probs": "sparse_categorical_crossentropy", "mask": "sparse_categorical_crossentropy",
              "tags": "sparse_categorical_crossentropy", "kind_probs": "sparse_categorical_crossentropy",
              "raw": "mse",
              "yes": "binary_crossentropy", "value": "mse", "score": "mse", "flag_score": "binary_crossentropy"}
    rows = 32 if spec.variant == "stateful" else len(next(iter(x.values())))
    feed = {n: (tf.constant(v[:rows]) if v.dtype.kind == "S" else v[:rows]) for n, v in x.items()}
    xs = structured(spec.inputs if spec.family != "preprocessing" else DICT, input_names, feed)
    if spec.family == "qat":
        (name,) = [n for n in y]
        target, loss = y[name][:rows], losses[name]  # one head: its array, whatever the wrapper named it
    elif spec.family == "subclassed":
        names = [n for n in y]
        target = structured(spec.outputs, names, {n: y[n][:rows] for n in names})
        loss = structured(spec.outputs, names, {n: losses[n] for n in names})
    else:
        target, loss = {n: y[n][:rows] for n in y}, {n: losses[n] for n in y}
    trainer.compile(optimizer=k.optimizers.Adam(0.01), loss=loss)
    trainer.fit(xs, target, epochs=EPOCHS, batch_size=spec.fixed_batch or 32, verbose=0, shuffle=False)


# ------------------------------------------------------------------------------------------------ saving


def save_keras(spec: ModelSpec, model: Any, folder: Path, sample: dict[str, np.ndarray], input_names: list[str]) -> Path:
    """The model where the user keeps it; a .tflite converted from its SavedModel (how Keras 3 models convert)."""
    tf = tf_module()
    base = folder / spec.id
    if spec.fmt == KERAS_FILE:
        model.save(f"{base}.keras")
        return Path(f"{base}.keras")
    if spec.fmt == H5:
        model.save(f"{base}.h5")
        return Path(f"{base}.h5")
    saved = Path(f"{base}.savedmodel") if spec.fmt == SAVED_MODEL else folder / f"{spec.id}.tflite-source"
    if spec.signatures > 1:
        export_with_signatures(spec, model, saved, sample, input_names)
    elif spec.keras == KERAS3:
        model.export(str(saved), verbose=False)
    else:
        model.save(str(saved), save_format="tf")
    if spec.fmt == SAVED_MODEL:
        return saved
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
    if spec.fmt in (TFLITE_UINT8, TFLITE_INT8):
        calib = {n: v.astype(np.float32) for n, v in sample.items()}
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ({n: v[i:i + 1].astype(np.float32) for n, v in calib.items()}
                                                    for i in range(32))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = \
            tf.uint8 if spec.fmt == TFLITE_UINT8 else tf.int8
    path = Path(f"{base}.tflite")
    path.write_bytes(converter.convert())
    return path


def export_with_signatures(spec: ModelSpec, model: Any, saved: Path, sample: dict[str, np.ndarray],
                           input_names: list[str]) -> None:
    """A SavedModel with the user's own signatures: `serving_default` (every output) and `scores` (the main head
    alone), each taking the inputs by name: Keras 3 through `ExportArchive`, tf_keras through
    `tf.saved_model.save`, as their guides show."""
    tf = tf_module()
    form = spec.inputs if spec.family != "preprocessing" else DICT
    specs = [{n: tf.TensorSpec(declared_shape(spec, n, v), tf.string if v.dtype.kind == "S" else v.dtype, name=n)
              for n, v in sample.items()}]
    head = HEAD_NAMES[spec.task]

    def named(raw: Any) -> dict[str, Any]:
        if isinstance(raw, dict):
            return dict(raw)
        names = list(getattr(model, "output_names", None) or [head])
        return dict(zip(names, raw)) if isinstance(raw, (list, tuple)) else {names[0]: raw}

    def serve(feed: dict[str, Any]) -> dict[str, Any]:
        return named(model(structured(form, input_names, feed), training=False))

    def scores(feed: dict[str, Any]) -> dict[str, Any]:
        return {head: serve(feed)[head]}

    if spec.keras == KERAS3:
        from keras.export import ExportArchive

        archive = ExportArchive()
        archive.track(model)
        archive.add_endpoint("serving_default", tf.function(serve, input_signature=specs))
        archive.add_endpoint("scores", tf.function(scores, input_signature=specs))
        archive.write_out(str(saved), verbose=False)
    else:
        functions = {"serving_default": tf.function(serve, input_signature=specs).get_concrete_function(),
                     "scores": tf.function(scores, input_signature=specs).get_concrete_function()}
        tf.saved_model.save(model, str(saved), signatures=functions)


def quantized_input(path: Path, x: np.ndarray) -> np.ndarray:
    """Float images quantized the way the file's own input says (scale, zero point, dtype): what its user feeds it."""
    from ai_edge_litert.interpreter import Interpreter

    detail = Interpreter(model_path=str(path)).get_input_details()[0]
    scale, zero = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    return np.clip(np.round(x / scale + zero), info.min, info.max).astype(detail["dtype"])


# ------------------------------------------------------------------------------------------------ tf.Module


def build_module(spec: ModelSpec, folder: Path, x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> Path:
    """A `tf.Module` with `tf.function` signatures, trained with a GradientTape loop, saved as a SavedModel."""
    tf = tf_module()
    rng = np.random.default_rng(spec.seed)
    name = next(iter(x))
    text = spec.variant == "text"

    floats = np.dtype(spec.dtype)  # float64: a scientist's network, weights and answers in double

    class Classifier(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="classifier")
            width = 8 if text else gen.TABULAR
            self.w = tf.Variable(rng.normal(0, 0.1, size=(width, gen.CLASSES)).astype(floats), name="w")
            self.b = tf.Variable(np.zeros(gen.CLASSES, floats), name="b")

        def featurize(self, value: Any) -> Any:
            if not text:
                return value
            buckets = tf.strings.to_hash_bucket_fast(tf.strings.split(value), 8)  # ragged: words per row
            return tf.cast(tf.reduce_sum(tf.ragged.map_flat_values(tf.one_hot, buckets, 8), axis=1), floats)

        def logits(self, value: Any) -> Any:
            return tf.matmul(self.featurize(value), self.w) + self.b

        @tf.function(input_signature=[tf.TensorSpec([None] if text else [None, gen.TABULAR],
                                                    tf.string if text else tf.as_dtype(floats), name=name)])
        def serve(self, value: Any) -> dict[str, Any]:
            logits = self.logits(value)
            return {"probs": tf.nn.softmax(logits), "logits": logits}

    module = Classifier()
    if spec.variant == "signatures":  # only here: saving traces every tf.function the module holds
        @tf.function(input_signature=[tf.TensorSpec([None, gen.TABULAR], tf.as_dtype(floats), name="features")])
        def flags(features: Any) -> dict[str, Any]:
            positive = features > 0
            return {"positive": positive, "count": tf.reduce_sum(tf.cast(positive, tf.int64), axis=1, keepdims=True)}

        @tf.function(input_signature=[tf.TensorSpec([None, gen.TABULAR], tf.as_dtype(floats), name="a"),
                                      tf.TensorSpec([None, gen.TABULAR], tf.as_dtype(floats), name="b")])
        def pair(a: Any, b: Any) -> dict[str, Any]:
            return {"similarity": tf.reduce_sum(tf.nn.softmax(module.logits(a)) * tf.nn.softmax(module.logits(b)),
                                                axis=-1, keepdims=True)}

        module.flags, module.pair = flags, pair
    optimizer = tf.optimizers.Adam(0.05)
    features, labels = tf.constant(x[name]), tf.constant(y["probs"])
    for _ in range(60):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                                 logits=module.logits(features)))
        optimizer.apply_gradients(zip(tape.gradient(loss, [module.w, module.b]), [module.w, module.b]))
    signatures = {"serving_default": module.serve}
    if spec.variant == "signatures":
        signatures.update(flags=module.flags, pair=module.pair)
    path = folder / f"{spec.id}.savedmodel"
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


# ------------------------------------------------------------------------------------------------ the original


def dtype_name(dtype: Any) -> str:
    """A dtype as the contract spells it: numpy's name, and `string` for text (numpy's `S<n>`, tf.string)."""
    if isinstance(dtype, np.dtype) and dtype.kind in "SUO":
        return "string"
    name = getattr(dtype, "name", str(dtype))
    return "string" if name in ("string", "object") or name.startswith("bytes") else name


def contract_of_saved_model(path: Path) -> dict[str, Any]:
    tf = tf_module()
    loaded = tf.saved_model.load(str(path))
    out = {}
    for key, fn in loaded.signatures.items():
        ins = fn.structured_input_signature[1]
        outs = fn.structured_outputs
        out[key] = {"inputs": [{"name": n, "dtype": dtype_name(s.dtype), "shape": list(s.shape.as_list())}
                               for n, s in sorted(ins.items())],
                    "outputs": [{"name": n, "dtype": dtype_name(s.dtype), "shape": list(s.shape.as_list())}
                                for n, s in sorted(outs.items())]}
    return out


def contract_of_tflite(path: Path) -> dict[str, Any]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    out = {}
    for key in interpreter.get_signature_list():
        runner = interpreter.get_signature_runner(key)

        def specs(details: dict[str, Any]) -> list[dict[str, Any]]:
            return [{"name": n, "dtype": dtype_name(np.dtype(d["dtype"])),
                     "shape": [None if s < 0 else int(s) for s in d["shape_signature"]]} for n, d in sorted(details.items())]

        out[key] = {"inputs": specs(runner.get_input_details()), "outputs": specs(runner.get_output_details())}
    return out


def reset_states(model: Any) -> None:
    """A stateful RNN's states back to zeros (Keras 3: per layer `reset_state`; tf_keras: `reset_states`)."""
    for layer in getattr(model, "layers", []):
        for inner in (layer, getattr(layer, "forward_layer", None), getattr(layer, "backward_layer", None)):
            reset = getattr(inner, "reset_state", None) or getattr(inner, "reset_states", None)
            if reset is not None and getattr(inner, "stateful", False):
                reset()


def answers_of(spec: ModelSpec, path: Path, signature: str, feed: dict[str, np.ndarray],
               input_names: list[str], output_names: list[str]) -> dict[str, np.ndarray]:
    """The ORIGINAL's answers: the saved file reloaded as its format loads, called on `feed`."""
    tf = tf_module()
    if spec.fmt in (SAVED_MODEL,):
        fn = tf.saved_model.load(str(path)).signatures[signature]
        return {k: v.numpy() for k, v in fn(**{n: tf.constant(v) for n, v in feed.items()}).items()}
    if spec.fmt in TFLITE_FORMATS:
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(path))
        runner = interpreter.get_signature_runner(signature)
        rows = [runner(**{n: v[i:i + 1] for n, v in feed.items()}) for i in range(len(next(iter(feed.values()))))]
        return {n: np.concatenate([r[n] for r in rows]) for n in rows[0]}
    k = keras_of(spec)
    if spec.family == "qat":
        import tensorflow_model_optimization as tfmot

        with tfmot.quantization.keras.quantize_scope():
            model = k.models.load_model(str(path))
    else:
        model = k.models.load_model(str(path))
    tensors = {n: tf.constant(v) for n, v in feed.items()}
    form = spec.inputs if spec.family != "preprocessing" else DICT
    if spec.fixed_batch:  # a stateful model: one row per call, its states reset first (each row its own sequence)
        rows = []
        for i in range(len(next(iter(feed.values())))):
            reset_states(model)
            one = {n: t[i:i + 1] for n, t in tensors.items()}
            rows.append(named_answers(model(structured(form, input_names, one), training=False), output_names))
        return {n: np.concatenate([r[n] for r in rows]) for n in rows[0]}
    return named_answers(model(structured(form, input_names, tensors), training=False), output_names)


def named_answers(raw: Any, output_names: list[str]) -> dict[str, np.ndarray]:
    """A Keras model's answer (a dict, a list in output order, or one tensor) by output name."""
    if isinstance(raw, dict):
        return {n: np.asarray(v) for n, v in raw.items()}
    if isinstance(raw, (list, tuple)):
        return {n: np.asarray(v) for n, v in zip(output_names, raw)}
    (only,) = output_names
    return {only: np.asarray(raw)}


def keras_contract(x: dict[str, np.ndarray], answers: dict[str, np.ndarray], spec: ModelSpec) -> dict[str, Any]:
    """A Keras file's contract: inputs as built (every generated shape is static but the batch), outputs as the
    reloaded model answers them (name, dtype, shape)."""
    def specs(arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        return [{"name": n, "dtype": dtype_name(v.dtype), "shape": declared_shape(spec, n, v)}
                for n, v in sorted(arrays.items())]

    return {"serving_default": {"inputs": specs(x), "outputs": specs(answers)}}


# ------------------------------------------------------------------------------------------------ one model


def build_one(spec: ModelSpec, folder: Path) -> dict[str, Any]:
    """Build, save, and record DATA, the original's answers and its contract; returns the manifest entry."""
    rng = np.random.default_rng(spec.seed * 1000 + spec.index)
    modality = FAMILY[spec.family].modality
    if spec.family == "tf_module" and spec.variant == "text":
        modality = "text"
    variant = spec.variant
    x = gen.main_input(modality, variant, rng)
    if spec.dtype != "float32":  # the main input in the model's float dtype
        x = {n: v.astype(spec.dtype) if v.dtype.kind == "f" else v for n, v in x.items()}
    main_name = next(iter(x)) if spec.family != "preprocessing" else "city"
    y_train = {HEAD_NAMES[spec.task]: gen.labels_for(spec.task, x[main_name], spec.seed)}
    if spec.aux_input != "none":
        aux_name, aux_values = gen.aux_input(spec.aux_input, rng)
        x[aux_name] = aux_values
    if spec.aux_output == "score":
        y_train["score"] = gen.labels_for("regression", x[main_name], spec.seed + 1)[:, :1]
    if spec.aux_output == "flag":
        y_train["flag_score"] = gen.labels_for("binary", x[main_name], spec.seed + 2)
    if spec.aux_output == "class_id":
        y_train["kind_probs"] = gen.labels_for("classification", x[main_name], spec.seed + 3) % 3
    if spec.aux_output == "rank1":
        y_train["raw"] = gen.labels_for("regression", x[main_name], spec.seed + 4)[:, 0]
    folder.mkdir(parents=True, exist_ok=True)
    model = None
    if spec.keras == NO_KERAS:
        path = build_module(spec, folder, x, y_train)
        input_names, output_names = list(x), ["probs", "logits"]
    else:
        k = keras_of(spec)
        policy = k.mixed_precision.global_policy()
        if spec.precision in (MIXED, MIXED_HALF_OUT):
            k.mixed_precision.set_global_policy("mixed_float16")
        try:
            model, trainer, input_names, output_names = build_keras(spec, x, y_train)
            fit(spec, trainer, k, x, y_train, input_names)
            if spec.family == "subclassed" and spec.keras != KERAS3:
                model({n: v[:1] for n, v in x.items()} if spec.inputs == DICT else
                      [v[:1] for v in x.values()] if spec.inputs == LIST else next(iter(x.values()))[:1])
            if spec.variant == "stateful":
                reset_states(model)
            path = save_keras(spec, model, folder, x, input_names)
        finally:
            k.mixed_precision.set_global_policy(policy)
    if spec.fmt in (TFLITE_UINT8, TFLITE_INT8):
        x = {n: quantized_input(path, v) for n, v in x.items()}
    # DATA: the labels as the user has them (ids, one-hot, per-pixel, targets, or none)
    head = HEAD_NAMES[spec.task]
    labelled = {}
    given = gen.as_given(spec.task, spec.labels, y_train[head])
    if given is not None:
        labelled[head] = given
    if spec.aux_output == "score" and spec.labels != "none":
        labelled["score"] = y_train["score"]
    if spec.family == "qat":
        labelled = {output_names[0]: v for v in labelled.values()}
    if spec.fmt in (*TFLITE_FORMATS, SAVED_MODEL):
        contract = contract_of_tflite(path) if spec.fmt != SAVED_MODEL else contract_of_saved_model(path)
        x, labelled = align_names(contract["serving_default"], x, labelled, output_names)
    single = spec.data_form == "single"
    arrays = gen.npz_arrays(x, labelled, spec.seed, single)
    data_path = folder / f"{spec.id}.npz"
    np.savez_compressed(data_path, **arrays)
    _, val, _ = gen.split_rows(len(next(iter(x.values()))), spec.seed)
    probe = {n: v[val[:PROBE_ROWS]] for n, v in x.items()}
    reference: dict[str, np.ndarray] = {}
    if spec.fmt in (*TFLITE_FORMATS, SAVED_MODEL):
        for signature, sig in contract.items():
            feed = {s["name"]: _probe_for(s, probe) for s in sig["inputs"]}
            answers = answers_of(spec, path, signature, feed, input_names, output_names)
            reference.update({f"x/{signature}/{n}": v for n, v in feed.items()})
            reference.update({f"y/{signature}/{n}": v for n, v in answers.items()})
    else:
        answers = answers_of(spec, path, "serving_default", probe, input_names, output_names)
        contract = keras_contract(x, answers, spec)
        reference.update({f"x/serving_default/{n}": v for n, v in probe.items()})
        reference.update({f"y/serving_default/{n}": v for n, v in answers.items()})
    np.savez(folder / f"{spec.id}.reference.npz", **reference)
    entry = {"id": spec.id, "spec": spec.as_dict(), "model": str(path), "data": str(data_path),
             "contract": contract, "labels": sorted(labelled)}
    (folder / f"{spec.id}.contract.json").write_text(json.dumps(entry, indent=1))
    return entry


def align_names(signature: dict[str, Any], x: dict[str, np.ndarray], labelled: dict[str, np.ndarray],
                output_names: list[str]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """DATA named as the saved signature names its tensors (a Keras 3 export names list outputs output_0, ...;
    a subclassed model's inputs are named by its call's arguments): names that match stay, the rest are paired
    in order."""
    def pair(names: list[str], values: dict[str, np.ndarray], order: list[str]) -> dict[str, np.ndarray]:
        spare = [n for n in names if n not in values]
        out = {}
        for key in order:
            if key not in values:
                continue
            if key in names:
                out[key] = values[key]
            elif spare:
                out[spare.pop(0)] = values[key]
        return out

    dtypes = {s["name"]: s["dtype"] for s in signature["inputs"]}
    in_names = [s["name"] for s in signature["inputs"]]
    out_names = [s["name"] for s in signature["outputs"]]
    if not set(out_names) & set(output_names):  # output_0, output_1 ... in the model's order
        out_names = sorted(out_names, key=lambda n: (len(n), n))
    named = pair(in_names, x, list(x))
    # the saved signature's dtypes are the contract: Keras 3's fit casts a bool input to float before a subclassed
    # model first sees it, so its export takes float32 there, and the user's DATA is what the signature takes
    named = {n: v if dtypes[n] == "string" or str(v.dtype) == dtypes[n] else v.astype(dtypes[n])
             for n, v in named.items()}
    return named, pair(out_names, labelled, output_names)


def _probe_for(spec: dict[str, Any], probe: dict[str, np.ndarray]) -> np.ndarray:
    """Probe rows for a signature input: DATA's own where the name matches, else rows of the first input
    (a `tf.Module`'s other signatures take the same features under other names)."""
    values = probe.get(spec["name"], next(iter(probe.values())))
    if spec["name"] == "b" and "a" not in probe:
        values = values[::-1].copy()  # a pair of different rows
    return values


def main(argv: list[str]) -> int:
    out, specs_path = Path(argv[0]), Path(argv[1])
    failed = 0
    for raw in json.loads(specs_path.read_text()):
        spec = ModelSpec(**raw)
        try:
            build_one(spec, out)
            print(f"built {spec.id}", flush=True)
        except Exception as error:  # one model that cannot be built must not hide the others
            failed += 1
            (out / f"{spec.id}.build-error.txt").write_text(
                f"{type(error).__name__}: {error}\n\n{traceback.format_exc()}")
            print(f"FAILED {spec.id}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
