"""Eight kinds of model that no other test here was written around, each brought as a new user brings it:
`tfsmith optimize MODEL --data DATA --out OUT`, then `tfsmith serve OUT` (a real server process), asked over REST
(rows and columns), gRPC and v2 and answered as the original answers, with the metadata the original declares:

- reviews: a Keras 3 multi-task text model on raw strings of any length (`TextVectorization` inside, a masked
  `Embedding`), a softmax topic and a sigmoid sentiment as a dict, `.keras`;
- gated: a Keras 3 custom layer written with `keras.ops` (RMS norm, SwiGLU gate), registered serializable in the
  user's own module (`--import`), `.keras`;
- tones: a `tf.Module` computing a log-mel spectrogram with `tf.signal.stft` inside its `tf.function`, a softmax
  and a loudness per row, SavedModel;
- shop: a tf_keras model on int64 item ids and a float64 price, a dict of a float32 and a float64 head, SavedModel;
- forecast: a Keras 3 LSTM built for batches of exactly 4 rows, exported with Keras's own `model.export` (whose
  signature declares any batch: what TF Serving would serve);
- masked: a Keras 3 model on float values and a bool mask, a masked mean written with `keras.ops` on symbolic
  tensors, `.keras`;
- effblock: an EfficientNet-like block (depthwise conv, squeeze-excite, residual) on NHWC float16 images, Keras 3
  saved as `.h5`;
- pixels: a tf_keras Sequential on uint8 pixels with `Rescaling` and a `Lambda` inside, `.h5`.

Every model is tiny and fitted in seconds on synthetic data (confident heads), built in two subprocesses (Keras 3
and tf_keras apart); optimize runs in this process with only the float candidates (no quantization, no OpenVINO,
no XLA): what is checked is the contract and the answers over every protocol, never speed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.inprocess import run_cli
from tests.modelgen.runner import Built, Server, ask_everything, metadata_problems

pytestmark = [pytest.mark.tf, pytest.mark.slow]
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "tf_keras", "keras", "ai_edge_litert", "grpc",
                                                     "tensorflow_serving")):
    pytest.skip("needs the optimize and serve extras and tensorflow-serving-api", allow_module_level=True)

#: the float candidates only: the SavedModel and the float .tflite files, on TensorFlow and LiteRT
QUICK = 'name = "unseen"\n[quantization]\nmodes = []\n[export]\nopenvino = false\nxla = false\n'

#: what each built model writes beside itself: DATA (`<name>.npz`), the original's contract as TF Serving would
#: declare it (`<name>.contract.json`) and its answers on probe rows (`<name>.reference.npz`)
RECORD = r'''
import json
import numpy as np


def spec(name, dtype, shape):
    return {"name": name, "dtype": dtype, "shape": list(shape)}


def record(out, name, model_path, data, inputs, outputs, x, y):
    np.savez(f"{out}/{name}.npz", **data)
    contract = {"serving_default": {"inputs": sorted(inputs, key=lambda s: s["name"]),
                                    "outputs": sorted(outputs, key=lambda s: s["name"])}}
    json.dump({"model": model_path, "data": f"{out}/{name}.npz", "contract": contract},
              open(f"{out}/{name}.contract.json", "w"))
    np.savez(f"{out}/{name}.reference.npz", **{f"x/serving_default/{k}": np.asarray(v) for k, v in x.items()},
             **{f"y/serving_default/{k}": np.asarray(v) for k, v in y.items()})
'''

#: the user's own module registering the custom layer (passed to optimize with --import)
USER_LAYERS = r'''
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="user_layers")
class GatedRMSNorm(keras.layers.Layer):
    """RMS normalisation with a learned scale, then a SwiGLU gate."""

    def __init__(self, units, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.units, self.epsilon = units, epsilon

    def build(self, input_shape):
        d = input_shape[-1]
        self.scale = self.add_weight(shape=(d,), initializer="ones", name="scale")
        self.gate = self.add_weight(shape=(d, 2 * self.units), initializer="glorot_uniform", name="gate")

    def call(self, x):
        x = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon) * self.scale
        a, b = ops.split(ops.matmul(x, self.gate), 2, axis=-1)
        return ops.silu(a) * b

    def get_config(self):
        return {**super().get_config(), "units": self.units, "epsilon": self.epsilon}
'''

KERAS3_MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out = sys.argv[1]
sys.path.insert(0, out)
import numpy as np, tensorflow as tf, keras
from record import record as _record, spec
record = lambda *a: _record(out, *a)
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)

# 1. multi-task text model: raw strings of any length, TextVectorization inside, a topic softmax and a sentiment
sports, films = ["game", "team", "score", "match", "coach"], ["movie", "plot", "actor", "scene", "film"]
good, bad = ["great", "fun", "good", "lovely"], ["awful", "boring", "bad", "slow"]
def review():
    topic = int(rng.integers(0, 3)); mood = int(rng.integers(0, 2))
    pool = [sports, films, sports + films][topic]
    words = list(rng.choice(pool, int(rng.integers(2, 7)))) + list(rng.choice([bad, good][mood], int(rng.integers(1, 3))))
    rng.shuffle(words)
    return " ".join(words), topic, mood
rows = [review() for _ in range(600)]
texts = np.array([r[0] for r in rows]); topics = np.array([r[1] for r in rows], "int64")
moods = np.array([r[2] for r in rows], "float32")[:, None]
vectorize = keras.layers.TextVectorization(max_tokens=40, name="vectorize")
vectorize.adapt(texts)
review_in = keras.Input(shape=(), dtype="string", name="review")
tokens = vectorize(review_in)
pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(40, 16, mask_zero=True)(tokens))
hidden = keras.layers.Dense(16, activation="relu")(pooled)
text_model = keras.Model(review_in, {"topic": keras.layers.Dense(3, activation="softmax")(hidden),
                                     "sentiment": keras.layers.Dense(1, activation="sigmoid")(hidden)})
text_model.compile("adam", {"topic": "sparse_categorical_crossentropy", "sentiment": "binary_crossentropy"})
text_model.fit(tf.constant(texts[:500]), {"topic": topics[:500], "sentiment": moods[:500]}, epochs=30, batch_size=32, verbose=0)
text_model.save(f"{out}/reviews.keras")
val = slice(500, 600)
got = text_model(tf.constant(texts[val]))
record("reviews", f"{out}/reviews.keras",
       {"x_val/review": np.char.encode(texts[val].astype(str), "utf-8"), "y_val/topic": topics[val], "y_val/sentiment": moods[val]},
       [spec("review", "string", [None])], [spec("topic", "float32", [None, 3]), spec("sentiment", "float32", [None, 1])],
       {"review": np.char.encode(texts[val][:24].astype(str), "utf-8")},
       {k: np.asarray(v)[:24] for k, v in got.items()})

# 2. a custom layer built on keras.ops, registered serializable, in the user's own module
import user_layers
x = rng.normal(size=(400, 12)).astype("float32"); y = (x[:, :4].argmax(axis=1)).astype("int64")
features = keras.Input((12,), name="features")
h = user_layers.GatedRMSNorm(16, name="gated")(keras.layers.Dense(16)(features))
custom = keras.Model(features, keras.layers.Dense(4, activation="softmax", name="probs")(h))
custom.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy"); custom.fit(x[:300], y[:300], epochs=30, verbose=0)
custom.save(f"{out}/gated.keras")
record("gated", f"{out}/gated.keras", {"x_val": x[300:], "y_val": y[300:]},
       [spec("features", "float32", [None, 12])], [spec("probs", "float32", [None, 4])],
       {"features": x[300:324]}, {"probs": custom(x[300:324])})

# 3. a tf.Module: a log-mel spectrogram by tf.signal.stft inside a tf.function, then a linear head
class Tones(tf.Module):
    def __init__(self, w, b):
        self.w, self.b = tf.Variable(w), tf.Variable(b)
        self.mel = tf.signal.linear_to_mel_weight_matrix(16, 129, 8000, 60.0, 3800.0)

    def features(self, waveform):
        spectrum = tf.abs(tf.signal.stft(waveform, frame_length=256, frame_step=128, fft_length=256))
        return tf.reduce_mean(tf.math.log(tf.tensordot(spectrum, self.mel, 1) + 1e-6), axis=1)

    @tf.function(input_signature=[tf.TensorSpec([None, 2048], tf.float32, name="waveform")])
    def serve(self, waveform):
        logits = self.features(waveform) @ self.w + self.b
        return {"probs": tf.nn.softmax(logits), "loudness": tf.reduce_mean(tf.abs(waveform), axis=1, keepdims=True)}
t = np.arange(2048) / 8000.0
freq = rng.choice([300.0, 900.0, 2500.0], 200); cls = np.searchsorted([300.0, 900.0, 2500.0], freq)
waves = (np.sin(2 * np.pi * freq[:, None] * t) * rng.uniform(0.3, 1.0, (200, 1)) + rng.normal(0, 0.05, (200, 2048))).astype("float32")
probe = Tones(np.zeros((16, 3), "float32"), np.zeros(3, "float32"))
feats = probe.features(tf.constant(waves)).numpy()
centroids = np.stack([feats[cls == c].mean(0) for c in range(3)])  # nearest centroid as a linear head
w = (2 * centroids.T).astype("float32"); b = (-(centroids ** 2).sum(1)).astype("float32")
tones = Tones(w, b)
tf.saved_model.save(tones, f"{out}/tones", signatures={"serving_default": tones.serve})
got = tones.serve(tf.constant(waves[150:174]))
record("tones", f"{out}/tones", {"x_val/waveform": waves[100:], "y_val/probs": cls[100:].astype("int64")},
       [spec("waveform", "float32", [None, 2048])], [spec("probs", "float32", [None, 3]), spec("loudness", "float32", [None, 1])],
       {"waveform": waves[150:174]}, {k: v.numpy() for k, v in got.items()})

# 5. a time-series LSTM for batches of exactly 4 rows, exported with Keras's own model.export
series = rng.normal(size=(200, 12, 3)).astype("float32").cumsum(axis=1) / 4
target = (series[:, -3:, 0].mean(axis=1, keepdims=True) + 0.5 * series[:, -1:, 1]).astype("float32")
s_in = keras.Input(batch_shape=(4, 12, 3), name="series")
lstm = keras.Model(s_in, keras.layers.Dense(1, name="forecast")(keras.layers.LSTM(16)(s_in)))
lstm.compile(keras.optimizers.Adam(0.01), "mse"); lstm.fit(series[:160], target[:160], batch_size=4, epochs=8, verbose=0)
lstm.export(f"{out}/forecast", verbose=False)  # its signature declares any batch: TF Serving serves that
got = np.concatenate([np.asarray(lstm(series[160 + k:164 + k])) for k in range(0, 24, 4)])
record("forecast", f"{out}/forecast", {"x_val": series[160:], "y_val": target[160:]},
       [spec("series", "float32", [None, 12, 3])], [spec("output_0", "float32", [None, 1])],
       {"series": series[160:184]}, {"output_0": got})

# 6. a bool mask beside the values: a masked mean written with keras.ops on symbolic tensors
values = rng.normal(size=(400, 10, 4)).astype("float32"); mask = rng.random((400, 10)) < 0.6
mask[:, 0] = True
label = ((values[..., 0] * mask).sum(1) / mask.sum(1) > 0).astype("int64")
v_in = keras.Input((10, 4), name="values"); m_in = keras.Input((10,), dtype="bool", name="mask")
weights = keras.ops.expand_dims(keras.ops.cast(m_in, "float32"), -1)
mean = keras.ops.sum(v_in * weights, axis=1) / keras.ops.maximum(keras.ops.sum(weights, axis=1), 1.0)
masked = keras.Model({"values": v_in, "mask": m_in},
                     keras.layers.Dense(2, activation="softmax", name="probs")(keras.layers.Dense(8, activation="relu")(mean)))
masked.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
masked.fit({"values": values[:300], "mask": mask[:300]}, label[:300], epochs=30, verbose=0)
masked.save(f"{out}/masked.keras")
record("masked", f"{out}/masked.keras",
       {"x_val/values": values[300:], "x_val/mask": mask[300:], "y_val/probs": label[300:]},
       [spec("values", "float32", [None, 10, 4]), spec("mask", "bool", [None, 10])], [spec("probs", "float32", [None, 2])],
       {"values": values[300:324], "mask": mask[300:324]},
       {"probs": masked({"values": values[300:324], "mask": mask[300:324]})})

# 7. an EfficientNet-like block (depthwise conv, squeeze-excite, residual) on NHWC float16 images, saved as .h5
images = rng.random((300, 16, 16, 3)).astype("float16"); kind = (images[..., 0].astype("float32").mean((1, 2)) > 0.5).astype("int64")
images[kind == 1, :, :, 0] += np.float16(0.3)
i_in = keras.Input((16, 16, 3), dtype="float16", name="image")
stem = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="swish")(i_in)
d = keras.layers.Activation("swish")(keras.layers.BatchNormalization()(keras.layers.DepthwiseConv2D(3, padding="same")(stem)))
se = keras.layers.Dense(8, activation="sigmoid")(keras.layers.Dense(2, activation="swish")(keras.layers.GlobalAveragePooling2D()(d)))
d = keras.layers.Multiply()([d, keras.layers.Reshape((1, 1, 8))(se)])
d = keras.layers.Add()([stem, keras.layers.Conv2D(8, 1)(d)])
eff = keras.Model(i_in, keras.layers.Dense(2, activation="softmax", name="probs")(keras.layers.GlobalAveragePooling2D()(d)))
eff.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy"); eff.fit(images[:200], kind[:200], epochs=15, verbose=0)
eff.save(f"{out}/effblock.h5")
record("effblock", f"{out}/effblock.h5", {"x_val": images[200:], "y_val": kind[200:]},
       [spec("image", "float16", [None, 16, 16, 3])], [spec("probs", "float32", [None, 2])],
       {"image": images[200:224]}, {"probs": eff(images[200:224])})
'''

TF_KERAS_MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"; os.environ["TF_USE_LEGACY_KERAS"] = "1"
out = sys.argv[1]
sys.path.insert(0, out)
import numpy as np, tensorflow as tf, tf_keras as keras
from record import record as _record, spec
record = lambda *a: _record(out, *a)
keras.utils.set_random_seed(0)
rng = np.random.default_rng(1)

# 4. int64 item ids and a float64 price: a dict of two heads, one float64, saved as a tf_keras SavedModel
ids = rng.integers(0, 50, (400, 5)).astype("int64"); price = rng.uniform(1, 100, (400, 1))
buy = ((ids % 2).sum(1, keepdims=True) + (price < 50) > 3).astype("float32")
spend = (price * buy).astype("float64")
i_in = keras.Input((5,), dtype="int64", name="item_ids"); p_in = keras.Input((1,), dtype="float64", name="price")
emb = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(i_in))
h = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([emb, keras.layers.Rescaling(0.01)(p_in)]))
shop = keras.Model({"item_ids": i_in, "price": p_in},
                   {"buy": keras.layers.Dense(1, activation="sigmoid", name="buy")(h),
                    "spend": keras.layers.Dense(1, dtype="float64", name="spend")(h)})
shop.compile(keras.optimizers.Adam(0.01), {"buy": "binary_crossentropy", "spend": "mse"})
shop.fit({"item_ids": ids[:300], "price": price[:300]}, {"buy": buy[:300], "spend": spend[:300]}, epochs=20, verbose=0)
shop.save(f"{out}/shop")
got = shop({"item_ids": ids[300:324], "price": price[300:324]})
record("shop", f"{out}/shop",
       {"x_val/item_ids": ids[300:], "x_val/price": price[300:], "y_val/buy": buy[300:], "y_val/spend": spend[300:]},
       [spec("item_ids", "int64", [None, 5]), spec("price", "float64", [None, 1])],
       [spec("buy", "float32", [None, 1]), spec("spend", "float64", [None, 1])],
       {"item_ids": ids[300:324], "price": price[300:324]}, {k: v.numpy() for k, v in got.items()})

# 8. a tf_keras Sequential on uint8 pixels: Rescaling inside, a Lambda layer, saved as .h5
pixels = rng.integers(0, 256, (300, 12, 12, 3)).astype("uint8"); bright = (pixels[..., 1].mean((1, 2)) > 127.5).astype("int64")
seq = keras.Sequential([keras.Input((12, 12, 3), dtype="uint8", name="pixels"), keras.layers.Rescaling(1 / 255.0),
                        keras.layers.Conv2D(6, 3, activation="relu"),
                        keras.layers.Lambda(lambda t: tf.nn.relu6(t * 4.0) / 6.0, name="clip"),
                        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2, activation="softmax", name="probs")])
seq.compile(keras.optimizers.Adam(0.02), "sparse_categorical_crossentropy"); seq.fit(pixels[:200], bright[:200], epochs=25, verbose=0)
seq.save(f"{out}/pixels.h5")
record("pixels", f"{out}/pixels.h5", {"x_val": pixels[200:], "y_val": bright[200:]},
       [spec("pixels", "uint8", [None, 12, 12, 3])], [spec("probs", "float32", [None, 2])],
       {"pixels": pixels[200:224]}, {"probs": seq(pixels[200:224]).numpy()})
'''


KINDS = ("reviews", "gated", "tones", "shop", "forecast", "masked", "effblock", "pixels")
#: what a user passes beside the model: the module that registers the custom layer
EXTRA = {"gated": ("--import", "user_layers")}


@dataclass(frozen=True)
class Kind:
    """What the runner's clients need of a model: its id, and no fixed batch (every signature here takes any)."""

    id: str
    fixed_batch: int | None = None


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("unseen")
    (out / "record.py").write_text(RECORD)
    (out / "user_layers.py").write_text(USER_LAYERS)
    for script in (KERAS3_MODELS, TF_KERAS_MODELS):
        done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_an_unseen_kind_is_optimized_and_served_as_the_original(kind: str, models: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    from builder.report import Report

    entry = json.loads((models / f"{kind}.contract.json").read_text())
    built = Built(Kind(kind), Path(entry["model"]), Path(entry["data"]), entry["contract"],  # type: ignore[arg-type]
                  models / f"{kind}.reference.npz", ())
    recipe = tmp_path / "quick.toml"
    recipe.write_text(QUICK)
    out = tmp_path / "optimized"
    monkeypatch.chdir(models)  # where the user's own module is, as --import finds it
    code, _, stderr = run_cli(monkeypatch, capfd, "optimize", built.model, "--data", built.data, "--recipe", recipe,
                              "--latency-runs", 10, "--out", out, *EXTRA.get(kind, ()))
    assert code == 0 and "Traceback" not in stderr, f"optimize {kind} exited {code}: {stderr[-3000:]}"
    report = Report.load(out)
    tasks = {o.name: o.task for o in report.contract.outputs}
    gate = {"max_accuracy_drop": report.gate.max_accuracy_drop, "max_relative_error": report.gate.max_relative_error}
    server = Server(out)
    try:
        problems = metadata_problems(server, built) + ask_everything(server, built, tasks, gate)
    finally:
        server.stop()
    assert not problems, "\n".join(problems[:8]) + f"\nserved: {report.chosen} on {report.chosen_runtime}"
