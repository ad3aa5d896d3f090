"""arm64 serving images of the example model, built on this x86 machine and proven under QEMU emulation with real
requests on REST, gRPC and the Open Inference Protocol (v2).

The example digits CNN goes through `tfsmith optimize --target neoverse_n1` once (chosen by rule: that CPU is not
this one) with a float-only recipe, and two images are made of its output. Float: the smoke test compares the
image's answers with this x86 machine's interpreter on the same file, and an int8 model's answers differ by one
output quantization step (1/256) between x86 and arm64 kernels, which that comparison does not allow.
- the LiteRT image of the chosen .tflite for neoverse_v1 (the arm64 image optimize picks for most models), on the
  arm64 Debian base. The set-up's QEMU is Debian trixie's 10.0 (bookworm's 7.2 segfaults creating LiteRT's
  interpreter), and its default CPU reports every feature neoverse_v1's code needs now that the guard asks for
  none of the hints (dgh) QEMU leaves out;
- the `tensorflow` kind of its SavedModel FROM the arm64 TensorFlow image for neoverse_n1 (PyPI's aarch64 wheel on
  the arm64 Debian base, as `make build TARGET=neoverse_n1` makes it here).
Emulation is slow: a small model, a few requests, one optimize run for both.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from builder.engine.docker import DockerEngine
from tests.locks import one_at_a_time
from tests.tf_image import TFSMITH, ensure_tf_image, packaging_from_tf_image
from tests.zoo_runs import shared_root

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(os.uname().machine != "x86_64", reason="emulates arm64 on an x86 machine")]

TAG = "tfsmith-test-serve/digits:tensorflow-arm64"
LITERT_TAG = "tfsmith-test-serve/digits:litert-arm64-neoverse-v1"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="session")
def arm64_tf_image(arm64_base_image: str) -> str:
    return ensure_tf_image(arm64_base_image, target="neoverse_n1", arch="aarch64")


@pytest.fixture(scope="session")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example model optimized for neoverse_n1 (float only): one optimize --out folder for both images, made
    once per run in the run's shared folder (the two tests run in different workers, see tests/conftest.py)."""
    root = shared_root(tmp_path_factory)
    work = root / "arm64-example"
    with one_at_a_time("arm64-example", root / "locks"):
        if not (work / "optimized").is_dir():
            recipe = root / "arm64-float-only.toml"
            recipe.write_text("[quantization]\nmodes = []\n", encoding="utf-8")
            for argv in (["example", "--out", str(work / "example")],
                         ["optimize", str(work / "example" / "digits_cnn.keras"), "--data",
                          str(work / "example" / "digits.npz"), "--recipe", str(recipe), "--target", "neoverse_n1",
                          "--out", str(work / "optimized")]):
                done = subprocess.run([str(TFSMITH), *argv], capture_output=True, text=True, timeout=900, env=ENV)
                assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return work / "optimized"


def test_an_arm64_litert_image_of_the_example_answers_under_emulation(
    arm64_base_image: str, optimized: Path
) -> None:
    tflites = sorted(optimized.glob("*.tflite"))
    assert tflites, f"optimize wrote no .tflite into {optimized}"
    engine = DockerEngine()
    try:
        done = subprocess.run([str(TFSMITH), "package", str(optimized), "--kind", "litert", "--target", "neoverse_v1",
                               "--base-image", arm64_base_image, "--tag", LITERT_TAG, "--model-name", "digits",
                               "--workers", "1", "--smoke"],
                              capture_output=True, text=True, timeout=1800, env=ENV)
        print(done.stdout)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "(linux/arm64)" in done.stdout and "under emulation" in done.stdout
        assert "every answer matches the local interpreter" in done.stdout and "gRPC, v2)" in done.stdout
        image = engine.inspect(LITERT_TAG)
        assert image.architecture == "arm64" and image.labels["io.tfsmith.target"] == "neoverse_v1"
        assert image.labels["io.tfsmith.runtime"] == "litert"
    finally:
        engine.remove_image(LITERT_TAG)


def test_an_arm64_serving_image_of_the_example_answers_under_emulation(arm64_tf_image: str, optimized: Path) -> None:
    engine = DockerEngine()
    try:
        with packaging_from_tf_image("neoverse_n1"):
            done = subprocess.run([str(TFSMITH), "package", str(optimized / "saved_model"), "--target",
                                   "neoverse_n1", "--tag", TAG, "--model-name", "digits", "--workers", "1", "--smoke"],
                                  capture_output=True, text=True, timeout=1800, env=ENV)
        print(done.stdout)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert f"FROM {arm64_tf_image}" in done.stdout and "(linux/arm64)" in done.stdout
        assert "under emulation" in done.stdout
        assert "every answer matches the same model on TensorFlow here" in done.stdout and "gRPC, v2)" in done.stdout
        image = engine.inspect(TAG)
        assert image.architecture == "arm64" and image.labels["io.tfsmith.platform"] == "linux/arm64"
        assert image.labels["io.tfsmith.target"] == "neoverse_n1"
    finally:
        engine.remove_image(TAG)
