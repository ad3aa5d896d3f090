"""An arm64 serving image of the example model, built on this x86 machine and proven under QEMU emulation with real
requests.

The example digits CNN goes through `tfsmith optimize --target neoverse_n1` (chosen by rule: that CPU is not
this one), and its SavedModel is packaged as the `tensorflow` kind FROM the arm64 TensorFlow image for neoverse_n1 (PyPI's aarch64 wheel on the
arm64 Debian base, as `make build TARGET=neoverse_n1` makes it here): LiteRT's interpreter crashes under Debian's
QEMU 7.2 (a segmentation fault as the interpreter is created, with or without XNNPACK), while TensorFlow runs, so
this is the arm64 image that can be smoke-tested here. neoverse_n1 because QEMU 7.2 reports every hwcap its guard
needs (it lacks neoverse_v1's dit, uscat and dgh: a neoverse_v1 image refuses on every emulated CPU).
Emulation is slow: a small model, a few requests.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from builder.engine.docker import DockerEngine
from builder.engine.local import ensure_base_image
from tests.tf_image import TFSMITH, ensure_tf_image

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(os.uname().machine != "x86_64", reason="emulates arm64 on an x86 machine")]

TAG = "tfsmith-test-serve/digits:tensorflow-arm64"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="module")
def arm64_tf_image(docker_engine: None) -> str:
    base = ensure_base_image(arch="arm64", say=print)
    return ensure_tf_image(base, target="neoverse_n1", arch="aarch64")


def test_an_arm64_serving_image_of_the_example_answers_under_emulation(arm64_tf_image: str, tmp_path: Path) -> None:
    for argv in (["example", "--out", str(tmp_path / "example")],
                 ["optimize", str(tmp_path / "example" / "digits_cnn.keras"), "--data",
                  str(tmp_path / "example" / "digits.npz"), "--recipe", "auto", "--target", "neoverse_n1",
                  "--out", str(tmp_path / "optimized")]):
        done = subprocess.run([str(TFSMITH), *argv], capture_output=True, text=True, timeout=900, env=ENV)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    engine = DockerEngine()
    try:
        done = subprocess.run([str(TFSMITH), "package", str(tmp_path / "optimized" / "saved_model"), "--target",
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
