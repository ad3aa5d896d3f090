"""`tfsmith bench --images A,B` through the served path, on the real engine: the user's SavedModel packaged FROM two
TensorFlow images, both served, timed over gRPC in interleaved slices; and an image that cannot serve it reported
with its reason, no ratio invented. The two images are the x86-64-v3 and x86-64-v2 runtime images from the same
stock wheel (no source build is possible here), so the test checks the measurement, not a speed-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.bench.served_images import compare_served_images
from builder.engine.docker import DockerEngine
from tests.tf_image import ensure_tf_image

pytestmark = [pytest.mark.engine, pytest.mark.tf, pytest.mark.slow]

MAKE_MODEL = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
class Scorer(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([64, 10], seed=[1, 2]))
    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="pixels")])
    def serve(self, pixels):
        return {"probs": tf.nn.softmax(tf.matmul(pixels, self.w))}
scorer = Scorer()
tf.saved_model.save(scorer, sys.argv[1], signatures={"serving_default": scorer.serve})
"""


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("served-bench") / "saved_model"
    done = subprocess.run([sys.executable, "-c", MAKE_MODEL, str(folder)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def _leftovers(engine: DockerEngine) -> list[str]:
    return [tag for image in engine.list_images() for tag in image.tags if tag.startswith("tfsmith-bench/served-")]


def test_two_tensorflow_images_are_timed_through_the_served_path(docker_engine: None, base_image: str,
                                                                 saved_model: Path, tmp_path: Path) -> None:
    first, second = ensure_tf_image(base_image), ensure_tf_image(base_image, target="x86-64-v2")
    engine = DockerEngine()
    comparison = compare_served_images(saved_model, first, second, threads=1, budget_s=4, engine=engine,
                                       say=print)
    for timing in (comparison.first, comparison.second):
        assert not timing.error and timing.samples >= 10 and timing.tensorflow == "2.21.0"
        assert timing.ci_ms is not None and timing.ci_ms[0] <= timing.p50_ms <= timing.ci_ms[1]
    assert comparison.ratio is not None and comparison.signature == "serving_default"
    summary = comparison.summary()
    assert "ratio B/A" in summary and ("beyond noise" in summary or "within noise" in summary)
    data = json.loads(comparison.to_json())
    assert data["path"].startswith("served") and data["ratio_b_over_a"] == pytest.approx(comparison.ratio)
    assert _leftovers(engine) == []  # the serving images made for the comparison are gone


def test_an_image_without_tensorflow_is_reported_not_timed(docker_engine: None, base_image: str,
                                                           saved_model: Path) -> None:
    engine = DockerEngine()
    comparison = compare_served_images(saved_model, ensure_tf_image(base_image), base_image, threads=1,
                                       budget_s=2, engine=engine, say=print)
    assert comparison.ratio is None and comparison.second.error and comparison.second.p50_ms is None
    assert comparison.first.p50_ms is not None
    assert "could not serve the model" in comparison.summary()
    assert _leftovers(engine) == []
